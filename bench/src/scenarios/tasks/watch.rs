//! Following a burst's objects on the API server: a watch per kind
//! (listed first, so no event is missed), each event read into what it
//! says of one task ([`Obs`]) and sent with the time it arrived, and those
//! notes folded into the tasks' timelines ([`apply`]).

use std::collections::HashMap;
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kruntimes_api::Run;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::timeline::{self, Seen};

/// What one watch event says of one task.
pub struct Obs {
    /// The task: a Run's, a Pod's name; a Job's for it and its Pod.
    pub task: String,
    /// It has an owner (a Run) or a node (a Pod).
    pub scheduled: bool,
    /// It has ended: `Ok` for a success, else how.
    pub ended: Option<Result<(), String>>,
    /// The script's own time (a Run's status has it).
    pub user_code: Option<f64>,
    /// The Pod whose log has the script's time.
    pub pod: Option<String>,
}

/// Notes what an event says of a task; 1 when it ended with it.
pub fn apply(
    seen: &mut HashMap<String, Seen>,
    pods: &mut HashMap<String, String>,
    at: f64,
    o: Obs,
) -> usize {
    let Some(s) = seen.get_mut(&o.task) else {
        return 0;
    };
    if let Some(pod) = o.pod {
        pods.insert(o.task.clone(), pod);
    }
    if o.scheduled && s.scheduled.is_none() {
        s.scheduled = Some(at);
    }
    if s.user_code.is_none() {
        s.user_code = o.user_code;
    }
    match o.ended {
        Some(end) if s.ended_seen.is_none() => {
            s.ended_written = Some(at);
            s.ended_seen = Some(at);
            s.failure = end.err();
            1
        }
        _ => 0,
    }
}

/// Lists the objects of `selector`, then watches them from there in a
/// task of its own, sending what `obs` reads of each event with the time
/// it arrived.
pub async fn follow<K>(
    api: Api<K>,
    selector: &str,
    obs: fn(&K) -> Option<Obs>,
    tx: mpsc::UnboundedSender<(f64, Obs)>,
) -> anyhow::Result<tokio::task::JoinHandle<()>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let lp = ListParams::default().labels(selector);
    let mut version = api
        .list(&lp)
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let wp = WatchParams::default().labels(selector).timeout(290);
    Ok(tokio::spawn(async move {
        loop {
            let Ok(stream) = api.watch(&wp, &version).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let mut stream = stream.boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                let at = timeline::now();
                match event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                        version = o.resource_version().unwrap_or_default();
                        if let Some(seen) = obs(&o)
                            && tx.send((at, seen)).is_err()
                        {
                            return;
                        }
                    }
                    WatchEvent::Deleted(o) => version = o.resource_version().unwrap_or_default(),
                    WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                    // Expired: what happened meanwhile is lost to the
                    // timeline; the burst gives up on it.
                    WatchEvent::Error(_) => break,
                }
            }
        }
    }))
}

pub fn run_obs(run: &Run) -> Option<Obs> {
    let status = run.status.as_ref()?;
    let phase = status.phase?;
    let task = status.task.as_ref();
    Some(Obs {
        task: run.name_any(),
        scheduled: status.assigned_pod.is_some(),
        ended: phase.is_terminal().then(|| {
            let ok = phase.as_str() == "Succeeded" && task.is_some_and(|t| t.exit_code == 0);
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "{}/{}",
                    phase.as_str(),
                    status.reason.as_deref().unwrap_or_default()
                ))
            }
        }),
        user_code: task.and_then(|t| timeline::printed_time(&t.stdout_tail)),
        pod: None,
    })
}

fn pod_ended(pod: &Pod) -> Option<Result<(), String>> {
    match pod.status.as_ref()?.phase.as_deref()? {
        "Succeeded" => Some(Ok(())),
        "Failed" => Some(Err("Failed".into())),
        _ => None,
    }
}

fn pod_scheduled(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| s.node_name.is_some())
}

pub fn pod_obs(pod: &Pod) -> Option<Obs> {
    Some(Obs {
        task: pod.name_any(),
        scheduled: pod_scheduled(pod),
        ended: pod_ended(pod),
        user_code: None,
        pod: Some(pod.name_any()),
    })
}

/// A Job's Pod: scheduled, and where its log is; the Job says when it
/// ended.
pub fn job_pod_obs(pod: &Pod) -> Option<Obs> {
    let job = pod.labels().get("job-name")?.clone();
    Some(Obs {
        task: job,
        scheduled: pod_scheduled(pod),
        ended: None,
        user_code: None,
        pod: Some(pod.name_any()),
    })
}

pub fn job_obs(job: &Job) -> Option<Obs> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let holds = |t: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    };
    let ended = if holds("Complete") {
        Some(Ok(()))
    } else if holds("Failed") {
        Some(Err("Failed".into()))
    } else {
        None
    };
    Some(Obs {
        task: job.name_any(),
        scheduled: false,
        ended,
        user_code: None,
        pod: None,
    })
}
