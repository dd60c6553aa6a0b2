//! The scheduler framework: Kubernetes-style single-Run cycles over an
//! immutable snapshot of Runtime Pods.
//!
//! A pass takes the Runs that wait for a Pod in queue order
//! ([`queue::order`]: priority with aging, sessions first, then oldest) and
//! runs one cycle per Run:
//!
//! 1. **PreFilter** — the Run's candidate Pods are its pool's (the pool
//!    index: a Run never looks at another Runtime's Pods), and the cohort of
//!    each required affinity term is counted once (bootstrap of an empty
//!    cohort).
//! 2. **Filter** — every [`Filter`] plugin, in order, may reject a Pod
//!    with a bounded [`Rejection`]; the first rejection counts.
//! 3. **Score** — every [`Score`] plugin scores the feasible Pods; each
//!    plugin's scores are normalised to 0..=100 and weighted; the highest sum
//!    wins, ties go to the Pod name that sorts first.
//! 4. **Reserve/Assume** — the chosen Pod's accounting takes the Run at
//!    once, so the next cycle of the same pass (a burst) sees it.
//! 5. **Bind** — the caller writes the assignment; a write that conflicts is
//!    decided again from a fresh snapshot on the next pass.
//!
//! A Run that fits nowhere gets an [`Unplaced`] saying which filter stage
//! stopped it and how many Pods were turned away for what.

pub mod affinity;
mod plugins;
pub mod queue;
pub mod resources;

use std::collections::BTreeMap;

pub use affinity::{Affinity, Labels};
pub use plugins::{
    LeastAllocated, PreferredAffinity, ResourcesFit, RunAffinity, RuntimePodAvailability,
};
pub use resources::Resources;

use crate::lifecycle::Reason;

/// What one Runtime Pod offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Capacity {
    /// Runs it may hold at once (a session holds all of them).
    pub runs: u32,
    /// Resources the Runs' requests are accounted against
    /// (`Runtime.spec.capacity.resources`).
    pub resources: Resources,
}

/// A Run holding capacity on a Pod, as the filters and scores see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Holder {
    /// Namespace (affinity terms only see Runs of their own namespace).
    pub namespace: String,
    /// Labels.
    pub labels: Labels,
    /// Resource requests.
    pub requests: Resources,
    /// A session: it holds the whole Pod.
    pub exclusive: bool,
    /// Its required anti-affinity, which a newcomer must respect too.
    pub anti: Vec<affinity::LabelSelector>,
}

/// A Runtime Pod in the snapshot, with the Runs it holds and what they
/// use (kept as Runs are reserved, so a filter reads it without summing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    /// Pod name (the tie breaker).
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// Its pool (the Runtime it belongs to).
    pub pool: String,
    /// Whether it takes new Runs.
    pub ready: bool,
    /// What it offers.
    pub capacity: Capacity,
    holders: Vec<Holder>,
    used: Resources,
    exclusive: bool,
}

impl Node {
    /// A Pod holding no Run yet.
    pub fn new(name: &str, uid: &str, pool: &str, ready: bool, capacity: Capacity) -> Self {
        Self {
            name: name.to_owned(),
            uid: uid.to_owned(),
            pool: pool.to_owned(),
            ready,
            capacity,
            ..Self::default()
        }
    }

    /// Takes `h` (a Run holding capacity here, or one reserved).
    pub fn hold(&mut self, h: Holder) {
        self.used.add(&h.requests);
        self.exclusive |= h.exclusive;
        self.holders.push(h);
    }

    /// The Runs holding capacity on it.
    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }

    /// Run slots in use.
    pub fn used_runs(&self) -> u32 {
        if self.exclusive {
            self.capacity.runs
        } else {
            u32::try_from(self.holders.len()).unwrap_or(u32::MAX)
        }
    }

    /// Whether a session holds it.
    pub fn exclusive(&self) -> bool {
        self.exclusive
    }

    /// The sum of its holders' requests.
    pub fn used_resources(&self) -> &Resources {
        &self.used
    }
}

/// The Run a cycle places.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Labels.
    pub labels: &'a Labels,
    /// `spec.runtime` (for messages).
    pub runtime: &'a str,
    /// The pool it is placed in.
    pub pool: &'a str,
    /// A session: it needs an idle Pod and holds all of it.
    pub exclusive: bool,
    /// Resource requests.
    pub requests: &'a Resources,
    /// Affinity and anti-affinity.
    pub affinity: &'a Affinity,
}

impl Candidate<'_> {
    /// What it adds to the Pod it is reserved on.
    pub fn holder(&self) -> Holder {
        Holder {
            namespace: self.namespace.to_owned(),
            labels: self.labels.clone(),
            requests: self.requests.clone(),
            exclusive: self.exclusive,
            anti: self
                .affinity
                .required_anti()
                .iter()
                .map(|t| t.label_selector.clone())
                .collect(),
        }
    }
}

/// Why a Filter turned a Pod away. Bounded: these are metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rejection {
    /// The Pod is not ready (or its runtimed is not connected).
    NotReady,
    /// A session holds the Pod.
    HeldBySession,
    /// A session needs an idle Pod and this one holds Runs.
    NotIdle,
    /// Every run slot is taken.
    NoFreeSlot,
    /// A requested resource does not fit.
    Insufficient,
    /// No Run on the Pod satisfies a required affinity term.
    AffinityUnmatched,
    /// A Run on the Pod conflicts with a required anti-affinity term (the
    /// newcomer's, or the Run's own against the newcomer).
    AntiAffinityConflict,
}

impl Rejection {
    /// Metric label and message key.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotReady => "NotReady",
            Self::HeldBySession => "HeldBySession",
            Self::NotIdle => "NotIdle",
            Self::NoFreeSlot => "NoFreeSlot",
            Self::Insufficient => "Insufficient",
            Self::AffinityUnmatched => "AffinityUnmatched",
            Self::AntiAffinityConflict => "AntiAffinityConflict",
        }
    }

    /// How a message counts it ("2 not ready").
    fn describe(self) -> &'static str {
        match self {
            Self::NotReady => "not ready",
            Self::HeldBySession => "held by a session",
            Self::NotIdle => "busy (a session needs an idle Pod)",
            Self::NoFreeSlot => "no free run slot",
            Self::Insufficient => "insufficient",
            Self::AffinityUnmatched => "no Run its runAffinity requires",
            Self::AntiAffinityConflict => "a Run its runAntiAffinity forbids",
        }
    }

    /// The `Pending` reason this rejection stands for.
    pub fn reason(self) -> Reason {
        match self {
            Self::NotReady | Self::HeldBySession | Self::NotIdle | Self::NoFreeSlot => {
                Reason::NoIdlePod
            }
            Self::Insufficient => Reason::InsufficientResources,
            Self::AffinityUnmatched | Self::AntiAffinityConflict => Reason::AffinityUnsatisfied,
        }
    }
}

/// A rejection and, for [`Rejection::Insufficient`], the resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rejected {
    /// The plugin that rejected.
    pub plugin: &'static str,
    /// Why.
    pub why: Rejection,
    /// The resource that does not fit.
    pub resource: Option<String>,
}

/// What PreFilter worked out once per cycle.
#[derive(Debug, Clone, Default)]
pub struct CycleState {
    /// Per required affinity term of the candidate: the cohort is empty
    /// (no Run of the pool matches) and the candidate matches the term
    /// itself, so it may start the cohort on any Pod.
    pub bootstrap: Vec<bool>,
}

/// A Filter plugin: may the candidate go on this Pod?
pub trait Filter: Send + Sync {
    /// Its name (a metric label).
    fn name(&self) -> &'static str;
    /// `Err` turns the Pod away.
    fn filter(&self, run: &Candidate<'_>, state: &CycleState, node: &Node) -> Result<(), Rejected>;
}

/// A Score plugin: how good is this feasible Pod for the candidate?
pub trait Score: Send + Sync {
    /// Its name.
    fn name(&self) -> &'static str;
    /// Raw score (any scale; normalised across the feasible Pods).
    fn score(&self, run: &Candidate<'_>, node: &Node) -> i64;
}

/// A scheduling profile: the plugins and their weights.
pub struct Framework {
    filters: Vec<Box<dyn Filter>>,
    scores: Vec<(Box<dyn Score>, u32)>,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framework")
            .field(
                "filters",
                &self.filters.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field(
                "scores",
                &self
                    .scores
                    .iter()
                    .map(|(p, w)| (p.name(), *w))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for Framework {
    /// The default profile: availability, resources and affinity filters;
    /// preferred affinity (weight 2) over spreading (weight 1).
    fn default() -> Self {
        Self {
            filters: vec![
                Box::new(RuntimePodAvailability),
                Box::new(ResourcesFit),
                Box::new(RunAffinity),
            ],
            scores: vec![
                (Box::new(PreferredAffinity), 2),
                (Box::new(LeastAllocated), 1),
            ],
        }
    }
}

/// Why a Run was not placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unplaced {
    /// The `Pending` reason: the stage that stopped the Pods that got
    /// furthest (availability, then resources, then affinity).
    pub reason: Reason,
    /// A bounded message with the counts.
    pub message: String,
    /// How many Pods each rejection turned away.
    pub rejections: BTreeMap<Rejected, u32>,
}

/// The outcome of one cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Reserved on the Pod at this index of the snapshot.
    Placed(usize),
    /// Not placed.
    Unplaced(Unplaced),
}

/// The Pods of a snapshot, indexed by pool, with the Runs reserved on them
/// during the pass.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    nodes: Vec<Node>,
    pools: BTreeMap<String, Vec<usize>>,
}

impl Snapshot {
    /// The snapshot of `nodes`.
    pub fn new(nodes: Vec<Node>) -> Self {
        let mut pools: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            pools.entry(n.pool.clone()).or_default().push(i);
        }
        Self { nodes, pools }
    }

    /// Every Pod.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The Pods of `pool`.
    pub fn pool(&self, pool: &str) -> impl Iterator<Item = &Node> {
        self.pools
            .get(pool)
            .into_iter()
            .flatten()
            .map(|i| &self.nodes[*i])
    }
}

impl Framework {
    /// A profile of these plugins.
    pub fn new(filters: Vec<Box<dyn Filter>>, scores: Vec<(Box<dyn Score>, u32)>) -> Self {
        Self { filters, scores }
    }

    /// One scheduling cycle for `run`; a placed Run is reserved on its Pod
    /// in `snapshot`.
    pub fn cycle(&self, run: &Candidate<'_>, snapshot: &mut Snapshot) -> Outcome {
        let indices: &[usize] = snapshot.pools.get(run.pool).map_or(&[], Vec::as_slice);
        let state = pre_filter(run, indices.iter().map(|i| &snapshot.nodes[*i]));
        let mut feasible = Vec::new();
        let mut rejections: BTreeMap<Rejected, u32> = BTreeMap::new();
        for &i in indices {
            let node = &snapshot.nodes[i];
            match self
                .filters
                .iter()
                .try_for_each(|f| f.filter(run, &state, node))
            {
                Ok(()) => feasible.push(i),
                Err(r) => *rejections.entry(r).or_default() += 1,
            }
        }
        let Some(best) = self.best(run, &feasible, &snapshot.nodes) else {
            return Outcome::Unplaced(unplaced(run, indices.len(), rejections));
        };
        snapshot.nodes[best].hold(run.holder());
        Outcome::Placed(best)
    }

    /// The feasible Pod with the highest weighted, normalised score; ties
    /// go to the name that sorts first.
    fn best(&self, run: &Candidate<'_>, feasible: &[usize], nodes: &[Node]) -> Option<usize> {
        let mut total = vec![0u64; feasible.len()];
        for (plugin, weight) in &self.scores {
            let raw: Vec<i64> = feasible
                .iter()
                .map(|i| plugin.score(run, &nodes[*i]))
                .collect();
            for (t, s) in total.iter_mut().zip(normalise(&raw)) {
                *t += s * u64::from(*weight);
            }
        }
        feasible
            .iter()
            .zip(total)
            .max_by(|(a, sa), (b, sb)| {
                sa.cmp(sb)
                    .then_with(|| nodes[**b].name.cmp(&nodes[**a].name))
            })
            .map(|(i, _)| *i)
    }
}

/// Scores scaled to 0..=100 across the feasible Pods (lowest 0, highest
/// 100); all equal scores become 0.
pub fn normalise(raw: &[i64]) -> Vec<u64> {
    let (Some(min), Some(max)) = (raw.iter().min(), raw.iter().max()) else {
        return Vec::new();
    };
    let span = i128::from(*max) - i128::from(*min);
    raw.iter()
        .map(|s| {
            if span == 0 {
                0
            } else {
                ((i128::from(*s) - i128::from(*min)) * 100 / span) as u64
            }
        })
        .collect()
}

/// PreFilter: the bootstrap of each required affinity term, from the Runs
/// the pool's Pods hold.
fn pre_filter<'n>(run: &Candidate<'_>, pool: impl Iterator<Item = &'n Node> + Clone) -> CycleState {
    let bootstrap = run
        .affinity
        .required()
        .iter()
        .map(|t| {
            let cohort = pool.clone().any(|n| {
                n.holders()
                    .iter()
                    .any(|h| h.namespace == run.namespace && t.label_selector.matches(&h.labels))
            });
            !cohort && t.label_selector.matches(run.labels)
        })
        .collect();
    CycleState { bootstrap }
}

/// The reason and message of a Run no Pod took.
fn unplaced(run: &Candidate<'_>, pods: usize, rejections: BTreeMap<Rejected, u32>) -> Unplaced {
    let kind = if run.exclusive { "session" } else { "Run" };
    if pods == 0 {
        return Unplaced {
            reason: Reason::NoIdlePod,
            message: format!("no {} Pod exists yet for this {kind}", run.runtime),
            rejections,
        };
    }
    let reason = rejections
        .keys()
        .map(|r| r.why)
        .max_by_key(|w| stage(*w))
        .map_or(Reason::NoIdlePod, Rejection::reason);
    let mut parts: Vec<(u32, String)> = rejections
        .iter()
        .map(|(r, n)| {
            let what = match &r.resource {
                Some(res) => format!("{} {res}", r.why.describe()),
                None => r.why.describe().to_owned(),
            };
            (*n, what)
        })
        .collect();
    parts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let counts: Vec<String> = parts.iter().map(|(n, w)| format!("{n} {w}")).collect();
    Unplaced {
        reason,
        message: format!(
            "0/{pods} {} Pods can take this {kind}: {}",
            run.runtime,
            counts.join(", ")
        ),
        rejections,
    }
}

/// How far a Pod got through the filters before this rejection.
fn stage(r: Rejection) -> u8 {
    match r.reason() {
        Reason::InsufficientResources => 1,
        Reason::AffinityUnsatisfied => 2,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
