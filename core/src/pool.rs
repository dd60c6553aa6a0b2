//! Warm pools that refill: how many Runtime Pods a pool should have so
//! that at least `minIdle` of them stay free for new Runs.
//!
//! Pure: the adapter counts the pool's Pods after a pass ([`Demand`], from
//! [`crate::pass::Plan::demand`]) and remembers since when the pool has had
//! more Pods than it needs; [`desired`] says how many it should have.
//! Scaling up is immediate; scaling down waits `scaleDownDelay` so a burst
//! that ends and starts again does not churn Pods.

use std::time::Duration;

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
}
