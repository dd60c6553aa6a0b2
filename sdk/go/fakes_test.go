package kruntimes

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// recorder is a fake server's log of what each request carried.
type recorder struct {
	mu    sync.Mutex
	calls []*http.Request
}

func (r *recorder) add(req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, req)
}

func (r *recorder) all() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.calls...)
}

// fake starts an HTTPS server answering with handler and recording every
// request (client-go sends a kubeconfig's credentials over TLS only).
func fake(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r.Clone(context.Background()))
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// caPEM is the certificate of a fake server, which is its own CA.
func caPEM(srv *httptest.Server) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}

// caFile writes caPEM(srv) to a file.
func caFile(t *testing.T, srv *httptest.Server) string {
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, []byte(caPEM(srv)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code string) {
	if status == 429 || status == 503 {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": code}})
}

const sessionPath = "/v1/namespaces/default/runtimes/bash/sessions/u-1"

// sandboxOn is a sandbox connected by endpoint to a fake gateway whose
// session routes other than status are answered by handler.
func sandboxOn(t *testing.T, handler http.HandlerFunc) (*Sandbox, *recorder) {
	t.Helper()
	srv, rec := fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == sessionPath && r.Method == http.MethodGet {
			writeJSON(w, 200, map[string]any{"uid": "u-1", "attempt": 1})
			return
		}
		handler(w, r)
	})
	c, err := New(srv.URL, "t", WithCAFile(caFile(t, srv)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.ConnectSandboxAt(context.Background(), srv.URL+sessionPath)
	if err != nil {
		t.Fatal(err)
	}
	return s, rec
}

// pages serves a files route with names, in pages of the requested limit.
func pages(names []string, limits *[]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		*limits = append(*limits, q.Get("limit"))
		limit := 100
		fmt.Sscan(q.Get("limit"), &limit)
		var rest []string
		for _, n := range names {
			if n > q.Get("pageToken") {
				rest = append(rest, n)
			}
		}
		page := rest[:min(limit, len(rest))]
		entries := make([]map[string]any, 0, len(page))
		for _, n := range page {
			entries = append(entries, map[string]any{"name": n, "type": "file", "size": 1})
		}
		doc := map[string]any{"entries": entries}
		if len(rest) > limit {
			doc["nextPageToken"] = page[len(page)-1]
		}
		writeJSON(w, 200, doc)
	}
}
