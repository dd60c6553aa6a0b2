package kruntimes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const runsPath = "/apis/kruntimes.io/v1alpha1/namespaces"

// taskRun is a task Run object in phase, with status.task when task is not nil.
func taskRun(phase, reason, message string, task map[string]any) map[string]any {
	status := map[string]any{"phase": phase, "reason": reason, "message": message, "attempt": 1}
	if task != nil {
		status["task"] = task
	}
	return map[string]any{
		"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
		"metadata": map[string]any{"name": "t", "namespace": "a", "uid": "u-1"},
		"spec":     map[string]any{"runtime": "python", "mode": map[string]any{"task": map[string]any{}}},
		"status":   status,
	}
}

var exited0 = map[string]any{"attempt": 1, "exitCode": 0, "stdoutTail": "hi\n", "stderrTail": "careful\n",
	"startedAt": "2026-12-07T12:03:00Z", "finishedAt": "2026-12-07T12:03:00.25Z"}

// taskAPI is a client of a fake API server that echoes a create (recording
// its body), answers every GET with run and every other request with other.
func taskAPI(t *testing.T, run map[string]any, other http.HandlerFunc) (*Client, *[]string, *[]map[string]any) {
	t.Helper()
	var calls []string
	var created []map[string]any
	kube, _ := fake(t, func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Path)
		switch r.Method {
		case http.MethodPost:
			b, _ := io.ReadAll(r.Body)
			var doc map[string]any
			_ = json.Unmarshal(b, &doc)
			created = append(created, doc)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			_, _ = w.Write(b)
		case http.MethodGet:
			writeJSON(w, 200, run)
		default:
			if other == nil {
				t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
				return
			}
			other(w, r)
		}
	})
	c, err := NewFromKubeconfig(writeKubeconfig(t, kube, contextFor("    token: t\n")))
	if err != nil {
		t.Fatal(err)
	}
	return c, &calls, &created
}

func deleted(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success"})
}

func TestAnInlineTaskIsCreatedAsKrtRunWouldAndItsResultReadFromItsStatus(t *testing.T) {
	c, calls, created := taskAPI(t, taskRun("Succeeded", "Completed", "", exited0), nil)
	retries := 0
	r, err := c.Tasks.Run(context.Background(), TaskOptions{Runtime: "python", Inline: "print('hi')",
		Env: map[string]string{"B": "2", "A": "1"}, Timeout: 1500 * time.Millisecond, MaxRetries: &retries,
		RetryOnExitCodes: []int{3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	doc := (*created)[0]
	name := doc["metadata"].(map[string]any)["name"].(string)
	if !strings.HasPrefix(name, "task-") || len(name) != len("task-")+8 {
		t.Errorf("name %q", name)
	}
	want := map[string]any{"runtime": "python", "source": map[string]any{"inline": "print('hi')"},
		"mode": map[string]any{"task": map[string]any{}}, "timeout": 2.0,
		"env":         []any{map[string]any{"name": "A", "value": "1"}, map[string]any{"name": "B", "value": "2"}},
		"retryPolicy": map[string]any{"maxRetries": 0.0, "onExitCodes": []any{3.0, 4.0}}}
	if !reflect.DeepEqual(doc["spec"], want) {
		t.Errorf("spec %v\nwant %v", doc["spec"], want)
	}
	if !slices.Equal(*calls, []string{"POST " + runsPath + "/a/runs", "GET " + runsPath + "/a/runs/" + name}) {
		t.Errorf("calls %v", *calls)
	}
	if r.Phase != "Succeeded" || r.Reason != "Completed" || *r.ExitCode != 0 || !r.OK() || !r.Ended() ||
		r.Stdout != "hi\n" || r.Stderr != "careful\n" || r.StdoutTruncated || r.Attempt != 1 {
		t.Errorf("%+v", r)
	}
	if d := r.FinishedAt.Sub(r.StartedAt); d != 250*time.Millisecond {
		t.Errorf("ran %v", d)
	}
}

func TestEntrypointsAndShellCommandsAreSentAsTheModeAndTheNameAndNamespaceAsGiven(t *testing.T) {
	c, calls, created := taskAPI(t, taskRun("Succeeded", "Completed", "", exited0), nil)
	ctx := context.Background()
	if _, err := c.Tasks.Run(ctx, TaskOptions{Runtime: "python", Entrypoint: "bin/run.py",
		Args: []string{"--verbose", "x y"}, Name: "nightly", Namespace: "ci"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tasks.Run(ctx, TaskOptions{Runtime: "bash", Args: []string{"echo one", "false"}}); err != nil {
		t.Fatal(err)
	}
	if (*calls)[0] != "POST "+runsPath+"/ci/runs" {
		t.Errorf("%v", *calls)
	}
	spec := (*created)[0]["spec"].(map[string]any)
	if !reflect.DeepEqual(spec["mode"], map[string]any{"task": map[string]any{"entrypoint": "bin/run.py",
		"args": []any{"--verbose", "x y"}}}) || spec["source"] != nil || spec["retryPolicy"] != nil {
		t.Errorf("%v", spec)
	}
	if m := (*created)[1]["spec"].(map[string]any)["mode"]; !reflect.DeepEqual(m,
		map[string]any{"task": map[string]any{"args": []any{"echo one", "false"}}}) {
		t.Errorf("%v", m)
	}
}

func TestANonZeroExitIsAResultNotAnError(t *testing.T) {
	c, _, _ := taskAPI(t, taskRun("Failed", "NonZeroExit", "exited with code 3",
		map[string]any{"attempt": 2, "exitCode": 3, "stderrTail": "oops\n", "stderrTruncated": true}), nil)
	r, err := c.Tasks.Run(context.Background(), TaskOptions{Runtime: "bash", Inline: "exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Phase != "Failed" || r.Reason != "NonZeroExit" || *r.ExitCode != 3 || r.OK() || r.Message != "exited with code 3" ||
		r.Stderr != "oops\n" || !r.StderrTruncated || r.Attempt != 2 || !r.StartedAt.IsZero() {
		t.Errorf("%+v", r)
	}
}

func TestATaskThatEndedWithoutAnExitOfItsOwnIsTheErrorOfHowItEnded(t *testing.T) {
	for _, c := range []struct {
		phase, reason string
		is            func(error) bool
	}{
		{"Failed", "StartFailed", func(err error) bool { var e *TaskStartFailedError; return errors.As(err, &e) }},
		{"Failed", "OwnerLost", func(err error) bool { var e *RunLostError; return errors.As(err, &e) }},
		{"Failed", "InvalidSpec", func(err error) bool {
			var e *InvalidSpecError
			var invalid *InvalidRequestError
			return errors.As(err, &e) && errors.As(err, &invalid) && invalid.Reason == "InvalidSpec"
		}},
		{"Failed", "RegistrationTimeout", func(err error) bool { _, ok := err.(*RunFailedError); return ok }},
		{"Timeout", "RunTimeout", func(err error) bool { var e *RunTimeoutError; return errors.As(err, &e) }},
		{"Cancelled", "Terminated", func(err error) bool { var e *RunCancelledError; return errors.As(err, &e) }},
		{"Cancelled", "OwnerLost", func(err error) bool { var e *RunCancelledError; return errors.As(err, &e) }},
	} {
		client, calls, _ := taskAPI(t, taskRun(c.phase, c.reason, "why it ended", nil), nil)
		r, err := client.Tasks.Run(context.Background(), TaskOptions{Runtime: "python", Args: []string{"print(1)"}, Name: "t"})
		var ended *RunEndedError
		var failed *RunFailedError
		var api *APIError
		if !c.is(err) || !errors.As(err, &ended) || !errors.As(err, &api) {
			t.Errorf("%s/%s: %T %v", c.phase, c.reason, err, err)
			continue
		}
		if errors.As(err, &failed) != (c.phase == "Failed") {
			t.Errorf("%s/%s: a *RunFailedError? %v", c.phase, c.reason, err)
		}
		if ended.Status != 0 || ended.Code != c.phase || ended.Phase != c.phase || ended.Reason != c.reason ||
			ended.Source != "client" || ended.Name != "t" || api.Reason != c.reason {
			t.Errorf("%+v", ended)
		}
		if want := "run a/t ended " + c.phase + " (" + c.reason + ": why it ended)"; err.Error() != want {
			t.Errorf("%q, want %q", err.Error(), want)
		}
		// The result as it ended comes with the error; the Run is kept unless asked.
		if r == nil || r.ExitCode != nil || r.Message != "why it ended" || len(*calls) != 2 {
			t.Errorf("%+v %v", r, *calls)
		}
	}
}

func TestRemoveDeletesTheRunAfterItsResultIsReadAfterItFailedAndAfterTheWaitGaveUp(t *testing.T) {
	ctx := context.Background()
	for _, run := range []map[string]any{
		taskRun("Succeeded", "Completed", "", exited0),
		taskRun("Failed", "StartFailed", "", nil),
	} {
		c, calls, _ := taskAPI(t, run, deleted)
		_, err := c.Tasks.Run(ctx, TaskOptions{Runtime: "python", Inline: "print(1)", Name: "t", Remove: true})
		var failed *TaskStartFailedError
		if err != nil && !errors.As(err, &failed) {
			t.Fatal(err)
		}
		if want := []string{"POST " + runsPath + "/a/runs", "GET " + runsPath + "/a/runs/t",
			"DELETE " + runsPath + "/a/runs/t"}; !slices.Equal(*calls, want) {
			t.Errorf("%v", *calls)
		}
	}
	pending := taskRun("Pending", "NoIdlePod", "0/1 python Pods can take this task: 1 busy", nil)
	for _, remove := range []bool{false, true} {
		c, calls, _ := taskAPI(t, pending, deleted)
		wait, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		r, err := c.Tasks.Run(wait, TaskOptions{Runtime: "python", Inline: "print(1)", Name: "t", Remove: remove})
		cancel()
		var timeout *WaitTimeoutError
		if !errors.As(err, &timeout) || r != nil || timeout.Phase != "Pending" || timeout.Reason != "NoIdlePod" ||
			!strings.Contains(err.Error(), "its end not reached (phase Pending, NoIdlePod: 0/1 python Pods") {
			t.Fatal(r, err)
		}
		if got := (*calls)[len(*calls)-1]; strings.HasPrefix(got, "DELETE") != remove {
			t.Errorf("remove %v: %v", remove, *calls)
		}
	}
}

func TestARemovalRefusedAfterTheResultComesWithTheResult(t *testing.T) {
	c, _, _ := taskAPI(t, taskRun("Succeeded", "Completed", "", exited0), func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 403, kubeStatus(403, "Forbidden"))
	})
	r, err := c.Tasks.Run(context.Background(), TaskOptions{Runtime: "python", Inline: "print(1)", Remove: true})
	var denied *PermissionDeniedError
	if !errors.As(err, &denied) || r == nil || *r.ExitCode != 0 {
		t.Fatal(r, err)
	}
}

func TestASpecTheAPIServerRefusesIsItsErrorAndNothingIsAwaited(t *testing.T) {
	var calls []string
	kube, _ := fake(t, func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method)
		writeJSON(w, 422, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid",
			"code": 422, "message": `Run.kruntimes.io "t" is invalid: spec.runtime: Too long`})
	})
	c, err := NewFromKubeconfig(writeKubeconfig(t, kube, contextFor("    token: t\n")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Tasks.Run(context.Background(), TaskOptions{Runtime: strings.Repeat("x", 64), Inline: "true"})
	var invalid *InvalidRequestError
	if !errors.As(err, &invalid) || invalid.Status != 422 || invalid.Source != "kubernetes" || len(calls) != 1 {
		t.Fatal(err, calls)
	}
}

func TestOptionsTheControlPlaneWouldRefuseAreRefusedBeforeAnythingIsSent(t *testing.T) {
	c, calls, _ := taskAPI(t, nil, nil)
	neg, many := -1, 101
	for _, o := range []struct {
		opts TaskOptions
		why  string
	}{
		{TaskOptions{Inline: "print(1)"}, "Runtime names"},
		{TaskOptions{Inline: "print(1)", Entrypoint: "main.py"}, "Entrypoint would have no effect"},
		{TaskOptions{Inline: "print(1)", Args: []string{"-v"}}, "Args would have no effect"},
		{TaskOptions{}, "a task needs something to run"},
		{TaskOptions{Entrypoint: "../x.py"}, "without '..'"},
		{TaskOptions{Entrypoint: "/etc/x"}, "relative"},
		{TaskOptions{Entrypoint: strings.Repeat("x", 256)}, "1 to 255 bytes"},
		{TaskOptions{Args: make([]string, 257)}, "at most 256"},
		{TaskOptions{Args: []string{"ok", "a\x00b"}}, "Args[1]"},
		{TaskOptions{Args: []string{"true"}, Timeout: -time.Second}, "Timeout"},
		{TaskOptions{Args: []string{"true"}, MaxRetries: &neg}, "MaxRetries"},
		{TaskOptions{Args: []string{"true"}, MaxRetries: &many}, "MaxRetries"},
		{TaskOptions{Args: []string{"true"}, RetryOnExitCodes: []int{0}}, "holds 0"},
		{TaskOptions{Args: []string{"true"}, RetryOnExitCodes: []int{256}}, "holds 256"},
		{TaskOptions{Args: []string{"true"}, Env: map[string]string{"": "x"}}, "Env names"},
		{TaskOptions{Args: []string{"true"}, Name: "Not_A_Name"}, "is not a Run name"},
		{TaskOptions{Args: []string{"true"}, Name: "a.b"}, "is not a Run name"},
	} {
		if o.opts.Runtime == "" && o.why != "Runtime names" {
			o.opts.Runtime = "bash"
		}
		if _, err := c.Tasks.Run(context.Background(), o.opts); err == nil || !strings.Contains(err.Error(), o.why) {
			t.Errorf("%+v: %v, want %q", o.opts, err, o.why)
		}
	}
	if len(*calls) != 0 {
		t.Errorf("sent %v", *calls)
	}
	gatewayOnly, err := New("https://127.0.0.1:1", "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gatewayOnly.Tasks.Run(context.Background(), TaskOptions{Runtime: "bash", Args: []string{"true"}}); !errors.Is(err, ErrUnsupported) {
		t.Error(err)
	}
}

func TestGetReadsATaskAsItStandsAndRefusesOtherModes(t *testing.T) {
	c, calls, _ := taskAPI(t, taskRun("Running", "Started", "", nil), deleted)
	ctx := context.Background()
	r, err := c.Tasks.Get(ctx, "t")
	if err != nil || r.Phase != "Running" || r.ExitCode != nil || r.Ended() || r.Attempt != 1 {
		t.Fatal(r, err)
	}
	if err := c.Tasks.Delete(ctx, "t"); err != nil || (*calls)[1] != "DELETE "+runsPath+"/a/runs/t" {
		t.Fatal(err, *calls)
	}
	c, _, _ = taskAPI(t, kubeRun("Ready", "session", ""), nil)
	var nf *NotFoundError
	if _, err := c.Tasks.Get(ctx, "t"); !errors.As(err, &nf) || !strings.Contains(err.Error(), "not a task Run") {
		t.Error(err)
	}
}

func TestOnAStateDirATaskIsTheFileKrtRunWritesAndItsRowItsResult(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	_ = os.Mkdir(runs, 0o755)
	_ = os.WriteFile(filepath.Join(dir, "runs.json"), []byte(`{"runs":[{"name":"done","namespace":"default","uid":"u",
		"runtime":"bash","mode":"task","phase":"Failed","reason":"NonZeroExit","attempt":1,
		"task":{"attempt":1,"exitCode":3,"stdoutTail":"out\n","stdoutTruncated":true}}]}`), 0o644)
	c := withTasks(&Client{namespace: "default", runs: &stateDirRuns{stateDir: dir, runsDir: runs}})
	ctx := context.Background()
	r, err := c.Tasks.Get(ctx, "done")
	if err != nil || *r.ExitCode != 3 || r.Stdout != "out\n" || !r.StdoutTruncated || r.Stderr != "" {
		t.Fatal(r, err)
	}
	// Listed already: refused, not written beside it.
	var conflict *ConflictError
	if _, err := c.Tasks.Run(ctx, TaskOptions{Runtime: "bash", Args: []string{"true"}, Name: "done"}); !errors.As(err, &conflict) {
		t.Error(err)
	}
	// A new one is written as krt run writes it (krt delete run finds it), and waited for.
	wait, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	var timeout *WaitTimeoutError
	if _, err := c.Tasks.Run(wait, TaskOptions{Runtime: "bash", Args: []string{"echo hi"}, Name: "new"}); !errors.As(err, &timeout) || timeout.Last != "not listed" {
		t.Error(err)
	}
	raw, err := os.ReadFile(filepath.Join(runs, "apply-default-new.yaml"))
	if err != nil || !strings.Contains(string(raw), `"echo hi"`) {
		t.Fatal(string(raw), err)
	}
	if err := c.Tasks.Delete(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(runs); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}
