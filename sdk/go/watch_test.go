package kruntimes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func watchLine(change, path string) string {
	return fmt.Sprintf(`{"type":"file","change":%q,"path":%q}`+"\n", change, path)
}

const (
	readyLine     = `{"type":"ready"}` + "\n"
	keepaliveLine = `{"type":"keepalive"}` + "\n"
)

// hold keeps a watch's answer open until the client goes away, then says so
// on closed (when not nil).
func hold(r *http.Request, closed chan<- struct{}) {
	select {
	case <-r.Context().Done():
		if closed != nil {
			closed <- struct{}{}
		}
	case <-time.After(20 * time.Second):
	}
}

// pollEvents takes a watch's new events until there are n (or 5 s passed).
func pollEvents(h *WatchHandle, n int) []FileEvent {
	var out []FileEvent
	for deadline := time.Now().Add(5 * time.Second); len(out) < n && time.Now().Before(deadline); {
		out = append(out, h.GetNewEvents()...)
		time.Sleep(5 * time.Millisecond)
	}
	return out
}

func waitDone(t *testing.T, h *WatchHandle) {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end")
	}
}

func TestWatchRequestsNameTheDirectoryAndWhetherItIsRecursive(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.Method+" "+strings.TrimPrefix(r.URL.Path, sessionPath)+"?"+r.URL.RawQuery)
		mu.Unlock()
		ndjson(w, readyLine)
		hold(r, nil)
	})
	ctx := context.Background()
	h, err := s.Files.WatchDir(ctx, "src", true)
	if err != nil || h.Path != "src" || !h.Recursive {
		t.Fatal(h, err)
	}
	h.Stop()
	flat, err := s.Files.WatchDir(ctx, "", false)
	if err != nil || flat.Recursive {
		t.Fatal(flat, err)
	}
	flat.Stop()
	want := []string{"GET /files:watch?path=src&recursive=true", "GET /files:watch?path=&recursive=false"}
	if fmt.Sprint(queries) != fmt.Sprint(want) {
		t.Errorf("requests %v, want %v", queries, want)
	}
}

func TestWatchDirReturnsOnlyOnceTheSessionSaidReady(t *testing.T) {
	gate := make(chan struct{})
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, keepaliveLine)
		<-gate
		ndjson(w, readyLine+watchLine("create", "src/a.txt"))
		hold(r, nil)
	})
	got := make(chan *WatchHandle, 1)
	go func() {
		h, err := s.Files.WatchDir(context.Background(), "src", false)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	select {
	case <-got:
		t.Fatal("WatchDir returned before ready")
	case <-time.After(300 * time.Millisecond):
	}
	close(gate)
	h := <-got
	defer h.Stop()
	if events := pollEvents(h, 1); fmt.Sprint(events) != "[{create src/a.txt}]" {
		t.Errorf("%v", events)
	}
}

func TestWatchEventsAreReadHoweverTheLinesAreSplit(t *testing.T) {
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		body := readyLine + keepaliveLine + watchLine("create", "src/a.txt") +
			`{"type":"progress","percent":5}` + "\n\r\n\n" +
			`{"type":"lost","events":3}` + "\n" + watchLine("write", "src/a.txt") +
			watchLine("rename", "src/a.txt") + watchLine("rename", "src/b.txt") + `{"type":"lost","events":2}` + "\n" +
			`{"type":"file","change":"other","path":"src/x","somethingNew":1}` + "\r\n" +
			watchLine("chmod", "src/run.sh") + watchLine("remove", "src/b.txt")
		var pieces []string
		for i := 0; i < len(body); i += 7 { // split mid-line, mid-JSON, between lines
			pieces = append(pieces, body[i:min(i+7, len(body))])
		}
		ndjson(w, pieces...)
		hold(r, nil)
	})
	ctx := context.Background()
	h, err := s.Files.WatchDir(ctx, "src", true)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	var events []string
	for ev, err := range h.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev.Change+":"+ev.Path)
		if len(events) == 7 {
			break
		}
	}
	want := "create:src/a.txt write:src/a.txt rename:src/a.txt rename:src/b.txt other:src/x chmod:src/run.sh remove:src/b.txt"
	if strings.Join(events, " ") != want {
		t.Errorf("events\n%s\nwant\n%s", strings.Join(events, " "), want)
	}
	if h.Lost() != 5 || h.Err() != nil || len(h.GetNewEvents()) != 0 {
		t.Errorf("lost %d, err %v", h.Lost(), h.Err())
	}
}

func TestAWatchFailureComesAfterTheEventsReadBeforeIt(t *testing.T) {
	answers := []string{
		readyLine + watchLine("create", "a") + watchLine("remove", "a") +
			`{"type":"failed","error":{"code":"OwnerUnavailable","message":"gone"}}` + "\n" + watchLine("create", "never"),
		readyLine + watchLine("create", "b"), // then the stream just ends
		readyLine + `{"type":`,
	}
	var mu sync.Mutex
	n := 0
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body := answers[n]
		n++
		mu.Unlock()
		ndjson(w, body)
	})
	ctx := context.Background()
	h, err := s.Files.WatchDir(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	var last error
	for ev, err := range h.Events(ctx) {
		if err != nil {
			last = err
			break
		}
		events = append(events, ev.Change+":"+ev.Path)
	}
	var unavailable *OwnerUnavailableError
	if strings.Join(events, " ") != "create:a remove:a" || !errors.As(last, &unavailable) || unavailable.Message != "gone" {
		t.Errorf("%v %v", events, last)
	}
	waitDone(t, h)
	if !errors.As(h.Err(), &unavailable) || len(h.GetNewEvents()) != 0 {
		t.Errorf("err %v", h.Err())
	}
	h.Stop() // after a failure: no error, and Err stays
	if !errors.As(h.Err(), &unavailable) {
		t.Errorf("after stop: %v", h.Err())
	}

	var network *NetworkError
	h, err = s.Files.WatchDir(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h)
	if events := h.GetNewEvents(); fmt.Sprint(events) != "[{create b}]" || !errors.As(h.Err(), &network) ||
		!errors.Is(h.Err(), io.ErrUnexpectedEOF) {
		t.Errorf("%v %v", events, h.Err())
	}

	h, err = s.Files.WatchDir(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h)
	if !errors.As(h.Err(), &network) || !strings.Contains(h.Err().Error(), "not a JSON line") {
		t.Errorf("%v", h.Err())
	}
}

func TestAWatchThatFailsOrEndsBeforeReadyIsWatchDirsError(t *testing.T) {
	answers := []string{
		keepaliveLine + `{"type":"failed","error":{"code":"Busy","message":"too many watches"}}` + "\n",
		keepaliveLine,
	}
	var mu sync.Mutex
	n := 0
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body := answers[n]
		n++
		mu.Unlock()
		ndjson(w, body)
	})
	var busy *BusyError
	if h, err := s.Files.WatchDir(context.Background(), "src", false); h != nil || !errors.As(err, &busy) ||
		busy.Status != 429 || busy.Message != "too many watches" {
		t.Errorf("%v %v", h, err)
	}
	var network *NetworkError
	if h, err := s.Files.WatchDir(context.Background(), "src", false); h != nil || !errors.As(err, &network) ||
		!errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("%v %v", h, err)
	}
}

func TestRefusedWatchesAreTyped(t *testing.T) {
	answer := map[string]func(http.ResponseWriter){
		"missing": func(w http.ResponseWriter) { writeError(w, 404, "NotFound") },
		"a.txt":   func(w http.ResponseWriter) { writeError(w, 409, "Conflict") },
		"../etc":  func(w http.ResponseWriter) { writeError(w, 400, "InvalidPath") },
		"busy":    func(w http.ResponseWriter) { writeError(w, 429, "Busy") },
	}
	s, rec := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		answer[r.URL.Query().Get("path")](w)
	})
	ctx := context.Background()
	var nf *NotFoundError
	var conflict *ConflictError
	var invalid *InvalidPathError
	var busy *BusyError
	var api *APIError
	for path, is := range map[string]func(error) bool{
		"missing": func(err error) bool { return errors.As(err, &nf) && nf.Status == 404 },
		"a.txt":   func(err error) bool { return errors.As(err, &conflict) && conflict.Status == 409 },
		"../etc":  func(err error) bool { return errors.As(err, &invalid) && invalid.Code == "InvalidPath" },
		"busy": func(err error) bool {
			return errors.As(err, &busy) && busy.RetryAfter == time.Second && errors.As(err, &api) && api.Retryable()
		},
	} {
		if h, err := s.Files.WatchDir(ctx, path, true); h != nil || !is(err) {
			t.Errorf("%s: %v %v", path, h, err)
		}
	}
	if n := len(rec.all()); n != 1+4 { // the status probe, then one call each: nothing is retried
		t.Errorf("%d requests", n)
	}
}

func TestStopTheContextOrSilenceClosesTheWatch(t *testing.T) {
	closed := make(chan struct{}, 4)
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, readyLine+watchLine("create", "a"))
		hold(r, closed)
	})
	waitClosed := func(what string) {
		t.Helper()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Errorf("%s: the server still holds the connection", what)
		}
	}
	h, err := s.Files.WatchDir(context.Background(), "", false)
	if err != nil {
		t.Fatal(err)
	}
	pollEvents(h, 1)
	h.Stop()
	waitClosed("stop")
	h.Stop()
	select {
	case <-h.Done():
	default:
		t.Error("Done is open after Stop")
	}
	for ev, err := range h.Events(context.Background()) {
		t.Errorf("after stop: %v %v", ev, err)
	}
	if h.Err() != nil || len(h.GetNewEvents()) != 0 {
		t.Errorf("after stop: %v", h.Err())
	}

	// Stopped while another goroutine follows it: its loop ends.
	h, err = s.Files.WatchDir(context.Background(), "", false)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, h.Stop)
	n := 0
	for _, err := range h.Events(context.Background()) {
		if err != nil {
			t.Error(err)
		}
		n++
	}
	if n != 1 {
		t.Errorf("%d events", n)
	}
	waitClosed("stop while following")

	// WatchDir's context bounds the watch.
	ctx, cancel := context.WithCancel(context.Background())
	h, err = s.Files.WatchDir(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitDone(t, h)
	var network *NetworkError
	if !errors.As(h.Err(), &network) || !errors.Is(h.Err(), context.Canceled) {
		t.Errorf("cancelled: %v", h.Err())
	}
	waitClosed("cancel")

	// Events' own context ends its loop, not the watch.
	h, err = s.Files.WatchDir(context.Background(), "", false)
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	var last error
	for _, err := range h.Events(short) {
		last = err
	}
	if !errors.Is(last, context.DeadlineExceeded) || h.Err() != nil {
		t.Errorf("events' context: %v, watch %v", last, h.Err())
	}
	h.Stop()
	waitClosed("stop after events' context")

	// Silence past the idle bound ends the watch.
	defer func(d time.Duration) { connectIdleTimeout = d }(connectIdleTimeout)
	connectIdleTimeout = 300 * time.Millisecond
	h, err = s.Files.WatchDir(context.Background(), "", false)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h)
	if !errors.As(h.Err(), &network) || !errors.Is(h.Err(), errIdle) {
		t.Errorf("silence: %v", h.Err())
	}
	waitClosed("silence")
}

func TestTheWatchBufferKeepsTenThousandEventsAndCountsTheRestLost(t *testing.T) {
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		b.WriteString(readyLine)
		for i := range MaxWatchEvents + 1000 {
			b.WriteString(watchLine("create", fmt.Sprintf("f%d", i)))
		}
		b.WriteString(`{"type":"lost","events":7}` + "\n")
		ndjson(w, b.String())
		hold(r, nil)
	})
	h, err := s.Files.WatchDir(context.Background(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	for deadline := time.Now().Add(5 * time.Second); h.Lost() != 1007 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	events := h.GetNewEvents()
	if len(events) != MaxWatchEvents || MaxWatchEvents != 10_000 || events[0].Path != "f0" ||
		events[len(events)-1].Path != "f9999" || h.Lost() != 1007 {
		t.Errorf("%d events, lost %d", len(events), h.Lost())
	}
	if len(h.GetNewEvents()) != 0 {
		t.Error("taken twice")
	}
}
