//! The public API's one error: [`ApiError`], a stable [`ErrorCode`] and a
//! message, answered alike by the gateway (before it forwards a request)
//! and by runtimed (after). Each code carries its whole contract — HTTP
//! status, whether the client may retry (`Retry-After`), and when it is
//! answered — and docs/api.md's error table is generated from it
//! ([`error_table`]; a test fails when the page is stale).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{PathError, truncate_utf8};

/// Stable error codes of the public API (ARCHITECTURE §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// Path does not name a known API route or has malformed segments.
    InvalidPath,
    /// Body is not valid JSON.
    InvalidJson,
    /// `X-Kruntimes-Invocation-Id` is too long or not printable ASCII.
    InvalidInvocationId,
    /// Other malformed request (headers, content-length).
    BadRequest,
    /// The route exists but not for this method.
    MethodNotAllowed,
    /// Missing, malformed, expired or unknown bearer token.
    Unauthenticated,
    /// Authenticated caller is not allowed to use this Run.
    Forbidden,
    /// Unknown Run UID, or the UID does not belong to that namespace/Runtime.
    NotFound,
    /// Request body over the limit.
    PayloadTooLarge,
    /// Request headers over the limit.
    HeadersTooLarge,
    /// The function already has an in-flight invocation (or a session is at
    /// its running processes).
    Busy,
    /// What the target's state does not allow: input to a session process
    /// whose stdin is closed or that has ended, resizing one without a
    /// terminal.
    Conflict,
    /// Run known but not Ready yet, or between two owners (pending,
    /// registering, recovering): a retry may find it Ready.
    NotReady,
    /// The Run has ended (`Succeeded`, `Timeout`, `Cancelled`) or is
    /// finalizing: it will not serve again.
    RunEnded,
    /// The Run has failed (`Failed`: its registration, its runtime, its
    /// spec): it will not serve again.
    RunFailed,
    /// Owner unreachable, or the table cannot vouch for it any more.
    OwnerUnavailable,
    /// The owner no longer holds this registration (fenced: other Pod or attempt).
    StaleOwner,
    /// The gateway's global in-flight limit is reached.
    Overloaded,
    /// The authentication/authorization backend is unavailable on a cache miss.
    AuthUnavailable,
    /// The handler raised or exited non-zero.
    FunctionError,
    /// The worker process died during the invocation.
    WorkerCrashed,
    /// The handler's output exceeded the output limit or is not JSON.
    InvalidOutput,
    /// The invocation deadline passed; the worker was killed.
    DeadlineExceeded,
    /// The call was sent to the owner and may have run, but no outcome came
    /// back (the Run stopped serving, or the owner's connection broke).
    OutcomeUnknown,
    /// A download's `Range` starts past the artifact's end.
    RangeNotSatisfiable,
    /// The Runtime's artifact store could not be reached (or has no store).
    ArtifactStoreUnavailable,
    /// Unexpected internal failure.
    Internal,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: [ErrorCode; 27] = {
        use ErrorCode::*;
        [
            InvalidPath,
            InvalidJson,
            InvalidInvocationId,
            BadRequest,
            MethodNotAllowed,
            Unauthenticated,
            Forbidden,
            NotFound,
            PayloadTooLarge,
            HeadersTooLarge,
            Busy,
            Conflict,
            NotReady,
            RunEnded,
            RunFailed,
            OwnerUnavailable,
            StaleOwner,
            Overloaded,
            AuthUnavailable,
            FunctionError,
            WorkerCrashed,
            InvalidOutput,
            DeadlineExceeded,
            OutcomeUnknown,
            RangeNotSatisfiable,
            ArtifactStoreUnavailable,
            Internal,
        ]
    };

    /// HTTP status for this code.
    pub fn status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidPath | InvalidJson | InvalidInvocationId | BadRequest => 400,
            MethodNotAllowed => 405,
            Unauthenticated => 401,
            Forbidden => 403,
            NotFound => 404,
            RunFailed | Conflict => 409,
            RunEnded => 410,
            PayloadTooLarge => 413,
            HeadersTooLarge => 431,
            Busy => 429,
            RangeNotSatisfiable => 416,
            NotReady
            | OwnerUnavailable
            | StaleOwner
            | Overloaded
            | AuthUnavailable
            | ArtifactStoreUnavailable => 503,
            FunctionError | WorkerCrashed | InvalidOutput | OutcomeUnknown | Internal => 500,
            DeadlineExceeded => 504,
        }
    }

    /// Seconds a client should wait before trying again, sent as
    /// `Retry-After`; `None`: asking again as it is will not help, or may
    /// run the handler twice.
    pub fn retry_after_secs(self) -> Option<u32> {
        match self.status() {
            429 | 503 => Some(1),
            _ => None,
        }
    }

    /// The code as written on the wire.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidPath => "InvalidPath",
            InvalidJson => "InvalidJson",
            InvalidInvocationId => "InvalidInvocationId",
            BadRequest => "BadRequest",
            MethodNotAllowed => "MethodNotAllowed",
            Unauthenticated => "Unauthenticated",
            Forbidden => "Forbidden",
            NotFound => "NotFound",
            PayloadTooLarge => "PayloadTooLarge",
            HeadersTooLarge => "HeadersTooLarge",
            Busy => "Busy",
            Conflict => "Conflict",
            NotReady => "NotReady",
            RunEnded => "RunEnded",
            RunFailed => "RunFailed",
            OwnerUnavailable => "OwnerUnavailable",
            StaleOwner => "StaleOwner",
            Overloaded => "Overloaded",
            AuthUnavailable => "AuthUnavailable",
            FunctionError => "FunctionError",
            WorkerCrashed => "WorkerCrashed",
            InvalidOutput => "InvalidOutput",
            DeadlineExceeded => "DeadlineExceeded",
            OutcomeUnknown => "OutcomeUnknown",
            RangeNotSatisfiable => "RangeNotSatisfiable",
            ArtifactStoreUnavailable => "ArtifactStoreUnavailable",
            Internal => "Internal",
        }
    }

    /// When the code is answered, for the people reading docs/api.md
    /// (Markdown, one line).
    pub fn description(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidPath => {
                "the path is not an API route, or a segment is malformed (namespace/runtime not DNS-1123 labels, UID not lowercase hex and dashes)"
            }
            InvalidJson => {
                "the body is not JSON, or the Runtime Server refused the input (a NUL byte, which no JSON document holds)"
            }
            InvalidInvocationId => {
                "`X-Kruntimes-Invocation-Id` is empty, longer than 128 bytes or not visible ASCII"
            }
            BadRequest => {
                "unparsable `Content-Length`, missing fencing headers (runtimed), a malformed session operation"
            }
            MethodNotAllowed => "a route called with a method it does not take (invoke: POST)",
            Unauthenticated => {
                "missing, malformed, foreign-signed, expired or not-yet-valid token; in Kubernetes mode, a token the cluster's `TokenReview` does not accept (see [security.md](security.md#kubernetes-mode))"
            }
            Forbidden => {
                "authenticated, but the policy (embedded mode) or RBAC (`create` on `runs/invoke` or `runs/session`, `get` on `runs/artifacts`, Kubernetes mode) does not allow this Run"
            }
            NotFound => {
                "unknown Run UID, or the UID is not of that namespace/Runtime (artifacts: also a name the Run's artifacts do not have, or a Runtime without an artifact store; sessions: also a workspace file, or an operation `operations:cancel` names that is not queued or running). Answered to an authenticated caller after waiting up to `--route-settle-ms` (250 ms) for the gateway's table to learn the UID: a Run just created may be `Ready` in its status before the control plane's word on it reaches the gateway"
            }
            PayloadTooLarge => {
                "body over 1 MiB — answered before anything reaches runtimed (`Content-Length`), or cut off while streaming. The gateway then reads and drops the rest of the body (at most 10 s), so a client still sending reads the 413 instead of a reset (`Expect: 100-continue` clients are not asked to send; their connection is closed)"
            }
            HeadersTooLarge => "request headers over 16 KiB",
            Busy => {
                "the function already has an in-flight invocation (one at a time per function Run; a call whose caller went away no longer counts); a session's queue is full, or 64 of its background processes already run"
            }
            Conflict => {
                "what the session process's state does not allow: input after its stdin was closed (or when it was started without `stdin`), input, signals or a resize after it ended, a resize of a process without a terminal; the message says which"
            }
            NotReady => {
                "the Run exists but is not Ready yet: pending (the message gives the reason, e.g. `NoIdlePod`), registering, between two owners, or its Runtime Server does not answer. The call did not run. A Run that is registering, or Ready with its owner's readiness not yet at the gateway, is first waited for up to `--route-settle-ms` (250 ms)"
            }
            RunEnded => {
                "the Run has ended (`Succeeded`, `Timeout` — e.g. `IdleTimeout` —, `Cancelled`) or is `Finalizing`, and answers this until it is deleted. The call did not run and never will on this Run: create a new one. `phase` and `reason` in the body, the Run's status message in `message`"
            }
            RunFailed => {
                "the Run has failed (`Failed`: e.g. `RegistrationFailed` for a handler that does not load, `RuntimeFailed`, `InvalidSpec`) and answers this until it is deleted. The call did not run; fix the cause in the message (the Run's status message) and create the Run again. `phase` and `reason` in the body"
            }
            OwnerUnavailable => {
                "the owner is unreachable, or its table entry is past the staleness window"
            }
            StaleOwner => {
                "the owner no longer holds this registration (other Pod or attempt); the message says what did not match"
            }
            Overloaded => {
                "the gateway's in-flight limit is reached (counted for authorized requests only: unauthenticated callers get their 401 first)"
            }
            AuthUnavailable => {
                "the authentication backend (Kubernetes mode: the API server) failed or timed out on a cache miss, or too many misses were waiting for it (fail closed)"
            }
            FunctionError => {
                "the handler raised (Python: `Type: message`) or exited non-zero (Bash: exit status and stderr tail)"
            }
            WorkerCrashed => {
                "the worker died during the call, or broke its protocol; the next call gets a fresh worker"
            }
            InvalidOutput => {
                "the output exceeds 1 MiB or is not JSON-serializable, or the files the invocation left in its artifacts directory could not be exported (one that cannot be an artifact, named; or the store did not take them in time)"
            }
            DeadlineExceeded => {
                "the invocation timeout passed; the handler's whole process tree was killed"
            }
            OutcomeUnknown => {
                "the call was sent to the owner and may have run, but no outcome came back: the Run was deleted, terminated or drained while the handler ran, or the connection to the owner broke after the request was sent. Retry only what is safe to run twice"
            }
            RangeNotSatisfiable => {
                "an artifact download's `Range` starts at or past the artifact's end (`Content-Range: bytes */SIZE` tells the size)"
            }
            ArtifactStoreUnavailable => {
                "the Runtime's artifact store did not answer (or refused runtimed's credentials) while listing or reading artifacts; nothing was lost, ask again"
            }
            Internal => {
                "a fault of kruntimes itself, never of the caller or the handler; the message says where"
            }
        }
    }
}

/// docs/api.md's error table: one row per code, by status, from the codes
/// themselves.
pub fn error_table() -> String {
    let mut codes = ErrorCode::ALL.to_vec();
    codes.sort_by_key(|c| c.status());
    let mut out = String::from("| Status | Code | Retry | When |\n| --- | --- | --- | --- |\n");
    for c in codes {
        let retry = match c.retry_after_secs() {
            Some(s) => format!("`Retry-After: {s}`"),
            None => "no".to_owned(),
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            c.status(),
            c.as_str(),
            retry,
            c.description()
        ));
    }
    out
}

/// A refused API request: a stable code and a message for people (never a
/// token or a payload). The gateway answers it before forwarding a
/// request, runtimed after; both render it as the same JSON body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    /// Stable code; it decides the status and `Retry-After`.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: Cow<'static, str>,
    /// The Run's phase and reason, when the answer is about its state
    /// (`RunEnded`, `RunFailed`, `NotReady`).
    pub run: Option<RunState>,
}

/// A Run's phase and reason, as an error answer carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunState {
    /// `status.phase`.
    pub phase: String,
    /// `status.reason` (may be empty).
    pub reason: String,
}

impl ApiError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            message: message.into(),
            run: None,
        }
    }

    /// The error with the Run's phase and reason (empty ones are left out
    /// of the body).
    pub fn with_run_state(mut self, phase: impl Into<String>, reason: impl Into<String>) -> Self {
        self.run = Some(RunState {
            phase: phase.into(),
            reason: reason.into(),
        });
        self
    }

    /// HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// The JSON body for a request with `invocation_id` (when known).
    pub fn body(&self, invocation_id: Option<&str>) -> ErrorBody {
        let mut body = ErrorBody::new(self.code, self.message.as_ref(), invocation_id);
        if let Some(run) = &self.run {
            let some = |s: &str| (!s.is_empty()).then(|| truncate_utf8(s.to_owned(), 64));
            body.error.phase = some(&run.phase);
            body.error.reason = some(&run.reason);
        }
        body
    }

    /// No such Run UID, or not one of that namespace/Runtime (404).
    pub fn unknown_run() -> Self {
        Self::new(
            ErrorCode::NotFound,
            "no such run in this namespace and runtime",
        )
    }

    /// A path the API knows that is not a Run route (400).
    pub fn not_a_run_route() -> Self {
        Self::new(ErrorCode::InvalidPath, "not a Run route")
    }

    /// The route exists for another method (405).
    pub fn method_not_allowed(expected: &str) -> Self {
        Self::new(
            ErrorCode::MethodNotAllowed,
            format!("this route takes {expected}"),
        )
    }

    /// Authentication is on and the request carries no bearer token (401).
    pub fn missing_token() -> Self {
        Self::new(ErrorCode::Unauthenticated, "missing bearer token")
    }

    /// The credential was rejected, for a reason safe to show (401).
    pub fn unauthenticated(why: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::Unauthenticated, why)
    }

    /// `subject` is authenticated but may not use the subresource `verb`
    /// of Runs of `namespace` (403).
    pub fn forbidden(subject: &str, verb: &str, namespace: &str) -> Self {
        Self::new(
            ErrorCode::Forbidden,
            format!("{subject} may not use runs/{verb} of this run in namespace {namespace}"),
        )
    }

    /// The UID names a Run of the other mode than the route (404).
    pub fn wrong_mode(uid: &str, session: bool) -> Self {
        let kind = if session { "session" } else { "function" };
        Self::new(
            ErrorCode::NotFound,
            format!("run {uid} is not a {kind} run"),
        )
    }
}

impl From<PathError> for ApiError {
    fn from(e: PathError) -> Self {
        Self::new(ErrorCode::InvalidPath, e.to_string())
    }
}

/// Longest error message put on the wire, in bytes.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 2048;

/// `{"error": {...}}`, the body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error itself.
    pub error: ErrorDetail,
}

/// The fields of an error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// Stable code.
    pub code: ErrorCode,
    /// Bounded human-readable message.
    pub message: String,
    /// Invocation id of the request, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// The Run's `status.phase`, when the error is about its state
    /// (`RunEnded`, `RunFailed`, and `NotReady` for a pending Run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The Run's `status.reason`, with `phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ErrorBody {
    /// Builds an error body, truncating the message on a char boundary.
    pub fn new(code: ErrorCode, message: impl Into<String>, invocation_id: Option<&str>) -> Self {
        Self {
            error: ErrorDetail {
                code,
                message: truncate_utf8(message.into(), MAX_ERROR_MESSAGE_BYTES),
                invocation_id: invocation_id.map(str::to_owned),
                phase: None,
                reason: None,
            },
        }
    }

    /// Serialized JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing a struct of strings into a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
