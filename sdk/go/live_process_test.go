package kruntimes_test

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"

	kruntimes "kruntimes.io/sdk"
)

// output reads a process's events until its output holds want (or it
// exits), then leaves: the connection closes, the process goes on.
func output(t *testing.T, events iter.Seq2[kruntimes.ProcessEvent, error], want string) string {
	t.Helper()
	var out strings.Builder
	for ev, err := range events {
		if err != nil {
			t.Fatalf("waiting for %q in %q: %v", want, out.String(), err)
		}
		out.Write(ev.Data)
		if strings.Contains(out.String(), want) || ev.Type == "exited" {
			break
		}
	}
	if !strings.Contains(out.String(), want) {
		t.Fatalf("%q never came: %q", want, out.String())
	}
	return out.String()
}

func TestLiveABackgroundProcessOutlivesItsHandleAndReplaysItsOutput(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{Env: map[string]string{"GREETING": "hi"}})
	ctx := timeout(t, time.Minute)
	if err := s.Files.MakeDir(ctx, "work"); err != nil {
		t.Fatal(err)
	}
	h, err := s.Commands.Start(ctx, kruntimes.Shell("pwd | xargs basename; echo $GREETING $EXTRA; echo oops >&2; "+
		"read go; echo done > bg.txt; echo done"), kruntimes.StartOptions{Cwd: "work", Env: map[string]string{"EXTRA": "more"}, Stdin: true})
	if err != nil || h.PID <= 0 {
		t.Fatal(h, err)
	}
	// Read the first lines and leave, closing the connection: the process
	// goes on, waiting for its input.
	output(t, h.Events(ctx), "hi more\n")
	pid := h.PID
	again, err := s.Commands.Connect(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.SendStdin(ctx, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	r, err := again.Wait(ctx)
	if err != nil || !r.OK() || r.Stdout != "work\nhi more\ndone\n" || r.Stderr != "oops\n" || r.Lost != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	if read(t, s, "work/bg.txt") != "done\n" {
		t.Error("bg.txt")
	}
	// The first handle goes on from where it left off: nothing read twice.
	if r, err := h.Wait(ctx); err != nil || !r.OK() || r.Stdout != "work\nhi more\ndone\n" || r.Stderr != "oops\n" {
		t.Fatalf("the first handle: %+v %v", r, err)
	}
	// Ended, it still replays its output and exit at once, to anyone.
	replay, err := s.Commands.Connect(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	var offsets []int64
	var exited *kruntimes.ProcessEvent
	for ev, err := range replay.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "output":
			offsets = append(offsets, ev.Offset)
		case "exited":
			exited = &ev
		}
	}
	if len(offsets) == 0 || offsets[len(offsets)-1] != int64(len("work\nhi more\ndone\noops\n")) || !slices.IsSorted(offsets) ||
		exited == nil || *exited.ExitCode != 0 {
		t.Errorf("replay: offsets %v, exit %+v", offsets, exited)
	}
	var conflict *kruntimes.ConflictError
	if err := replay.SendStdin(ctx, []byte("late\n")); !errors.As(err, &conflict) || conflict.Code != "Conflict" || conflict.Status != 409 {
		t.Errorf("input to an ended process: %v", err)
	}
}

func TestLiveStdinKillAndTheList(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)

	cat, err := s.Commands.Start(ctx, kruntimes.Argv("cat"), kruntimes.StartOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"hello\n", "world\n"} {
		if err := cat.SendStdin(ctx, []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	output(t, cat.Events(ctx), "world\n")
	for range 2 { // idempotent
		if err := cat.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var conflict *kruntimes.ConflictError
	if err := s.Commands.SendStdin(ctx, cat.PID, []byte("more\n")); !errors.As(err, &conflict) {
		t.Errorf("input after close: %v", err)
	}
	if r, err := cat.Wait(ctx); err != nil || !r.OK() || r.Stdout != "hello\nworld\n" {
		t.Fatalf("%+v %v", r, err)
	}
	// Without Stdin, stdin is at end-of-file at once.
	eof, err := s.Commands.Start(ctx, kruntimes.Argv("cat"), kruntimes.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := eof.Wait(ctx); err != nil || !r.OK() || r.Stdout != "" {
		t.Fatalf("%+v %v", r, err)
	}

	sleeper, err := s.Commands.Start(ctx, kruntimes.Argv("sleep", "300"), kruntimes.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := s.Commands.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byPID := map[int]kruntimes.ProcessInfo{}
	for _, p := range ps {
		byPID[p.PID] = p
	}
	if p := byPID[sleeper.PID]; !p.Running || p.ExitCode != nil || p.PTY || fmt.Sprint(p.Command.Argv) != "[sleep 300]" || p.StartedAt.IsZero() {
		t.Errorf("running: %+v", p)
	}
	if p := byPID[cat.PID]; p.Running || p.ExitCode == nil || *p.ExitCode != 0 || p.EndedAt.IsZero() {
		t.Errorf("ended: %+v", p)
	}
	if err := s.Commands.Kill(ctx, sleeper.PID); err != nil {
		t.Fatal(err)
	}
	// Killed by signal 9, it exits 128 + 9: the session names no signal.
	r, err := sleeper.Wait(ctx)
	if err != nil || r.ExitCode == nil || *r.ExitCode != 137 || r.OK() {
		t.Fatalf("%+v %v", r, err)
	}
	if p, err := s.Commands.Get(ctx, sleeper.PID); err != nil || p.Running || p.ExitCode == nil || *p.ExitCode != 137 {
		t.Errorf("killed: %+v %v", p, err)
	}
	// SIGTERM goes to the whole tree: a shell and its child both end, 128 + 15.
	term, err := s.Commands.Start(ctx, kruntimes.Shell("echo up; sleep 300; echo never"), kruntimes.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	output(t, term.Events(ctx), "up\n")
	if err := term.Signal(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if r, err := term.Wait(ctx); err != nil || r.ExitCode == nil || *r.ExitCode != 143 || r.OK() ||
		!strings.HasPrefix(r.Stdout, "up\n") || strings.Contains(r.Stdout, "never") {
		t.Errorf("SIGTERM: %+v %v", r, err)
	}
	// A process that handles SIGTERM exits with its own code. (Its shell may
	// report its killed child, "Terminated": the output is not compared.)
	trap, err := s.Commands.Start(ctx, kruntimes.Shell("trap 'echo cleanup; exit 7' TERM; echo up; sleep 300 & wait"), kruntimes.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	output(t, trap.Events(ctx), "up\n")
	if err := trap.Signal(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if r, err := trap.Wait(ctx); err != nil || r.ExitCode == nil || *r.ExitCode != 7 || !strings.Contains(r.Stdout, "cleanup\n") {
		t.Errorf("SIGTERM, handled: %+v %v", r, err)
	}
	// Connected after its end, a process that wrote more than the ring holds
	// replays what the ring kept (the last 1 MiB), after a lost event for
	// the rest.
	big, err := s.Commands.Start(ctx, kruntimes.Shell("head -c 3000000 /dev/zero | tr '\\0' x"), kruntimes.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for p, err := s.Commands.Get(ctx, big.PID); err != nil || p.Running; p, err = s.Commands.Get(ctx, big.PID) {
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err = big.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || len(r.Stdout) == 0 || len(r.Stdout) > 1<<20 || r.Lost+int64(len(r.Stdout)) != 3000000 ||
		strings.Trim(r.Stdout, "x") != "" || r.StdoutTruncated {
		t.Errorf("%d bytes after %d lost, ok %v", len(r.Stdout), r.Lost, r.OK())
	}
	var nf *kruntimes.NotFoundError
	if _, err := s.Commands.Connect(ctx, 999999999); !errors.As(err, &nf) {
		t.Errorf("unknown pid: %v", err)
	}
	if err := s.Commands.Kill(ctx, 999999999); !errors.As(err, &nf) {
		t.Errorf("kill an unknown pid: %v", err)
	}
}

func TestLiveATerminalReportsItsSizeAndIsResized(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	term, err := s.PTY.Create(ctx, kruntimes.PTYOptions{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	if err := term.SendInput(ctx, []byte("tty; stty size; echo term=$TERM\n")); err != nil {
		t.Fatal(err)
	}
	out := output(t, term.Events(ctx), "term=xterm-256color")
	if !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "24 80") {
		t.Errorf("%q", out)
	}
	if err := term.Resize(ctx, 40, 120); err != nil {
		t.Fatal(err)
	}
	if err := term.SendInput(ctx, []byte("stty size; exit 3\n")); err != nil {
		t.Fatal(err)
	}
	// A new connection replays the terminal's whole output.
	again, err := s.PTY.Connect(ctx, term.PID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := again.Wait(ctx)
	if err != nil || r.ExitCode == nil || *r.ExitCode != 3 || !strings.Contains(r.Stdout, "24 80") ||
		!strings.Contains(r.Stdout, "40 120") || r.Stderr != "" {
		t.Fatalf("%+v %v", r, err)
	}
	if p, err := s.Commands.Get(ctx, term.PID); err != nil || !p.PTY {
		t.Errorf("%+v %v", p, err)
	}

	// A process without a terminal cannot be resized.
	plain, err := s.Commands.Start(ctx, kruntimes.Argv("sleep", "300"), kruntimes.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notTerm, err := s.PTY.Connect(ctx, plain.PID)
	if err != nil {
		t.Fatal(err)
	}
	var conflict *kruntimes.ConflictError
	if err := notTerm.Resize(ctx, 40, 120); !errors.As(err, &conflict) || conflict.Status != 409 || conflict.Code != "Conflict" {
		t.Errorf("resize without a terminal: %v", err)
	}
	if err := plain.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := plain.Wait(ctx); err != nil || r.ExitCode == nil || *r.ExitCode != 137 {
		t.Errorf("%+v %v", r, err)
	}
}

func TestLiveMetricsCountABackgroundProcessAndItsMemory(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	// 32 MiB resident, held until it is killed.
	holder, err := s.Commands.Start(ctx, kruntimes.Argv("python3", "-c",
		"import time\nb = bytearray(32 << 20)\nprint('held', flush=True)\ntime.sleep(300)"), kruntimes.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	output(t, holder.Events(ctx), "held\n")
	m, err := s.GetMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Processes < 1 || m.MemoryBytes < 32<<20 || m.CPUCount < 1 || m.CPUSeconds < 0 || m.DiskBytes < 0 ||
		m.DiskTotalBytes < m.DiskFreeBytes || (m.MemoryLimitBytes != nil && *m.MemoryLimitBytes <= 0) {
		t.Errorf("%+v", m)
	}
	if err := holder.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := holder.Wait(ctx); err != nil || r.ExitCode == nil || *r.ExitCode != 137 {
		t.Errorf("%+v %v", r, err)
	}
}
