//! Capacity scheduling of Runs onto Runtime Pods. Pure and deterministic.
//!
//! Function Runs share a Pod up to its `runs` capacity; a session Run needs
//! an otherwise idle Pod and then holds all of it. Among feasible Pods the
//! one with the most free capacity wins (spreading load), ties broken by name.

/// A Pod as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Pod name (tie breaker).
    pub name: String,
    /// Whether it can take new Runs.
    pub ready: bool,
    /// Its `runs` capacity.
    pub capacity: u32,
    /// Runs currently holding capacity on it.
    pub used: u32,
    /// Whether a session (exclusive) Run holds it.
    pub exclusive: bool,
}

/// A Run waiting for a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRun {
    /// Run key (for the result).
    pub key: String,
    /// Session Runs need an idle Pod.
    pub exclusive: bool,
}

/// Assigns pending Runs in order; returns `(run key, pod name)` pairs.
/// Runs that fit nowhere stay pending.
pub fn schedule(pending: &[PendingRun], pods: &[PodView]) -> Vec<(String, String)> {
    let mut pods: Vec<PodView> = pods.to_vec();
    let mut out = Vec::new();
    for run in pending {
        let best = pods
            .iter_mut()
            .filter(|p| p.ready && !p.exclusive && p.used < p.capacity)
            .filter(|p| !run.exclusive || p.used == 0)
            .max_by(|a, b| {
                (a.capacity - a.used)
                    .cmp(&(b.capacity - b.used))
                    .then_with(|| b.name.cmp(&a.name))
            });
        if let Some(p) = best {
            if run.exclusive {
                p.exclusive = true;
                p.used = p.capacity;
            } else {
                p.used += 1;
            }
            out.push((run.key.clone(), p.name.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, capacity: u32, used: u32) -> PodView {
        PodView {
            name: name.into(),
            ready: true,
            capacity,
            used,
            exclusive: false,
        }
    }

    fn run(key: &str, exclusive: bool) -> PendingRun {
        PendingRun {
            key: key.into(),
            exclusive,
        }
    }

    #[test]
    fn function_runs_spread_across_pods_deterministically() {
        let pods = [pod("b", 2, 0), pod("a", 2, 0)];
        let got = schedule(
            &[run("r1", false), run("r2", false), run("r3", false)],
            &pods,
        );
        assert_eq!(
            got,
            vec![
                ("r1".into(), "a".into()),
                ("r2".into(), "b".into()),
                ("r3".into(), "a".into())
            ]
        );
    }

    #[test]
    fn capacity_is_respected_and_overflow_stays_pending() {
        let pods = [pod("a", 1, 0), pod("b", 1, 1)];
        let got = schedule(&[run("r1", false), run("r2", false)], &pods);
        assert_eq!(got, vec![("r1".into(), "a".into())]);
    }

    #[test]
    fn unready_pods_get_nothing() {
        let mut p = pod("a", 4, 0);
        p.ready = false;
        assert!(schedule(&[run("r", false)], &[p]).is_empty());
    }

    #[test]
    fn sessions_need_an_idle_pod_and_hold_it() {
        let pods = [pod("a", 4, 1), pod("b", 4, 0)];
        let got = schedule(&[run("s", true), run("f", false), run("s2", true)], &pods);
        assert_eq!(
            got,
            vec![("s".into(), "b".into()), ("f".into(), "a".into())]
        );
        let mut busy = pod("c", 4, 4);
        busy.exclusive = true;
        assert!(schedule(&[run("f", false)], &[busy]).is_empty());
    }

    #[test]
    fn more_free_capacity_wins_over_name() {
        let pods = [pod("a", 4, 3), pod("z", 4, 1)];
        assert_eq!(
            schedule(&[run("r", false)], &pods),
            vec![("r".into(), "z".into())]
        );
    }
}
