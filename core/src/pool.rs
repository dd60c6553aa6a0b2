//! Warm pools that refill: how many Runtime Pods a pool should have so
//! that at least `minIdle` of them stay free for new Runs.
//!
//! Pure: the adapter counts the pool's Pods after a pass ([`Demand`], from
//! [`crate::pass::Plan::demand`]); a [`Sizer`] per pool remembers what was
//! last asked for and since when the pool has had more Pods than it needs,
//! and [`desired`] says how many it should have. Scaling up is immediate;
//! scaling down waits `scaleDownDelay` so a burst that ends and starts again
//! does not churn Pods. The Kubernetes operator sizes Deployments with it,
//! `krt up` its runtimed processes.

use std::time::{Duration, Instant};

/// `Runtime.spec.pool`, with `spec.replicas` as the floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpec {
    /// `spec.replicas`: never fewer Pods.
    pub min_replicas: u32,
    /// Pods kept free of Runs for new ones (a session needs a whole one).
    pub min_idle: u32,
    /// Never more Pods.
    pub max_replicas: u32,
    /// How long a surplus lasts before the pool shrinks.
    pub scale_down_delay: Duration,
}

/// What a pool's Pods hold after a pass (the Runs it just bound included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    /// Pods holding at least one Run.
    pub busy: u32,
    /// Ready Pods holding none.
    pub idle: u32,
    /// Sessions that found no Pod but would fit on a fresh one: each needs
    /// one more.
    pub waiting_sessions: u32,
    /// Shared Runs that found no Pod but would fit on a fresh one.
    pub waiting_shared: u32,
}

/// How many Pods the pool needs now: every busy Pod, `minIdle` free ones,
/// one per waiting session and enough for the waiting shared Runs at
/// `runs_per_pod`, within `[minReplicas, maxReplicas]`.
pub fn need(spec: &PoolSpec, demand: &Demand, runs_per_pod: u32) -> u32 {
    let shared = demand.waiting_shared.div_ceil(runs_per_pod.max(1));
    let want = demand
        .busy
        .saturating_add(spec.min_idle)
        .saturating_add(demand.waiting_sessions)
        .saturating_add(shared);
    want.clamp(spec.min_replicas, spec.max_replicas.max(spec.min_replicas))
}

/// The replicas to ask for, given the `current` ask and how long the pool
/// has needed fewer (`surplus_for`, `None` when it does not): up at once,
/// down only after the delay.
pub fn desired(
    spec: &PoolSpec,
    demand: &Demand,
    runs_per_pod: u32,
    current: u32,
    surplus_for: Option<Duration>,
) -> u32 {
    let need = need(spec, demand, runs_per_pod);
    if need >= current {
        return need;
    }
    match surplus_for {
        Some(d) if d >= spec.scale_down_delay => need,
        _ => current,
    }
}

/// One pool's size as last asked for, and since when it has needed fewer
/// Pods: the state [`desired`] needs between passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizer {
    asked: u32,
    surplus_since: Option<Instant>,
}

/// A change of a pool's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resize {
    /// The size asked for before.
    pub from: u32,
    /// The size asked for now.
    pub to: u32,
}

impl Sizer {
    /// A pool that was last asked for `asked` Pods (its current size, or
    /// what an earlier leader recorded), with no surplus yet.
    pub fn new(asked: u32) -> Self {
        Self {
            asked,
            surplus_since: None,
        }
    }

    /// The size last asked for.
    pub fn asked(&self) -> u32 {
        self.asked
    }

    /// The size to ask for at `now`, after a pass that left `demand`; the
    /// change, if any. A surplus starts its delay the first time it is
    /// seen and is forgotten as soon as the pool needs its Pods again.
    pub fn step(
        &mut self,
        spec: &PoolSpec,
        demand: &Demand,
        runs_per_pod: u32,
        now: Instant,
    ) -> Option<Resize> {
        if need(spec, demand, runs_per_pod) < self.asked {
            self.surplus_since.get_or_insert(now);
        } else {
            self.surplus_since = None;
        }
        let surplus_for = self.surplus_since.map(|t| now.duration_since(t));
        let to = desired(spec, demand, runs_per_pod, self.asked, surplus_for);
        if to == self.asked {
            return None;
        }
        let from = std::mem::replace(&mut self.asked, to);
        self.surplus_since = None;
        Some(Resize { from, to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PoolSpec {
        PoolSpec {
            min_replicas: 1,
            min_idle: 2,
            max_replicas: 10,
            scale_down_delay: Duration::from_secs(60),
        }
    }

    fn demand(busy: u32, idle: u32) -> Demand {
        Demand {
            busy,
            idle,
            ..Demand::default()
        }
    }

    #[test]
    fn the_pool_keeps_min_idle_free_pods_beside_the_busy_ones() {
        assert_eq!(need(&spec(), &demand(0, 0), 8), 2);
        assert_eq!(need(&spec(), &demand(3, 2), 8), 5);
        assert_eq!(need(&spec(), &demand(3, 0), 8), 5);
    }

    #[test]
    fn waiting_runs_ask_for_more_within_the_bounds() {
        let mut d = demand(2, 0);
        d.waiting_sessions = 3;
        d.waiting_shared = 9;
        // 2 busy + 2 idle + 3 sessions + ceil(9 / 8) = 9.
        assert_eq!(need(&spec(), &d, 8), 9);
        d.waiting_sessions = 50;
        assert_eq!(need(&spec(), &d, 8), 10);
        let fixed = PoolSpec {
            min_replicas: 4,
            min_idle: 0,
            max_replicas: 0,
            ..spec()
        };
        assert_eq!(
            need(&fixed, &demand(0, 4), 8),
            4,
            "maxReplicas below replicas: replicas"
        );
        assert_eq!(
            need(&spec(), &d, 0),
            10,
            "a zero capacity never divides by zero"
        );
    }

    #[test]
    fn scaling_up_is_immediate_and_down_waits_for_the_delay() {
        let s = spec();
        assert_eq!(desired(&s, &demand(4, 0), 8, 3, None), 6);
        let quiet = demand(0, 6);
        assert_eq!(desired(&s, &quiet, 8, 6, None), 6);
        assert_eq!(desired(&s, &quiet, 8, 6, Some(Duration::from_secs(59))), 6);
        assert_eq!(desired(&s, &quiet, 8, 6, Some(Duration::from_secs(60))), 2);
    }

    #[test]
    fn a_sizer_grows_at_once_and_shrinks_after_a_surplus_that_lasted() {
        let s = spec();
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let mut sizer = Sizer::new(2);
        // Two sessions took both idle Pods: two more at once.
        assert_eq!(
            sizer.step(&s, &demand(2, 0), 8, at(0)),
            Some(Resize { from: 2, to: 4 })
        );
        assert_eq!(sizer.asked(), 4);
        assert_eq!(sizer.step(&s, &demand(2, 2), 8, at(1)), None);
        // They ended: a surplus of two, kept for the delay ...
        assert_eq!(sizer.step(&s, &demand(0, 4), 8, at(10)), None);
        assert_eq!(sizer.step(&s, &demand(0, 4), 8, at(69)), None);
        // ... then given back.
        assert_eq!(
            sizer.step(&s, &demand(0, 4), 8, at(70)),
            Some(Resize { from: 4, to: 2 })
        );
        assert_eq!(sizer.step(&s, &demand(0, 2), 8, at(71)), None);
    }

    #[test]
    fn a_surplus_that_is_needed_again_starts_its_delay_over() {
        let s = spec();
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let mut sizer = Sizer::new(4);
        assert_eq!(sizer.step(&s, &demand(0, 4), 8, at(0)), None);
        // A burst came back before the delay passed ...
        assert_eq!(sizer.step(&s, &demand(2, 2), 8, at(50)), None);
        // ... so the next surplus waits a whole delay from when it began.
        assert_eq!(sizer.step(&s, &demand(0, 4), 8, at(55)), None);
        assert_eq!(sizer.step(&s, &demand(0, 4), 8, at(114)), None);
        assert_eq!(
            sizer.step(&s, &demand(0, 4), 8, at(115)),
            Some(Resize { from: 4, to: 2 })
        );
    }
}
