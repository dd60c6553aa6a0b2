package kruntimes

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Entry is one directory entry.
type Entry struct {
	Name string `json:"name"`
	// Type is file, directory, symlink or other.
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Path is workspace-relative: the listed directory joined with Name.
	Path string `json:"-"`
}

// IsDir reports whether the entry is a directory.
func (e Entry) IsDir() bool { return e.Type == "directory" }

// Page is one page of a listing; NextPageToken is "" on the last.
type Page struct {
	Entries       []Entry `json:"entries"`
	NextPageToken string  `json:"nextPageToken"`
}

// MaxPage is the largest page the API serves.
const MaxPage = 1000

// Files reads and changes a sandbox's workspace. Paths are
// workspace-relative; absolute paths, ".." and symlinks leading outside are
// an *InvalidPathError. Mutations (Write, MakeDir, Rename, Remove) go through
// the session's FIFO queue; reads, listings and watches (WatchDir) do not
// wait in it. A mutation that fails is an *OperationFailedError.
type Files struct{ s *Sandbox }

func (f *Files) mutate(ctx context.Context, op string, body map[string]any) error {
	var r CommandResult
	if err := f.s.operation(ctx, "operations:execute", body, &r); err != nil {
		return err
	}
	if !r.OK() {
		return &OperationFailedError{Op: op, Result: &r}
	}
	return nil
}

// MaxFileBytes is the largest file a session writes or reads (32 MiB).
const MaxFileBytes = 32 << 20

// Write writes (replaces) a file of at most 32 MiB with what r holds; a
// larger one is a *PayloadTooLargeError before anything is sent.
func (f *Files) Write(ctx context.Context, path string, r io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return err
	}
	if len(data) > MaxFileBytes {
		return &PayloadTooLargeError{APIError{Status: http.StatusRequestEntityTooLarge, Code: "PayloadTooLarge", Source: "client",
			Message: fmt.Sprintf("%s: the file is over %d bytes: a session file is at most 32 MiB", path, MaxFileBytes)}}
	}
	return f.mutate(ctx, "writeFile", map[string]any{
		"writeFile": map[string]any{"path": path, "contentBase64": base64.StdEncoding.EncodeToString(data)},
	})
}

// Read is a file's content (at most 32 MiB); close it when done.
func (f *Files) Read(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := f.s.c.gw.do(ctx, request{method: http.MethodGet, url: f.s.run.Endpoint + "/files:content",
		query: url.Values{"path": {path}}, caPEM: f.s.run.CABundle})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ListPage is one page of a directory (limit 1–1000; 0: the server's 100).
func (f *Files) ListPage(ctx context.Context, path string, limit int, pageToken string) (*Page, error) {
	q := url.Values{"path": {path}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if pageToken != "" {
		q.Set("pageToken", pageToken)
	}
	var p Page
	err := f.s.c.gw.json(ctx, request{method: http.MethodGet, url: f.s.run.Endpoint + "/files", query: q,
		caPEM: f.s.run.CABundle}, nil, &p)
	if err != nil {
		return nil, err
	}
	dir := strings.Trim(path, "/")
	for i := range p.Entries {
		p.Entries[i].Path = p.Entries[i].Name
		if dir != "" && dir != "." {
			p.Entries[i].Path = dir + "/" + p.Entries[i].Name
		}
	}
	return &p, nil
}

// Entries yields every entry of a directory in UTF-8 byte order of the
// names, fetching pages of MaxPage as the loop goes; an error ends it.
func (f *Files) Entries(ctx context.Context, path string) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		token := ""
		for {
			p, err := f.ListPage(ctx, path, MaxPage, token)
			if err != nil {
				yield(Entry{}, err)
				return
			}
			for _, e := range p.Entries {
				if !yield(e, nil) {
					return
				}
			}
			if token = p.NextPageToken; token == "" {
				return
			}
		}
	}
}

// List is every entry of a directory, paging through it.
func (f *Files) List(ctx context.Context, path string) ([]Entry, error) {
	var out []Entry
	for e, err := range f.Entries(ctx, path) {
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Exists reports whether path names anything in the workspace. It looks
// the name up in its parent's listing, which comes sorted, so it stops at
// the page that would hold it.
func (f *Files) Exists(ctx context.Context, path string) (bool, error) {
	var parts []string
	for _, p := range strings.Split(path, "/") {
		if p != "" && p != "." {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return true, nil
	}
	parent, name := strings.Join(parts[:len(parts)-1], "/"), parts[len(parts)-1]
	for e, err := range f.Entries(ctx, parent) {
		var nf *NotFoundError
		var bad *BadRequestError
		switch {
		case errors.As(err, &nf), errors.As(err, &bad):
			return false, nil // no parent, or the parent is not a directory
		case err != nil:
			return false, err
		case e.Name == name:
			return true, nil
		case e.Name > name: // Go compares strings bytewise: UTF-8 byte order
			return false, nil
		}
	}
	return false, nil
}

// MakeDir creates a directory and its missing parents.
func (f *Files) MakeDir(ctx context.Context, path string) error {
	return f.mutate(ctx, "mkdir", map[string]any{"mkdir": map[string]any{"path": path}})
}

// Rename moves a file or directory within the workspace.
func (f *Files) Rename(ctx context.Context, from, to string) error {
	return f.mutate(ctx, "rename", map[string]any{"rename": map[string]any{"from": from, "to": to}})
}

// Remove removes a file, a symlink (not its target) or a directory tree.
func (f *Files) Remove(ctx context.Context, path string) error {
	return f.mutate(ctx, "delete", map[string]any{"delete": map[string]any{"path": path}})
}
