package kruntimes

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ArtifactRef is one file a task left in $KRUNTIME_ARTIFACTS_DIR
// (status.artifacts, or the gateway's artifact list).
type ArtifactRef struct {
	// Name is its path relative to the artifacts directory (report.txt,
	// out/deep/blob.bin).
	Name string `json:"name"`
	// URI is where the store keeps it (s3://BUCKET/KEY, file:///DIR/KEY): for
	// an operator; callers read through the gateway.
	URI string `json:"uri"`
	// Size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lowercase hex SHA-256 of the content.
	SHA256 string `json:"sha256"`
}

// Range is a byte range of an artifact: Length bytes from Offset (Length 0:
// to the end). A negative Offset is the last -Offset bytes (Length must be
// 0). A range past the end is cut to it; one that starts at or past the end
// is a *RangeNotSatisfiableError.
type Range struct {
	Offset, Length int64
}

// header is the Range header of r.
func (r *Range) header() (string, error) {
	switch {
	case r.Length < 0:
		return "", fmt.Errorf("kruntimes: artifact range: Length %d is negative", r.Length)
	case r.Offset < 0 && r.Length != 0:
		return "", fmt.Errorf("kruntimes: artifact range: a negative Offset reads the last -Offset bytes: it takes no Length")
	case r.Offset < 0:
		return fmt.Sprintf("bytes=%d", r.Offset), nil
	case r.Length == 0:
		return fmt.Sprintf("bytes=%d-", r.Offset), nil
	}
	return fmt.Sprintf("bytes=%d-%d", r.Offset, r.Offset+r.Length-1), nil
}

// Artifacts reads the files task Runs left behind, through the gateway
// (GET …/runs/{uid}/artifacts[/{name}], docs/artifacts.md) with the client's
// own credentials: no store credentials on this side. Client.Artifacts.
//
// A Run is named by its name in namespace ("": the client's), or by its
// artifacts URL (a task Run's status.endpoint.url) for a client made with
// New. Reading is a right of its own: runs/artifacts in Kubernetes mode, the
// verb artifacts in krt up's policy.
type Artifacts struct{ c *Client }

// target is where the Run's artifacts are read: …/runs/{uid}/artifacts, and
// the CA its endpoint chains to.
func (a *Artifacts) target(ctx context.Context, namespace, run string) (string, string, error) {
	if strings.Contains(run, "://") {
		u := strings.TrimRight(run, "/")
		parsed, err := url.Parse(u)
		if err != nil || !strings.HasSuffix(parsed.Path, "/artifacts") {
			return "", "", fmt.Errorf("kruntimes: %q is not an artifacts URL (…/runs/{uid}/artifacts, a task Run's status.endpoint.url)", run)
		}
		return u, "", nil
	}
	store, err := a.c.store()
	if err != nil {
		return "", "", err
	}
	info, err := store.get(ctx, or(namespace, a.c.namespace), run)
	if err != nil {
		return "", "", err
	}
	base := a.c.gateway
	if info.Endpoint != "" {
		u, err := url.Parse(info.Endpoint)
		if err != nil {
			return "", "", fmt.Errorf("kruntimes: the endpoint of run %s/%s is not a URL: %w", info.Namespace, info.Name, err)
		}
		base = u.Scheme + "://" + u.Host
	}
	if base == "" || info.UID == "" || info.Runtime == "" {
		return "", "", typed(APIError{Status: 503, Code: "NotReady", Source: "client", Phase: info.Phase, Reason: info.Reason,
			Message: fmt.Sprintf("run %s/%s has no endpoint yet (phase %s)", info.Namespace, info.Name, info.Phase)})
	}
	return fmt.Sprintf("%s/v1/namespaces/%s/runtimes/%s/runs/%s/artifacts", base, info.Namespace, info.Runtime, info.UID),
		info.CABundle, nil
}

// List is every artifact of the Run (not only the 100 status.artifacts
// lists); none before its export, after a failed one, or for a Run that
// exported nothing. A *NotFoundError for no such Run (or a Runtime without
// an artifact store).
func (a *Artifacts) List(ctx context.Context, namespace, run string) ([]ArtifactRef, error) {
	u, ca, err := a.target(ctx, namespace, run)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Artifacts []ArtifactRef `json:"artifacts"`
	}
	if err := a.c.gw.json(ctx, request{method: http.MethodGet, url: u, caPEM: ca}, nil, &doc); err != nil {
		return nil, err
	}
	for i := range doc.Artifacts {
		doc.Artifacts[i].SHA256 = strings.ToLower(doc.Artifacts[i].SHA256)
	}
	if doc.Artifacts == nil {
		doc.Artifacts = []ArtifactRef{}
	}
	return doc.Artifacts, nil
}

// ArtifactReader is an artifact's content as it streams from the gateway. A
// whole artifact is checked as it is read: its last Read returns an
// *ArtifactIntegrityError instead of io.EOF when the bytes are not what the
// gateway announced. A connection that breaks is a *NetworkError.
type ArtifactReader struct {
	// Size and SHA256 are the whole artifact's, as the gateway announces them
	// (Size -1, SHA256 "": not announced).
	Size   int64
	SHA256 string

	name  string
	op    string
	body  io.ReadCloser
	r     io.Reader
	hash  hash.Hash // nil: a range, not checked
	got   int64
	ended error
}

// Read reads the content.
func (ar *ArtifactReader) Read(p []byte) (int, error) {
	if ar.ended != nil {
		return 0, ar.ended
	}
	n, err := ar.r.Read(p)
	if ar.hash != nil {
		ar.hash.Write(p[:n])
		ar.got += int64(n)
	}
	switch {
	case err == io.EOF:
		if ar.hash != nil {
			if ierr := ar.verify(); ierr != nil {
				err = ierr
			}
		}
		ar.ended = err
	case err != nil:
		var ie *ArtifactIntegrityError
		if !errors.As(err, &ie) {
			err = &NetworkError{Op: ar.op, Err: err}
		}
		ar.ended = err
	}
	return n, err
}

func (ar *ArtifactReader) verify() error {
	got := hex.EncodeToString(ar.hash.Sum(nil))
	if (ar.Size >= 0 && ar.got != ar.Size) || (ar.SHA256 != "" && got != ar.SHA256) {
		return &ArtifactIntegrityError{Name: ar.name, WantSHA256: ar.SHA256, GotSHA256: got, WantSize: ar.Size, GotSize: ar.got}
	}
	return nil
}

// Close closes the connection.
func (ar *ArtifactReader) Close() error { return ar.body.Close() }

// Open streams an artifact: whole (r nil, checked against its SHA-256 as it
// is read) or the byte range r. A *NotFoundError for a name the Run does not
// have (the message names it), a *RangeNotSatisfiableError for a range that
// starts at or past the end, an *InvalidPathError (Source "client") for a
// name the gateway would refuse, before anything is sent. The caller closes
// it; the context bounds the whole read.
func (a *Artifacts) Open(ctx context.Context, namespace, run, name string, r *Range) (*ArtifactReader, error) {
	if err := checkArtifactName(name); err != nil {
		return nil, err
	}
	h := http.Header{}
	if r != nil {
		spec, err := r.header()
		if err != nil {
			return nil, err
		}
		h.Set("Range", spec)
	}
	u, ca, err := a.target(ctx, namespace, run)
	if err != nil {
		return nil, err
	}
	u += "/" + name
	resp, err := a.c.gw.do(ctx, request{method: http.MethodGet, url: u, header: h, caPEM: ca})
	if err != nil {
		return nil, err
	}
	ar := &ArtifactReader{Size: -1, SHA256: announcedSHA256(resp.Header), name: name, op: "GET " + u, body: resp.Body, r: resp.Body}
	if s, err := strconv.ParseInt(resp.Header.Get("X-Kruntimes-Artifact-Size"), 10, 64); err == nil {
		ar.Size = s
	}
	if resp.StatusCode == http.StatusPartialContent {
		return ar, nil
	}
	// The whole artifact: checked as it is read, then (had a server ignored
	// the Range) cut as asked.
	ar.hash = sha256.New()
	if r != nil {
		if err := ar.cut(r); err != nil {
			ar.Close()
			return nil, err
		}
	}
	return ar, nil
}

// cut reads the whole artifact and keeps the range r of it (a server that
// answered 200 to a Range).
func (ar *ArtifactReader) cut(r *Range) error {
	all, err := io.ReadAll(ar)
	if err != nil {
		return err
	}
	start, end := r.Offset, int64(len(all))
	if r.Offset < 0 {
		start = max(0, end+r.Offset)
	} else if r.Length > 0 {
		end = min(end, r.Offset+r.Length)
	}
	start = min(start, end)
	ar.hash, ar.ended, ar.r = nil, nil, bytes.NewReader(all[start:end])
	return nil
}

func announcedSHA256(h http.Header) string {
	s := h.Get("X-Kruntimes-Artifact-Sha256")
	if s == "" {
		s = strings.Trim(h.Get("ETag"), `"`)
	}
	return strings.ToLower(s)
}

// Read is an artifact's content in memory: whole (r nil, checked against its
// SHA-256: an *ArtifactIntegrityError otherwise) or the byte range r. Open
// says what else it returns; Download suits large files.
func (a *Artifacts) Read(ctx context.Context, namespace, run, name string, r *Range) ([]byte, error) {
	ar, err := a.Open(ctx, namespace, run, name, r)
	if err != nil {
		return nil, err
	}
	defer ar.Close()
	return io.ReadAll(ar)
}

// Download streams an artifact into path: into a new file beside it
// (.NAME.RANDOM.part, made with the permissions os.Create gives), renamed
// over path once whole and its SHA-256 and size match what the gateway
// announces. A broken connection (*NetworkError), a mismatch
// (*ArtifactIntegrityError) or an ended context leaves no partial file, and
// path as it was.
func (a *Artifacts) Download(ctx context.Context, namespace, run, name, path string) error {
	ar, err := a.Open(ctx, namespace, run, name, nil)
	if err != nil {
		return err
	}
	defer ar.Close()
	tmp, f, err := partFile(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, ar)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// partFile creates a new file beside path for a download to go into.
func partFile(path string) (string, *os.File, error) {
	dir, base := filepath.Split(path)
	for {
		var b [6]byte
		_, _ = rand.Read(b[:])
		tmp := filepath.Join(dir, "."+base+"."+hex.EncodeToString(b[:])+".part")
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return tmp, f, err
	}
}

// The gateway's rule for names (proto/src/api/path.rs, artifact_name).
const (
	maxArtifactNameBytes    = 512
	maxArtifactSegmentBytes = 255
	maxArtifactDepth        = 32
)

// artifactNameProblem says why name cannot be an artifact's name ("" when
// it can): 1–512 bytes, at most 32 "/"-separated segments of 1–255 ASCII
// letters, digits and ". _ - + = @ ,", none "." or "..".
func artifactNameProblem(name string) string {
	if name == "" {
		return "the name is empty"
	}
	if len(name) > maxArtifactNameBytes {
		return "the name is longer than 512 bytes"
	}
	segments := strings.Split(name, "/")
	for _, seg := range segments {
		switch {
		case seg == "":
			return "the name has an empty segment (a leading, trailing or double '/')"
		case seg == "." || seg == "..":
			return "the name has a '.' or '..' segment"
		case len(seg) > maxArtifactSegmentBytes:
			return "a segment of the name is longer than 255 bytes"
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-+=@,", c) >= 0) {
				return "the name has a character other than ASCII letters, digits and '. _ - + = @ ,'"
			}
		}
	}
	if len(segments) > maxArtifactDepth {
		return "the name is more than 32 levels deep"
	}
	return ""
}

// checkArtifactName is what the gateway would answer (400 InvalidPath) for
// a name outside the rule, before anything is sent.
func checkArtifactName(name string) error {
	if why := artifactNameProblem(name); why != "" {
		return typed(APIError{Status: 400, Code: "InvalidPath", Source: "client",
			Message: fmt.Sprintf("%q cannot be an artifact name: %s", name, why)})
	}
	return nil
}
