package kruntimes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Watching a directory: the session's GET …/files:watch (docs/sessions.md,
// "Watching files"), NDJSON: ready first (every change from then on is
// reported), a file line per change, lost when the session dropped some, a
// keepalive after 20 s of silence, failed when the watch broke. It bypasses
// the session's queue.

// MaxWatchEvents is the most events a WatchHandle buffers: what comes while
// it holds that many is dropped and counted in Lost.
const MaxWatchEvents = 10_000

// FileEvent is one change beneath a watched directory.
type FileEvent struct {
	// Change is create, write, remove, rename (once for the old name and
	// once for the new) or chmod (metadata); a newer session may say
	// something else, passed on as it is.
	Change string
	// Path is workspace-relative ("src/d/a.txt" for a watch of "src"), not
	// relative to the watched directory.
	Path string
}

// errWatchStopped is the cause of a watch's context once Stop was called.
var errWatchStopped = errors.New("the watch was stopped")

// WatchHandle is a watch of a directory, made once the session reported it
// ready: every change after WatchDir returned is reported. A goroutine reads
// the stream into a buffer of at most MaxWatchEvents events (those that come
// while it is full are dropped and counted in Lost); GetNewEvents takes what
// it holds, Events follows it. The watch lasts until Stop, the end of the
// context WatchDir was given, or a failure (Err). Call Stop when done: it
// closes the connection. Its methods may be called from any goroutine.
type WatchHandle struct {
	// Path is the watched directory (workspace-relative); Recursive says
	// whether its subdirectories are watched too.
	Path      string
	Recursive bool

	cancel context.CancelCauseFunc
	done   chan struct{} // closed once the reading goroutine returned

	mu      sync.Mutex
	events  []FileEvent
	changed chan struct{} // closed, and replaced, whenever events or the end change
	lost    int64         // what lost events said
	dropped int64         // what the full buffer dropped
	ready   bool
	ended   bool
	err     error
}

// WatchDir watches what changes beneath the directory path ("": the
// workspace; recursive: its subdirectories too, those made later included)
// and returns once the session reports the watch ready. ctx bounds the wait
// for ready and the watch's whole life: when it ends, the watch ends (Err
// then says why). A *NotFoundError for a directory that does not exist, a
// *ConflictError for a file, an *InvalidPathError for a path that leaves the
// workspace, a *BusyError past 16 watches in the session (or a tree larger
// than the kernel watches).
func (f *Files) WatchDir(ctx context.Context, path string, recursive bool) (*WatchHandle, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	idle := time.AfterFunc(connectIdleTimeout, func() { cancel(errIdle) })
	q := url.Values{"path": {path}, "recursive": {strconv.FormatBool(recursive)}}
	resp, err := f.s.c.gw.do(ctx, request{method: http.MethodGet, url: f.s.run.Endpoint + "/files:watch", query: q,
		caPEM: f.s.run.CABundle})
	if err != nil {
		idle.Stop()
		cancel(nil)
		return nil, err
	}
	h := &WatchHandle{Path: path, Recursive: recursive, cancel: cancel, done: make(chan struct{}),
		changed: make(chan struct{})}
	go h.read(ctx, resp.Body, idle)
	for {
		h.mu.Lock()
		ready, ended, changed, err := h.ready, h.ended, h.changed, h.err
		h.mu.Unlock()
		switch {
		case ready:
			return h, nil
		case ended:
			<-h.done
			return nil, err
		}
		<-changed
	}
}

func (h *WatchHandle) op() string { return fmt.Sprintf("files:watch %q", h.Path) }

// read reads the stream until it ends, fails or is stopped.
func (h *WatchHandle) read(ctx context.Context, body io.ReadCloser, idle *time.Timer) {
	defer close(h.done)
	defer h.cancel(nil)
	defer body.Close()
	defer idle.Stop()
	lines := bufio.NewScanner(body)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	var err error
	for lines.Scan() {
		idle.Reset(connectIdleTimeout)
		if len(bytes.TrimSpace(lines.Bytes())) == 0 {
			continue
		}
		if err = h.take(lines.Bytes()); err != nil {
			break
		}
	}
	if err == nil {
		err = lines.Err()
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		if !errors.Is(err, errWatchStopped) {
			err = &NetworkError{Op: h.op(), Err: fmt.Errorf("the watch stream ended: %w", err)}
		}
	}
	if errors.Is(err, errWatchStopped) {
		err = nil
	}
	h.end(err)
}

// take is one line of the stream; a failed line is its typed error.
func (h *WatchHandle) take(line []byte) error {
	var d struct {
		Type   string          `json:"type"`
		Change string          `json:"change"`
		Path   string          `json:"path"`
		Events int64           `json:"events"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(line, &d); err != nil {
		return &NetworkError{Op: h.op(), Err: fmt.Errorf("not a JSON line: %w", err)}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch d.Type {
	case "ready":
		h.ready = true
	case "file":
		if len(h.events) >= MaxWatchEvents {
			h.dropped++
		} else {
			h.events = append(h.events, FileEvent{Change: d.Change, Path: d.Path})
		}
	case "lost":
		h.lost += d.Events
	case "failed":
		body := append(append([]byte(`{"error":`), d.Error...), '}')
		return fromAnswer("gateway", statusOf(d.Error), http.Header{}, body)
	default:
		return nil // keepalive, or a type this client does not know
	}
	h.notify()
	return nil
}

// notify wakes whoever waits for a change; h.mu is held.
func (h *WatchHandle) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// end records how the watch ended: the first end wins.
func (h *WatchHandle) end(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended {
		h.ended, h.err = true, err
		h.notify()
	}
}

// GetNewEvents takes the events buffered since the last call, oldest first,
// without waiting: none when nothing changed (or the watch ended: see Err).
func (h *WatchHandle) GetNewEvents() []FileEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.events
	h.events = nil
	return out
}

// Events yields the events as they come — first those buffered —, taking
// them as GetNewEvents does, until the watch ends: after Stop it ends, after
// a failure it yields the error last (once the events read before it), and
// when ctx ends it yields ctx's error. Stopping the loop leaves the watch
// running.
func (h *WatchHandle) Events(ctx context.Context) iter.Seq2[FileEvent, error] {
	return func(yield func(FileEvent, error) bool) {
		for {
			h.mu.Lock()
			if len(h.events) > 0 {
				ev := h.events[0]
				h.events = h.events[1:]
				h.mu.Unlock()
				if !yield(ev, nil) {
					return
				}
				continue
			}
			ended, err, changed := h.ended, h.err, h.changed
			h.mu.Unlock()
			if ended {
				if err != nil {
					yield(FileEvent{}, err)
				}
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				yield(FileEvent{}, ctx.Err())
				return
			}
		}
	}
}

// Lost is how many events were dropped so far: by the session (its reader
// fell behind: lost events) and by this handle (its buffer was full).
func (h *WatchHandle) Lost() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost + h.dropped
}

// Err is why the watch ended: nil while it runs and after Stop; the
// session's error (a failed event: the session closed, its owner went
// away), a *NetworkError for a stream that broke, ended or stayed silent
// for 60 s, or one wrapping the context's error when WatchDir's context
// ended.
func (h *WatchHandle) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Done is closed once the watch has ended and its connection is closed.
func (h *WatchHandle) Done() <-chan struct{} { return h.done }

// Stop ends the watch and closes its connection; it returns once the
// connection is closed. Stopping again is no error. The events already
// buffered can still be taken.
func (h *WatchHandle) Stop() {
	h.cancel(errWatchStopped)
	<-h.done
}
