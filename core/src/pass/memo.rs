//! What a pass remembers about each pool whose Runs waited, so that the
//! next one gives a waiting Run a scheduling cycle only when something that
//! could change its answer happened in its pool — the seeds' "a Pod or
//! capacity event wakes only the Pending Runs it concerns".
//!
//! A waiting Run's cycle reads only its own pool's Pods and the Runs they
//! hold (filters, scores, affinity: topology is the Runtime Pod), and its
//! own labels, requests and affinity (the last two immutable). So if a
//! pool's [`fingerprint`] — each Pod's identity, readiness, capacity and
//! holders — is what the last pass left, and every Run waiting in it was
//! already turned away then with the labels it has now (its status says
//! why), the cycles would turn them away again: they are skipped. Anything else wakes the pool: its
//! first pass, a change of its Pods or of the Runs they hold (a Run bound,
//! ended, released; a Pod added, lost, not ready, resized), or a Run that
//! waits there anew.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::scheduler;

/// One pool, as a pass left it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolMemo {
    /// [`fingerprint`] of its Pods after the pass.
    pub fingerprint: u64,
    /// The Runs it turned away as it is now — after the pass's last
    /// reservation there (a Run turned away before another was placed saw
    /// a different pool, and is tried again) —, by UID, with a hash of
    /// their labels ([`labels`]) then.
    pub unplaced: BTreeMap<String, u64>,
}

/// Why a pool's waiting Runs get their cycles in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// No pass remembered it.
    First,
    /// Its Pods, or the Runs they hold, changed.
    Pods,
    /// A Run waits there that the last pass did not turn away.
    Runs,
}

impl Wake {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::First => "first",
            Self::Pods => "pods",
            Self::Runs => "runs",
        }
    }
}

/// What can change a waiting Run's answer in `pool`: each Pod (by name)
/// with its UID, whether it takes Runs, its capacity and the Runs it holds
/// (in any order).
pub(super) fn fingerprint(nodes: &scheduler::Snapshot, pool: &str) -> u64 {
    let mut pods: Vec<&scheduler::Node> = nodes.pool(pool).collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h = DefaultHasher::new();
    for p in pods {
        (&p.name, &p.uid, p.ready, &p.capacity).hash(&mut h);
        let mut holders: Vec<u64> = p
            .holders()
            .iter()
            .map(|holder| {
                let mut hh = DefaultHasher::new();
                holder.hash(&mut hh);
                hh.finish()
            })
            .collect();
        holders.sort_unstable();
        holders.hash(&mut h);
    }
    h.finish()
}

/// A hash of a Run's labels: a waiting Run relabelled may now fit where
/// anti-affinity turned it away.
pub(super) fn labels(labels: &scheduler::Labels) -> u64 {
    let mut h = DefaultHasher::new();
    labels.hash(&mut h);
    h.finish()
}

/// A waiting Run as [`wake`] reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Waiting<'a> {
    /// Its UID.
    pub(super) uid: &'a str,
    /// [`labels`] of it.
    pub(super) labels: u64,
    /// Its status already says why it waits.
    pub(super) says_why: bool,
}

/// Whether `pool`'s waiting Runs get cycles; `None` skips them.
pub(super) fn wake<'a>(
    memo: Option<&PoolMemo>,
    fingerprint: u64,
    mut waiting: impl Iterator<Item = Waiting<'a>>,
) -> Option<Wake> {
    let Some(memo) = memo else {
        return Some(Wake::First);
    };
    if memo.fingerprint != fingerprint {
        return Some(Wake::Pods);
    }
    if waiting.any(|w| !w.says_why || memo.unplaced.get(w.uid) != Some(&w.labels)) {
        return Some(Wake::Runs);
    }
    None
}

/// The memo a pass leaves: for each pool where Runs were turned away, its
/// fingerprint after the pass's reservations and those Runs.
pub(super) fn after(
    nodes: &scheduler::Snapshot,
    unplaced: BTreeMap<String, BTreeMap<String, u64>>,
) -> BTreeMap<String, PoolMemo> {
    unplaced
        .into_iter()
        .filter(|(_, turned_away)| !turned_away.is_empty())
        .map(|(pool, unplaced)| {
            let fingerprint = fingerprint(nodes, &pool);
            (
                pool,
                PoolMemo {
                    fingerprint,
                    unplaced,
                },
            )
        })
        .collect()
}
