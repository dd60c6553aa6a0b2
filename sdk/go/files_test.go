package kruntimes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("f%04d", i)
	}
	return out
}

func TestListPagesThroughTheWholeDirectory(t *testing.T) {
	var limits []string
	s, _ := sandboxOn(t, pages(names(2500), &limits))
	entries, err := s.Files.List(context.Background(), "big")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2500 || entries[0].Path != "big/f0000" || entries[2499].Name != "f2499" {
		t.Fatalf("%d entries, first %+v", len(entries), entries[0])
	}
	if strings.Join(limits, ",") != "1000,1000,1000" {
		t.Errorf("limits %v", limits)
	}
	// Stopping the loop early fetches no further page.
	limits = nil
	for e := range s.Files.Entries(context.Background(), "big") {
		if e.Name == "f0003" {
			break
		}
	}
	if len(limits) != 1 {
		t.Errorf("pages fetched after break: %v", limits)
	}
}

func TestExistsStopsAtThePageThatWouldHoldTheName(t *testing.T) {
	var limits []string
	s, _ := sandboxOn(t, pages(names(2500), &limits))
	ctx := context.Background()
	for _, c := range []struct {
		path  string
		want  bool
		pages int
	}{
		{"big/f0005", true, 1}, {"big/f2400", true, 3}, {"big/f0005x", false, 1}, {"", true, 0}, {"./", true, 0},
	} {
		limits = nil
		got, err := s.Files.Exists(ctx, c.path)
		if err != nil || got != c.want || len(limits) != c.pages {
			t.Errorf("%q: %v %v after %d pages", c.path, got, err, len(limits))
		}
	}
	for status, code := range map[int]string{404: "NotFound", 400: "BadRequest"} {
		s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, status, code) })
		if got, err := s.Files.Exists(ctx, "x/y"); got || err != nil {
			t.Errorf("%s parent: %v %v", code, got, err)
		}
	}
	s, _ = sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, 400, "InvalidPath") })
	var bad *InvalidPathError
	if _, err := s.Files.Exists(ctx, "../x"); !errors.As(err, &bad) {
		t.Errorf("escape: %v", err)
	}
}

func TestSessionOperationsAreSentOnceWhateverTheAnswer(t *testing.T) {
	s, rec := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, 429, "Busy") })
	ctx := context.Background()
	var busy *BusyError
	if _, err := s.Commands.Run(ctx, Shell("make")); !errors.As(err, &busy) || busy.RetryAfter == 0 {
		t.Errorf("run: %v", err)
	}
	if err := s.Files.Write(ctx, "a", strings.NewReader("x")); !errors.As(err, &busy) {
		t.Errorf("write: %v", err)
	}
	if n := len(rec.all()); n != 1+2 { // the status probe, then one call each
		t.Errorf("%d requests", n)
	}
}

func TestCommandBodiesAndResults(t *testing.T) {
	var bodies []string
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		writeJSON(w, 200, map[string]any{"operationId": "op-1", "state": "Failed", "exitCode": 2, "error": ""})
	})
	r, err := s.Commands.Run(context.Background(), Command{Argv: []string{"ls", "-l"}, Stdin: "in", Cwd: "w",
		Env: map[string]string{"A": "1"}, Timeout: 1500 * 1e6})
	if err != nil || r.OK() || *r.ExitCode != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	want := `{"command":{"argv":["ls","-l"]},"cwd":"w","env":{"A":"1"},"stdin":"in","timeoutSeconds":2}`
	if strings.TrimSpace(bodies[0]) != want {
		t.Errorf("body %s", bodies[0])
	}
	var failed *OperationFailedError
	if err := r.Check(); !errors.As(err, &failed) || !strings.Contains(err.Error(), "exit code 2") {
		t.Errorf("check: %v", err)
	}
	if err := s.Files.Rename(context.Background(), "a", "b"); !errors.As(err, &failed) || failed.Op != "rename" {
		t.Errorf("rename: %v", err)
	}
}

func TestStreamYieldsEventsThenTheErrorOfAFailedStream(t *testing.T) {
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"type":"accepted","sequence":1,"operationId":"op-1"}`)
		fmt.Fprintln(w, `{"type":"output","sequence":2,"stream":"stdout","data":"hi\n"}`)
		fmt.Fprintln(w, `{"type":"failed","sequence":3,"error":{"code":"Internal","message":"operation was dropped"}}`)
	})
	var types []string
	var last error
	for ev, err := range s.Commands.Stream(context.Background(), Shell("echo hi")) {
		types = append(types, ev.Type)
		last = err
	}
	var internal *InternalError
	if strings.Join(types, ",") != "accepted,output,failed" || !errors.As(last, &internal) || internal.Status != 500 {
		t.Errorf("%v %v", types, last)
	}
}

func TestASandboxByEndpointCannotBeEndedAndNeedsASessionURL(t *testing.T) {
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {})
	if s.Namespace() != "default" || s.UID() != "u-1" {
		t.Errorf("%+v", s.Run())
	}
	if _, err := s.Close(context.Background()); !errors.Is(err, ErrUnsupported) {
		t.Errorf("close: %v", err)
	}
	c, _ := New("https://gw", "t")
	if _, err := c.ConnectSandboxAt(context.Background(), "https://gw/v1/namespaces/a/runtimes/p/runs/u:invoke"); err == nil {
		t.Error("a function endpoint was accepted")
	}
	if _, err := c.CreateSandbox(context.Background(), SandboxOptions{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("create: %v", err)
	}
}

func TestAFileOverTheLimitIsRefusedBeforeItIsSent(t *testing.T) {
	s, rec := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, 500, "Internal") })
	before := len(rec.all())
	big := io.LimitReader(zeros{}, MaxFileBytes+1)
	var tooLarge *PayloadTooLargeError
	err := s.Files.Write(context.Background(), "big.bin", big)
	if !errors.As(err, &tooLarge) || tooLarge.Source != "client" || !strings.Contains(err.Error(), "at most 32 MiB") {
		t.Fatalf("%T %v", err, err)
	}
	if n := len(rec.all()) - before; n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
