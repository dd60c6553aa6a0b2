package kruntimes

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// APIError is an error answered by the gateway or the Kubernetes API. It is
// always returned inside the type of its code (or of its status group), so
// errors.As(err, &apiErr) and errors.As(err, &notFound) both work.
type APIError struct {
	// Status is the HTTP status. For Runs read from krt up's runs.json it is
	// the status the gateway would answer (404: no such Run).
	Status int
	// Code is the stable error code (NotFound, Busy, …; for the Kubernetes
	// API, the Status reason).
	Code string
	// Message says why.
	Message string
	// InvocationID is the gateway's X-Kruntimes-Invocation-Id.
	InvocationID string
	// RetryAfter is the Retry-After of 429 and 503 answers (0 when absent).
	RetryAfter time.Duration
	// Source is "gateway", "kubernetes" or "client" (read from a state dir).
	Source string
	// Phase and Reason are the Run's, when the answer is about its state
	// (RunEnded, RunFailed, a pending NotReady, a wait's errors).
	Phase, Reason string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	if e.InvocationID != "" {
		s += " (invocation " + e.InvocationID + ")"
	}
	return s
}

// As lets errors.As find the *APIError inside every per-code type.
func (e *APIError) As(target any) bool {
	if t, ok := target.(**APIError); ok {
		*t = e
		return true
	}
	return false
}

// Retryable reports whether the call did not run and may be sent again after
// RetryAfter (429 and 503). The retry contract (docs/api.md): other 4xx did
// not run and will not as they are (RunEnded and RunFailed never on that
// Run); a 500 or 504 ran or may have run (OutcomeUnknown).
func (e *APIError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable
}

func (e *APIError) set(v APIError) { *e = v }

// The groups: errors.As(err, &group) matches every code of the group.
type (
	// InvalidRequestError is a 400: the request was malformed; it did not run.
	InvalidRequestError struct{ APIError }
	// UnavailableError is a 503: the call did not run; retry after RetryAfter.
	UnavailableError struct{ APIError }
	// ServerError is a 500: the call ran (or started) and failed.
	ServerError struct{ APIError }
)

// As matches the group, then the *APIError.
func (e *InvalidRequestError) As(target any) bool { return asGroup(e, target) }

// As matches the group, then the *APIError.
func (e *UnavailableError) As(target any) bool { return asGroup(e, target) }

// As matches the group, then the *APIError.
func (e *ServerError) As(target any) bool { return asGroup(e, target) }

type grouped interface {
	error
	apiError() *APIError
}

func (e *InvalidRequestError) apiError() *APIError { return &e.APIError }
func (e *UnavailableError) apiError() *APIError    { return &e.APIError }
func (e *ServerError) apiError() *APIError         { return &e.APIError }

func asGroup[G grouped](g G, target any) bool {
	if t, ok := target.(*G); ok {
		*t = g
		return true
	}
	return g.apiError().As(target)
}

// One type per code of the gateway's error table (docs/api.md).
type (
	// InvalidPathError is 400 InvalidPath: not an API route, or a workspace path that escapes.
	InvalidPathError struct{ InvalidRequestError }
	// InvalidJSONError is 400 InvalidJson: the body is not JSON.
	InvalidJSONError struct{ InvalidRequestError }
	// InvalidInvocationIDError is 400 InvalidInvocationId.
	InvalidInvocationIDError struct{ InvalidRequestError }
	// BadRequestError is 400 BadRequest: any other malformed request.
	BadRequestError struct{ InvalidRequestError }
	// UnauthenticatedError is 401: a missing, invalid or expired token.
	UnauthenticatedError struct{ APIError }
	// PermissionDeniedError is 403 Forbidden: RBAC (runs/invoke, runs/session) or the policy says no.
	PermissionDeniedError struct{ APIError }
	// NotFoundError is 404: no such Run, Run UID or workspace file.
	NotFoundError struct{ APIError }
	// MethodNotAllowedError is 405.
	MethodNotAllowedError struct{ APIError }
	// ConflictError is 409 Conflict: a session process's stdin is closed,
	// it has ended, or it has no terminal to resize; or (Kubernetes API) the
	// Run exists, or changed meanwhile.
	ConflictError struct{ APIError }
	// PayloadTooLargeError is 413: a body over 1 MiB (invoke) or a file over 32 MiB.
	PayloadTooLargeError struct{ APIError }
	// HeadersTooLargeError is 431.
	HeadersTooLargeError struct{ APIError }
	// RangeNotSatisfiableError is 416 RangeNotSatisfiable: an artifact's
	// byte range starts at or past its end (any range of an empty artifact);
	// the message gives the artifact's size.
	RangeNotSatisfiableError struct{ APIError }
	// BusyError is 429: an invocation is in flight, or the session queue is full; retry after RetryAfter.
	BusyError struct{ APIError }
	// NotReadyError is 503 NotReady: the Run is not Ready yet (pending — Phase
	// and Reason say why —, registering, between owners).
	NotReadyError struct{ UnavailableError }
	// OwnerUnavailableError is 503 OwnerUnavailable.
	OwnerUnavailableError struct{ UnavailableError }
	// StaleOwnerError is 503 StaleOwner.
	StaleOwnerError struct{ UnavailableError }
	// OverloadedError is 503 Overloaded: the gateway's in-flight limit.
	OverloadedError struct{ UnavailableError }
	// AuthUnavailableError is 503 AuthUnavailable: the authentication backend failed.
	AuthUnavailableError struct{ UnavailableError }
	// ArtifactStoreUnavailableError is 503 ArtifactStoreUnavailable: the
	// artifact store failed (or refused runtimed's credentials) while listing
	// or reading; nothing was lost: ask again after RetryAfter.
	ArtifactStoreUnavailableError struct{ UnavailableError }
	// FunctionError is 500 FunctionError: the handler raised or exited non-zero.
	FunctionError struct{ ServerError }
	// WorkerCrashedError is 500 WorkerCrashed.
	WorkerCrashedError struct{ ServerError }
	// InvalidOutputError is 500 InvalidOutput: over 1 MiB or not JSON.
	InvalidOutputError struct{ ServerError }
	// InternalError is 500 Internal.
	InternalError struct{ ServerError }
	// OutcomeUnknownError is 500 OutcomeUnknown: the call reached the owner
	// and may have run, but no outcome came back (the Run was deleted,
	// terminated or moved while it ran, or the owner's connection broke).
	OutcomeUnknownError struct{ ServerError }
	// DeadlineExceededError is 504: the invocation timeout passed.
	DeadlineExceededError struct{ APIError }
)

type setter interface {
	error
	set(APIError)
}

func wrap[T any, P interface {
	*T
	setter
}](e APIError) error {
	p := P(new(T))
	p.set(e)
	return p
}

type kind struct {
	status int
	make   func(APIError) error
}

var byCode = map[string]kind{
	"InvalidPath":              {400, wrap[InvalidPathError]},
	"InvalidJson":              {400, wrap[InvalidJSONError]},
	"InvalidInvocationId":      {400, wrap[InvalidInvocationIDError]},
	"BadRequest":               {400, wrap[BadRequestError]},
	"Unauthenticated":          {401, wrap[UnauthenticatedError]},
	"Forbidden":                {403, wrap[PermissionDeniedError]},
	"NotFound":                 {404, wrap[NotFoundError]},
	"MethodNotAllowed":         {405, wrap[MethodNotAllowedError]},
	"Conflict":                 {409, wrap[ConflictError]},
	"PayloadTooLarge":          {413, wrap[PayloadTooLargeError]},
	"HeadersTooLarge":          {431, wrap[HeadersTooLargeError]},
	"RangeNotSatisfiable":      {416, wrap[RangeNotSatisfiableError]},
	"Busy":                     {429, wrap[BusyError]},
	"NotReady":                 {503, wrap[NotReadyError]},
	"OwnerUnavailable":         {503, wrap[OwnerUnavailableError]},
	"StaleOwner":               {503, wrap[StaleOwnerError]},
	"Overloaded":               {503, wrap[OverloadedError]},
	"AuthUnavailable":          {503, wrap[AuthUnavailableError]},
	"ArtifactStoreUnavailable": {503, wrap[ArtifactStoreUnavailableError]},
	"FunctionError":            {500, wrap[FunctionError]},
	"WorkerCrashed":            {500, wrap[WorkerCrashedError]},
	"InvalidOutput":            {500, wrap[InvalidOutputError]},
	"Internal":                 {500, wrap[InternalError]},
	"OutcomeUnknown":           {500, wrap[OutcomeUnknownError]},
	"RunEnded":                 {410, wrap[RunEndedError]},
	"RunFailed":                {409, wrap[RunFailedError]},
	"DeadlineExceeded":         {504, wrap[DeadlineExceededError]},
}

var byStatus = map[int]func(APIError) error{
	400: wrap[InvalidRequestError],
	401: wrap[UnauthenticatedError],
	403: wrap[PermissionDeniedError],
	404: wrap[NotFoundError],
	405: wrap[MethodNotAllowedError],
	409: wrap[ConflictError],
	410: wrap[RunEndedError],
	413: wrap[PayloadTooLargeError],
	416: wrap[RangeNotSatisfiableError],
	422: wrap[InvalidRequestError],
	429: wrap[BusyError],
	431: wrap[HeadersTooLargeError],
	502: wrap[UnavailableError],
	503: wrap[UnavailableError],
	504: wrap[DeadlineExceededError],
}

// typed wraps e in the type of its code (when it came with that code's
// status), else of its status.
func typed(e APIError) error {
	if k, ok := byCode[e.Code]; ok && k.status == e.Status {
		return k.make(e)
	}
	if f, ok := byStatus[e.Status]; ok {
		return f(e)
	}
	if e.Status >= 500 {
		return wrap[ServerError](e)
	}
	return &e
}

// fromAnswer is the typed error of a non-2xx answer: the gateway's
// {"error": {…}} or a Kubernetes Status object.
func fromAnswer(source string, status int, header http.Header, body []byte) error {
	e := APIError{Status: status, Source: source, InvocationID: header.Get("X-Kruntimes-Invocation-Id")}
	var doc struct {
		Error *struct {
			Code, Message, InvocationID, Phase, Reason string
		} `json:"error"`
		Kind, Reason, Message string
	}
	if json.Unmarshal(body, &doc) == nil && doc.Error != nil {
		e.Code, e.Message = doc.Error.Code, doc.Error.Message
		e.Phase, e.Reason = doc.Error.Phase, doc.Error.Reason
		if doc.Error.InvocationID != "" {
			e.InvocationID = doc.Error.InvocationID
		}
	} else if doc.Kind == "Status" {
		e.Code, e.Message = doc.Reason, doc.Message
	} else {
		e.Message = string(body[:min(len(body), 2048)])
	}
	if e.Code == "" {
		e.Code = "Unknown"
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	e.RetryAfter = parseRetryAfter(header.Get("Retry-After"))
	return typed(e)
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// NetworkError is a connection that failed or broke, or a context that ended
// while waiting for the answer: whether the call ran is unknown.
type NetworkError struct {
	Op  string
	Err error
}

func (e *NetworkError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *NetworkError) Unwrap() error { return e.Err }

// RunEndedError is a Run that has ended and will not serve again; Phase and
// Reason are its own. The gateway answers 410 RunEnded (Succeeded, Timeout,
// Cancelled, Finalizing) to a call on such a Run: the call did not run. A
// wait returns it (Status 0, Code the phase, Namespace and Name set) when
// the awaited Run ends before the awaited phase, and Tasks.Run when a task
// Run ends without an exit of its own — inside the type that says how:
// *RunTimeoutError, *RunCancelledError, *RunLostError,
// *TaskStartFailedError, *InvalidSpecError.
type RunEndedError struct {
	APIError
	// Namespace and Name of the awaited Run (waits only).
	Namespace, Name string
}

func (e *RunEndedError) Error() string {
	if e.Name == "" {
		return e.APIError.Error()
	}
	return fmt.Sprintf("run %s/%s ended %s (%s: %s)", e.Namespace, e.Name, e.Phase, e.Reason, e.Message)
}

// RunFailedError is 409 RunFailed: the Run has failed (RegistrationFailed,
// RuntimeFailed, …) and the message says why; or a wait whose Run ended
// Failed. errors.As matches it as a *RunEndedError too.
type RunFailedError struct{ RunEndedError }

// As matches *RunEndedError, then the *APIError.
func (e *RunFailedError) As(target any) bool {
	if t, ok := target.(**RunEndedError); ok {
		*t = &e.RunEndedError
		return true
	}
	return e.APIError.As(target)
}

// How an awaited Run ended, when not as awaited: returned by the client only
// (Status 0, Code the phase); the gateway answers such Runs with RunEnded or
// RunFailed. errors.As matches each as the *RunEndedError (and
// *RunFailedError) it is too.
type (
	// RunTimeoutError is an awaited Run that ended Timeout: its spec.timeout
	// passed (reason RunTimeout; its processes were killed) or it was idle
	// too long (IdleTimeout).
	RunTimeoutError struct{ RunEndedError }
	// RunCancelledError is an awaited Run that ended Cancelled:
	// spec.termination Immediate (reason Terminated), or its owner was lost
	// while it was being ended (OwnerLost).
	RunCancelledError struct{ RunEndedError }
	// RunLostError is an awaited Run that failed because its owner Pod was
	// lost past retryPolicy.maxRetries (reason OwnerLost): a new Run may
	// succeed.
	RunLostError struct{ RunFailedError }
	// TaskStartFailedError is a task Run whose process could not be started
	// on any attempt (reason StartFailed; the message says why, e.g. a script
	// Runtime given shell commands): it did not run.
	TaskStartFailedError struct{ RunFailedError }
	// InvalidSpecError is an awaited Run that failed because its control
	// plane refused its spec (reason InvalidSpec; the message names the
	// field). errors.As matches it as an *InvalidRequestError too, as the
	// Kubernetes API's 422 for a spec its schema refuses at creation.
	InvalidSpecError struct{ RunFailedError }
)

// As matches *RunEndedError, then the *APIError.
func (e *RunTimeoutError) As(target any) bool { return asEnded(&e.RunEndedError, target) }

// As matches *RunEndedError, then the *APIError.
func (e *RunCancelledError) As(target any) bool { return asEnded(&e.RunEndedError, target) }

// As matches *RunFailedError, *RunEndedError, then the *APIError.
func (e *RunLostError) As(target any) bool { return asFailed(&e.RunFailedError, target) }

// As matches *RunFailedError, *RunEndedError, then the *APIError.
func (e *TaskStartFailedError) As(target any) bool { return asFailed(&e.RunFailedError, target) }

// As matches *RunFailedError, *RunEndedError, *InvalidRequestError, then
// the *APIError.
func (e *InvalidSpecError) As(target any) bool {
	if t, ok := target.(**InvalidRequestError); ok {
		*t = &InvalidRequestError{e.APIError}
		return true
	}
	return asFailed(&e.RunFailedError, target)
}

func asEnded(e *RunEndedError, target any) bool {
	if t, ok := target.(**RunEndedError); ok {
		*t = e
		return true
	}
	return e.APIError.As(target)
}

func asFailed(e *RunFailedError, target any) bool {
	if t, ok := target.(**RunFailedError); ok {
		*t = e
		return true
	}
	return e.As(target)
}

// runEnded is what a wait returns when the awaited Run ends first: the type
// of its phase and reason.
func runEnded(namespace, name string, run *RunInfo) error {
	ended := RunEndedError{
		APIError:  APIError{Code: run.Phase, Message: run.Message, Source: "client", Phase: run.Phase, Reason: run.Reason},
		Namespace: namespace,
		Name:      name,
	}
	switch run.Phase {
	case "Timeout":
		return &RunTimeoutError{ended}
	case "Cancelled":
		return &RunCancelledError{ended}
	case "Failed":
		failed := RunFailedError{ended}
		switch run.Reason {
		case "StartFailed":
			return &TaskStartFailedError{failed}
		case "OwnerLost":
			return &RunLostError{failed}
		case "InvalidSpec":
			return &InvalidSpecError{failed}
		}
		return &failed
	}
	return &ended
}

// OperationFailedError is a session file operation that ran and failed, or a
// command that did not succeed (CommandResult.Check).
type OperationFailedError struct {
	Op     string
	Result *CommandResult
}

func (e *OperationFailedError) Error() string {
	detail := e.Result.Error
	if e.Result.ExitCode != nil {
		detail = fmt.Sprintf("exit code %d", *e.Result.ExitCode)
	}
	if detail == "" {
		detail = e.Result.State
	}
	return fmt.Sprintf("%s %s %s: %s", e.Op, e.Result.OperationID, e.Result.State, detail)
}

// ArtifactIntegrityError is an artifact whose bytes are not what the
// gateway announced: their SHA-256 (or size) differs from
// X-Kruntimes-Artifact-Sha256 (X-Kruntimes-Artifact-Size). Artifacts.Download
// then writes nothing at its path; the download may be tried again.
type ArtifactIntegrityError struct {
	// Name is the artifact's.
	Name string
	// WantSHA256 and WantSize are what the gateway announced (WantSize -1:
	// not announced); GotSHA256 and GotSize what arrived.
	WantSHA256, GotSHA256 string
	WantSize, GotSize     int64
}

func (e *ArtifactIntegrityError) Error() string {
	return fmt.Sprintf("kruntimes: artifact %q: received %d bytes with SHA-256 %s, the gateway announced %d bytes with SHA-256 %s",
		e.Name, e.GotSize, e.GotSHA256, e.WantSize, e.WantSHA256)
}

// ErrUnsupported is returned for what this client cannot do, such as
// creating a sandbox without a control plane (a client made with New).
var ErrUnsupported = errors.New("kruntimes: not supported by this client")
