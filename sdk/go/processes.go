package kruntimes

import (
	"bufio"
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
	"time"
)

// Background processes and terminals: the session's …/processes routes
// (docs/sessions.md). Starting one waits its turn in the session's FIFO
// queue; everything else bypasses it. A process runs until it exits, is
// signalled or the session ends, whoever is connected: a handle is its pid
// and what it has read, and dropping it changes nothing.

// MaxInputBytes is the most input one :input call carries (1 MiB): SendStdin
// and SendInput send longer input in pieces of this size, one call each.
const MaxInputBytes = 1 << 20

// MaxProcessOutput is how much of each stream a handle keeps for its
// ProcessResult: the last 1 MiB, as the session's ring does.
const MaxProcessOutput = 1 << 20

// connectIdleTimeout bounds the silence on a process's output stream: the
// session sends a keepalive after 20 s of it, so only a dead connection
// waits this long.
var connectIdleTimeout = 60 * time.Second

// errIdle ends a stream that stayed silent for connectIdleTimeout.
var errIdle = errors.New("no event within the idle bound (the session sends a keepalive every 20 s): the connection is dead")

// StartOptions are a background process's: its working directory
// (workspace-relative), extra environment, and whether its stdin stays open
// for SendStdin until CloseStdin (otherwise it reads end-of-file at once).
type StartOptions struct {
	Cwd   string
	Env   map[string]string
	Stdin bool
}

// ProcessInfo is one process of the session, running or among the 64 most
// recently ended.
type ProcessInfo struct {
	PID int
	// Command is what runs: its Shell or its Argv.
	Command Command
	// Cwd is workspace-relative ("" for the workspace itself).
	Cwd string
	// PTY says whether it runs on a terminal.
	PTY     bool
	Running bool
	// ExitCode is nil while it runs; once it ended, the process's own exit
	// code or 128 + N when signal N killed it (137 for SIGKILL, 143 for
	// SIGTERM: the session cannot tell the two apart).
	ExitCode *int
	// StartedAt and EndedAt are zero when unknown (EndedAt while it runs).
	StartedAt, EndedAt time.Time
}

// UnmarshalJSON reads the API's process object.
func (p *ProcessInfo) UnmarshalJSON(b []byte) error {
	var d struct {
		PID     int `json:"pid"`
		Command struct {
			Argv  []string `json:"argv"`
			Shell string   `json:"shell"`
		} `json:"command"`
		Cwd       string          `json:"cwd"`
		PTY       json.RawMessage `json:"pty"`
		Running   bool            `json:"running"`
		ExitCode  *int            `json:"exitCode"`
		StartedAt time.Time       `json:"startedAt"`
		EndedAt   time.Time       `json:"endedAt"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	pty := string(bytes.TrimSpace(d.PTY))
	*p = ProcessInfo{PID: d.PID, Command: Command{Argv: d.Command.Argv, Shell: d.Command.Shell}, Cwd: d.Cwd,
		// true, or (as in the start body) the terminal's size
		PTY:     pty != "" && pty != "false" && pty != "null",
		Running: d.Running, ExitCode: d.ExitCode, StartedAt: d.StartedAt, EndedAt: d.EndedAt}
	return nil
}

// ProcessEvent is one event of a process's output, as Events yields it:
//
//   - output: Data (the bytes) of Stream (stdout, stderr, or pty for a
//     terminal); Offset counts the process's output bytes up to the end of
//     Data.
//   - lost: Lost bytes of output this handle will never see (the session's
//     ring dropped them: the process wrote more than it holds, or the
//     reader was too slow).
//   - exited: the last event; ExitCode is the process's own, or 128 + N
//     when signal N killed it (nil if the session could not tell).
//
// Keepalives, and event types this client does not know, are not yielded.
type ProcessEvent struct {
	Type     string
	Stream   string
	Data     []byte
	Offset   int64
	Lost     int64
	ExitCode *int
}

// ProcessResult is how a process ended, with the output its handle read. A
// terminal's output is Stdout.
type ProcessResult struct {
	PID int
	// ExitCode is the process's own, or 128 + N when signal N killed it (137
	// after Kill, 143 after SIGTERM): the shell's convention, so a process
	// that exits 137 itself reads the same. Nil if the session could not
	// tell.
	ExitCode       *int
	Stdout, Stderr string
	// StdoutTruncated and StderrTruncated say the handle kept only the last
	// MaxProcessOutput bytes of that stream.
	StdoutTruncated, StderrTruncated bool
	// Lost is the output the session's ring dropped before the handle read
	// it (lost events), any stream.
	Lost int64
}

// OK reports whether the process exited 0.
func (r *ProcessResult) OK() bool { return r.ExitCode != nil && *r.ExitCode == 0 }

// process is a pid of a sandbox: the requests about it.
type process struct {
	s   *Sandbox
	pid int
}

func (p process) route(action string) string {
	return fmt.Sprintf("%s/processes/%d%s", p.s.run.Endpoint, p.pid, action)
}

// call posts body (nil: none) to the process's action and expects no answer.
func (p process) call(ctx context.Context, action string, body any) error {
	return p.s.c.gw.json(ctx, request{method: http.MethodPost, url: p.route(action), caPEM: p.s.run.CABundle}, body, nil)
}

// input sends data in pieces of MaxInputBytes (one call for none); an error
// stops it, what was sent before it stays sent.
func (p process) input(ctx context.Context, data []byte) error {
	for start := 0; start == 0 || start < len(data); start += MaxInputBytes {
		piece := data[start:min(start+MaxInputBytes, len(data))]
		if err := p.call(ctx, ":input", map[string]string{"dataBase64": base64.StdEncoding.EncodeToString(piece)}); err != nil {
			return err
		}
	}
	return nil
}

// signalName is SIGINT for "SIGINT", "sigint" or "int".
func signalName(sig string) (string, error) {
	name := strings.ToUpper(strings.TrimSpace(sig))
	if name == "" || name == "SIG" {
		return "", fmt.Errorf("kruntimes: %q is not a signal (SIGTERM, SIGINT, …)", sig)
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	return name, nil
}

func (p process) signal(ctx context.Context, sig string) error {
	name, err := signalName(sig)
	if err != nil {
		return err
	}
	return p.call(ctx, ":signal", map[string]string{"signal": name})
}

func (p process) resize(ctx context.Context, rows, cols int) error {
	if err := ptySize(rows, cols); err != nil {
		return err
	}
	return p.call(ctx, ":resize", map[string]int{"rows": rows, "cols": cols})
}

func (p process) info(ctx context.Context) (*ProcessInfo, error) {
	var info ProcessInfo
	if err := p.s.c.gw.json(ctx, request{method: http.MethodGet, url: p.route(""), caPEM: p.s.run.CABundle}, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// connect is one GET …/processes/{pid}:connect: the retained output, then
// live output, then exited, which ends it. A stream that ends before
// exited, or stays silent for connectIdleTimeout, yields a *NetworkError.
func (p process) connect(ctx context.Context) iter.Seq2[ProcessEvent, error] {
	return func(yield func(ProcessEvent, error) bool) {
		op := fmt.Sprintf("processes/%d:connect", p.pid)
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		idle := time.AfterFunc(connectIdleTimeout, func() { cancel(errIdle) })
		defer idle.Stop()
		resp, err := p.s.c.gw.do(ctx, request{method: http.MethodGet, url: p.route(":connect"), caPEM: p.s.run.CABundle})
		if err != nil {
			yield(ProcessEvent{}, err)
			return
		}
		defer resp.Body.Close()
		lines := bufio.NewScanner(resp.Body)
		lines.Buffer(make([]byte, 64<<10), 16<<20)
		for lines.Scan() {
			idle.Reset(connectIdleTimeout)
			if len(bytes.TrimSpace(lines.Bytes())) == 0 {
				continue
			}
			ev, err := parseProcessEvent(op, lines.Bytes())
			switch {
			case err != nil:
				yield(ProcessEvent{}, err)
				return
			case ev.Type != "output" && ev.Type != "lost" && ev.Type != "exited":
				continue // keepalive, or a type this client does not know
			case !yield(ev, nil) || ev.Type == "exited":
				return
			}
		}
		err = lines.Err()
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		yield(ProcessEvent{}, &NetworkError{Op: op, Err: fmt.Errorf("the stream ended before the process's exit: %w", err)})
	}
}

func parseProcessEvent(op string, line []byte) (ProcessEvent, error) {
	var d struct {
		Type       string          `json:"type"`
		Stream     string          `json:"stream"`
		DataBase64 string          `json:"dataBase64"`
		Offset     int64           `json:"offset"`
		Bytes      int64           `json:"bytes"`
		ExitCode   *int            `json:"exitCode"`
		Error      json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(line, &d); err != nil {
		return ProcessEvent{}, &NetworkError{Op: op, Err: err}
	}
	ev := ProcessEvent{Type: d.Type}
	switch d.Type {
	case "output":
		data, err := base64.StdEncoding.DecodeString(d.DataBase64)
		if err != nil {
			return ProcessEvent{}, &NetworkError{Op: op, Err: fmt.Errorf("output dataBase64: %w", err)}
		}
		ev.Stream, ev.Data, ev.Offset = or(d.Stream, "stdout"), data, d.Offset
	case "lost":
		ev.Lost = d.Bytes
	case "exited":
		ev.ExitCode = d.ExitCode
	case "failed":
		// An error after streaming started, as operations streams say it.
		body := append(append([]byte(`{"error":`), d.Error...), '}')
		return ev, fromAnswer("gateway", statusOf(d.Error), http.Header{}, body)
	}
	return ev, nil
}

// tail keeps the last MaxProcessOutput bytes written to it.
type tail struct {
	b       []byte
	dropped bool
}

func (t *tail) write(p []byte) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*MaxProcessOutput {
		t.trim()
	}
}

func (t *tail) trim() {
	if over := len(t.b) - MaxProcessOutput; over > 0 {
		t.b = t.b[:copy(t.b, t.b[over:])]
		t.dropped = true
	}
}

func (t *tail) String() string {
	t.trim()
	return string(t.b)
}

// handle is what a CommandHandle or a PTYHandle has read of its process.
type handle struct {
	p process

	mu          sync.Mutex
	connections int
	// offset is the end of the last output the handle read, in the
	// process's output bytes.
	offset int64
	// gaps is the output the handle knows lost by the offsets; lostEvents
	// what lost events said (for output without offsets).
	gaps, lostEvents int64
	withOffsets      bool
	exited           bool
	exitCode         *int
	stdout, stderr   tail
}

// take is what an event of the stream stands for, to be recorded one by
// one as it is yielded. On the first connection, every event as it comes.
// On a later one the ring is replayed from its start: output already read
// is dropped by its offset (a chunk that straddles it is cut), and a gap
// between what was read and what the ring still holds is one lost event
// (the session's own lost counts from the process's start, not from what
// this handle read).
func (h *handle) take(ev ProcessEvent) []ProcessEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	later := h.connections > 1
	if later && ev.Type == "lost" {
		return nil
	}
	if later && ev.Type == "output" && ev.Offset > 0 {
		start := ev.Offset - int64(len(ev.Data))
		switch {
		case ev.Offset <= h.offset:
			return nil
		case start < h.offset:
			ev.Data = ev.Data[h.offset-start:]
		case start > h.offset:
			return []ProcessEvent{{Type: "lost", Lost: start - h.offset}, ev}
		}
	}
	return []ProcessEvent{ev}
}

func (h *handle) record(ev ProcessEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Type {
	case "lost":
		h.lostEvents += ev.Lost
	case "output":
		if ev.Offset > 0 {
			// What the ring dropped ends where this output starts: counted
			// once, however often a lost event said it.
			if start := ev.Offset - int64(len(ev.Data)); start > h.offset {
				h.gaps += start - h.offset
			}
			h.offset, h.withOffsets = ev.Offset, true
		} else {
			h.offset += int64(len(ev.Data))
		}
		if ev.Stream == "stderr" {
			h.stderr.write(ev.Data)
		} else {
			h.stdout.write(ev.Data)
		}
	case "exited":
		h.exited, h.exitCode = true, ev.ExitCode
	}
}

// connected counts a connection; false once the handle read exited.
func (h *handle) connected() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exited {
		return false
	}
	h.connections++
	return true
}

func (h *handle) events(ctx context.Context) iter.Seq2[ProcessEvent, error] {
	return func(yield func(ProcessEvent, error) bool) {
		if !h.connected() {
			return
		}
		for ev, err := range h.p.connect(ctx) {
			if err != nil {
				yield(ProcessEvent{}, err)
				return
			}
			for _, e := range h.take(ev) {
				h.record(e) // what the loop sees is read, whether or not it goes on
				if !yield(e, nil) {
					return
				}
			}
		}
	}
}

func (h *handle) wait(ctx context.Context) (*ProcessResult, error) {
	for _, err := range h.events(ctx) {
		if err != nil {
			return nil, err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.exited { // connect ends with exited or an error
		return nil, &NetworkError{Op: fmt.Sprintf("processes/%d:connect", h.p.pid), Err: io.ErrUnexpectedEOF}
	}
	lost := h.lostEvents
	if h.withOffsets {
		lost = h.gaps
	}
	return &ProcessResult{PID: h.p.pid, ExitCode: h.exitCode,
		Stdout: h.stdout.String(), Stderr: h.stderr.String(), StdoutTruncated: h.stdout.dropped,
		StderrTruncated: h.stderr.dropped, Lost: lost}, nil
}

// CommandHandle is a background process: its PID, its output and its
// input. It holds a connection only while Events or Wait runs, and
// remembers what it has read: reading again (after a stream broke, or a
// loop stopped early) goes on from there. Events and Wait are for one
// goroutine at a time; the other methods may be called from any.
type CommandHandle struct {
	PID int
	h   *handle
}

func newCommandHandle(s *Sandbox, pid int) *CommandHandle {
	return &CommandHandle{PID: pid, h: &handle{p: process{s, pid}}}
}

// Events yields the process's output as it happens: on the handle's first
// connection what the session retains (the last 1 MiB), then live; on a
// later one only what the handle has not read yet (a gap the ring dropped
// meanwhile is a lost event). It ends after the exited event; once the
// handle has read it, Events yields nothing. A stream that fails, ends
// early or stays silent for 60 s yields its error last (a *NetworkError
// unless the session said otherwise). Stopping the loop early, or ending
// ctx, closes the connection; the process goes on.
func (c *CommandHandle) Events(ctx context.Context) iter.Seq2[ProcessEvent, error] {
	return c.h.events(ctx)
}

// Wait follows the process until it exits and returns how it ended, with
// the output the handle read (the last MaxProcessOutput bytes of each
// stream). A non-zero exit is a result, not an error. ctx bounds the wait;
// the process goes on, and a later Wait goes on from where this one was.
func (c *CommandHandle) Wait(ctx context.Context) (*ProcessResult, error) { return c.h.wait(ctx) }

// Info is the process as the session lists it now.
func (c *CommandHandle) Info(ctx context.Context) (*ProcessInfo, error) { return c.h.p.info(ctx) }

// Kill sends SIGKILL: the process tree ends at once (exit code 137).
func (c *CommandHandle) Kill(ctx context.Context) error { return c.h.p.signal(ctx, "SIGKILL") }

// Signal sends a signal by name ("SIGINT", "int"): SIGTERM ends the whole
// tree (2 s grace, then SIGKILL), SIGKILL at once; SIGINT, SIGHUP, SIGQUIT,
// SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT and SIGTSTP go to the process
// itself.
func (c *CommandHandle) Signal(ctx context.Context, sig string) error { return c.h.p.signal(ctx, sig) }

// SendStdin writes data to the process's stdin, which StartOptions.Stdin
// kept open (in pieces of MaxInputBytes). A *ConflictError once stdin is
// closed or the process has ended.
func (c *CommandHandle) SendStdin(ctx context.Context, data []byte) error {
	return c.h.p.input(ctx, data)
}

// CloseStdin closes the process's stdin: it reads end-of-file. Closing it
// again is no error.
func (c *CommandHandle) CloseStdin(ctx context.Context) error {
	return c.h.p.call(ctx, ":closeStdin", nil)
}

// Start starts cmd in the background and returns once it runs (starting
// waits its turn in the session's queue: a *BusyError when the queue is
// full or 64 processes run). cmd's Shell or Argv is what runs; its Cwd and
// Env apply too, opts's winning. A background process has no timeout and
// takes its input through SendStdin: cmd.Timeout and cmd.Stdin are refused
// before anything is sent.
func (c *Commands) Start(ctx context.Context, cmd Command, opts StartOptions) (*CommandHandle, error) {
	switch {
	case cmd.Stdin != "":
		return nil, fmt.Errorf("kruntimes: background command: Stdin is for Run and Stream; start with StartOptions{Stdin: true} and use SendStdin")
	case cmd.Timeout != 0:
		return nil, fmt.Errorf("kruntimes: background command: it runs until it exits or is signalled: Timeout would have no effect")
	}
	body := map[string]any{"command": cmd.spec()}
	if cwd := or(opts.Cwd, cmd.Cwd); cwd != "" {
		body["cwd"] = cwd
	}
	if env := merged(cmd.Env, opts.Env); len(env) > 0 {
		body["env"] = env
	}
	if opts.Stdin {
		body["stdin"] = true
	}
	pid, err := c.s.start(ctx, body)
	if err != nil {
		return nil, err
	}
	return newCommandHandle(c.s, pid), nil
}

func merged(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func (s *Sandbox) start(ctx context.Context, body map[string]any) (int, error) {
	var answer struct {
		PID int `json:"pid"`
	}
	err := s.c.gw.json(ctx, request{method: http.MethodPost, url: s.run.Endpoint + "/processes", caPEM: s.run.CABundle},
		body, &answer)
	return answer.PID, err
}

// Connect is a new handle on the session's process pid, running or among
// the 64 most recently ended: its output replays what the session retains,
// then follows. A *NotFoundError for a pid the session does not know.
func (c *Commands) Connect(ctx context.Context, pid int) (*CommandHandle, error) {
	if _, err := c.Get(ctx, pid); err != nil {
		return nil, err
	}
	return newCommandHandle(c.s, pid), nil
}

// Get is one process of the session (terminals too); a *NotFoundError for
// a pid it does not know.
func (c *Commands) Get(ctx context.Context, pid int) (*ProcessInfo, error) {
	return process{c.s, pid}.info(ctx)
}

// List is the session's processes (terminals too), running and recently
// ended, by pid.
func (c *Commands) List(ctx context.Context) ([]ProcessInfo, error) {
	var doc struct {
		Processes []ProcessInfo `json:"processes"`
	}
	err := c.s.c.gw.json(ctx, request{method: http.MethodGet, url: c.s.run.Endpoint + "/processes", caPEM: c.s.run.CABundle},
		nil, &doc)
	if err != nil {
		return nil, err
	}
	return doc.Processes, nil
}

// Kill is CommandHandle.Kill by pid.
func (c *Commands) Kill(ctx context.Context, pid int) error {
	return process{c.s, pid}.signal(ctx, "SIGKILL")
}

// Signal is CommandHandle.Signal by pid.
func (c *Commands) Signal(ctx context.Context, pid int, sig string) error {
	return process{c.s, pid}.signal(ctx, sig)
}

// SendStdin is CommandHandle.SendStdin by pid.
func (c *Commands) SendStdin(ctx context.Context, pid int, data []byte) error {
	return process{c.s, pid}.input(ctx, data)
}

// CloseStdin is CommandHandle.CloseStdin by pid.
func (c *Commands) CloseStdin(ctx context.Context, pid int) error {
	return process{c.s, pid}.call(ctx, ":closeStdin", nil)
}

// PTY runs processes on terminals in a sandbox.
type PTY struct{ s *Sandbox }

// PTYOptions describe a terminal: its size (1–1000 each; 0: 24 rows, 80
// columns), the program it runs (default DefaultPTYCommand, bash -i -l),
// its working directory and extra environment (TERM is xterm-256color
// unless Env sets it).
type PTYOptions struct {
	Rows, Cols int
	Cmd        []string
	Cwd        string
	Env        map[string]string
}

// DefaultPTYCommand is what a terminal runs unless PTYOptions.Cmd says: an
// interactive login shell.
var DefaultPTYCommand = []string{"bash", "-i", "-l"}

// maxPTYSize bounds a terminal's rows and columns.
const maxPTYSize = 1000

func ptySize(rows, cols int) error {
	if rows < 1 || rows > maxPTYSize || cols < 1 || cols > maxPTYSize {
		return fmt.Errorf("kruntimes: terminal: %d rows and %d columns: each must be 1 to %d", rows, cols, maxPTYSize)
	}
	return nil
}

// PTYHandle is a process on a terminal: its PID, its output (one stream,
// pty) and its input. It reads as a CommandHandle does.
type PTYHandle struct {
	PID int
	h   *handle
}

func newPTYHandle(s *Sandbox, pid int) *PTYHandle {
	return &PTYHandle{PID: pid, h: &handle{p: process{s, pid}}}
}

// Create starts o.Cmd on a new terminal, in the background (starting waits
// its turn in the session's queue). Its input is open until it ends.
func (t *PTY) Create(ctx context.Context, o PTYOptions) (*PTYHandle, error) {
	rows, cols := o.Rows, o.Cols
	if rows == 0 {
		rows = 24
	}
	if cols == 0 {
		cols = 80
	}
	if err := ptySize(rows, cols); err != nil {
		return nil, err
	}
	argv := o.Cmd
	if len(argv) == 0 {
		argv = DefaultPTYCommand
	}
	body := map[string]any{"command": map[string]any{"argv": argv}, "stdin": true,
		"pty": map[string]int{"rows": rows, "cols": cols}}
	if o.Cwd != "" {
		body["cwd"] = o.Cwd
	}
	if len(o.Env) > 0 {
		body["env"] = o.Env
	}
	pid, err := t.s.start(ctx, body)
	if err != nil {
		return nil, err
	}
	return newPTYHandle(t.s, pid), nil
}

// Connect is a new handle on the terminal process pid (a *NotFoundError
// for a pid the session does not know).
func (t *PTY) Connect(ctx context.Context, pid int) (*PTYHandle, error) {
	if _, err := t.s.Commands.Get(ctx, pid); err != nil {
		return nil, err
	}
	return newPTYHandle(t.s, pid), nil
}

// SendInput is PTYHandle.SendInput by pid.
func (t *PTY) SendInput(ctx context.Context, pid int, data []byte) error {
	return process{t.s, pid}.input(ctx, data)
}

// Resize is PTYHandle.Resize by pid.
func (t *PTY) Resize(ctx context.Context, pid int, rows, cols int) error {
	return process{t.s, pid}.resize(ctx, rows, cols)
}

// Kill is PTYHandle.Kill by pid.
func (t *PTY) Kill(ctx context.Context, pid int) error {
	return process{t.s, pid}.signal(ctx, "SIGKILL")
}

// Events yields the terminal's output (Stream pty) as CommandHandle.Events
// does.
func (p *PTYHandle) Events(ctx context.Context) iter.Seq2[ProcessEvent, error] {
	return p.h.events(ctx)
}

// Wait follows the terminal's process until it exits, as
// CommandHandle.Wait; its output is the result's Stdout.
func (p *PTYHandle) Wait(ctx context.Context) (*ProcessResult, error) { return p.h.wait(ctx) }

// Info is the process as the session lists it now.
func (p *PTYHandle) Info(ctx context.Context) (*ProcessInfo, error) { return p.h.p.info(ctx) }

// SendInput types data on the terminal ("ls\n"; "\x03" is Ctrl-C, "\x04"
// Ctrl-D), in pieces of MaxInputBytes. A *ConflictError once the process
// has ended.
func (p *PTYHandle) SendInput(ctx context.Context, data []byte) error { return p.h.p.input(ctx, data) }

// Resize sets the terminal's size (1–1000 rows and columns); the process
// gets SIGWINCH. A *ConflictError for a process without a terminal.
func (p *PTYHandle) Resize(ctx context.Context, rows, cols int) error {
	return p.h.p.resize(ctx, rows, cols)
}

// Kill sends SIGKILL to the terminal's process tree.
func (p *PTYHandle) Kill(ctx context.Context) error { return p.h.p.signal(ctx, "SIGKILL") }

// Signal sends a signal by name, as CommandHandle.Signal.
func (p *PTYHandle) Signal(ctx context.Context, sig string) error { return p.h.p.signal(ctx, sig) }
