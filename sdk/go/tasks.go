package kruntimes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// TaskOptions describes a task Run (spec.mode.task) to run once. What runs
// is the Run's input semantics (docs/tasks.md): Inline is a standalone
// script; Entrypoint names a script file of the source, run with Args;
// without either, a shell Runtime (bash) runs Args as shell commands, the
// first failure ending them.
type TaskOptions struct {
	// Runtime of the Run (required: python, bash, or a custom one).
	Runtime string
	// Inline is spec.source.inline, a script run as it is (not with
	// Entrypoint or Args: they would have no effect).
	Inline string
	// Entrypoint is a script file of the source (workspace-relative).
	Entrypoint string
	// Args are Entrypoint's arguments; without it, shell commands.
	Args []string
	// Name of the Run (default "task-<random>"); Namespace defaults to the
	// client's.
	Name, Namespace string
	// Env is the task's environment.
	Env map[string]string
	// Timeout is spec.timeout (whole seconds, rounded up): the Run ends
	// Timeout, its process tree killed, this long after its creation.
	Timeout time.Duration
	// MaxRetries is spec.retryPolicy.maxRetries: the moves to another Pod
	// after a lost owner or a failed start (nil: the Run's default, 3;
	// ptr.To(0) of k8s.io/utils/ptr: none).
	MaxRetries *int
	// RetryOnExitCodes are the non-zero exit codes (1–255) that run the task
	// again, within MaxRetries.
	RetryOnExitCodes []int
	// Remove deletes the Run once Tasks.Run is done with it, whatever the
	// outcome (a Run still running, the wait given up, is killed).
	Remove bool
}

// TaskResult is a task Run as it stands: how its process ended, once it has.
type TaskResult struct {
	Name, Namespace, UID string
	// Phase is Succeeded (exit 0), Failed (Reason NonZeroExit: ExitCode says
	// which), or a phase before the end (Tasks.Get of a Run still running).
	Phase string
	// Reason (Completed, NonZeroExit, …) and Message are the Run's status.
	Reason, Message string
	// Attempt is the attempt that ran (the Run's attempt before its process
	// ended).
	Attempt int64
	// ExitCode is the process's exit code (128 + N when signal N ended it);
	// nil until it exited.
	ExitCode *int
	// Stdout and Stderr are the last 4 KiB of each stream (UTF-8).
	Stdout, Stderr string
	// StdoutTruncated and StderrTruncated: more was written than the tail
	// holds (the Run's log has it all: krt logs).
	StdoutTruncated, StderrTruncated bool
	// StartedAt and FinishedAt are the process's (zero when unknown).
	StartedAt, FinishedAt time.Time
	// Artifacts are what the task left in $KRUNTIME_ARTIFACTS_DIR
	// (status.artifacts: at most 100 listed; Client.Artifacts.List has them
	// all), once its Run has ended; none for a Runtime without an artifact
	// store.
	Artifacts []ArtifactRef
}

// OK reports whether the task exited 0 (Phase Succeeded).
func (r *TaskResult) OK() bool { return r.Phase == "Succeeded" }

// Ended reports whether the Run has ended (a terminal phase).
func (r *TaskResult) Ended() bool { return RunInfo{Phase: r.Phase}.Ended() }

func taskResult(run *RunInfo) *TaskResult {
	r := &TaskResult{Name: run.Name, Namespace: run.Namespace, UID: run.UID, Phase: run.Phase,
		Reason: run.Reason, Message: run.Message, Attempt: run.Attempt, Artifacts: run.Artifacts}
	if t := run.Task; t != nil {
		code := t.ExitCode
		r.Attempt, r.ExitCode, r.Stdout, r.Stderr = t.Attempt, &code, t.StdoutTail, t.StderrTail
		r.StdoutTruncated, r.StderrTruncated = t.StdoutTruncated, t.StderrTruncated
		r.StartedAt, r.FinishedAt = t.StartedAt, t.FinishedAt
	}
	return r
}

// Tasks runs task Runs: Client.Tasks.
type Tasks struct{ c *Client }

// Waits of Tasks.Run when the context has no deadline.
const (
	defaultTaskWait = 10 * time.Minute
	// taskTimeoutGrace is how much longer than a task's own Timeout Run
	// waits: the control plane ends it then.
	taskTimeoutGrace = time.Minute
)

// Run runs a task once and returns its result once its Run has ended.
//
// A process that exited is a result, 0 (Succeeded) or not (Failed, Reason
// NonZeroExit). A Run that ended without an exit of its own is an error of
// its kind — *TaskStartFailedError, *RunLostError, *RunTimeoutError,
// *RunCancelledError, *InvalidSpecError, else *RunFailedError —
// returned with the result as the Run ended. A spec the Kubernetes API's
// schema refuses is its *InvalidRequestError (422). The context bounds the
// wait (without a deadline: Timeout plus a minute, else 10 minutes); a wait
// that runs out is a *WaitTimeoutError and leaves the Run running (unless
// Remove). Options the control plane would refuse are an error before
// anything is created. With Remove, a removal that fails after the result was
// read returns the result with its error.
func (t *Tasks) Run(ctx context.Context, o TaskOptions) (*TaskResult, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	store, err := t.c.store()
	if err != nil {
		return nil, err
	}
	ns, name := or(o.Namespace, t.c.namespace), o.Name
	if name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = "task-" + hex.EncodeToString(b[:])
	}
	if err := store.create(ctx, taskManifest(name, ns, o)); err != nil {
		return nil, err
	}
	res, err := t.wait(ctx, store, ns, name, o)
	if o.Remove {
		// Deleting a Run still running (the wait gave up) kills its process tree.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if derr := store.delete(cleanup, ns, name); derr != nil && err == nil {
			return res, derr
		}
	}
	return res, err
}

func (t *Tasks) wait(ctx context.Context, store runStore, ns, name string, o TaskOptions) (*TaskResult, error) {
	bound := defaultTaskWait
	if o.Timeout > 0 {
		bound = o.Timeout + taskTimeoutGrace
	}
	ctx, cancel := bounded(ctx, bound)
	defer cancel()
	run, err := waitFor(ctx, t.c.logger, store, ns, name, "its end", func(r *RunInfo) bool { return r.Ended() })
	if err != nil {
		return nil, err
	}
	res := taskResult(run)
	// The process ran and exited: its code is the answer, whatever it is.
	if run.Phase == "Succeeded" || run.Reason == "NonZeroExit" {
		return res, nil
	}
	return res, runEnded(ns, name, run)
}

// Get is the task Run name of the client's namespace as it stands (nothing
// returned for how it ended: Ended says whether it has); a *NotFoundError
// when there is no such task Run.
func (t *Tasks) Get(ctx context.Context, name string) (*TaskResult, error) {
	run, err := t.c.lookup(ctx, name, "task")
	if err != nil {
		return nil, err
	}
	return taskResult(run), nil
}

// Delete deletes the task Run name of the client's namespace (killing its
// process if it still runs); a Run already gone is no error.
func (t *Tasks) Delete(ctx context.Context, name string) error {
	store, err := t.c.store()
	if err != nil {
		return err
	}
	return store.delete(ctx, t.c.namespace, name)
}

// The bounds the control plane checks (api/src/run/task.rs), checked before
// anything is created.
const (
	maxTaskArgs        = 256
	maxTaskArgBytes    = 4096
	maxEntrypointBytes = 255
	maxTaskRetries     = 100
	maxRetryExitCodes  = 32
)

// runName is metadata.name: a DNS-1123 label.
var runName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// check refuses what the control plane would refuse, or would silently
// ignore, in its words.
func (o TaskOptions) check() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("kruntimes: task: "+format, a...) }
	switch {
	case o.Runtime == "":
		return bad("Runtime names the Runtime that runs the task (python, bash, or a custom one)")
	case o.Name != "" && !runName.MatchString(o.Name):
		return bad("Name %q is not a Run name (a DNS-1123 label: lowercase letters, digits and '-', at most 63)", o.Name)
	case o.Inline != "" && (o.Entrypoint != "" || len(o.Args) > 0):
		var moot []string
		if o.Entrypoint != "" {
			moot = append(moot, "Entrypoint")
		}
		if len(o.Args) > 0 {
			moot = append(moot, "Args")
		}
		return bad("Inline is a standalone script and runs as it is: %s would have no effect", strings.Join(moot, " and "))
	case o.Inline == "" && o.Entrypoint == "" && len(o.Args) == 0:
		return bad("a task needs something to run: Inline, Entrypoint, or Args (shell commands)")
	case len(o.Entrypoint) > maxEntrypointBytes:
		return bad("Entrypoint must be 1 to %d bytes", maxEntrypointBytes)
	case strings.HasPrefix(o.Entrypoint, "/") || slices.Contains(strings.Split(o.Entrypoint, "/"), "..") ||
		strings.ContainsRune(o.Entrypoint, 0):
		return bad("Entrypoint %q must be a file of the source: relative, without '..' or NUL", o.Entrypoint)
	case len(o.Args) > maxTaskArgs:
		return bad("Args has %d items; at most %d", len(o.Args), maxTaskArgs)
	case o.Timeout < 0:
		return bad("Timeout must not be negative")
	case o.MaxRetries != nil && (*o.MaxRetries < 0 || *o.MaxRetries > maxTaskRetries):
		return bad("MaxRetries must be 0 to %d", maxTaskRetries)
	case len(o.RetryOnExitCodes) > maxRetryExitCodes:
		return bad("RetryOnExitCodes has %d codes; at most %d", len(o.RetryOnExitCodes), maxRetryExitCodes)
	}
	for i, a := range o.Args {
		if len(a) > maxTaskArgBytes || strings.ContainsRune(a, 0) {
			return bad("Args[%d] is longer than %d bytes or contains NUL", i, maxTaskArgBytes)
		}
	}
	for _, c := range o.RetryOnExitCodes {
		if c < 1 || c > 255 {
			return bad("RetryOnExitCodes holds %d; exit codes that fail are 1 to 255", c)
		}
	}
	if _, ok := o.Env[""]; ok {
		return bad("Env names must not be empty")
	}
	return nil
}

// taskManifest is a task Run, as krt run writes one from its flags.
func taskManifest(name, namespace string, o TaskOptions) map[string]any {
	task := map[string]any{}
	if o.Entrypoint != "" {
		task["entrypoint"] = o.Entrypoint
	}
	// JSON values only ([]any, int64): an unstructured object is deep-copied.
	if len(o.Args) > 0 {
		args := make([]any, len(o.Args))
		for i, a := range o.Args {
			args[i] = a
		}
		task["args"] = args
	}
	env := envList(o.Env)
	spec := map[string]any{"runtime": o.Runtime, "env": env, "mode": map[string]any{"task": task}}
	if o.Inline != "" {
		spec["source"] = map[string]any{"inline": o.Inline}
	}
	if o.Timeout > 0 {
		spec["timeout"] = int64((o.Timeout + time.Second - 1) / time.Second)
	}
	if o.MaxRetries != nil || len(o.RetryOnExitCodes) > 0 {
		policy := map[string]any{}
		if o.MaxRetries != nil {
			policy["maxRetries"] = int64(*o.MaxRetries)
		}
		if len(o.RetryOnExitCodes) > 0 {
			codes := make([]any, len(o.RetryOnExitCodes))
			for i, c := range o.RetryOnExitCodes {
				codes[i] = int64(c)
			}
			policy["onExitCodes"] = codes
		}
		spec["retryPolicy"] = policy
	}
	return map[string]any{
		"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     spec,
	}
}
