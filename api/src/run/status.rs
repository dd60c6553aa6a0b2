//! `status` of a Run, written by the control plane and the Run's owner.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kruntimes_core::lifecycle::{Life, Phase, Reason};

use super::Run;

/// `status` of a Run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Machine-readable reason of the phase (for example `IdleTimeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub reason: Option<String>,
    /// Human-readable, bounded message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
    /// Name of the Pod that owns the Run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub assigned_pod: Option<String>,
    /// UID of that Pod at assignment: a new Pod of the same name is not the owner.
    #[serde(
        default,
        rename = "assignedPodUID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    pub assigned_pod_uid: Option<String>,
    /// Registration attempt: how many times the Run was assigned to a Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    /// Where to invoke the Run (function Runs) or reach it (session Runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,
    /// Conditions (`Ready`, written by the owner).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
    /// When the Run was assigned to its current Pod (written with the
    /// assignment): its registration deadline counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_time: Option<Time>,
    /// When the Run started on its Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the Run reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// How a task Run's process ended (task Runs, once it has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskStatus>,
    /// What the Run left in its artifacts directory, uploaded to its
    /// Runtime's artifact store (at most 100; the gateway's artifacts route
    /// lists them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub artifacts: Vec<crate::ArtifactRef>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl RunStatus {
    /// The life it records: phase, a reason this version knows, attempt.
    pub fn life(&self) -> Life {
        Life {
            phase: self.phase.unwrap_or(Phase::Pending),
            reason: self.reason.as_deref().and_then(Reason::parse),
            attempt: self.attempt.unwrap_or(0).max(0) as u64,
        }
    }
}

/// `status.task`: a task's result, bounded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The attempt that ran.
    pub attempt: i64,
    /// Its exit code (`128 + N` when signal N ended it).
    pub exit_code: i32,
    /// The last 4 KiB of its stdout (UTF-8; a character cut by the bound
    /// is left out).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub stdout_tail: String,
    /// The last 4 KiB of its stderr.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub stderr_tail: String,
    /// More stdout was written than the tail holds (the Run's log has it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdout_truncated: bool,
    /// More stderr was written than the tail holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stderr_truncated: bool,
    /// When its process started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When its process ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// Bytes of each stream a task's status keeps.
pub const TASK_TAIL_BYTES: usize = 4096;

/// The end of `s` in at most `max` bytes, cut at a character boundary.
pub fn tail_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

impl TaskStatus {
    /// The status of a task as its owner published it (`None` before it
    /// ended). Tails are bounded again: a custom Runtime Server may send
    /// more.
    pub fn of(outcome: &kruntimes_proto::ownership::v1::TaskOutcome, attempt: u64) -> Option<Self> {
        if !outcome.ended {
            return None;
        }
        let time = |ms: i64| {
            (ms > 0)
                .then(|| k8s_openapi::jiff::Timestamp::from_millisecond(ms).ok())
                .flatten()
                .map(Time)
        };
        let clip = |s: &str| tail_utf8(s, TASK_TAIL_BYTES).to_owned();
        Some(Self {
            attempt: i64::try_from(attempt).unwrap_or(i64::MAX),
            exit_code: outcome.exit_code,
            stdout_truncated: outcome.stdout_truncated
                || outcome.stdout_tail.len() > TASK_TAIL_BYTES,
            stderr_truncated: outcome.stderr_truncated
                || outcome.stderr_tail.len() > TASK_TAIL_BYTES,
            stdout_tail: clip(&outcome.stdout_tail),
            stderr_tail: clip(&outcome.stderr_tail),
            started_at: time(outcome.started_unix_ms),
            finished_at: time(outcome.finished_unix_ms),
        })
    }
}

/// `status.endpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// `HTTPS` or `HTTP`.
    pub protocol: String,
    /// The public URL of the Run on the gateway.
    #[schemars(length(max = 2048))]
    pub url: String,
    /// Base64 PEM bundle of the CA that signs the gateway's certificate
    /// (public; read from a ConfigMap, never from a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16384))]
    pub ca_bundle: Option<String>,
}

impl Endpoint {
    /// The endpoint of a Run on the gateway at `gateway_url`
    /// (`https://host[:port]`): the invoke URL of a function Run, the
    /// session URL of a session Run.
    pub fn new(gateway_url: &str, run: &Run, ca_bundle: Option<String>) -> Self {
        Self::at(gateway_url, &run.public_path(), ca_bundle)
    }

    /// The endpoint at `path` (a Run's [`Run::public_path`]) of the gateway
    /// at `gateway_url`.
    pub fn at(gateway_url: &str, path: &str, ca_bundle: Option<String>) -> Self {
        let base = gateway_url.trim_end_matches('/');
        Self {
            protocol: if base.starts_with("http://") {
                "HTTP".into()
            } else {
                "HTTPS".into()
            },
            url: format!("{base}{path}"),
            ca_bundle,
        }
    }
}

#[cfg(test)]
mod task_tests {
    use super::*;
    use kruntimes_proto::ownership::v1::TaskOutcome;

    #[test]
    fn a_tail_is_cut_at_a_character_boundary() {
        assert_eq!(tail_utf8("abc", 8), "abc");
        assert_eq!(tail_utf8("aé€", 4), "€");
        assert_eq!(tail_utf8("aé€", 5), "é€");
        assert_eq!(tail_utf8("", 0), "");
    }

    #[test]
    fn only_an_ended_task_has_a_status_and_it_is_bounded() {
        let mut o = TaskOutcome {
            exit_code: 3,
            stdout_tail: "é".repeat(3000),
            stderr_tail: "oops\n".into(),
            started_unix_ms: 1_700_000_000_000,
            finished_unix_ms: 1_700_000_000_250,
            ..Default::default()
        };
        assert_eq!(TaskStatus::of(&o, 1), None);
        o.ended = true;
        let t = TaskStatus::of(&o, 2).unwrap();
        assert_eq!((t.attempt, t.exit_code), (2, 3));
        assert_eq!(t.stdout_tail.len(), TASK_TAIL_BYTES);
        assert!(t.stdout_truncated && !t.stderr_truncated);
        assert_eq!(t.stderr_tail, "oops\n");
        let (a, b) = (
            t.started_at.clone().unwrap(),
            t.finished_at.clone().unwrap(),
        );
        assert_eq!(b.0.as_millisecond() - a.0.as_millisecond(), 250);
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["exitCode"], 3);
        assert!(v.get("stderrTruncated").is_none());
    }
}
