package kruntimes_test

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	kruntimes "kruntimes.io/sdk"
)

func TestLiveInvokeReturnsTheHandlersOutput(t *testing.T) {
	fn := client(t, "").Function(env(t, "KRT_TEST_FUNCTION"))
	ctx := timeout(t, time.Minute)
	var out greeting
	if err := fn.Invoke(ctx, map[string]string{"name": "Go"}, &out); err != nil || out.Message != "hello Go" || out.PID == 0 {
		t.Fatal(out, err)
	}
	if !strings.HasSuffix(fn.Endpoint(), ":invoke") {
		t.Errorf("endpoint %q", fn.Endpoint())
	}
	if err := fn.Invoke(ctx, nil, &out); err != nil || out.Message != "hello world" {
		t.Fatal(out, err)
	}
}

// On krt up (every Runtime has a store) the handler's report comes back as a
// ref named under the invocation ID and is read by the Run's name through
// Client.Artifacts; Invoke decodes the handler's value alone. On the API
// server harness (no store) the handler has no directory: no refs.
func TestLiveAnInvocationsArtifactsComeBackWithItsAnswer(t *testing.T) {
	c := client(t, "")
	name := env(t, "KRT_TEST_FUNCTION")
	fn := c.Function(name)
	ctx := timeout(t, time.Minute)
	type report struct {
		Reported int
		Stored   bool
	}
	embedded := mode(t) == "embedded"
	inv, err := fn.Call(ctx, map[string]string{"report": "hello report"}, kruntimes.WithInvocationID("sdk-1"))
	if err != nil {
		t.Fatal(err)
	}
	var out report
	if err := json.Unmarshal(inv.Output, &out); err != nil || out != (report{12, embedded}) || inv.InvocationID != "sdk-1" {
		t.Fatalf("%s %q %v", inv.Output, inv.InvocationID, err)
	}
	if !embedded {
		if len(inv.Artifacts) != 0 {
			t.Errorf("%+v", inv.Artifacts)
		}
		if err := fn.Invoke(ctx, map[string]string{"report": "again"}, &out); err != nil || out != (report{5, false}) {
			t.Fatal(out, err)
		}
		return
	}
	if len(inv.Artifacts) != 1 {
		t.Fatalf("%+v", inv.Artifacts)
	}
	ref := inv.Artifacts[0]
	if ref.Name != "invocations/sdk-1/report.txt" || ref.Size != 12 || ref.SHA256 != sha256Hex([]byte("hello report")) ||
		!strings.HasPrefix(ref.URI, "file://") || !strings.HasSuffix(ref.URI, "/invocations/sdk-1/report.txt") {
		t.Errorf("%+v", ref)
	}
	if got, err := c.Artifacts.Read(ctx, "", name, ref.Name, nil); err != nil || string(got) != "hello report" {
		t.Fatalf("%q %v", got, err)
	}
	if got, err := c.Artifacts.Read(ctx, "", name, ref.Name, &kruntimes.Range{Offset: 6}); err != nil || string(got) != "report" {
		t.Errorf("%q %v", got, err)
	}
	// Invoke: the same kind of answer, decoded to the handler's value.
	if err := fn.Invoke(ctx, map[string]string{"report": "again"}, &out, kruntimes.WithInvocationID("sdk-2")); err != nil || out != (report{5, true}) {
		t.Fatal(out, err)
	}
	if got, err := c.Artifacts.Read(ctx, "", name, "invocations/sdk-2/report.txt", nil); err != nil || string(got) != "again" {
		t.Errorf("%q %v", got, err)
	}
	// Nothing written: the value as it is, no refs, and the ID the gateway made up.
	plain, err := fn.Call(ctx, map[string]string{"name": "plain"})
	var greet greeting
	if err != nil || json.Unmarshal(plain.Output, &greet) != nil || greet.Message != "hello plain" || len(plain.Artifacts) != 0 ||
		plain.InvocationID == "" {
		t.Errorf("%+v %v", plain, err)
	}
}

func TestLiveHandlerFailuresAreTypedByCode(t *testing.T) {
	fn := client(t, "").Function(env(t, "KRT_TEST_FUNCTION"))
	ctx := timeout(t, time.Minute)
	var fe *kruntimes.FunctionError
	err := fn.Invoke(ctx, map[string]any{"raise": "go"}, nil, kruntimes.WithInvocationID("go-raise-1"))
	if !errors.As(err, &fe) || fe.Status != 500 || fe.InvocationID != "go-raise-1" || !strings.Contains(fe.Message, "ValueError: bad go") {
		t.Fatalf("%T %v", err, err)
	}
	var server *kruntimes.ServerError
	if !errors.As(err, &server) {
		t.Error("a FunctionError is not a *ServerError")
	}
	var crashed *kruntimes.WorkerCrashedError
	if err := fn.Invoke(ctx, map[string]any{"crash": true}, nil); !errors.As(err, &crashed) {
		t.Errorf("crash: %v", err)
	}
	var output *kruntimes.InvalidOutputError
	if err := fn.Invoke(ctx, map[string]any{"big": true}, nil); !errors.As(err, &output) {
		t.Errorf("big output: %v", err)
	}
	var large *kruntimes.PayloadTooLargeError
	if err := fn.Invoke(ctx, map[string]string{"name": strings.Repeat("x", 1<<20)}, nil); !errors.As(err, &large) || large.Status != 413 {
		t.Errorf("1 MiB input: %v", err)
	}
	var badID *kruntimes.InvalidInvocationIDError
	if err := fn.Invoke(ctx, nil, nil, kruntimes.WithInvocationID(strings.Repeat("x", 200))); !errors.As(err, &badID) || badID.Status != 400 {
		t.Errorf("long invocation id: %v", err)
	}
}

func TestLiveAFunctionThatCannotLoadHasFailedForGood(t *testing.T) {
	fn := client(t, "").Function(env(t, "KRT_TEST_BROKEN_FUNCTION"))
	ctx := timeout(t, time.Minute)
	err := fn.Invoke(ctx, nil, nil)
	var failed *kruntimes.RunFailedError
	var ended *kruntimes.RunEndedError
	var unavailable *kruntimes.UnavailableError
	if !errors.As(err, &failed) || !errors.As(err, &ended) || errors.As(err, &unavailable) {
		t.Fatalf("%T %v", err, err)
	}
	if failed.Status != 409 || failed.Phase != "Failed" || failed.Reason != "RegistrationFailed" || failed.Retryable() || !strings.Contains(failed.Message, "SyntaxError") {
		t.Errorf("%+v", failed.APIError)
	}
}

func TestLiveABadTokenIsUnauthenticatedAndBobIsDenied(t *testing.T) {
	ctx := timeout(t, time.Minute)
	name := env(t, "KRT_TEST_FUNCTION")
	var unauth *kruntimes.UnauthenticatedError
	err := client(t, "", kruntimes.WithToken("not-a-valid-token")).Function(name).Invoke(ctx, nil, nil)
	if !errors.As(err, &unauth) || unauth.Status != 401 || unauth.Source != "gateway" || unauth.InvocationID == "" {
		t.Errorf("bad token: %v", err)
	}
	var denied *kruntimes.PermissionDeniedError
	err = client(t, "bob").Function(name).Invoke(ctx, nil, nil)
	if !errors.As(err, &denied) || denied.Status != 403 || denied.Code != "Forbidden" || denied.Source != "gateway" {
		t.Errorf("bob: %v", err)
	}
}

func TestLiveUnknownRunsAreNotFound(t *testing.T) {
	ctx := timeout(t, time.Minute)
	var nf *kruntimes.NotFoundError
	if err := client(t, "").Function("no-such-function").Invoke(ctx, nil, nil); !errors.As(err, &nf) || nf.Status != 404 {
		t.Errorf("unknown name: %v", err)
	}
	madeUp := env(t, "KRT_TEST_GATEWAY") + "/v1/namespaces/" + env(t, "KRT_TEST_NAMESPACE") +
		"/runtimes/python/runs/" + madeUpUID() + ":invoke"
	if err := explicit(t).FunctionAt(madeUp).Invoke(ctx, nil, nil); !errors.As(err, &nf) || nf.Source != "gateway" {
		t.Errorf("made-up UID: %v", err)
	}
}

func TestLiveABusyFunctionSaysWhenToRetry(t *testing.T) {
	fn := client(t, "").Function(env(t, "KRT_TEST_FUNCTION"))
	ctx := timeout(t, time.Minute)
	slow := make(chan error, 1)
	go func() { slow <- fn.Invoke(ctx, map[string]any{"sleep": 1.5}, nil) }()
	time.Sleep(300 * time.Millisecond) // let the slow call reach its worker first
	var busy *kruntimes.BusyError
	deadline := time.Now().Add(time.Second)
	for busy == nil && time.Now().Before(deadline) {
		if err := fn.Invoke(ctx, nil, nil); err != nil && !errors.As(err, &busy) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if busy == nil || busy.Status != 429 || busy.RetryAfter <= 0 || !busy.Retryable() {
		t.Fatalf("no 429 with Retry-After while an invocation was in flight: %v", busy)
	}
}

func TestLiveASlowHandlerHitsItsDeadline(t *testing.T) {
	fn := client(t, "").Function(env(t, "KRT_TEST_FUNCTION"))
	ctx := timeout(t, time.Minute)
	start := time.Now()
	var late *kruntimes.DeadlineExceededError
	if err := fn.Invoke(ctx, map[string]any{"sleep": 10}, nil); !errors.As(err, &late) || late.Status != 504 {
		t.Fatal(err)
	}
	if time.Since(start) > 8*time.Second {
		t.Errorf("the Run's 2 s deadline took %v", time.Since(start))
	}
	var out greeting
	if err := fn.Invoke(ctx, map[string]string{"name": "after"}, &out); err != nil || out.Message != "hello after" {
		t.Fatal(out, err)
	}
}

// madeUpUID is a UID no Run has.
func madeUpUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
