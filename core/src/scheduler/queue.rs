//! The order in which waiting Runs get their cycle: higher priority first,
//! with aging so a low-priority Run is not starved forever; within a
//! priority sessions first (a session needs a whole idle Pod, which a
//! shared Run placed before it would take), then oldest first, then by key.
//! There is no preemption: priority orders the queue, it never evicts.

use std::cmp::Reverse;
use std::time::Duration;

/// Lowest `spec.priority`.
pub const MIN_PRIORITY: i32 = -1000;
/// Highest `spec.priority`.
pub const MAX_PRIORITY: i32 = 1000;
/// Waiting time that raises a Run's effective priority by one.
pub const AGING_STEP: Duration = Duration::from_secs(10);
/// The highest priority anyone may give a Run; above it, the chart's
/// admission policy asks for the priority group
/// (`charts/kruntimes/files/run-priority-policy.yaml`).
pub const OPEN_PRIORITY: i32 = 100;

/// `spec.priorityClassName`: a named priority instead of a number — `low`
/// (−500), `normal` (0), `high` (500), `critical` (1000); not with
/// `spec.priority`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PriorityClass {
    /// −500: batch work that may wait.
    Low,
    /// 0: the default.
    Normal,
    /// 500: placed before normal work (needs the priority group).
    High,
    /// 1000: placed first (needs the priority group).
    Critical,
}

impl PriorityClass {
    /// Every class, lowest first.
    pub const ALL: [PriorityClass; 4] = [Self::Low, Self::Normal, Self::High, Self::Critical];

    /// The priority it stands for.
    pub fn value(self) -> i32 {
        match self {
            Self::Low => -500,
            Self::Normal => 0,
            Self::High => 500,
            Self::Critical => MAX_PRIORITY,
        }
    }

    /// Its name in a manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Normal => "normal",
            Self::High => "high",
            Self::Critical => "critical",
        }
    }
}

/// What orders one waiting Run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueKey<'a> {
    /// `spec.priority` (clamped to the bounds).
    pub priority: i32,
    /// How long it has waited.
    pub waited: Duration,
    /// A session.
    pub exclusive: bool,
    /// Creation order (smaller is older).
    pub created: u64,
    /// A unique key (namespace/name or UID).
    pub key: &'a str,
}

/// The priority a Run is queued at after waiting `waited`: its own, plus
/// one per [`AGING_STEP`], never above [`MAX_PRIORITY`].
pub fn effective_priority(priority: i32, waited: Duration) -> i32 {
    let aged = waited.as_secs() / AGING_STEP.as_secs();
    let base = priority.clamp(MIN_PRIORITY, MAX_PRIORITY);
    i32::try_from(i64::from(base) + aged.min(u64::from(u32::MAX)) as i64)
        .unwrap_or(MAX_PRIORITY)
        .min(MAX_PRIORITY)
}

/// The indices of `keys` in queue order.
pub fn order(keys: &[QueueKey<'_>]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..keys.len()).collect();
    idx.sort_by_key(|i| {
        let k = &keys[*i];
        (
            Reverse(effective_priority(k.priority, k.waited)),
            !k.exclusive,
            k.created,
            k.key,
        )
    });
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(key: &str, priority: i32, waited: u64, exclusive: bool, created: u64) -> QueueKey<'_> {
        QueueKey {
            priority,
            waited: Duration::from_secs(waited),
            exclusive,
            created,
            key,
        }
    }

    #[test]
    fn higher_priority_first_then_sessions_then_oldest() {
        let keys = [
            key("old-fn", 0, 0, false, 1),
            key("new-fn", 0, 0, false, 2),
            key("session", 0, 0, true, 3),
            key("urgent", 10, 0, false, 4),
            key("low", -5, 0, true, 0),
        ];
        let names: Vec<&str> = order(&keys).into_iter().map(|i| keys[i].key).collect();
        assert_eq!(names, ["urgent", "session", "old-fn", "new-fn", "low"]);
    }

    #[test]
    fn waiting_raises_priority_so_nothing_starves() {
        assert_eq!(effective_priority(0, Duration::from_secs(9)), 0);
        assert_eq!(effective_priority(0, Duration::from_secs(10)), 1);
        assert_eq!(effective_priority(-1000, Duration::from_secs(3600)), -640);
        assert_eq!(
            effective_priority(999, Duration::from_secs(1000)),
            MAX_PRIORITY
        );
        assert_eq!(effective_priority(i32::MAX, Duration::ZERO), MAX_PRIORITY);
        assert_eq!(effective_priority(i32::MIN, Duration::ZERO), MIN_PRIORITY);
        assert_eq!(effective_priority(0, Duration::MAX), MAX_PRIORITY);
        // A low-priority Run that waited 110 s overtakes a fresh one 10 above.
        let keys = [
            key("fresh", 10, 0, false, 2),
            key("starving", 0, 110, false, 1),
        ];
        assert_eq!(order(&keys), [1, 0]);
    }

    #[test]
    fn ties_are_broken_by_key_deterministically() {
        let keys = [key("b", 0, 0, false, 1), key("a", 0, 0, false, 1)];
        assert_eq!(order(&keys), [1, 0]);
    }

    #[test]
    fn named_classes_stand_for_numbers_within_the_bounds() {
        let values: Vec<i32> = PriorityClass::ALL.iter().map(|c| c.value()).collect();
        assert_eq!(values, [-500, 0, 500, 1000]);
        assert!(values.windows(2).all(|w| w[0] < w[1]), "ordered");
        for c in PriorityClass::ALL {
            assert!((MIN_PRIORITY..=MAX_PRIORITY).contains(&c.value()));
            let json = format!("\"{}\"", c.as_str());
            assert_eq!(serde_json::from_str::<PriorityClass>(&json).unwrap(), c);
        }
        // Only the classes above the open band need the priority group.
        let gated: Vec<&str> = PriorityClass::ALL
            .iter()
            .filter(|c| c.value() > OPEN_PRIORITY)
            .map(|c| c.as_str())
            .collect();
        assert_eq!(gated, ["high", "critical"]);
    }
}
