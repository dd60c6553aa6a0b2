//! What an operation ends with (the unary result, the `completed` event) and
//! the events `operations:stream` sends. Pure wire shapes.

use serde::{Deserialize, Serialize};

/// Terminal state of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpState {
    /// Completed; commands exited 0.
    Succeeded,
    /// Command exited non-zero, or a file operation failed.
    Failed,
    /// Cancelled (session closed).
    Cancelled,
    /// The timeout killed the command.
    TimedOut,
}

/// Result of one operation (the unary response and the `completed` event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationResult {
    /// Operation id.
    pub operation_id: String,
    /// Terminal state.
    pub state: OpState,
    /// Exit code (commands that exited).
    pub exit_code: Option<i32>,
    /// Captured stdout (lossy UTF-8, bounded).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8, bounded).
    pub stderr: String,
    /// Whether stdout was cut at the bound.
    pub stdout_truncated: bool,
    /// Whether stderr was cut at the bound.
    pub stderr_truncated: bool,
    /// Wall time.
    pub duration_ms: u64,
    /// Why a file operation failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The pid of a started background process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The Runtime Server's refusal of a process start, as the API answers
    /// it (never serialized: the start route answers with it).
    #[serde(skip)]
    pub refusal: Option<kruntimes_proto::api::ApiError>,
}

impl OperationResult {
    /// A result without output.
    pub fn bare(
        operation_id: &str,
        state: OpState,
        duration_ms: u64,
        error: Option<String>,
    ) -> Self {
        Self {
            operation_id: operation_id.to_owned(),
            state,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration_ms,
            error,
            pid: None,
            refusal: None,
        }
    }
}

/// A streamed event (`operations:stream`, one JSON object per line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Event {
    /// Admitted to the queue.
    #[serde(rename_all = "camelCase")]
    Accepted {
        /// Strictly increasing per stream.
        sequence: u64,
        /// Operation id.
        operation_id: String,
    },
    /// Output bytes.
    Output {
        /// Strictly increasing per stream.
        sequence: u64,
        /// `stdout` or `stderr`.
        stream: String,
        /// Lossy UTF-8 text.
        data: String,
    },
    /// Finished (any terminal state).
    Completed {
        /// Strictly increasing per stream.
        sequence: u64,
        /// The result.
        #[serde(flatten)]
        result: OperationResult,
    },
    /// The stream broke after it started.
    Failed {
        /// Strictly increasing per stream.
        sequence: u64,
        /// Error body.
        error: serde_json::Value,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_with_type_and_sequence() {
        let e = Event::Output {
            sequence: 2,
            stream: "stdout".into(),
            data: "x".into(),
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"type": "output", "sequence": 2, "stream": "stdout", "data": "x"})
        );
        let done = Event::Completed {
            sequence: 3,
            result: OperationResult::bare("op-1", OpState::Succeeded, 5, None),
        };
        let v = serde_json::to_value(&done).unwrap();
        assert_eq!(v["type"], "completed");
        assert_eq!(v["operationId"], "op-1");
        assert_eq!(v["state"], "Succeeded");
    }
}
