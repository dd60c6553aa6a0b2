package kruntimes

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const artifactsPath = "/v1/namespaces/default/runtimes/bash/runs/u-1/artifacts"

var (
	report = []byte("hello artifacts")
	blob   = func() []byte {
		b := make([]byte, 1_000_000)
		for i := range b {
			b[i] = byte(i * 7)
		}
		return b
	}()
)

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// gatewayMode is how a fake artifact gateway misbehaves.
type gatewayMode struct {
	mu          sync.Mutex
	lie         bool // announce a wrong SHA-256
	breakAfter  int  // > 0: hang up after this many bytes of the body
	unavailable bool // 503 ArtifactStoreUnavailable
}

func (m *gatewayMode) set(f func(*gatewayMode)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// artifactGateway answers like the gateway's artifact routes of Run u-1:
// the list, each file with Range (bytes=A-B, A-, -N; 206, 416), 404 for
// other names.
func artifactGateway(t *testing.T) (*httptest.Server, *recorder, *gatewayMode) {
	t.Helper()
	files := map[string][]byte{"report.txt": report, "out/deep/blob.bin": blob, "empty": {}}
	mode := &gatewayMode{}
	srv, rec := fake(t, func(w http.ResponseWriter, r *http.Request) {
		mode.mu.Lock()
		m := gatewayMode{lie: mode.lie, breakAfter: mode.breakAfter, unavailable: mode.unavailable}
		mode.mu.Unlock()
		if m.unavailable {
			writeError(w, 503, "ArtifactStoreUnavailable")
			return
		}
		if r.URL.Path == artifactsPath {
			refs := []map[string]any{}
			for _, n := range []string{"empty", "out/deep/blob.bin", "report.txt"} {
				refs = append(refs, map[string]any{"name": n, "uri": "file:///store/" + n, "size": len(files[n]),
					"sha256": strings.ToUpper(hexSHA(files[n]))})
			}
			writeJSON(w, 200, map[string]any{"artifacts": refs})
			return
		}
		data, ok := files[strings.TrimPrefix(r.URL.Path, artifactsPath+"/")]
		if !ok || !strings.HasPrefix(r.URL.Path, artifactsPath+"/") {
			writeError(w, 404, "NotFound")
			return
		}
		sum := hexSHA(data)
		if m.lie {
			sum = hexSHA([]byte("lies"))
		}
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("ETag", `"`+sum+`"`)
		h.Set("X-Kruntimes-Artifact-Sha256", sum)
		h.Set("X-Kruntimes-Artifact-Size", strconv.Itoa(len(data)))
		status, body := 200, data
		if spec := r.Header.Get("Range"); spec != "" {
			first, last, _ := strings.Cut(strings.TrimPrefix(spec, "bytes="), "-")
			start, end := 0, len(data)
			if first == "" {
				n, _ := strconv.Atoi(last)
				start = max(0, len(data)-n)
			} else {
				start, _ = strconv.Atoi(first)
				if last != "" {
					l, _ := strconv.Atoi(last)
					end = min(len(data), l+1)
				}
			}
			if start >= len(data) {
				h.Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
				writeError(w, 416, "RangeNotSatisfiable")
				return
			}
			status, body = 206, data[start:end]
			h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end-1, len(data)))
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		if m.breakAfter > 0 {
			_, _ = w.Write(body[:m.breakAfter])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // hang up mid-body
		}
		_, _ = w.Write(body)
	})
	return srv, rec, mode
}

// artifactClient is a client of the gateway alone, of srv.
func artifactClient(t *testing.T, srv *httptest.Server) *Client {
	t.Helper()
	c, err := New(srv.URL, "t", WithCAFile(caFile(t, srv)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAnArtifactListIsParsedIntoRefsAndSentWithTheToken(t *testing.T) {
	srv, rec, _ := artifactGateway(t)
	c := artifactClient(t, srv)
	refs, err := c.Artifacts.List(context.Background(), "", srv.URL+artifactsPath)
	if err != nil {
		t.Fatal(err)
	}
	want := []ArtifactRef{
		{"empty", "file:///store/empty", 0, hexSHA(nil)},
		{"out/deep/blob.bin", "file:///store/out/deep/blob.bin", int64(len(blob)), hexSHA(blob)},
		{"report.txt", "file:///store/report.txt", 15, hexSHA(report)},
	}
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("%+v", refs)
	}
	call := rec.all()[0]
	if call.URL.Path != artifactsPath || call.Header.Get("Authorization") != "Bearer t" || call.Header.Get("Range") != "" {
		t.Errorf("%s %v", call.URL.Path, call.Header)
	}
}

func TestRangesAreSentAsAskedAndReturnThoseBytes(t *testing.T) {
	srv, rec, _ := artifactGateway(t)
	c := artifactClient(t, srv)
	ctx, run := context.Background(), srv.URL+artifactsPath
	for _, tc := range []struct {
		name   string
		r      *Range
		header string
		want   []byte
	}{
		{"report.txt", nil, "", report},
		{"out/deep/blob.bin", &Range{Offset: 1000, Length: 1000}, "bytes=1000-1999", blob[1000:2000]},
		{"report.txt", &Range{Offset: -9}, "bytes=-9", []byte("artifacts")},
		{"report.txt", &Range{Offset: 6}, "bytes=6-", []byte("artifacts")},
		{"report.txt", &Range{Length: 5}, "bytes=0-4", []byte("hello")},
		{"report.txt", &Range{Offset: 10, Length: 100}, "bytes=10-109", []byte("facts")}, // cut to the end
		{"empty", nil, "", []byte{}},
	} {
		got, err := c.Artifacts.Read(ctx, "", run, tc.name, tc.r)
		if err != nil || string(got) != string(tc.want) {
			t.Errorf("%s %+v: %d bytes, %v", tc.name, tc.r, len(got), err)
		}
		calls := rec.all()
		last := calls[len(calls)-1]
		if last.URL.Path != artifactsPath+"/"+tc.name || last.Header.Get("Range") != tc.header {
			t.Errorf("%s %+v: sent %s Range %q", tc.name, tc.r, last.URL.Path, last.Header.Get("Range"))
		}
	}
	// Ranges that mean nothing are refused before anything is sent.
	before := len(rec.all())
	for _, r := range []*Range{{Offset: -9, Length: 3}, {Length: -1}} {
		if _, err := c.Artifacts.Read(ctx, "", run, "report.txt", r); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	if len(rec.all()) != before {
		t.Error("a refused range was sent")
	}
}

func TestARangeAtOrPastTheEndIsRangeNotSatisfiable(t *testing.T) {
	srv, _, _ := artifactGateway(t)
	c := artifactClient(t, srv)
	for _, tc := range []struct {
		name   string
		offset int64
	}{{"report.txt", 15}, {"report.txt", 100}, {"empty", 0}} {
		_, err := c.Artifacts.Read(context.Background(), "", srv.URL+artifactsPath, tc.name, &Range{Offset: tc.offset})
		var rns *RangeNotSatisfiableError
		var unavailable *UnavailableError
		if !errors.As(err, &rns) || rns.Status != 416 || rns.Code != "RangeNotSatisfiable" || rns.Source != "gateway" ||
			errors.As(err, &unavailable) || rns.Retryable() {
			t.Errorf("%s from %d: %T %v", tc.name, tc.offset, err, err)
		}
	}
}

func TestAMissingNameIsNotFoundAndAFailingStoreIsRetryable(t *testing.T) {
	srv, _, mode := artifactGateway(t)
	c := artifactClient(t, srv)
	ctx, run, dir := context.Background(), srv.URL+artifactsPath, t.TempDir()
	var nf *NotFoundError
	if _, err := c.Artifacts.Read(ctx, "", run, "nope.txt", nil); !errors.As(err, &nf) || nf.Status != 404 {
		t.Errorf("%T %v", err, err)
	}
	if err := c.Artifacts.Download(ctx, "", run, "nope.txt", filepath.Join(dir, "nope.txt")); !errors.As(err, &nf) {
		t.Errorf("%T %v", err, err)
	}
	mode.set(func(m *gatewayMode) { m.unavailable = true })
	for what, call := range map[string]func() error{
		"list": func() error { _, err := c.Artifacts.List(ctx, "", run); return err },
		"read": func() error { _, err := c.Artifacts.Read(ctx, "", run, "report.txt", nil); return err },
		"download": func() error {
			return c.Artifacts.Download(ctx, "", run, "report.txt", filepath.Join(dir, "report.txt"))
		},
	} {
		err := call()
		var store *ArtifactStoreUnavailableError
		var unavailable *UnavailableError
		if !errors.As(err, &store) || !errors.As(err, &unavailable) || !store.Retryable() || store.RetryAfter == 0 {
			t.Errorf("%s: %T %v", what, err, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

func TestNamesTheGatewayWouldRefuseAreRefusedBeforeAnythingIsSent(t *testing.T) {
	srv, rec, _ := artifactGateway(t)
	c := artifactClient(t, srv)
	for _, name := range []string{"", "a b", "../etc/passwd", "a//b", "/abs", "a/./b", "x:y", "résumé.pdf", "a/",
		strings.Repeat("a", 256), strings.Repeat("a/", 32) + "a", "a?b", "a%2Fb"} {
		_, err := c.Artifacts.Read(context.Background(), "", srv.URL+artifactsPath, name, nil)
		var bad *InvalidPathError
		if !errors.As(err, &bad) || bad.Status != 400 || bad.Source != "client" {
			t.Errorf("%q: %T %v", name, err, err)
		}
	}
	if len(rec.all()) != 0 {
		t.Errorf("%d requests sent", len(rec.all()))
	}
	for _, name := range []string{"report.txt", "out/deep/blob.bin", "a+b=c@d,e_f-g.h", strings.Repeat("a/", 31) + "a",
		strings.Repeat("a", 255)} {
		if why := artifactNameProblem(name); why != "" {
			t.Errorf("%q: %s", name, why)
		}
	}
}

func TestADownloadStreamsToThePathAndChecksTheDigest(t *testing.T) {
	srv, _, _ := artifactGateway(t)
	c := artifactClient(t, srv)
	ctx, run, dir := context.Background(), srv.URL+artifactsPath, t.TempDir()
	dest := filepath.Join(dir, "blob.bin")
	if err := c.Artifacts.Download(ctx, "", run, "out/deep/blob.bin", dest); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dest)
	if hexSHA(got) != hexSHA(blob) {
		t.Errorf("%d bytes, sha %s", len(got), hexSHA(got))
	}
	// Made as os.Create would: the umask's permissions.
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if st, _ := os.Stat(dest); st.Mode().Perm() != os.FileMode(0o666&^umask) {
		t.Errorf("mode %v", st.Mode())
	}
	// Over an existing file, and the empty artifact.
	if err := c.Artifacts.Download(ctx, "", run, "report.txt", dest); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); string(got) != string(report) {
		t.Errorf("%q", got)
	}
	if err := c.Artifacts.Download(ctx, "", run, "empty", filepath.Join(dir, "empty")); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%v", entries)
	}
}

func TestADigestMismatchIsAnIntegrityErrorAndLeavesNoFile(t *testing.T) {
	srv, _, mode := artifactGateway(t)
	mode.set(func(m *gatewayMode) { m.lie = true })
	c := artifactClient(t, srv)
	ctx, run, dir := context.Background(), srv.URL+artifactsPath, t.TempDir()
	dest := filepath.Join(dir, "report.txt")
	err := c.Artifacts.Download(ctx, "", run, "report.txt", dest)
	var bad *ArtifactIntegrityError
	if !errors.As(err, &bad) || bad.Name != "report.txt" || bad.GotSHA256 != hexSHA(report) ||
		bad.WantSHA256 != hexSHA([]byte("lies")) || bad.WantSize != 15 || bad.GotSize != 15 {
		t.Fatalf("%T %v", err, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
	// A file already there stays as it was.
	_ = os.WriteFile(dest, []byte("before"), 0o644)
	if err := c.Artifacts.Download(ctx, "", run, "report.txt", dest); !errors.As(err, &bad) {
		t.Error(err)
	}
	if got, _ := os.ReadFile(dest); string(got) != "before" {
		t.Errorf("%q", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left %v", entries)
	}
	// A whole read is checked too; a range cannot be.
	if _, err := c.Artifacts.Read(ctx, "", run, "report.txt", nil); !errors.As(err, &bad) {
		t.Error(err)
	}
	if got, err := c.Artifacts.Read(ctx, "", run, "report.txt", &Range{Length: 5}); err != nil || string(got) != "hello" {
		t.Error(string(got), err)
	}
}

func TestABrokenStreamLeavesNoPartialFile(t *testing.T) {
	srv, _, mode := artifactGateway(t)
	mode.set(func(m *gatewayMode) { m.breakAfter = 300_000 })
	c := artifactClient(t, srv)
	ctx, run, dir := context.Background(), srv.URL+artifactsPath, t.TempDir()
	dest := filepath.Join(dir, "blob.bin")
	var network *NetworkError
	if err := c.Artifacts.Download(ctx, "", run, "out/deep/blob.bin", dest); !errors.As(err, &network) {
		t.Fatalf("%T %v", err, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
	_ = os.WriteFile(dest, []byte("before"), 0o644)
	if err := c.Artifacts.Download(ctx, "", run, "out/deep/blob.bin", dest); !errors.As(err, &network) {
		t.Fatalf("%T %v", err, err)
	}
	if got, _ := os.ReadFile(dest); string(got) != "before" {
		t.Errorf("%q", got)
	}
	if _, err := c.Artifacts.Read(ctx, "", run, "out/deep/blob.bin", nil); !errors.As(err, &network) {
		t.Errorf("%T %v", err, err)
	}
	mode.set(func(m *gatewayMode) { m.breakAfter = 0 })
	if err := c.Artifacts.Download(ctx, "", run, "out/deep/blob.bin", dest); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); len(got) != len(blob) {
		t.Errorf("%d bytes", len(got))
	}
}

// artifactRow is a runs.json row of task Run report, served by srv unless
// endpoint is false.
func artifactRow(t *testing.T, srv *httptest.Server, uid string, endpoint bool) string {
	dir := t.TempDir()
	row := map[string]any{"name": "report", "namespace": "default", "runtime": "bash", "uid": uid, "mode": "task",
		"phase": "Succeeded", "reason": "Completed", "attempt": 1,
		"task":      map[string]any{"attempt": 1, "exitCode": 0},
		"artifacts": []any{map[string]any{"name": "report.txt", "uri": "file:///store/report.txt", "size": 15, "sha256": hexSHA(report)}}}
	if endpoint {
		row["endpoint"] = srv.URL + strings.Replace(artifactsPath, "u-1", uid, 1)
	}
	b, _ := json.Marshal(map[string]any{"runs": []any{row}})
	_ = os.WriteFile(filepath.Join(dir, "runs.json"), b, 0o644)
	return dir
}

func TestARunIsNamedByItsNameInItsNamespaceOrByItsURL(t *testing.T) {
	srv, rec, _ := artifactGateway(t)
	c := artifactClient(t, srv)
	ctx := context.Background()
	c.runs = &stateDirRuns{stateDir: artifactRow(t, srv, "u-1", true)}
	refs, err := c.Artifacts.List(ctx, "", "report")
	if err != nil || len(refs) != 3 {
		t.Fatal(refs, err)
	}
	// The row's refs reach the Run and the task's result.
	res, err := c.Tasks.Get(ctx, "report")
	want := []ArtifactRef{{"report.txt", "file:///store/report.txt", 15, hexSHA(report)}}
	if err != nil || !reflect.DeepEqual(res.Artifacts, want) {
		t.Fatal(res, err)
	}
	if got, err := c.Artifacts.Read(ctx, res.Namespace, res.Name, res.Artifacts[0].Name, nil); err != nil || string(got) != string(report) {
		t.Error(string(got), err)
	}
	var nf *NotFoundError
	if _, err := c.Artifacts.List(ctx, "", "other"); !errors.As(err, &nf) {
		t.Error(err)
	}
	if _, err := c.Artifacts.List(ctx, "elsewhere", "report"); !errors.As(err, &nf) {
		t.Error(err)
	}
	if _, err := c.Artifacts.List(ctx, "", srv.URL+"/v1/namespaces/default/runtimes/bash/sessions/u-1"); err == nil {
		t.Error("a session URL was taken for an artifacts URL")
	}
	// Without an endpoint: the client's gateway; without either, not ready.
	c.runs = &stateDirRuns{stateDir: artifactRow(t, srv, "u-1", false)}
	if _, err := c.Artifacts.List(ctx, "", "report"); err != nil {
		t.Error(err)
	}
	c.gateway = ""
	var notReady *NotReadyError
	if _, err := c.Artifacts.List(ctx, "", "report"); !errors.As(err, &notReady) {
		t.Error(err)
	}
	for _, call := range rec.all() {
		if !strings.HasPrefix(call.URL.Path, artifactsPath) {
			t.Errorf("sent to %s", call.URL.Path)
		}
	}
}

func TestAClusterRunIsReadAtItsEndpointsOriginWithItsCA(t *testing.T) {
	srv, rec, _ := artifactGateway(t)
	run := taskRun("Succeeded", "Completed", "", exited0)
	run["metadata"].(map[string]any)["namespace"] = "default"
	run["spec"].(map[string]any)["runtime"] = "bash"
	status := run["status"].(map[string]any)
	// The gateway's certificate is trusted through the Run's status alone.
	status["endpoint"] = map[string]any{"url": srv.URL + artifactsPath,
		"caBundle": base64.StdEncoding.EncodeToString([]byte(caPEM(srv)))}
	status["artifacts"] = []any{map[string]any{"name": "r.txt", "uri": "s3://b/k", "size": 1, "sha256": hexSHA([]byte("r"))}}
	c, calls, _ := taskAPI(t, run, nil)
	ctx := context.Background()
	res, err := c.Tasks.Get(ctx, "t")
	if err != nil || len(res.Artifacts) != 1 || res.Artifacts[0].URI != "s3://b/k" {
		t.Fatal(res, err)
	}
	got, err := c.Artifacts.Read(ctx, "default", "t", "report.txt", &Range{Offset: -9})
	if err != nil || string(got) != "artifacts" {
		t.Fatal(string(got), err)
	}
	if (*calls)[len(*calls)-1] != "GET "+runsPath+"/default/runs/t" || len(rec.all()) != 1 {
		t.Errorf("%v, %d gateway calls", *calls, len(rec.all()))
	}
}
