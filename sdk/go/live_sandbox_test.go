package kruntimes_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	kruntimes "kruntimes.io/sdk"
)

// sandbox creates a sandbox closed (Drain) when the test ends.
func sandbox(t *testing.T, o kruntimes.SandboxOptions) *kruntimes.Sandbox {
	t.Helper()
	o.Runtime = env(t, "KRT_TEST_SESSION_RUNTIME")
	s, err := client(t, "").CreateSandbox(timeout(t, time.Minute), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !s.Run().Ended() {
			_, _ = s.Close(context.Background())
		}
	})
	return s
}

func read(t *testing.T, s *kruntimes.Sandbox, path string) string {
	t.Helper()
	r, err := s.Files.Read(timeout(t, time.Minute), path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLiveASandboxClosedWhenDoneEndsSucceeded(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{Env: map[string]string{"GREETING": "hello"}})
	ctx := timeout(t, time.Minute)
	if !strings.HasPrefix(s.Name(), "sandbox-") || !strings.HasSuffix(s.Endpoint(), "/sessions/"+s.UID()) {
		t.Errorf("%+v", s.Run())
	}
	r, err := s.Commands.Run(ctx, kruntimes.Shell("echo $GREETING; echo oops >&2; exit 3"))
	if err != nil || r.State != "Failed" || *r.ExitCode != 3 || r.Stdout != "hello\n" || r.Stderr != "oops\n" {
		t.Fatal(r, err)
	}
	ended, err := s.Close(ctx)
	if err != nil || ended.Phase != "Succeeded" {
		t.Fatal(ended, err)
	}
	run, err := client(t, "").GetRun(ctx, s.Name())
	if err != nil || run.Phase != "Succeeded" {
		t.Fatal(run, err)
	}
	// Ended for good: 410 RunEnded with the Run's phase, not retryable. The
	// gateway's table follows the API a moment later: the phase it names
	// may still be Draining on the first call after the close.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var gone *kruntimes.RunEndedError
		var unavailable *kruntimes.UnavailableError
		_, err := s.Commands.Run(ctx, kruntimes.Argv("true"))
		if !errors.As(err, &gone) || errors.As(err, &unavailable) || gone.Status != 410 || gone.Retryable() {
			t.Fatalf("after close: %v", err)
		}
		if gone.Phase == "Succeeded" {
			break
		}
		if gone.Phase != "Draining" || time.Now().After(deadline) {
			t.Fatalf("after close: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestLiveKillCancelsRunningWork(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	done := make(chan *kruntimes.CommandResult, 1)
	go func() {
		r, _ := s.Commands.Run(ctx, kruntimes.Shell("sleep 30"))
		done <- r
	}()
	for st, err := s.Status(ctx); err == nil && st.PendingOperations == 0; st, err = s.Status(ctx) {
		time.Sleep(50 * time.Millisecond)
	}
	ended, err := s.Kill(ctx)
	if err != nil || ended.Phase != "Cancelled" {
		t.Fatal(ended, err)
	}
	if r := <-done; r == nil || r.State != "Cancelled" {
		t.Errorf("running command: %+v", r)
	}
}

func TestLiveARunningCommandIsCancelledByItsOperationID(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	var id, state string
	for ev, err := range s.Commands.Stream(ctx, kruntimes.Shell("sleep 60")) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "accepted":
			id = ev.OperationID
			if err := s.Commands.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		case "completed":
			state = ev.Result.State
		}
	}
	if id == "" || state != "Cancelled" {
		t.Fatalf("operation %q ended %q", id, state)
	}
	var nf *kruntimes.NotFoundError
	if err := s.Commands.Cancel(ctx, id); !errors.As(err, &nf) {
		t.Errorf("cancel again: %v", err)
	}
	if r, err := s.Commands.Run(ctx, kruntimes.Shell("true")); err != nil || !r.OK() {
		t.Errorf("after cancel: %+v %v", r, err)
	}
}

func TestLiveCommandsTakeArgvStdinCwdEnvAndATimeout(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{Env: map[string]string{"GREETING": "hi"}})
	ctx := timeout(t, time.Minute)
	r, err := s.Commands.Run(ctx, kruntimes.Command{Argv: []string{"cat"}, Stdin: "piped input"})
	if err != nil || !r.OK() || r.Stdout != "piped input" {
		t.Fatal(r, err)
	}
	if err := s.Files.MakeDir(ctx, "work/sub"); err != nil {
		t.Fatal(err)
	}
	r, err = s.Commands.Run(ctx, kruntimes.Command{Shell: "pwd | xargs basename; echo $GREETING $EXTRA", Cwd: "work/sub",
		Env: map[string]string{"EXTRA": "more"}})
	if err != nil || r.Stdout != "sub\nhi more\n" {
		t.Fatal(r, err)
	}
	r, err = s.Commands.Run(ctx, kruntimes.Command{Argv: []string{"sleep", "10"}, Timeout: time.Second})
	if err != nil || r.State != "TimedOut" || r.ExitCode != nil {
		t.Fatal(r, err)
	}
	var failed *kruntimes.OperationFailedError
	if r, _ := s.Commands.Run(ctx, kruntimes.Shell("exit 4")); !errors.As(r.Check(), &failed) {
		t.Errorf("check: %+v", r)
	}
	// The caller's own deadline ends the wait on its side; the accepted command goes on.
	short := timeout(t, 300*time.Millisecond)
	var network *kruntimes.NetworkError
	if _, err := s.Commands.Run(short, kruntimes.Shell("sleep 1; echo done > late.txt")); !errors.As(err, &network) ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context deadline: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ok, _ := s.Files.Exists(ctx, "late.txt"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned command did not go on")
		}
	}
}

func TestLiveStreamYieldsOutputAsItHappens(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	var events []kruntimes.Event
	for ev, err := range s.Commands.Stream(ctx, kruntimes.Argv("bash", "-c", "for i in 1 2 3; do echo line$i; sleep 0.1; done; echo e >&2")) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	first, last := events[0], events[len(events)-1]
	if first.Type != "accepted" || last.Type != "completed" || !last.Result.OK() || last.Result.OperationID != first.OperationID {
		t.Fatalf("%+v … %+v", first, last)
	}
	var stdout, stderr strings.Builder
	for i, ev := range events {
		if i > 0 && ev.Sequence <= events[i-1].Sequence {
			t.Errorf("sequence %d after %d", ev.Sequence, events[i-1].Sequence)
		}
		if ev.Type == "output" && ev.Stream == "stdout" {
			stdout.WriteString(ev.Data)
		} else if ev.Type == "output" {
			stderr.WriteString(ev.Data)
		}
	}
	if stdout.String() != "line1\nline2\nline3\n" || stderr.String() != "e\n" {
		t.Errorf("%q %q", stdout.String(), stderr.String())
	}
	// Leaving early closes the stream; the session goes on.
	for ev := range s.Commands.Stream(ctx, kruntimes.Shell("echo early; sleep 1")) {
		if ev.Type == "output" {
			break
		}
	}
	if r, err := s.Commands.Run(ctx, kruntimes.Shell("echo next")); err != nil || r.Stdout != "next\n" {
		t.Fatal(r, err)
	}
}

func TestLiveFilesAreWrittenReadListedTestedMovedAndRemoved(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Files.MakeDir(ctx, "data"))
	payload := make([]byte, 1<<20)
	for i := range payload {
		payload[i] = byte(i)
	}
	must(s.Files.Write(ctx, "data/blob.bin", strings.NewReader(string(payload))))
	must(s.Files.Write(ctx, "data/text.txt", strings.NewReader("héllo")))
	src, err := os.Open("live_sandbox_test.go")
	must(err)
	defer src.Close()
	must(s.Files.Write(ctx, "data/source.go", src))
	if read(t, s, "data/blob.bin") != string(payload) || read(t, s, "data/text.txt") != "héllo" {
		t.Fatal("content differs")
	}
	entries, err := s.Files.List(ctx, "data")
	must(err)
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s:%s:%s", e.Name, e.Type, e.Path))
	}
	if strings.Join(got, " ") != "blob.bin:file:data/blob.bin source.go:file:data/source.go text.txt:file:data/text.txt" ||
		entries[0].Size != 1<<20 {
		t.Errorf("%v", entries)
	}
	for path, want := range map[string]bool{"data/text.txt": true, "data": true, "data/": true, "data/missing": false,
		"missing/x": false, "data/text.txt/below": false} {
		if ok, err := s.Files.Exists(ctx, path); err != nil || ok != want {
			t.Errorf("exists %q: %v %v", path, ok, err)
		}
	}
	must(s.Files.MakeDir(ctx, "data/sub/deeper"))
	must(s.Files.Rename(ctx, "data/text.txt", "data/sub/moved.txt"))
	if read(t, s, "data/sub/moved.txt") != "héllo" {
		t.Error("moved content differs")
	}
	must(s.Files.Remove(ctx, "data/sub"))
	must(s.Files.Remove(ctx, "data/blob.bin"))
	if entries, _ := s.Files.List(ctx, "data"); len(entries) != 1 || entries[0].Name != "source.go" {
		t.Errorf("%v", entries)
	}
	var nf *kruntimes.NotFoundError
	if _, err := s.Files.Read(ctx, "missing.txt"); !errors.As(err, &nf) || nf.Status != 404 {
		t.Errorf("read missing: %v", err)
	}
	var escape *kruntimes.InvalidPathError
	if err := s.Files.Write(ctx, "../escape", strings.NewReader("x")); !errors.As(err, &escape) {
		t.Errorf("escape: %v", err)
	}
	var failed *kruntimes.OperationFailedError
	if err := s.Files.Rename(ctx, "missing.txt", "other.txt"); !errors.As(err, &failed) || failed.Result.State != "Failed" {
		t.Errorf("rename missing: %v", err)
	}
}

func TestLiveWriteCreatesMissingParents(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	if err := s.Files.Write(ctx, "fresh/a/b/c.txt", strings.NewReader("deep")); err != nil {
		t.Fatal(err)
	}
	if read(t, s, "fresh/a/b/c.txt") != "deep" {
		t.Error("content differs")
	}
}

func TestLiveListingPagesThroughADirectoryOf2500Files(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	r, err := s.Commands.Run(ctx, kruntimes.Shell("mkdir -p big && cd big && for i in $(seq -w 0 2499); do : > f$i; done"))
	if err != nil || !r.OK() {
		t.Fatal(r, err)
	}
	entries, err := s.Files.List(ctx, "big")
	if err != nil || len(entries) != 2500 {
		t.Fatal(len(entries), err)
	}
	for i, e := range entries {
		if e.Name != fmt.Sprintf("f%04d", i) {
			t.Fatalf("entry %d is %s", i, e.Name)
		}
	}
	var sizes []int
	for token := ""; ; {
		page, err := s.Files.ListPage(ctx, "big", 700, token)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(page.Entries))
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if fmt.Sprint(sizes) != "[700 700 700 400]" {
		t.Errorf("pages %v", sizes)
	}
	for path, want := range map[string]bool{"big/f2499": true, "big/f2500": false} {
		if ok, err := s.Files.Exists(ctx, path); err != nil || ok != want {
			t.Errorf("exists %s: %v %v", path, ok, err)
		}
	}
}

func TestLiveConnectAttachesToAnExistingSandbox(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{Env: map[string]string{"GREETING": "hi"}})
	ctx := timeout(t, time.Minute)
	again, err := client(t, "").ConnectSandbox(ctx, s.Name())
	if err != nil || again.UID() != s.UID() {
		t.Fatal(again, err)
	}
	if r, err := again.Commands.Run(ctx, kruntimes.Shell("echo $GREETING")); err != nil || r.Stdout != "hi\n" {
		t.Fatal(r, err)
	}
	direct, err := explicit(t).ConnectSandboxAt(ctx, s.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := direct.Commands.Run(ctx, kruntimes.Argv("echo", "direct")); err != nil || r.Stdout != "direct\n" {
		t.Fatal(r, err)
	}
	var nf *kruntimes.NotFoundError
	if _, err := client(t, "").ConnectSandbox(ctx, "no-such-sandbox"); !errors.As(err, &nf) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := client(t, "").ConnectSandbox(ctx, env(t, "KRT_TEST_FUNCTION")); !errors.As(err, &nf) {
		t.Errorf("a function: %v", err)
	}
	var unauth *kruntimes.UnauthenticatedError
	if _, err := client(t, "", kruntimes.WithToken("not-a-valid-token")).ConnectSandbox(ctx, s.Name()); !errors.As(err, &unauth) {
		t.Errorf("bad token: %v", err)
	}
	var denied *kruntimes.PermissionDeniedError
	if _, err := client(t, "bob").ConnectSandbox(ctx, s.Name()); !errors.As(err, &denied) || denied.Source != "gateway" {
		t.Errorf("bob: %v", err)
	}
	if mode(t) == "kubernetes" {
		// bob may read Runs but not create them.
		_, err := client(t, "bob").CreateSandbox(ctx, kruntimes.SandboxOptions{Runtime: env(t, "KRT_TEST_SESSION_RUNTIME")})
		if !errors.As(err, &denied) || denied.Status != 403 || denied.Source != "kubernetes" {
			t.Errorf("bob creates: %v", err)
		}
	}
}

func TestLiveAFullSessionQueueIsBusy(t *testing.T) {
	// queueSize 1: one running, one waiting, the next refused (0 would mean the default, 16).
	s := sandbox(t, kruntimes.SandboxOptions{QueueSize: 1})
	ctx := timeout(t, time.Minute)
	var wg sync.WaitGroup
	for n := int64(1); n <= 2; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.Commands.Run(ctx, kruntimes.Shell("sleep 1.5"))
		}()
		for st, err := s.Status(ctx); err == nil && st.PendingOperations < n; st, err = s.Status(ctx) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var busy *kruntimes.BusyError
	if err := s.Files.Write(ctx, "queued.txt", strings.NewReader("x")); !errors.As(err, &busy) || busy.Status != 429 || busy.RetryAfter == 0 {
		t.Errorf("third operation: %v", err)
	}
	wg.Wait()
	if ok, err := s.Files.Exists(ctx, "queued.txt"); ok || err != nil {
		t.Errorf("a refused operation ran: %v %v", ok, err)
	}
}
