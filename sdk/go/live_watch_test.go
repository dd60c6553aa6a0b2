package kruntimes_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	kruntimes "kruntimes.io/sdk"
)

// eventTimeout bounds how long a change may take to be reported.
const eventTimeout = 30 * time.Second

// shell runs a script in the sandbox and fails the test unless it succeeds.
func shell(t *testing.T, ctx context.Context, s *kruntimes.Sandbox, script string) {
	t.Helper()
	r, err := s.Commands.Run(ctx, kruntimes.Shell(script))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(); err != nil {
		t.Fatalf("%s: %v (%s)", script, err, r.Stderr)
	}
}

// until polls a watch's new events into seen until done(seen), for at most
// eventTimeout.
func until(t *testing.T, h *kruntimes.WatchHandle, seen *[]kruntimes.FileEvent, done func([]kruntimes.FileEvent) bool) {
	t.Helper()
	for deadline := time.Now().Add(eventTimeout); !done(*seen); {
		if time.Now().After(deadline) {
			t.Fatalf("not reported within %v; seen %v (watch: %v)", eventTimeout, *seen, h.Err())
		}
		time.Sleep(50 * time.Millisecond)
		*seen = append(*seen, h.GetNewEvents()...)
	}
}

func has(ev kruntimes.FileEvent) func([]kruntimes.FileEvent) bool {
	return func(seen []kruntimes.FileEvent) bool { return slices.Contains(seen, ev) }
}

func TestLiveARecursiveWatchSeesEachChangeBeneathItsDirectoryAndNothingOutside(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, 2*time.Minute)
	if err := s.Files.MakeDir(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	h, err := s.Files.WatchDir(ctx, "src", true)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	var seen []kruntimes.FileEvent
	shell(t, ctx, s, "echo x > outside.txt")
	// A directory made after the watch started is watched once the session
	// has seen it (inotify adds its watch then): what is written into it in
	// the same instant could be missed, so the files come once its create
	// was reported.
	shell(t, ctx, s, "mkdir -p src/d")
	until(t, h, &seen, has(kruntimes.FileEvent{Change: "create", Path: "src/d"}))
	time.Sleep(200 * time.Millisecond)
	shell(t, ctx, s, "echo 1 > src/d/a.txt && mv src/d/a.txt src/d/b.txt && rm src/d/b.txt")
	until(t, h, &seen, has(kruntimes.FileEvent{Change: "remove", Path: "src/d/b.txt"}))

	first := func(change, path string) int {
		return slices.Index(seen, kruntimes.FileEvent{Change: change, Path: path})
	}
	for _, want := range [][2]string{{"create", "src/d/a.txt"}, {"write", "src/d/a.txt"}, {"rename", "src/d/a.txt"},
		{"rename", "src/d/b.txt"}, {"remove", "src/d/b.txt"}} {
		if first(want[0], want[1]) < 0 {
			t.Errorf("no %s of %s in %v", want[0], want[1], seen)
		}
	}
	if !(first("create", "src/d/a.txt") < first("write", "src/d/a.txt") &&
		first("write", "src/d/a.txt") < first("rename", "src/d/a.txt") &&
		first("rename", "src/d/b.txt") < first("remove", "src/d/b.txt")) {
		t.Errorf("out of order: %v", seen)
	}
	for _, ev := range seen {
		if ev.Path != "src" && !strings.HasPrefix(ev.Path, "src/") {
			t.Errorf("outside the watched directory: %+v", ev)
		}
	}
	if h.Lost() != 0 || h.Err() != nil {
		t.Errorf("lost %d, err %v", h.Lost(), h.Err())
	}
	h.Stop()
	if h.Err() != nil {
		t.Errorf("after stop: %v", h.Err())
	}

	// Events follows a watch as changes come.
	flat, err := s.Files.WatchDir(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	defer flat.Stop()
	if err := s.Files.Write(ctx, "top.txt", strings.NewReader("hi")); err != nil {
		t.Fatal(err)
	}
	follow, cancel := context.WithTimeout(ctx, eventTimeout)
	defer cancel()
	for ev, err := range flat.Events(follow) {
		if err != nil {
			t.Fatalf("following: %v", err)
		}
		if ev == (kruntimes.FileEvent{Change: "create", Path: "top.txt"}) {
			break
		}
	}
}

func TestLiveWatchingWhatIsNotADirectoryOfTheWorkspaceIsRefused(t *testing.T) {
	s := sandbox(t, kruntimes.SandboxOptions{})
	ctx := timeout(t, time.Minute)
	var nf *kruntimes.NotFoundError
	if h, err := s.Files.WatchDir(ctx, "no/such/dir", true); h != nil || !errors.As(err, &nf) || nf.Status != 404 || nf.Code != "NotFound" {
		t.Errorf("missing: %v %v", h, err)
	}
	if err := s.Files.Write(ctx, "plain.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	var conflict *kruntimes.ConflictError
	if h, err := s.Files.WatchDir(ctx, "plain.txt", false); h != nil || !errors.As(err, &conflict) || conflict.Status != 409 {
		t.Errorf("a file: %v %v", h, err)
	}
	var invalid *kruntimes.InvalidPathError
	if h, err := s.Files.WatchDir(ctx, "../etc", false); h != nil || !errors.As(err, &invalid) || invalid.Status != 400 {
		t.Errorf("outside: %v %v", h, err)
	}
}
