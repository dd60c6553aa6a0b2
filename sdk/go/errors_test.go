package kruntimes

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func gatewayBody(code string) []byte {
	return fmt.Appendf(nil, `{"error":{"code":%q,"message":"m","invocationId":"inv-1"}}`, code)
}

func TestEveryCodeOfTheTableHasItsType(t *testing.T) {
	table := []struct {
		status int
		code   string
		want   error
	}{
		{400, "InvalidPath", &InvalidPathError{}}, {400, "InvalidJson", &InvalidJSONError{}},
		{400, "InvalidInvocationId", &InvalidInvocationIDError{}}, {400, "BadRequest", &BadRequestError{}},
		{401, "Unauthenticated", &UnauthenticatedError{}}, {403, "Forbidden", &PermissionDeniedError{}},
		{404, "NotFound", &NotFoundError{}}, {405, "MethodNotAllowed", &MethodNotAllowedError{}},
		{413, "PayloadTooLarge", &PayloadTooLargeError{}}, {431, "HeadersTooLarge", &HeadersTooLargeError{}},
		{429, "Busy", &BusyError{}}, {503, "NotReady", &NotReadyError{}},
		{503, "OwnerUnavailable", &OwnerUnavailableError{}}, {503, "StaleOwner", &StaleOwnerError{}},
		{503, "Overloaded", &OverloadedError{}}, {503, "AuthUnavailable", &AuthUnavailableError{}},
		{500, "FunctionError", &FunctionError{}}, {500, "WorkerCrashed", &WorkerCrashedError{}},
		{500, "InvalidOutput", &InvalidOutputError{}}, {500, "Internal", &InternalError{}},
		{500, "OutcomeUnknown", &OutcomeUnknownError{}}, {504, "DeadlineExceeded", &DeadlineExceededError{}},
		{409, "Conflict", &ConflictError{}}, {409, "RunFailed", &RunFailedError{}}, {410, "RunEnded", &RunEndedError{}},
		{416, "RangeNotSatisfiable", &RangeNotSatisfiableError{}},
		{503, "ArtifactStoreUnavailable", &ArtifactStoreUnavailableError{}},
	}
	if len(table) != len(byCode) {
		t.Fatalf("%d codes tested, %d known", len(table), len(byCode))
	}
	for _, c := range table {
		h := http.Header{}
		if c.status == 429 || c.status == 503 {
			h.Set("Retry-After", "2")
		}
		err := fromAnswer("gateway", c.status, h, gatewayBody(c.code))
		if reflect.TypeOf(err) != reflect.TypeOf(c.want) {
			t.Errorf("%s: got %T, want %T", c.code, err, c.want)
		}
		var api *APIError
		if !errors.As(err, &api) {
			t.Fatalf("%s: errors.As *APIError failed", c.code)
		}
		if api.Status != c.status || api.Code != c.code || api.InvocationID != "inv-1" || api.Source != "gateway" {
			t.Errorf("%s: %+v", c.code, api)
		}
		if (c.status == 429 || c.status == 503) != (api.RetryAfter == 2*time.Second) || api.Retryable() != (api.RetryAfter > 0) {
			t.Errorf("%s: retry after %v, retryable %v", c.code, api.RetryAfter, api.Retryable())
		}
	}
}

func TestGroupsMatchEveryCodeOfTheirStatus(t *testing.T) {
	for _, code := range []string{"NotReady", "OwnerUnavailable", "StaleOwner", "Overloaded", "AuthUnavailable",
		"ArtifactStoreUnavailable"} {
		var g *UnavailableError
		if err := fromAnswer("gateway", 503, http.Header{}, gatewayBody(code)); !errors.As(err, &g) || g.Code != code {
			t.Errorf("%s is not an *UnavailableError", code)
		}
	}
	for _, code := range []string{"FunctionError", "WorkerCrashed", "InvalidOutput", "OutcomeUnknown", "Internal"} {
		var g *ServerError
		if err := fromAnswer("gateway", 500, http.Header{}, gatewayBody(code)); !errors.As(err, &g) {
			t.Errorf("%s is not a *ServerError", code)
		}
	}
	var g *InvalidRequestError
	wrapped := fmt.Errorf("call: %w", fromAnswer("gateway", 400, http.Header{}, gatewayBody("InvalidPath")))
	if !errors.As(wrapped, &g) {
		t.Error("a wrapped InvalidPath is not an *InvalidRequestError")
	}
	var nf *NotFoundError
	if errors.As(wrapped, &nf) {
		t.Error("an InvalidPath is a *NotFoundError")
	}
}

func TestUnknownCodesAndKubernetesStatusesFallBackToTheirStatus(t *testing.T) {
	var u *UnavailableError
	if err := fromAnswer("gateway", 503, http.Header{}, gatewayBody("New")); !errors.As(err, &u) || u.Code != "New" {
		t.Errorf("unknown 503: %v", err)
	}
	status := func(code int, reason string) []byte {
		return fmt.Appendf(nil, `{"kind":"Status","code":%d,"reason":%q,"message":"msg"}`, code, reason)
	}
	for _, c := range []struct {
		code   int
		reason string
		want   error
	}{
		{401, "Unauthorized", &UnauthenticatedError{}}, {403, "Forbidden", &PermissionDeniedError{}},
		{404, "NotFound", &NotFoundError{}}, {409, "AlreadyExists", &ConflictError{}},
		{422, "Invalid", &InvalidRequestError{}}, {500, "InternalError", &ServerError{}},
	} {
		err := fromAnswer("kubernetes", c.code, http.Header{}, status(c.code, c.reason))
		var api *APIError
		if reflect.TypeOf(err) != reflect.TypeOf(c.want) || !errors.As(err, &api) || api.Code != c.reason || api.Source != "kubernetes" {
			t.Errorf("%d %s: %T %v", c.code, c.reason, err, err)
		}
	}
	err := fromAnswer("gateway", 418, http.Header{}, []byte("teapot"))
	if api, ok := err.(*APIError); !ok || api.Message != "teapot" || api.Code != "Unknown" {
		t.Errorf("418: %T %v", err, err)
	}
}

func TestRetryAfterTakesSecondsOrADate(t *testing.T) {
	if d := parseRetryAfter("1.5"); d != 1500*time.Millisecond {
		t.Error(d)
	}
	if d := parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"); d != 0 {
		t.Error(d)
	}
	if d := parseRetryAfter("soon"); d != 0 {
		t.Error(d)
	}
}

func TestEndedAndFailedRunsCarryTheirPhaseAndAreNotRetryable(t *testing.T) {
	body := []byte(`{"error":{"code":"RunFailed","message":"run x failed (RegistrationFailed): SyntaxError","phase":"Failed","reason":"RegistrationFailed"}}`)
	err := fromAnswer("gateway", 409, http.Header{}, body)
	var failed *RunFailedError
	var ended *RunEndedError
	var conflict *ConflictError
	if !errors.As(err, &failed) || !errors.As(err, &ended) || errors.As(err, &conflict) {
		t.Fatalf("%T %v", err, err)
	}
	if ended.Phase != "Failed" || ended.Reason != "RegistrationFailed" || ended.Retryable() || ended.Status != 409 {
		t.Errorf("%+v", ended)
	}
	if got := err.Error(); got != "409 RunFailed: run x failed (RegistrationFailed): SyntaxError" {
		t.Errorf("message %q", got)
	}
	err = fromAnswer("gateway", 410, http.Header{}, []byte(`{"error":{"code":"RunEnded","message":"m","phase":"Timeout","reason":"IdleTimeout"}}`))
	if !errors.As(err, &ended) || errors.As(err, &failed) || ended.Phase != "Timeout" || ended.Reason != "IdleTimeout" {
		t.Fatalf("%T %v", err, err)
	}
	var api *APIError
	err = fromAnswer("gateway", 503, http.Header{"Retry-After": {"1"}}, []byte(`{"error":{"code":"NotReady","message":"m","phase":"Pending","reason":"NoIdlePod"}}`))
	if !errors.As(err, &api) || api.Phase != "Pending" || api.Reason != "NoIdlePod" || !api.Retryable() {
		t.Fatalf("%+v", api)
	}
	// A wait's: Status 0, Code the phase; Failed is a *RunFailedError.
	err = runEnded("a", "hello", &RunInfo{Phase: "Failed", Reason: "RegistrationFailed", Message: "no bash"})
	if !errors.As(err, &failed) || !errors.As(err, &ended) || ended.Status != 0 || ended.Code != "Failed" {
		t.Fatalf("%T %+v", err, err)
	}
	if got := err.Error(); got != "run a/hello ended Failed (RegistrationFailed: no bash)" {
		t.Errorf("message %q", got)
	}
	err = runEnded("a", "hello", &RunInfo{Phase: "Timeout", Reason: "IdleTimeout"})
	if !errors.As(err, &ended) || errors.As(err, &failed) {
		t.Fatalf("%T", err)
	}
}
