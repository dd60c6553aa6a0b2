//! One table of placement cases, run against a real API server (the
//! operator; `kubernetes.rs`) and against `krt up` (the embedded control
//! plane; `placement.rs`): resources that fit and do not, required affinity
//! unsatisfied then satisfied, freed capacity going by priority (a number
//! and a named class), and an invalid request failing the Run where it is.
//! Both targets hold one Runtime Pod of the `python` Runtime with 4 run
//! slots and 1 CPU, and no pool growth.

use serde_json::{Value, json};

/// What a case reads of a Run, whichever control plane wrote it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub phase: String,
    pub reason: String,
    pub message: String,
}

impl Seen {
    /// From a Run object's `status` (a cluster) or a `runs.json` entry.
    pub fn from_status(status: &Value) -> Self {
        let s = |k: &str| status[k].as_str().unwrap_or_default().to_owned();
        Self {
            phase: s("phase"),
            reason: s("reason"),
            message: s("message"),
        }
    }
}

/// A control plane the cases drive.
pub trait Target {
    /// Creates function Run `name` with `labels`, its `spec` extended by
    /// `spec` (resources, affinity, priority).
    async fn create(&self, name: &str, labels: Value, spec: Value);
    /// Deletes it.
    async fn delete(&self, name: &str);
    /// Waits until `check` holds for it (up to 60 s); what it saw.
    async fn wait(&self, name: &str, what: &str, check: fn(&Seen) -> bool) -> Seen;
    /// What it shows now.
    async fn seen(&self, name: &str) -> Seen;
}

/// The Run manifest every case creates: a Python function.
pub fn manifest(name: &str, namespace: &str, labels: Value, spec: Value) -> Value {
    let mut v = json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "runtime": "python",
            "source": {"inlinePath": "main.py", "inline": "def invoke(r):\n    return r\n"},
            "mode": {"function": {"handler": "main.invoke"}},
        }
    });
    if let Some(extra) = spec.as_object() {
        for (k, val) in extra {
            v["spec"][k] = val.clone();
        }
    }
    v
}

fn cpu(q: &str) -> Value {
    json!({"resources": {"requests": {"cpu": q}}})
}

async fn reason_is(t: &impl Target, name: &str, reason: &'static str) -> Seen {
    // `fn` pointers cannot capture: one per reason the table waits for.
    let check: fn(&Seen) -> bool = match reason {
        "InsufficientResources" => |s| s.reason == "InsufficientResources",
        "AffinityUnsatisfied" => |s| s.reason == "AffinityUnsatisfied",
        other => panic!("no check for {other}"),
    };
    t.wait(name, reason, check).await
}

async fn ready(t: &impl Target, name: &str) -> Seen {
    t.wait(name, "Ready", |s| s.phase == "Ready").await
}

/// The table.
pub async fn resources_affinity_and_priority(t: &impl Target) {
    // Resources: 600m fits, a second 600m does not.
    t.create("big", json!({}), cpu("600m")).await;
    ready(t, "big").await;
    t.create("big-2", json!({}), cpu("600m")).await;
    let w = reason_is(t, "big-2", "InsufficientResources").await;
    assert_eq!(w.phase, "Pending");
    assert_eq!(
        w.message,
        "0/1 python Pods can take this Run: 1 insufficient cpu"
    );

    // Affinity: a follower of `app=web` waits until a web Run exists.
    let follow = json!({"affinity": {"runAffinity": {"required": [
        {"labelSelector": {"matchLabels": {"app": "web"}}}]}}});
    t.create("follower", json!({}), follow).await;
    let w = reason_is(t, "follower", "AffinityUnsatisfied").await;
    assert_eq!(
        w.message,
        "0/1 python Pods can take this Run: 1 no Run its runAffinity requires"
    );
    t.create("web", json!({"app": "web"}), json!({})).await;
    ready(t, "web").await;
    ready(t, "follower").await;

    // The CPU `big` frees goes by priority, not age: `high` (a named
    // class, newest) takes 500m of it, and neither the older `big-2` nor
    // `low` fit beside it.
    t.create(
        "low",
        json!({}),
        json!({"priority": -5, "resources": {"requests": {"cpu": "600m"}}}),
    )
    .await;
    t.create(
        "high",
        json!({}),
        json!({"priorityClassName": "high", "resources": {"requests": {"cpu": "500m"}}}),
    )
    .await;
    reason_is(t, "high", "InsufficientResources").await;
    t.delete("big").await;
    ready(t, "high").await;
    for name in ["big-2", "low"] {
        let s = t.seen(name).await;
        assert_eq!(s.reason, "InsufficientResources", "{name}: {s:?}");
    }

    // Invalid requests fail the Run and say where.
    t.create("bad", json!({}), cpu("lots")).await;
    let bad = t.wait("bad", "Failed", |s| s.phase == "Failed").await;
    assert_eq!(bad.reason, "InvalidSpec");
    assert!(
        bad.message.starts_with("spec.resources.requests.cpu:"),
        "{bad:?}"
    );
}
