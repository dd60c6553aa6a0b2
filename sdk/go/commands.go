package kruntimes

import (
	"bufio"
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"time"
)

// Command is one command for a sandbox: a shell script (Shell) or a program
// and its arguments (Argv), with optional stdin, working directory
// (workspace-relative), extra environment and timeout (default: the Run's
// operationTimeout).
type Command struct {
	Argv    []string
	Shell   string
	Stdin   string
	Cwd     string
	Env     map[string]string
	Timeout time.Duration
}

// Shell is a bash -c script.
func Shell(script string) Command { return Command{Shell: script} }

// Argv is a program and its arguments, run without a shell.
func Argv(args ...string) Command { return Command{Argv: args} }

// spec is the body's "command": the shell script or the argv.
func (c Command) spec() map[string]any {
	if c.Shell != "" {
		return map[string]any{"shell": c.Shell}
	}
	return map[string]any{"argv": c.Argv}
}

func (c Command) body() map[string]any {
	b := map[string]any{"command": c.spec()}
	if c.Stdin != "" {
		b["stdin"] = c.Stdin
	}
	if c.Cwd != "" {
		b["cwd"] = c.Cwd
	}
	if len(c.Env) > 0 {
		b["env"] = c.Env
	}
	if c.Timeout > 0 {
		b["timeoutSeconds"] = int64((c.Timeout + time.Second - 1) / time.Second)
	}
	return b
}

// CommandResult is how an operation ended.
type CommandResult struct {
	OperationID string `json:"operationId"`
	// State is Succeeded, Failed (non-zero exit, or a failed file
	// operation), Cancelled (the session closed) or TimedOut.
	State           string `json:"state"`
	ExitCode        *int   `json:"exitCode"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	StderrTruncated bool   `json:"stderrTruncated"`
	DurationMs      int64  `json:"durationMs"`
	// Error says why a file operation failed.
	Error string `json:"error"`
}

// OK reports whether the operation succeeded.
func (r *CommandResult) OK() bool { return r.State == "Succeeded" }

// Check is nil for a command that succeeded, else an *OperationFailedError.
func (r *CommandResult) Check() error {
	if r.OK() {
		return nil
	}
	return &OperationFailedError{Op: "command", Result: r}
}

// Event is one event of Stream: accepted, output (Stream is stdout or
// stderr, Data the text) and completed (Result); Sequence strictly increases.
type Event struct {
	Type        string
	Sequence    int64
	OperationID string
	Stream      string
	Data        string
	Result      *CommandResult
}

// Commands runs commands in a sandbox, through its FIFO queue.
type Commands struct{ s *Sandbox }

// Run runs cmd and waits for its result. A non-zero exit is a result (State
// Failed, ExitCode), not an error; see CommandResult.Check.
func (c *Commands) Run(ctx context.Context, cmd Command) (*CommandResult, error) {
	var r CommandResult
	if err := c.s.operation(ctx, "operations:execute", cmd.body(), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Stream runs cmd and yields its events as they happen; a failed stream
// yields its error last. Stopping the loop early closes the connection; the
// command goes on.
func (c *Commands) Stream(ctx context.Context, cmd Command) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		resp, err := c.s.post(ctx, "operations:stream", cmd.body())
		if err != nil {
			yield(Event{}, err)
			return
		}
		defer resp.Body.Close()
		lines := bufio.NewScanner(resp.Body)
		lines.Buffer(make([]byte, 64<<10), 16<<20)
		for lines.Scan() {
			if len(lines.Bytes()) == 0 {
				continue
			}
			ev, err := parseEvent(lines.Bytes())
			if !yield(ev, err) || err != nil {
				return
			}
		}
		if err := lines.Err(); err != nil {
			yield(Event{}, &NetworkError{Op: "operations:stream", Err: err})
		}
	}
}

// Cancel cancels a queued or running command by the OperationID of its
// accepted event: its whole process tree ends and its result says Cancelled.
// A command that is not queued or running is a *NotFoundError.
func (c *Commands) Cancel(ctx context.Context, operationID string) error {
	resp, err := c.s.post(ctx, "operations:cancel", map[string]string{"operationId": operationID})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func parseEvent(line []byte) (Event, error) {
	var d struct {
		Type        string          `json:"type"`
		Sequence    int64           `json:"sequence"`
		OperationID string          `json:"operationId"`
		Stream      string          `json:"stream"`
		Data        string          `json:"data"`
		Error       json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(line, &d); err != nil {
		return Event{}, &NetworkError{Op: "operations:stream", Err: err}
	}
	ev := Event{Type: d.Type, Sequence: d.Sequence, OperationID: d.OperationID, Stream: d.Stream, Data: d.Data}
	switch d.Type {
	case "completed":
		ev.Result = &CommandResult{}
		if err := json.Unmarshal(line, ev.Result); err != nil {
			return Event{}, &NetworkError{Op: "operations:stream", Err: err}
		}
	case "failed":
		body := append(append([]byte(`{"error":`), d.Error...), '}')
		return ev, fromAnswer("gateway", statusOf(d.Error), http.Header{}, body)
	}
	return ev, nil
}

// statusOf is the status of a failed event's code (500 when unknown).
func statusOf(errBody json.RawMessage) int {
	var e struct{ Code string }
	_ = json.Unmarshal(errBody, &e)
	if k, ok := byCode[e.Code]; ok {
		return k.status
	}
	return 500
}
