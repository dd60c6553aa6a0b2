//! Which Runs' artifacts go: retention and the orphan sweep, decided once
//! for both control planes. Pure.
//!
//! A Run's artifacts are deleted when its Runtime's retention
//! (`retainAfterRunSeconds`) has passed since it ended, and when the Run
//! no longer exists — noticed by a sweep that compares what the store holds
//! with the Runs the control plane knows. A Run deleted is never waited
//! for: its deletion is never blocked by the store, and the sweep removes
//! its artifacts afterwards (retried on every sweep while the store fails).
//! A UID the control plane does not know must be missing for a grace
//! period first: a Run created a moment ago, or a control plane whose view
//! is not yet complete, never loses what was just exported.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// A Run the control plane knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    /// Its namespace.
    pub namespace: String,
    /// How long ago it ended (`None`: it has not).
    pub ended_for: Option<Duration>,
    /// Its Runtime's retention (`None`: until the Run is deleted).
    pub retain: Option<Duration>,
}

/// Whether a Run that ended `ended_for` ago has outlived `retain` (never
/// while it runs, never without a retention).
pub fn expired(ended_for: Option<Duration>, retain: Option<Duration>) -> bool {
    matches!((ended_for, retain), (Some(ended), Some(retain)) if ended >= retain)
}

/// Why a Run's artifacts are deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Why {
    /// Its Runtime's retention passed.
    Expired,
    /// The Run is gone.
    Orphaned,
}

impl Why {
    /// For logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Orphaned => "orphaned",
        }
    }
}

/// The sweep's memory between passes: since when each stored UID has been
/// unknown to the control plane.
#[derive(Debug, Default, Clone)]
pub struct Sweep {
    missing_since: BTreeMap<String, Instant>,
}

impl Sweep {
    /// The Runs whose artifacts go now, given what the store holds
    /// (`(namespace, uid)`), the Runs the control plane knows (by UID), the
    /// namespaces whose Runs could not be listed this time (`unlisted`:
    /// nothing of theirs goes, and their UIDs keep the time they have been
    /// missing), and the grace an unknown UID is given. Expired Runs are
    /// listed only if the store lists them.
    pub fn plan(
        &mut self,
        stored: &[(String, String)],
        live: &BTreeMap<String, Live>,
        unlisted: &BTreeSet<String>,
        grace: Duration,
        now: Instant,
    ) -> Vec<(String, String, Why)> {
        let mut out = Vec::new();
        let mut still_missing = BTreeSet::new();
        for (ns, uid) in stored {
            if unlisted.contains(ns) {
                if self.missing_since.contains_key(uid) {
                    still_missing.insert(uid.clone());
                }
                continue;
            }
            match live.get(uid) {
                Some(l) if l.namespace == *ns => {
                    if expired(l.ended_for, l.retain) {
                        out.push((ns.clone(), uid.clone(), Why::Expired));
                    }
                }
                // Unknown (or known in another namespace: not this one's).
                _ => {
                    let since = *self.missing_since.entry(uid.clone()).or_insert(now);
                    still_missing.insert(uid.clone());
                    if now.duration_since(since) >= grace {
                        out.push((ns.clone(), uid.clone(), Why::Orphaned));
                    }
                }
            }
        }
        // A UID no longer stored, or known again, starts over.
        self.missing_since
            .retain(|uid, _| still_missing.contains(uid));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(n, u)| (n.to_string(), u.to_string()))
            .collect()
    }

    fn live(ns: &str, ended_for: Option<u64>, retain: Option<u64>) -> Live {
        Live {
            namespace: ns.into(),
            ended_for: ended_for.map(Duration::from_secs),
            retain: retain.map(Duration::from_secs),
        }
    }

    const GRACE: Duration = Duration::from_secs(60);

    fn none_unlisted() -> BTreeSet<String> {
        BTreeSet::new()
    }

    #[test]
    fn a_namespace_not_listed_loses_nothing_and_keeps_its_timers() {
        let t0 = Instant::now();
        let mut sweep = Sweep::default();
        let s = stored(&[("a", "gone"), ("b", "other")]);
        let none = BTreeMap::new();
        let a = BTreeSet::from(["a".to_string()]);
        sweep.plan(&s, &none, &none_unlisted(), GRACE, t0);
        // `a` unlisted past the grace: nothing of it goes, `b`'s goes.
        assert_eq!(
            sweep.plan(&s, &none, &a, GRACE, t0 + GRACE),
            vec![("b".into(), "other".into(), Why::Orphaned)]
        );
        // Listed again: its UID has been missing since t0, so it goes now.
        assert_eq!(
            sweep.plan(&s, &none, &none_unlisted(), GRACE, t0 + GRACE),
            vec![
                ("a".into(), "gone".into(), Why::Orphaned),
                ("b".into(), "other".into(), Why::Orphaned)
            ]
        );
        // A UID first seen while its namespace is unlisted starts no timer.
        let mut fresh = Sweep::default();
        fresh.plan(&stored(&[("a", "new")]), &none, &a, GRACE, t0);
        assert!(
            fresh
                .plan(
                    &stored(&[("a", "new")]),
                    &none,
                    &none_unlisted(),
                    GRACE,
                    t0 + GRACE
                )
                .is_empty()
        );
    }

    #[test]
    fn retention_deletes_only_what_ended_long_enough_ago() {
        let t0 = Instant::now();
        let runs = BTreeMap::from([
            ("running".to_string(), live("a", None, Some(10))),
            ("young".to_string(), live("a", Some(9), Some(10))),
            ("due".to_string(), live("a", Some(10), Some(10))),
            ("kept".to_string(), live("a", Some(99_999), None)),
        ]);
        let s = stored(&[
            ("a", "running"),
            ("a", "young"),
            ("a", "due"),
            ("a", "kept"),
        ]);
        assert_eq!(
            Sweep::default().plan(&s, &runs, &none_unlisted(), GRACE, t0),
            vec![("a".into(), "due".into(), Why::Expired)]
        );
    }

    #[test]
    fn an_unknown_uid_goes_only_once_missing_for_the_grace() {
        let t0 = Instant::now();
        let mut sweep = Sweep::default();
        let s = stored(&[("a", "gone")]);
        let none = BTreeMap::new();
        assert!(
            sweep
                .plan(&s, &none, &none_unlisted(), GRACE, t0)
                .is_empty(),
            "first seen"
        );
        assert!(
            sweep
                .plan(
                    &s,
                    &none,
                    &none_unlisted(),
                    GRACE,
                    t0 + Duration::from_secs(59)
                )
                .is_empty()
        );
        assert_eq!(
            sweep.plan(&s, &none, &none_unlisted(), GRACE, t0 + GRACE),
            vec![("a".into(), "gone".into(), Why::Orphaned)]
        );
    }

    #[test]
    fn a_uid_known_again_or_no_longer_stored_starts_over() {
        let t0 = Instant::now();
        let mut sweep = Sweep::default();
        let s = stored(&[("a", "u")]);
        let none = BTreeMap::new();
        sweep.plan(&s, &none, &none_unlisted(), GRACE, t0);
        // The control plane's view caught up: it exists.
        let known = BTreeMap::from([("u".to_string(), live("a", None, None))]);
        assert!(
            sweep
                .plan(&s, &known, &none_unlisted(), GRACE, t0 + GRACE)
                .is_empty()
        );
        // Unknown again: the grace counts from now.
        assert!(
            sweep
                .plan(&s, &none, &none_unlisted(), GRACE, t0 + GRACE)
                .is_empty()
        );
        assert_eq!(
            sweep
                .plan(&s, &none, &none_unlisted(), GRACE, t0 + GRACE * 2)
                .len(),
            1
        );
        // Deleted by someone else: forgotten.
        sweep.plan(&[], &none, &none_unlisted(), GRACE, t0 + GRACE * 3);
        assert!(
            sweep
                .plan(&s, &none, &none_unlisted(), GRACE, t0 + GRACE * 3)
                .is_empty()
        );
    }

    #[test]
    fn a_uid_known_in_another_namespace_is_an_orphan_here() {
        let t0 = Instant::now();
        let mut sweep = Sweep::default();
        let runs = BTreeMap::from([("u".to_string(), live("b", None, None))]);
        let s = stored(&[("a", "u")]);
        sweep.plan(&s, &runs, &none_unlisted(), GRACE, t0);
        assert_eq!(
            sweep.plan(&s, &runs, &none_unlisted(), GRACE, t0 + GRACE),
            vec![("a".into(), "u".into(), Why::Orphaned)]
        );
    }
}
