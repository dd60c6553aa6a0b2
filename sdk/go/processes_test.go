package kruntimes

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// call is one request a fake session received: method, path and body.
type call struct{ method, path, body string }

// calls records the requests of a fake session's handler.
type calls struct {
	mu  sync.Mutex
	all []call
}

func (c *calls) add(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, call{r.Method, strings.TrimPrefix(r.URL.Path, sessionPath), strings.TrimSpace(string(b))})
}

func (c *calls) list() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]call(nil), c.all...)
}

// ndjson writes lines, flushing after each.
func ndjson(w http.ResponseWriter, lines ...string) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	for _, l := range lines {
		fmt.Fprint(w, l)
		w.(http.Flusher).Flush()
	}
}

func TestProcessRequestsHaveTheAPIsShape(t *testing.T) {
	var got calls
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		switch {
		case r.URL.Path == sessionPath+"/processes" && r.Method == http.MethodPost:
			writeJSON(w, 201, map[string]any{"pid": 4242})
		case r.Method == http.MethodGet:
			writeJSON(w, 200, map[string]any{"pid": 4242})
		default:
			w.WriteHeader(204)
		}
	})
	ctx := context.Background()
	h, err := s.Commands.Start(ctx, Command{Shell: "python3 -m http.server 8000", Cwd: "ignored", Env: map[string]string{"A": "1", "X": "0"}},
		StartOptions{Cwd: "work", Env: map[string]string{"X": "1"}, Stdin: true})
	if err != nil || h.PID != 4242 {
		t.Fatal(h, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.SendStdin(ctx, []byte("hi\n")))
	must(h.CloseStdin(ctx))
	must(h.Signal(ctx, "SIGINT"))
	must(h.Kill(ctx))
	must(s.Commands.Kill(ctx, 7))
	must(s.Commands.SendStdin(ctx, 7, []byte{0, 255}))
	must(s.Commands.Signal(ctx, 7, " term"))
	must(s.Commands.CloseStdin(ctx, 7))
	if _, err := h.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commands.Start(ctx, Argv("cat"), StartOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := s.PTY.Create(ctx, PTYOptions{})
	if err != nil || p.PID != 4242 {
		t.Fatal(p, err)
	}
	must(p.SendInput(ctx, []byte("ls\r")))
	must(p.Resize(ctx, 40, 120))
	must(p.Signal(ctx, "SIGHUP"))
	must(p.Kill(ctx))
	if _, err := s.PTY.Create(ctx, PTYOptions{Rows: 50, Cols: 200, Cmd: []string{"sh"}, Cwd: "w", Env: map[string]string{"TERM": "dumb"}}); err != nil {
		t.Fatal(err)
	}
	must(s.PTY.SendInput(ctx, 8, []byte("\x03")))
	must(s.PTY.Resize(ctx, 8, 1, 1000))
	must(s.PTY.Kill(ctx, 8))
	must(p.Signal(ctx, "sigwinch"))
	want := []call{
		{"POST", "/processes", `{"command":{"shell":"python3 -m http.server 8000"},"cwd":"work","env":{"A":"1","X":"1"},"stdin":true}`},
		{"POST", "/processes/4242:input", `{"dataBase64":"aGkK"}`},
		{"POST", "/processes/4242:closeStdin", ``},
		{"POST", "/processes/4242:signal", `{"signal":"SIGINT"}`},
		{"POST", "/processes/4242:signal", `{"signal":"SIGKILL"}`},
		{"POST", "/processes/7:signal", `{"signal":"SIGKILL"}`},
		{"POST", "/processes/7:input", `{"dataBase64":"AP8="}`},
		{"POST", "/processes/7:signal", `{"signal":"SIGTERM"}`},
		{"POST", "/processes/7:closeStdin", ``},
		{"GET", "/processes/4242", ``},
		{"POST", "/processes", `{"command":{"argv":["cat"]}}`},
		{"POST", "/processes", `{"command":{"argv":["bash","-i","-l"]},"pty":{"cols":80,"rows":24},"stdin":true}`},
		{"POST", "/processes/4242:input", `{"dataBase64":"bHMN"}`},
		{"POST", "/processes/4242:resize", `{"cols":120,"rows":40}`},
		{"POST", "/processes/4242:signal", `{"signal":"SIGHUP"}`},
		{"POST", "/processes/4242:signal", `{"signal":"SIGKILL"}`},
		{"POST", "/processes", `{"command":{"argv":["sh"]},"cwd":"w","env":{"TERM":"dumb"},"pty":{"cols":200,"rows":50},"stdin":true}`},
		{"POST", "/processes/8:input", `{"dataBase64":"Aw=="}`},
		{"POST", "/processes/8:resize", `{"cols":1000,"rows":1}`},
		{"POST", "/processes/8:signal", `{"signal":"SIGKILL"}`},
		{"POST", "/processes/4242:signal", `{"signal":"SIGWINCH"}`},
	}
	if fmt.Sprint(got.list()) != fmt.Sprint(want) {
		t.Errorf("requests\n%v\nwant\n%v", got.list(), want)
	}
}

func TestWhatTheAPIWouldRefuseIsRefusedBeforeItIsSent(t *testing.T) {
	var got calls
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) { got.add(r); w.WriteHeader(204) })
	ctx := context.Background()
	if _, err := s.Commands.Start(ctx, Command{Argv: []string{"cat"}, Stdin: "x"}, StartOptions{}); err == nil || !strings.Contains(err.Error(), "SendStdin") {
		t.Errorf("stdin: %v", err)
	}
	if _, err := s.Commands.Start(ctx, Command{Shell: "sleep 9", Timeout: time.Second}, StartOptions{}); err == nil {
		t.Error("a timeout was accepted")
	}
	for _, sig := range []string{"", " ", "sig"} {
		if err := s.Commands.Signal(ctx, 1, sig); err == nil {
			t.Errorf("signal %q accepted", sig)
		}
	}
	for _, size := range [][2]int{{0, 80}, {24, 1001}, {-1, 5}} {
		if err := newPTYHandle(s, 1).Resize(ctx, size[0], size[1]); err == nil {
			t.Errorf("resize %v accepted", size)
		}
	}
	if _, err := s.PTY.Create(ctx, PTYOptions{Rows: 2000}); err == nil {
		t.Error("2000 rows accepted")
	}
	if n := len(got.list()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
	// Longer input goes in pieces of 1 MiB, one call each; none is one call.
	big := make([]byte, 2*MaxInputBytes+3)
	big[MaxInputBytes] = 'x'
	if err := s.Commands.SendStdin(ctx, 1, big); err != nil {
		t.Fatal(err)
	}
	if err := s.Commands.SendStdin(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var sizes []string
	for _, c := range got.list() {
		var d struct{ DataBase64 string }
		_ = json.Unmarshal([]byte(c.body), &d)
		b, _ := base64.StdEncoding.DecodeString(d.DataBase64)
		sizes = append(sizes, fmt.Sprintf("%d:%d", len(b), bytes.IndexByte(b, 'x')))
	}
	if fmt.Sprint(sizes) != fmt.Sprintf("[%d:-1 %d:0 3:-1 0:-1]", MaxInputBytes, MaxInputBytes) {
		t.Errorf("pieces %v", sizes)
	}
}

func TestProcessesAreListedAndConnected(t *testing.T) {
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case sessionPath + "/processes":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"processes":[
			  {"pid":12,"command":{"shell":"python3 -m http.server 8000"},"cwd":"work","pty":false,"running":true,
			   "exitCode":null,"startedAt":"2026-12-08T00:20:00Z","endedAt":null},
			  {"pid":13,"command":{"argv":["bash","-i","-l"]},"cwd":"","pty":true,"running":false,
			   "exitCode":137,"startedAt":"2026-12-08T00:20:00.5Z","endedAt":"2026-12-08T00:21:00Z","future":1},
			  {"pid":14,"command":{"argv":["sh"]},"pty":{"rows":24,"cols":80},"running":true}]}`)
		case sessionPath + "/processes/12":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"pid":12,"command":{"shell":"x"},"running":true}`)
		default:
			writeError(w, 404, "NotFound")
		}
	})
	ctx := context.Background()
	ps, err := s.Commands.List(ctx)
	if err != nil || len(ps) != 3 {
		t.Fatal(ps, err)
	}
	first, second := ps[0], ps[1]
	if first.PID != 12 || first.Command.Shell != "python3 -m http.server 8000" || first.Cwd != "work" || first.PTY ||
		!first.Running || first.ExitCode != nil || !first.StartedAt.Equal(time.Date(2026, 12, 8, 0, 20, 0, 0, time.UTC)) ||
		!first.EndedAt.IsZero() {
		t.Errorf("%+v", first)
	}
	if second.PID != 13 || fmt.Sprint(second.Command.Argv) != "[bash -i -l]" || !second.PTY || second.Running ||
		*second.ExitCode != 137 || second.EndedAt.Sub(second.StartedAt) != 59500*time.Millisecond {
		t.Errorf("%+v", second)
	}
	if !ps[2].PTY {
		t.Errorf("a terminal's size is a terminal: %+v", ps[2])
	}
	if h, err := s.Commands.Connect(ctx, 12); err != nil || h.PID != 12 {
		t.Errorf("connect: %v %v", h, err)
	}
	info, err := s.Commands.Get(ctx, 12)
	if err != nil || info.Command.Shell != "x" {
		t.Errorf("get: %+v %v", info, err)
	}
	var nf *NotFoundError
	if _, err := s.Commands.Connect(ctx, 99); !errors.As(err, &nf) || nf.Status != 404 {
		t.Errorf("unknown pid: %v", err)
	}
	if _, err := s.PTY.Connect(ctx, 99); !errors.As(err, &nf) {
		t.Errorf("unknown terminal: %v", err)
	}
}

// describe is an event in a line: stdout:"hi\n"@3, lost:9, exited:0.
func describe(ev ProcessEvent) string {
	switch ev.Type {
	case "output":
		return fmt.Sprintf("%s:%q@%d", ev.Stream, ev.Data, ev.Offset)
	case "lost":
		return fmt.Sprintf("lost:%d", ev.Lost)
	case "exited":
		return fmt.Sprintf("exited:%d", *ev.ExitCode)
	}
	return ev.Type
}

// seen is what a loop over events saw, and the error it ended with.
func seen(events iter.Seq2[ProcessEvent, error]) (string, error) {
	var got []string
	for ev, err := range events {
		if err != nil {
			return strings.Join(got, " "), err
		}
		got = append(got, describe(ev))
	}
	return strings.Join(got, " "), nil
}

func TestEventsAreParsedAndWaitCollectsThem(t *testing.T) {
	exited := `{"type":"exited","exitCode":137}` + "\n"
	split := `{"type":"output","stream":"stdout","dataBase64":"d29ybGQK","offset":1048593}` + "\n"
	var got calls
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		ndjson(w,
			`{"type":"lost","bytes":1048576}`+"\n",
			`{"type":"output","stream":"stdout","dataBase64":"aGVsbG8K","offset":1048582}`+"\n",
			"\n",
			`{"type":"keepalive"}`+"\n",
			`{"type":"somethingNew","x":1}`+"\n",
			`{"type":"output","stream":"stderr","data`, `Base64":"b29wcwo=","offset":104858`, "7}\r\n", // one event, three writes
			split[:20], split[20:],
			exited,
			`{"type":"output","stream":"stdout","dataBase64":"bmV2ZXIK","offset":18}`+"\n", // after exited: not read
		)
	})
	h := newCommandHandle(s, 5)
	ctx := context.Background()
	events, err := seen(h.Events(ctx))
	want := `lost:1048576 stdout:"hello\n"@1048582 stderr:"oops\n"@1048587 stdout:"world\n"@1048593 exited:137`
	if err != nil || events != want {
		t.Errorf("events\n%s\nwant\n%s (%v)", events, want, err)
	}
	check := func(r *ProcessResult, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r.PID != 5 || *r.ExitCode != 137 || r.OK() || r.Stdout != "hello\nworld\n" ||
			r.Stderr != "oops\n" || r.Lost != 1<<20 || r.StdoutTruncated || r.StderrTruncated {
			t.Errorf("%+v", r)
		}
	}
	// The handle read the exit: Wait answers from what it read, and Events yields nothing more.
	check(h.Wait(ctx))
	if events, err := seen(h.Events(ctx)); events != "" || err != nil {
		t.Errorf("after the exit: %s %v", events, err)
	}
	if n := len(got.list()); n != 1 {
		t.Errorf("%d connections", n)
	}
	// Another handle connects anew.
	check(newCommandHandle(s, 5).Wait(ctx))
	if c := got.list(); len(c) != 2 || c[1].method+" "+c[1].path != "GET /processes/5:connect" {
		t.Errorf("%v", c)
	}
}

func TestAHandleGoesOnFromWhereItWas(t *testing.T) {
	replays := [][]string{{
		`{"type":"lost","bytes":100}`,
		`{"type":"output","stream":"stdout","dataBase64":"YWJj","offset":103}`, // abc
		`{"type":"output","stream":"stderr","dataBase64":"ZGVm","offset":106}`, // def; then the connection breaks
	}, {
		`{"type":"lost","bytes":100}`,                                              // the session's, from the process's start: not this handle's
		`{"type":"output","stream":"stdout","dataBase64":"YWJj","offset":103}`,     // read already
		`{"type":"output","stream":"stderr","dataBase64":"ZGVmZ2g=","offset":108}`, // defgh: def read already
		`{"type":"output","stream":"stdout","dataBase64":"aWo=","offset":110}`,     // ij
		`{"type":"output","stream":"stdout","dataBase64":"eHk=","offset":200}`,     // xy, after 88 bytes this handle never saw
		`{"type":"exited","exitCode":0}`,
	}}
	var got calls
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		n := len(got.list())
		ndjson(w, strings.Join(replays[min(n, 2)-1], "\n")+"\n")
	})
	h := newCommandHandle(s, 3)
	ctx := context.Background()
	events, err := seen(h.Events(ctx))
	if events != `lost:100 stdout:"abc"@103 stderr:"def"@106` || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("first: %s %v", events, err)
	}
	events, err = seen(h.Events(ctx))
	if events != `stderr:"gh"@108 stdout:"ij"@110 lost:88 stdout:"xy"@200 exited:0` || err != nil {
		t.Errorf("again: %s %v", events, err)
	}
	r, err := h.Wait(ctx)
	if err != nil || !r.OK() || r.Stdout != "abcijxy" || r.Stderr != "defgh" || r.Lost != 188 {
		t.Errorf("%+v %v", r, err)
	}
	// Breaking out of the loop: the next loop goes on after what was yielded.
	p := newPTYHandle(s, 3)
	for ev := range p.Events(ctx) {
		if ev.Type == "output" {
			break
		}
	}
	if events, err := seen(p.Events(ctx)); events != `stderr:"defgh"@108 stdout:"ij"@110 lost:88 stdout:"xy"@200 exited:0` || err != nil {
		t.Errorf("after a break: %s %v", events, err)
	}
	// Leaving at a lost event: it is said again before the output it precedes, and counted once.
	q := newCommandHandle(s, 3)
	for ev := range q.Events(ctx) {
		if string(ev.Data) == "ij" {
			break
		}
	}
	for ev := range q.Events(ctx) {
		if ev.Type == "lost" {
			break
		}
	}
	if events, err := seen(q.Events(ctx)); events != `lost:88 stdout:"xy"@200 exited:0` || err != nil {
		t.Errorf("after a lost event: %s %v", events, err)
	}
	if r, err := q.Wait(ctx); err != nil || r.Stdout != "abcijxy" || r.Stderr != "defgh" || r.Lost != 188 {
		t.Errorf("%+v %v", r, err)
	}
	// Without offsets, lost events are what was lost.
	var h2 handle
	h2.record(ProcessEvent{Type: "lost", Lost: 7})
	h2.record(ProcessEvent{Type: "output", Data: []byte("ab")})
	h2.record(ProcessEvent{Type: "exited"})
	if r, err := h2.wait(ctx); err != nil || r.Lost != 7 || r.Stdout != "ab" || h2.offset != 2 {
		t.Errorf("%+v %v", r, err)
	}
}

func TestAnExitIsReadWithOrWithoutCode(t *testing.T) {
	// A process killed by signal N exits 128 + N: the event names no signal,
	// and fields this client does not know are ignored.
	for line, want := range map[string]string{
		`{"type":"exited","exitCode":0}`:                    "0",
		`{"type":"exited","exitCode":143}`:                  "143",
		`{"type":"exited","exitCode":137,"somethingNew":1}`: "137",
		`{"type":"exited","exitCode":null}`:                 "nil",
		`{"type":"exited"}`:                                 "nil",
	} {
		ev, err := parseProcessEvent("x", []byte(line))
		code := "nil"
		if ev.ExitCode != nil {
			code = fmt.Sprint(*ev.ExitCode)
		}
		if err != nil || ev.Type != "exited" || code != want {
			t.Errorf("%s: %s %v", line, code, err)
		}
	}
	var network *NetworkError
	for _, line := range []string{`{"type":"output","dataBase64":"%%%"}`, `{"type":`} {
		if _, err := parseProcessEvent("x", []byte(line)); !errors.As(err, &network) {
			t.Errorf("%s: %v", line, err)
		}
	}
}

func TestAStreamThatEndsBeforeTheExitIsAnError(t *testing.T) {
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, `{"type":"output","stream":"stdout","dataBase64":"aGkK","offset":3}`+"\n")
	})
	h := newCommandHandle(s, 5)
	var types []string
	var last error
	for ev, err := range h.Events(context.Background()) {
		types = append(types, ev.Type)
		last = err
	}
	var network *NetworkError
	if strings.Join(types, ",") != "output," || !errors.As(last, &network) || !errors.Is(last, io.ErrUnexpectedEOF) {
		t.Errorf("%v %v", types, last)
	}
	if r, err := h.Wait(context.Background()); r != nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("wait: %+v %v", r, err)
	}
	// A failed event is the typed error it carries.
	s, _ = sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, `{"type":"failed","error":{"code":"OwnerUnavailable","message":"gone"}}`+"\n")
	})
	var unavailable *OwnerUnavailableError
	if _, err := newPTYHandle(s, 5).Wait(context.Background()); !errors.As(err, &unavailable) {
		t.Errorf("failed event: %v", err)
	}
}

func TestTheContextABreakOrSilenceClosesTheStream(t *testing.T) {
	closed := make(chan struct{}, 4)
	var keepalives atomic.Int32
	s, _ := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, `{"type":"output","stream":"pty","dataBase64":"JCA=","offset":2}`+"\n")
		for range keepalives.Load() {
			time.Sleep(50 * time.Millisecond)
			ndjson(w, `{"type":"keepalive"}`+"\n")
		}
		if keepalives.Load() > 0 {
			ndjson(w, `{"type":"exited","exitCode":0}`+"\n")
			return
		}
		select {
		case <-r.Context().Done():
			closed <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	})
	waitClosed := func(what string) {
		t.Helper()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Errorf("%s: the server still holds the connection", what)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var last error
	n := 0
	for ev, err := range newPTYHandle(s, 9).Events(ctx) {
		n++
		if ev.Type == "output" && string(ev.Data) == "$ " && ev.Stream == "pty" {
			cancel()
		}
		last = err
	}
	var network *NetworkError
	if n != 2 || !errors.As(last, &network) || !errors.Is(last, context.Canceled) {
		t.Errorf("%d events, last %v", n, last)
	}
	waitClosed("cancel")

	for range newPTYHandle(s, 9).Events(context.Background()) {
		break
	}
	waitClosed("break")

	short, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	if _, err := newCommandHandle(s, 9).Wait(short); !errors.As(err, &network) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait: %v", err)
	}
	waitClosed("deadline")

	// Silence past the idle bound ends the stream; keepalives keep it open.
	defer func(d time.Duration) { connectIdleTimeout = d }(connectIdleTimeout)
	connectIdleTimeout = 300 * time.Millisecond
	if _, err := newCommandHandle(s, 9).Wait(context.Background()); !errors.As(err, &network) || !errors.Is(err, errIdle) {
		t.Errorf("silence: %v", err)
	}
	waitClosed("silence")
	keepalives.Store(10)
	if r, err := newCommandHandle(s, 9).Wait(context.Background()); err != nil || !r.OK() {
		t.Errorf("keepalives: %+v %v", r, err)
	}
}

func TestProcessErrorsAreTyped(t *testing.T) {
	answer := map[string]func(http.ResponseWriter){
		"/processes":              func(w http.ResponseWriter) { writeError(w, 429, "Busy") },
		"/processes/4:input":      func(w http.ResponseWriter) { writeError(w, 409, "Conflict") },
		"/processes/4:resize":     func(w http.ResponseWriter) { writeError(w, 409, "Conflict") },
		"/processes/4:closeStdin": func(w http.ResponseWriter) { w.WriteHeader(204) },
		"/processes/4:signal":     func(w http.ResponseWriter) { writeError(w, 400, "BadRequest") },
	}
	s, rec := sandboxOn(t, func(w http.ResponseWriter, r *http.Request) {
		if f, ok := answer[strings.TrimPrefix(r.URL.Path, sessionPath)]; ok {
			f(w)
			return
		}
		writeError(w, 404, "NotFound")
	})
	ctx := context.Background()
	var busy *BusyError
	if _, err := s.Commands.Start(ctx, Shell("sleep 9"), StartOptions{}); !errors.As(err, &busy) || busy.RetryAfter == 0 {
		t.Errorf("start: %v", err)
	}
	if _, err := s.PTY.Create(ctx, PTYOptions{}); !errors.As(err, &busy) {
		t.Errorf("create: %v", err)
	}
	h := newCommandHandle(s, 4)
	var conflict *ConflictError
	var api *APIError
	if err := h.SendStdin(ctx, []byte("x")); !errors.As(err, &conflict) || !errors.As(err, &api) || api.Code != "Conflict" ||
		api.Status != 409 || api.Retryable() {
		t.Errorf("input: %v", err)
	}
	if err := newPTYHandle(s, 4).Resize(ctx, 40, 120); !errors.As(err, &conflict) {
		t.Errorf("resize: %v", err)
	}
	if err := h.CloseStdin(ctx); err != nil {
		t.Errorf("close stdin: %v", err)
	}
	var bad *BadRequestError
	if err := h.Signal(ctx, "SIGNOPE"); !errors.As(err, &bad) {
		t.Errorf("signal: %v", err)
	}
	var nf *NotFoundError
	for ev, err := range newCommandHandle(s, 5).Events(ctx) {
		if ev.Type != "" || !errors.As(err, &nf) {
			t.Errorf("connect: %+v %v", ev, err)
		}
	}
	if err := s.Commands.Kill(ctx, 5); !errors.As(err, &nf) {
		t.Errorf("kill: %v", err)
	}
	if n := len(rec.all()); n != 1+8 { // the status probe, then one call each: nothing is retried
		t.Errorf("%d requests", n)
	}
}

func TestWaitKeepsTheLastMebibyteOfEachStream(t *testing.T) {
	var tl tail
	chunk := []byte(strings.Repeat("x", 1000) + "\n")
	for range 3000 {
		tl.write(chunk)
	}
	tl.write([]byte("end"))
	out := tl.String()
	if len(out) != MaxProcessOutput || !strings.HasSuffix(out, "x\nend") || !tl.dropped {
		t.Errorf("%d bytes, dropped %v", len(out), tl.dropped)
	}
	var small tail
	small.write([]byte("hi"))
	if small.String() != "hi" || small.dropped {
		t.Error("a small output was cut")
	}
	// The JSON the docs show is what ProcessInfo reads.
	var p ProcessInfo
	doc := `{"pid": 4242, "command": {"shell": "python3 -m http.server 8000"}, "cwd": "work", "pty": false,
	  "running": true, "exitCode": null, "startedAt": "2026-12-08T00:20:00Z", "endedAt": null}`
	if err := json.Unmarshal([]byte(doc), &p); err != nil || p.PID != 4242 || !p.Running {
		t.Errorf("%+v %v", p, err)
	}
}
