package kruntimes_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	kruntimes "kruntimes.io/sdk"
)

// python is the Runtime of the fixture function Run: every target serves Python.
const python = "python"

// shellTasks reports whether the session Runtime runs shell tasks: the API
// server harness plays every Pod with the python backend (kubetest passes
// --backend=python whatever the Runtime), so there its bash Runtime runs
// scripts as Python; krt up picks the backend by runtime name.
func shellTasks(t *testing.T) bool { return mode(t) == "embedded" }

// gone waits until the Run name is no longer listed.
func gone(t *testing.T, c *kruntimes.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.GetRun(context.Background(), name)
		var nf *kruntimes.NotFoundError
		if errors.As(err, &nf) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still listed: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestLiveAPythonTaskRunsOnceAndItsOutputAndExitCodeAreReadBack(t *testing.T) {
	c := client(t, "")
	ctx := timeout(t, 2*time.Minute)
	r, err := c.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: python,
		Inline: "import os, sys\nprint('hello', os.environ['WHO'])\nprint('careful', file=sys.stderr)",
		Env:    map[string]string{"WHO": "sdk"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Phase != "Succeeded" || r.Reason != "Completed" || *r.ExitCode != 0 || !r.OK() || r.Stdout != "hello sdk\n" ||
		r.Stderr != "careful\n" || r.StdoutTruncated || r.Attempt != 1 || !strings.HasPrefix(r.Name, "task-") ||
		r.StartedAt.IsZero() || r.FinishedAt.Before(r.StartedAt) {
		t.Errorf("%+v", r)
	}
	// Kept until deleted: read back as it ended.
	again, err := c.Tasks.Get(ctx, r.Name)
	if err != nil || again.UID != r.UID || *again.ExitCode != 0 || again.Stdout != "hello sdk\n" {
		t.Fatal(again, err)
	}
	if err := c.Tasks.Delete(ctx, r.Name); err != nil {
		t.Fatal(err)
	}
	gone(t, c, r.Name)
	var nf *kruntimes.NotFoundError
	if _, err := c.Tasks.Get(ctx, r.Name); !errors.As(err, &nf) {
		t.Error(err)
	}
}

func TestLiveANonZeroExitIsAResultWithItsCodeNotAnError(t *testing.T) {
	c := client(t, "")
	ctx := timeout(t, 2*time.Minute)
	r, err := c.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: python,
		Inline: "import sys\nprint('before')\nprint('oops', file=sys.stderr)\nsys.exit(3)", Remove: true})
	if err != nil || r.Phase != "Failed" || r.Reason != "NonZeroExit" || *r.ExitCode != 3 || r.OK() ||
		r.Stdout != "before\n" || r.Stderr != "oops\n" || r.Message != "exited with code 3" {
		t.Fatal(r, err)
	}
	if !shellTasks(t) {
		return
	}
	bash := env(t, "KRT_TEST_SESSION_RUNTIME")
	r, err = c.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: bash, Inline: "echo before; echo oops >&2; exit 3", Remove: true})
	if err != nil || r.Reason != "NonZeroExit" || *r.ExitCode != 3 || r.Stdout != "before\n" || r.Stderr != "oops\n" {
		t.Fatal(r, err)
	}
	// Shell commands without an entrypoint: the first failure ends them.
	r, err = c.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: bash, Args: []string{"echo one", "false", "echo never"}, Remove: true})
	if err != nil || *r.ExitCode != 1 || r.Stdout != "one\n" {
		t.Fatal(r, err)
	}
}

func TestLiveATaskThatCannotStartIsAStartFailure(t *testing.T) {
	none := 0
	// Python runs a script, not shell commands: its process cannot start; no retry makes it quick.
	r, err := client(t, "").Tasks.Run(timeout(t, 2*time.Minute), kruntimes.TaskOptions{Runtime: python,
		Args: []string{"print(1)"}, MaxRetries: &none, Remove: true})
	var start *kruntimes.TaskStartFailedError
	var failed *kruntimes.RunFailedError
	if !errors.As(err, &start) || !errors.As(err, &failed) || start.Phase != "Failed" || start.Reason != "StartFailed" ||
		!strings.Contains(start.Message, "runs a script") {
		t.Fatalf("%T %v", err, err)
	}
	if r == nil || r.ExitCode != nil || r.Reason != "StartFailed" {
		t.Errorf("%+v", r)
	}
}

func TestLiveATaskPastItsTimeoutIsARunTimeout(t *testing.T) {
	started := time.Now()
	_, err := client(t, "").Tasks.Run(timeout(t, 2*time.Minute), kruntimes.TaskOptions{
		Runtime: python, Inline: "import time\nprint('started', flush=True)\ntime.sleep(60)", Timeout: time.Second, Remove: true})
	var timedOut *kruntimes.RunTimeoutError
	var ended *kruntimes.RunEndedError
	var failed *kruntimes.RunFailedError
	if !errors.As(err, &timedOut) || !errors.As(err, &ended) || errors.As(err, &failed) ||
		timedOut.Phase != "Timeout" || timedOut.Reason != "RunTimeout" {
		t.Fatalf("%T %v", err, err)
	}
	if d := time.Since(started); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestLiveASpecTheControlPlaneRefusesIsAnInvalidSpec(t *testing.T) {
	// Not a DNS-1123 label: left to the control plane to judge (both refuse it as InvalidSpec).
	_, err := client(t, "").Tasks.Run(timeout(t, 2*time.Minute), kruntimes.TaskOptions{Runtime: "Not_A_Runtime",
		Args: []string{"true"}, Remove: true})
	var spec *kruntimes.InvalidSpecError
	var invalid *kruntimes.InvalidRequestError
	if !errors.As(err, &spec) || !errors.As(err, &invalid) || spec.Reason != "InvalidSpec" ||
		!strings.Contains(spec.Message, "spec.runtime") {
		t.Fatalf("%T %v", err, err)
	}
}

func TestLiveRemoveDeletesTheRunOnceReadAndKillsOneTheWaitGaveUpOn(t *testing.T) {
	c := client(t, "")
	r, err := c.Tasks.Run(timeout(t, 2*time.Minute), kruntimes.TaskOptions{Runtime: python, Inline: "print('bye')", Remove: true})
	if err != nil || *r.ExitCode != 0 || r.Stdout != "bye\n" {
		t.Fatal(r, err)
	}
	gone(t, c, r.Name)
	_, err = c.Tasks.Run(timeout(t, 500*time.Millisecond), kruntimes.TaskOptions{Runtime: python, Inline: "import time\ntime.sleep(120)",
		Name: "go-task-given-up", Remove: true})
	var wait *kruntimes.WaitTimeoutError
	if !errors.As(err, &wait) || wait.Name != "go-task-given-up" {
		t.Fatalf("%T %v", err, err)
	}
	gone(t, c, "go-task-given-up")
	// Without Remove, a name that exists is refused (the Run is kept until deleted).
	ctx := timeout(t, 2*time.Minute)
	if _, err := c.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: python, Inline: "pass", Name: "go-task-kept"}); err != nil {
		t.Fatal(err)
	}
	var conflict *kruntimes.ConflictError
	if _, err := c.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: python, Inline: "pass", Name: "go-task-kept"}); !errors.As(err, &conflict) {
		t.Error(err)
	}
	if err := c.Tasks.Delete(ctx, "go-task-kept"); err != nil {
		t.Fatal(err)
	}
}

func TestLiveAUserWhoMayOnlyReadRunsCannotRunATask(t *testing.T) {
	kubernetesOnly(t)
	_, err := client(t, "bob").Tasks.Run(timeout(t, time.Minute), kruntimes.TaskOptions{
		Runtime: env(t, "KRT_TEST_SESSION_RUNTIME"), Inline: "true"})
	var denied *kruntimes.PermissionDeniedError
	if !errors.As(err, &denied) || denied.Status != 403 || denied.Source != "kubernetes" {
		t.Fatalf("%T %v", err, err)
	}
}
