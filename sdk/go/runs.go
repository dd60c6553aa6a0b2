package kruntimes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// RunInfo is a Run as its control plane reports it.
type RunInfo struct {
	Name, Namespace, UID, Runtime string
	// Mode is function, session or task.
	Mode string
	// Phase is Pending, Scheduled, Running, Ready, Finalizing or a terminal
	// phase (Succeeded, Failed, Timeout, Cancelled).
	Phase, Reason, Message string
	Attempt                int64
	// Endpoint is the Run's gateway URL (…:invoke or …/sessions/{uid}).
	Endpoint string
	// CABundle is the PEM CA the endpoint's certificate chains to, when the
	// status publishes one.
	CABundle string
	// Task is status.task: how a task Run's process ended (task Runs, once it
	// has; nil otherwise).
	Task *TaskStatus
	// Artifacts is status.artifacts: what a task left in its artifacts
	// directory (at most 100 listed; Client.Artifacts.List has them all).
	Artifacts []ArtifactRef
}

// TaskStatus is status.task: how a task Run's process ended, with the last
// 4 KiB of each stream (UTF-8).
type TaskStatus struct {
	// Attempt is the attempt that ran.
	Attempt int64 `json:"attempt"`
	// ExitCode is its exit code (128 + N when signal N ended it).
	ExitCode   int    `json:"exitCode"`
	StdoutTail string `json:"stdoutTail"`
	StderrTail string `json:"stderrTail"`
	// StdoutTruncated and StderrTruncated: more was written than the tail holds.
	StdoutTruncated bool `json:"stdoutTruncated"`
	StderrTruncated bool `json:"stderrTruncated"`
	// StartedAt and FinishedAt are zero when the status does not say.
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
}

// Ended reports whether the phase is terminal.
func (r RunInfo) Ended() bool {
	switch r.Phase {
	case "Succeeded", "Failed", "Timeout", "Cancelled":
		return true
	}
	return false
}

// runStore is where Runs live: get, create, terminate, delete.
type runStore interface {
	// get answers a *NotFoundError for a Run that does not exist.
	get(ctx context.Context, namespace, name string) (*RunInfo, error)
	// create answers a *ConflictError when a Run of that name exists.
	create(ctx context.Context, manifest map[string]any) error
	// terminate sets spec.termination.mode (Drain or Immediate).
	terminate(ctx context.Context, namespace, name, mode string) error
	// delete deletes the Run (its owner releases what it held); a Run
	// already gone is no error.
	delete(ctx context.Context, namespace, name string) error
	// source is the Source of the errors it answers.
	source() string
}

var runsResource = schema.GroupVersionResource{Group: "kruntimes.io", Version: "v1alpha1", Resource: "runs"}

// kubeRuns are Runs in the Kubernetes API.
type kubeRuns struct{ dyn dynamic.Interface }

func (k *kubeRuns) source() string { return "kubernetes" }

// kubeError is the typed error of a Kubernetes API failure.
func kubeError(err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		e := APIError{Status: int(s.Code), Code: string(s.Reason), Message: s.Message, Source: "kubernetes"}
		if s.Details != nil && s.Details.RetryAfterSeconds > 0 {
			e.RetryAfter = time.Duration(s.Details.RetryAfterSeconds) * time.Second
		}
		return typed(e)
	}
	return &NetworkError{Op: "kubernetes", Err: err}
}

func (k *kubeRuns) get(ctx context.Context, namespace, name string) (*RunInfo, error) {
	obj, err := k.dyn.Resource(runsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, kubeError(err)
	}
	return runFromObject(obj.Object)
}

func (k *kubeRuns) create(ctx context.Context, manifest map[string]any) error {
	ns, _ := manifest["metadata"].(map[string]any)["namespace"].(string)
	_, err := k.dyn.Resource(runsResource).Namespace(ns).
		Create(ctx, &unstructured.Unstructured{Object: manifest}, metav1.CreateOptions{})
	if err != nil {
		return kubeError(err)
	}
	return nil
}

func (k *kubeRuns) terminate(ctx context.Context, namespace, name, mode string) error {
	patch := fmt.Appendf(nil, `{"spec":{"termination":{"mode":%q}}}`, mode)
	_, err := k.dyn.Resource(runsResource).Namespace(namespace).
		Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return kubeError(err)
	}
	return nil
}

func (k *kubeRuns) delete(ctx context.Context, namespace, name string) error {
	err := k.dyn.Resource(runsResource).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return kubeError(err)
	}
	return nil
}

func runFromObject(obj map[string]any) (*RunInfo, error) {
	var run struct {
		Metadata struct{ Name, Namespace, UID string }
		Spec     struct {
			Runtime string
			Mode    map[string]json.RawMessage
		}
		Status struct {
			Phase, Reason, Message string
			Attempt                int64
			Endpoint               struct {
				URL      string `json:"url"`
				CABundle string `json:"caBundle"`
			}
			Task      *TaskStatus
			Artifacts []ArtifactRef
		}
	}
	raw, err := json.Marshal(obj)
	if err == nil {
		err = json.Unmarshal(raw, &run)
	}
	if err != nil {
		return nil, fmt.Errorf("decode Run: %w", err)
	}
	info := &RunInfo{
		Name: run.Metadata.Name, Namespace: run.Metadata.Namespace, UID: run.Metadata.UID,
		Runtime: run.Spec.Runtime, Phase: or(run.Status.Phase, "Pending"), Reason: run.Status.Reason,
		Message: run.Status.Message, Attempt: run.Status.Attempt, Endpoint: run.Status.Endpoint.URL,
		Task: run.Status.Task, Artifacts: run.Status.Artifacts,
	}
	for mode := range run.Spec.Mode {
		info.Mode = mode
	}
	if b := run.Status.Endpoint.CABundle; b != "" {
		pem, err := base64.StdEncoding.DecodeString(b)
		if err != nil {
			return nil, fmt.Errorf("decode status.endpoint.caBundle: %w", err)
		}
		info.CABundle = string(pem)
	}
	return info, nil
}

// stateDirRuns are the Runs of krt up: status from runs.json, manifests
// written to its runs directory.
type stateDirRuns struct{ stateDir, runsDir string }

func (s *stateDirRuns) source() string { return "client" }

func (s *stateDirRuns) get(_ context.Context, namespace, name string) (*RunInfo, error) {
	path := filepath.Join(s.stateDir, "runs.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s (is `krt up` running with this state dir?): %w", path, err)
	}
	var doc struct {
		Runs []struct {
			Name, Namespace, Runtime, UID, Mode, Phase, Reason, Message, Endpoint string
			Attempt                                                               int64
			Task                                                                  *TaskStatus
			Artifacts                                                             []ArtifactRef
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	for _, r := range doc.Runs {
		if r.Namespace == namespace && r.Name == name {
			return &RunInfo{Name: name, Namespace: namespace, UID: r.UID, Runtime: r.Runtime, Mode: r.Mode,
				Phase: or(r.Phase, "Pending"), Reason: r.Reason, Message: r.Message, Attempt: r.Attempt,
				Endpoint: r.Endpoint, Task: r.Task, Artifacts: r.Artifacts}, nil
		}
	}
	return nil, typed(APIError{Status: 404, Code: "NotFound", Source: "client",
		Message: fmt.Sprintf("no run %s/%s", namespace, name)})
}

// manifestPrefixes name the files krt and the SDKs write Runs into:
// session for sessions (krt session create), apply for the rest (krt apply,
// and krt run for tasks). krt delete and krt session close find a Run's
// file by these names, as this store does.
var manifestPrefixes = []string{"apply", "session"}

// manifestPath is the file krt and the SDKs keep a Run's manifest in
// (PREFIX-NS-NAME.yaml).
func (s *stateDirRuns) manifestPath(prefix, namespace, name string) (string, error) {
	if s.runsDir == "" {
		return "", fmt.Errorf("%w: this krt up does not publish its runs directory (client.json has no runsDir)", ErrUnsupported)
	}
	return filepath.Join(s.runsDir, fmt.Sprintf("%s-%s-%s.yaml", prefix, namespace, name)), nil
}

// ownFile is the file krt or an SDK wrote for the Run ("" when none).
func (s *stateDirRuns) ownFile(namespace, name string) (string, error) {
	for _, prefix := range manifestPrefixes {
		path, err := s.manifestPath(prefix, namespace, name)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	return "", nil
}

func (s *stateDirRuns) write(path string, doc map[string]any) error {
	// JSON is YAML; write then rename so the store never reads half a file.
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (s *stateDirRuns) create(ctx context.Context, manifest map[string]any) error {
	meta := manifest["metadata"].(map[string]any)
	ns, name := meta["namespace"].(string), meta["name"].(string)
	prefix := "apply"
	if spec, _ := manifest["spec"].(map[string]any); spec != nil {
		if mode, _ := spec["mode"].(map[string]any); mode != nil && mode["session"] != nil {
			prefix = "session"
		}
	}
	path, err := s.manifestPath(prefix, ns, name)
	if err != nil {
		return err
	}
	exists := func(why string) error {
		return typed(APIError{Status: 409, Code: "AlreadyExists", Source: "client",
			Message: fmt.Sprintf("run %s/%s exists (%s)", ns, name, why)})
	}
	if own, err := s.ownFile(ns, name); err != nil || own != "" {
		if err != nil {
			return err
		}
		return exists(own)
	}
	// A Run of that name from another file (krt up --runs): a second one
	// would be skipped as a duplicate, and waiting on the name would wait on
	// the other.
	var nf *NotFoundError
	switch run, err := s.get(ctx, ns, name); {
	case err == nil:
		return exists("phase " + run.Phase + "; delete it, or choose another name")
	case !errors.As(err, &nf):
		return err
	}
	return s.write(path, manifest)
}

func (s *stateDirRuns) terminate(_ context.Context, namespace, name, mode string) error {
	path, err := s.ownFile(namespace, name)
	if err != nil {
		return err
	}
	if path == "" {
		return fmt.Errorf("%w: run %s/%s has no manifest of this SDK or krt in %s: end it by editing its own manifest (spec.termination)",
			ErrUnsupported, namespace, name, s.runsDir)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	spec, _ := doc["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
		doc["spec"] = spec
	}
	spec["termination"] = map[string]any{"mode": mode}
	return s.write(path, doc)
}

func (s *stateDirRuns) delete(_ context.Context, namespace, name string) error {
	path, err := s.ownFile(namespace, name)
	if err != nil || path == "" {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// sessionManifest is a session Run (docs/sessions.md).
func sessionManifest(name, namespace string, o SandboxOptions) map[string]any {
	session := map[string]any{}
	if o.IdleTimeout > 0 {
		session["idleTimeoutSeconds"] = int64(o.IdleTimeout / time.Second)
	}
	if o.QueueSize > 0 {
		session["queueSize"] = o.QueueSize
	}
	if o.OperationTimeout > 0 {
		session["operationTimeout"] = int64(o.OperationTimeout / time.Second)
	}
	env := envList(o.Env)
	spec := map[string]any{"runtime": or(o.Runtime, "bash"), "env": env, "mode": map[string]any{"session": session}}
	if o.Timeout > 0 {
		spec["timeout"] = int64(o.Timeout / time.Second)
	}
	return map[string]any{
		"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     spec,
	}
}

// WaitTimeoutError is a Run that did not reach what was awaited before the
// context ended. Phase and Reason are the Run's when last seen (empty when it
// was not listed); Last says it in words, with the status message that says
// why a Pending Run waits.
type WaitTimeoutError struct {
	Namespace, Name, What, Last string
	Phase, Reason               string
	Err                         error
}

func (e *WaitTimeoutError) Error() string {
	return fmt.Sprintf("run %s/%s: %s not reached (%s): %v", e.Namespace, e.Name, e.What, e.Last, e.Err)
}

func (e *WaitTimeoutError) Unwrap() error { return e.Err }

// waitFor polls the Run until want holds; a Run that ends otherwise is a
// *RunEndedError (*RunFailedError for Failed), one the store does not list
// yet is waited for.
// Where the Run stands is logged to log (when not nil) once quietWait has
// passed, and again at each change.
func waitFor(ctx context.Context, log *slog.Logger, store runStore, namespace, name, what string, want func(*RunInfo) bool) (*RunInfo, error) {
	delay := 50 * time.Millisecond
	var seen *RunInfo
	started, said := time.Now(), ""
	for {
		run, err := store.get(ctx, namespace, name)
		var nf *NotFoundError
		switch {
		case err == nil && want(run):
			return run, nil
		case err == nil && run.Ended():
			return nil, runEnded(namespace, name, run)
		case err == nil:
			seen = run
		case !errors.As(err, &nf):
			return nil, err
		}
		if now := lastSeen(seen); log != nil && now != said && time.Since(started) >= quietWait {
			log.InfoContext(ctx, "kruntimes: waiting for run", "run", namespace+"/"+name, "for", what, "status", now)
			said = now
		}
		if err := sleep(ctx, delay); err != nil {
			e := &WaitTimeoutError{Namespace: namespace, Name: name, What: what, Last: lastSeen(seen), Err: err}
			if seen != nil {
				e.Phase, e.Reason = seen.Phase, seen.Reason
			}
			return nil, e
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// quietWait is how long a wait logs nothing: a quick one stays silent.
const quietWait = time.Second

// lastSeen is what a wait saw last: the phase, and why the Run waits when
// its status says.
func lastSeen(run *RunInfo) string {
	if run == nil {
		return "not listed"
	}
	var why []string
	for _, part := range []string{run.Reason, run.Message} {
		if part != "" {
			why = append(why, part)
		}
	}
	if len(why) == 0 {
		return "phase " + run.Phase
	}
	return "phase " + run.Phase + ", " + strings.Join(why, ": ")
}

// envList is a Run's spec.env from a map, sorted by name (JSON values only:
// an unstructured object is deep-copied).
func envList(vars map[string]string) []any {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]any, 0, len(keys))
	for _, k := range keys {
		env = append(env, map[string]any{"name": k, "value": vars[k]})
	}
	return env
}
