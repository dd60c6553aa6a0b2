package kruntimes

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// metricsWire is the answer of docs/sessions.md, "Metrics".
func metricsWire() map[string]any {
	return map[string]any{"cpuSeconds": 12.34, "cpuCount": 2, "memoryBytes": 73400320, "memoryLimitBytes": 2147483648,
		"processes": 3, "diskBytes": 1048576, "diskPartial": false,
		"diskTotalBytes": 107374182400, "diskFreeBytes": 53687091200}
}

func TestMetricsAreReadFromTheMetricsRoute(t *testing.T) {
	s, rec := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, metricsWire()) })
	m, err := s.GetMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(2147483648)
	want := SandboxMetrics{CPUSeconds: 12.34, CPUCount: 2, MemoryBytes: 73400320, MemoryLimitBytes: &limit,
		Processes: 3, DiskBytes: 1048576, DiskTotalBytes: 107374182400, DiskFreeBytes: 53687091200}
	got := *m
	if got.MemoryLimitBytes == nil || *got.MemoryLimitBytes != limit {
		t.Fatalf("limit %v", got.MemoryLimitBytes)
	}
	got.MemoryLimitBytes, want.MemoryLimitBytes = nil, nil
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	calls := rec.all()
	if len(calls) != 2 { // the status probe, then the metrics
		t.Fatalf("%d requests", len(calls))
	}
	if c := calls[1]; c.Method != http.MethodGet || c.URL.Path != sessionPath+"/metrics" || c.URL.RawQuery != "" {
		t.Errorf("request %s %s", c.Method, c.URL)
	}
}

func TestANullLimitIsNil(t *testing.T) {
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		doc := metricsWire()
		doc["memoryLimitBytes"], doc["cpuSeconds"], doc["diskPartial"], doc["processes"] = nil, 0, true, 0
		writeJSON(w, 200, doc)
	})
	m, err := s.GetMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.MemoryLimitBytes != nil || m.CPUSeconds != 0 || !m.DiskPartial || m.Processes != 0 || m.CPUCount != 2 {
		t.Errorf("%+v", m)
	}
}

func TestMetricsErrorsAreTypedAndNotRetried(t *testing.T) {
	ctx := context.Background()

	s, rec := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, 404, "NotFound") })
	var nf *NotFoundError
	if m, err := s.GetMetrics(ctx); m != nil || !errors.As(err, &nf) || nf.Status != 404 || nf.Code != "NotFound" {
		t.Errorf("404: %v %v", m, err)
	}
	if n := len(rec.all()); n != 1+1 {
		t.Errorf("404: %d requests", n)
	}

	for _, code := range []string{"NotReady", "OwnerUnavailable", "Overloaded"} {
		s, rec := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, 503, code) })
		m, err := s.GetMetrics(ctx)
		var unavailable *UnavailableError
		var api *APIError
		if m != nil || !errors.As(err, &unavailable) || !errors.As(err, &api) || api.Code != code ||
			api.Status != 503 || api.RetryAfter != time.Second {
			t.Errorf("503 %s: %v %v", code, m, err)
		}
		if n := len(rec.all()); n != 1+1 {
			t.Errorf("503 %s: %d requests", code, n)
		}
	}
	s, _ = sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, 503, "NotReady") })
	var nr *NotReadyError
	if _, err := s.GetMetrics(ctx); !errors.As(err, &nr) {
		t.Errorf("NotReady: %v", err)
	}
}
