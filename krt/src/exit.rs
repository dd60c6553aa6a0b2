//! krt's exit codes: 1 for a failure outside the API (usage, I/O, the API
//! server), 9 for an HTTP error without a kruntimes error body, and one code
//! per API error code from 10 up, so scripts can tell `Busy` from
//! `NotFound` without parsing text.

use kruntimes_client::ApiError;
use kruntimes_proto::api::ErrorCode;

/// Exit code of a failure outside the API (usage, I/O, the API server).
pub const EXIT_LOCAL: i32 = 1;
/// Exit code of an HTTP error without a kruntimes error body.
pub const EXIT_HTTP: i32 = 9;

/// The exit code of each API error code (10 and up; codes added later
/// take the next free number, so a script's numbers never change).
pub fn exit_code(code: ErrorCode) -> i32 {
    use ErrorCode::*;
    match code {
        InvalidPath => 10,
        InvalidJson => 11,
        InvalidInvocationId => 12,
        BadRequest => 13,
        MethodNotAllowed => 14,
        Unauthenticated => 15,
        Forbidden => 16,
        NotFound => 17,
        PayloadTooLarge => 18,
        HeadersTooLarge => 19,
        Busy => 20,
        NotReady => 21,
        OwnerUnavailable => 22,
        StaleOwner => 23,
        Overloaded => 24,
        AuthUnavailable => 25,
        FunctionError => 26,
        WorkerCrashed => 27,
        InvalidOutput => 28,
        DeadlineExceeded => 29,
        Internal => 30,
        RunEnded => 31,
        RunFailed => 32,
        OutcomeUnknown => 33,
        RangeNotSatisfiable => 34,
        ArtifactStoreUnavailable => 35,
        Conflict => 36,
    }
}

/// The exit code of an answered error.
pub fn of_api_error(e: &ApiError) -> i32 {
    e.code.map_or(EXIT_HTTP, exit_code)
}

/// Prints `e` and returns the exit code it maps to.
pub fn report(e: &anyhow::Error) -> i32 {
    eprintln!("error: {e:#}");
    e.downcast_ref::<kruntimes_client::Error>()
        .and_then(kruntimes_client::Error::api)
        .map_or(EXIT_LOCAL, of_api_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16, code: Option<ErrorCode>) -> ApiError {
        ApiError {
            status,
            code,
            message: "m".into(),
            invocation_id: None,
        }
    }

    #[test]
    fn every_error_code_has_its_own_exit_code() {
        let all = ErrorCode::ALL;
        let codes: std::collections::BTreeSet<i32> = all.iter().map(|c| exit_code(*c)).collect();
        assert_eq!(codes.len(), all.len());
        assert!(
            codes
                .iter()
                .all(|c| *c >= 10 && *c != EXIT_LOCAL && *c != EXIT_HTTP)
        );
    }

    #[test]
    fn local_failures_exit_1_and_api_errors_their_code() {
        assert_eq!(report(&anyhow::anyhow!("no such file")), EXIT_LOCAL);
        let e = anyhow::Error::from(kruntimes_client::Error::Api(answered(
            404,
            Some(ErrorCode::NotFound),
        )))
        .context("invoke default/x");
        assert_eq!(report(&e), 17);
        let busy = kruntimes_client::Error::Api(answered(429, Some(ErrorCode::Busy)));
        assert_eq!(report(&anyhow::Error::from(busy)), 20);
        let plain = kruntimes_client::Error::Api(answered(502, None));
        assert_eq!(report(&anyhow::Error::from(plain)), EXIT_HTTP);
    }
}
