//! The default plugins. Each is a small type: one rule, its own tests.

use super::{Candidate, CycleState, Filter, Node, Rejected, Rejection, Resources, Score};

/// Filter: the Pod is ready, not held by a session, has a free run slot,
/// and is idle when the candidate is a session.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimePodAvailability;

impl Filter for RuntimePodAvailability {
    fn name(&self) -> &'static str {
        "RuntimePodAvailability"
    }

    fn filter(&self, run: &Candidate<'_>, _: &CycleState, node: &Node) -> Result<(), Rejected> {
        let why = if !node.ready {
            Some(Rejection::NotReady)
        } else if node.exclusive() {
            Some(Rejection::HeldBySession)
        } else if node.used_runs() >= node.capacity.runs {
            Some(Rejection::NoFreeSlot)
        } else if run.exclusive && !node.holders().is_empty() {
            Some(Rejection::NotIdle)
        } else {
            None
        };
        why.map_or(Ok(()), |why| {
            Err(Rejected {
                plugin: self.name(),
                why,
                resource: None,
            })
        })
    }
}

/// Filter: the candidate's requests fit beside the requests of the Runs the
/// Pod holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResourcesFit;

impl Filter for ResourcesFit {
    fn name(&self) -> &'static str {
        "ResourcesFit"
    }

    fn filter(&self, run: &Candidate<'_>, _: &CycleState, node: &Node) -> Result<(), Rejected> {
        let used = node.used_resources();
        match Resources::first_short(run.requests, used, &node.capacity.resources) {
            None => Ok(()),
            Some(name) => Err(Rejected {
                plugin: self.name(),
                why: Rejection::Insufficient,
                resource: Some(name.to_owned()),
            }),
        }
    }
}

/// Filter: required affinity (a matching Run of the namespace is on the
/// Pod, or the empty cohort is bootstrapped) and required anti-affinity,
/// both ways (no Run on the Pod matches the candidate's terms, and the
/// candidate matches no term of a Run on the Pod).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunAffinity;

impl Filter for RunAffinity {
    fn name(&self) -> &'static str {
        "RunAffinity"
    }

    fn filter(&self, run: &Candidate<'_>, state: &CycleState, node: &Node) -> Result<(), Rejected> {
        let same_ns = || {
            node.holders()
                .iter()
                .filter(|h| h.namespace == run.namespace)
        };
        let reject = |why| {
            Err(Rejected {
                plugin: "RunAffinity",
                why,
                resource: None,
            })
        };
        for (i, t) in run.affinity.required().iter().enumerate() {
            let bootstrap = state.bootstrap.get(i).copied().unwrap_or(false);
            if !bootstrap && !same_ns().any(|h| t.label_selector.matches(&h.labels)) {
                return reject(Rejection::AffinityUnmatched);
            }
        }
        for t in run.affinity.required_anti() {
            if same_ns().any(|h| t.label_selector.matches(&h.labels)) {
                return reject(Rejection::AntiAffinityConflict);
            }
        }
        if same_ns().any(|h| h.anti.iter().any(|s| s.matches(run.labels))) {
            return reject(Rejection::AntiAffinityConflict);
        }
        Ok(())
    }
}

/// Score: the share of the Pod left free once the candidate is on it,
/// averaged over run slots and every declared resource (spreads load).
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastAllocated;

impl Score for LeastAllocated {
    fn name(&self) -> &'static str {
        "LeastAllocated"
    }

    fn score(&self, run: &Candidate<'_>, node: &Node) -> i64 {
        let free = |cap: u64, used: u64| -> i64 {
            if cap == 0 {
                return 0;
            }
            (cap.saturating_sub(used) as i128 * 1000 / cap as i128) as i64
        };
        let mut sum = free(
            u64::from(node.capacity.runs),
            u64::from(node.used_runs()) + 1,
        );
        let mut shares = 1;
        let used = node.used_resources();
        for (name, cap) in node.capacity.resources.iter() {
            sum += free(cap, used.get(name).saturating_add(run.requests.get(name)));
            shares += 1;
        }
        sum / shares
    }
}

/// Score: the weights of the preferred affinity terms a Run on the Pod
/// satisfies, minus those of the preferred anti-affinity terms.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreferredAffinity;

impl Score for PreferredAffinity {
    fn name(&self) -> &'static str {
        "PreferredAffinity"
    }

    fn score(&self, run: &Candidate<'_>, node: &Node) -> i64 {
        let present = |s: &super::affinity::LabelSelector| {
            node.holders()
                .iter()
                .any(|h| h.namespace == run.namespace && s.matches(&h.labels))
        };
        let plus: i64 = run
            .affinity
            .preferred()
            .iter()
            .filter(|t| present(&t.label_selector))
            .map(|t| i64::from(t.weight))
            .sum();
        let minus: i64 = run
            .affinity
            .preferred_anti()
            .iter()
            .filter(|t| present(&t.label_selector))
            .map(|t| i64::from(t.weight))
            .sum();
        plus - minus
    }
}
