//! The runtimed instances of `krt up`: each a runtimed and its Runtime
//! Server, started at start-up (the pool's floor) and later on the embedded
//! control plane's request when the pool follows demand, stopped when it
//! retires an idle one.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use kruntimes_operator::embedded::{InstanceReport, InstanceRequest, PodConfig};
use tokio::sync::mpsc;

use super::supervised::Supervised;
use super::{Dirs, UpArgs, bind_port, runtime_server, runtimed};
use crate::pki::Pki;

/// How long a retired instance has to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The two processes of instance `name` (its Runtime Server first), not
/// yet started, and what the control plane needs to know of it. Its
/// listener is bound here and handed over: never free for another process
/// to take between this pick and its start.
pub(super) fn plan(
    pki: &Pki,
    args: &UpArgs,
    dirs: &Dirs,
    name: &str,
) -> anyhow::Result<(PodConfig, [Supervised; 2])> {
    let (addr, listener) = bind_port(args.runtimed_ip)?;
    let pod = PodConfig {
        name: name.to_owned(),
        address: addr.to_string(),
        capacity: args.capacity,
        resources: args.resources.clone().unwrap_or_default(),
    };
    let (mut server, socket) = runtime_server(&dirs.state, &dirs.logs, name)?;
    let log = dirs.logs.join(format!("{name}.log"));
    let mut d = runtimed(pki, name, addr, &socket, log);
    if let Some(store) = &dirs.artifacts {
        d.extra_env
            .push((kruntimes_artifacts::STORE_ENV.to_owned(), store.to_json()));
        // User code never reaches a store directory outside the state
        // directory either.
        if let kruntimes_artifacts::StoreConfig::Directory { path } = store
            && !path.starts_with(&dirs.state)
        {
            server
                .args
                .extend(["--protect".to_owned(), path.display().to_string()]);
        }
    }
    d.args.extend(args.runtimed_flags.iter().cloned());
    d.hand_over(listener);
    Ok((pod, [server, d]))
}

/// The instance a child process belongs to (`runtimed-3` for
/// `runtimed-3` and `runtime-server-3`), if it is one.
fn instance_of(child: &str) -> Option<String> {
    let n = child
        .strip_prefix("runtimed-")
        .or_else(|| child.strip_prefix("runtime-server-"))?;
    n.parse::<u32>().ok().map(|n| format!("runtimed-{n}"))
}

/// Starts and stops instances as the control plane asks.
pub(super) struct Launcher {
    requests: mpsc::UnboundedReceiver<InstanceRequest>,
    reports: mpsc::UnboundedSender<InstanceReport>,
    /// Instances stopping: their names (and so their directories and
    /// sockets) are not taken again until their processes are gone.
    stopping: BTreeSet<String>,
    stopped_tx: mpsc::UnboundedSender<String>,
    stopped_rx: mpsc::UnboundedReceiver<String>,
}

/// What the launcher waits for.
pub(super) enum Event {
    Request(InstanceRequest),
    Stopped(String),
}

impl Launcher {
    /// A launcher serving `requests`, reporting on `reports`.
    pub(super) fn new(
        requests: mpsc::UnboundedReceiver<InstanceRequest>,
        reports: mpsc::UnboundedSender<InstanceReport>,
    ) -> Self {
        let (stopped_tx, stopped_rx) = mpsc::unbounded_channel();
        Self {
            requests,
            reports,
            stopping: BTreeSet::new(),
            stopped_tx,
            stopped_rx,
        }
    }

    /// The next request, or an instance that finished stopping. Pending
    /// forever once the control plane is gone.
    pub(super) async fn next(&mut self) -> Event {
        tokio::select! {
            Some(r) = self.requests.recv() => Event::Request(r),
            Some(name) = self.stopped_rx.recv() => Event::Stopped(name),
            else => std::future::pending().await,
        }
    }

    /// Carries out `event` on `children`; whether the set of processes
    /// changed.
    pub(super) fn handle(
        &mut self,
        event: Event,
        exe: &Path,
        pki: &Pki,
        args: &UpArgs,
        dirs: &Dirs,
        children: &mut Vec<Supervised>,
    ) -> bool {
        match event {
            Event::Request(InstanceRequest::Start { count }) => {
                for _ in 0..count {
                    let report = match self.start(exe, pki, args, dirs, children) {
                        Ok(pod) => InstanceReport::Started(pod),
                        Err(e) => InstanceReport::StartFailed {
                            error: format!("{e:#}"),
                        },
                    };
                    let _ = self.reports.send(report);
                }
                true
            }
            Event::Request(InstanceRequest::Stop { name }) => {
                self.stop(&name, children);
                true
            }
            Event::Stopped(name) => {
                self.stopping.remove(&name);
                tracing::info!(instance = %name, "runtimed instance stopped");
                let _ = self.reports.send(InstanceReport::Stopped { name });
                false
            }
        }
    }

    /// Starts an instance under the lowest name neither running nor
    /// stopping.
    fn start(
        &mut self,
        exe: &Path,
        pki: &Pki,
        args: &UpArgs,
        dirs: &Dirs,
        children: &mut Vec<Supervised>,
    ) -> anyhow::Result<PodConfig> {
        let taken: BTreeSet<String> = children
            .iter()
            .filter_map(|c| instance_of(&c.name))
            .chain(self.stopping.iter().cloned())
            .collect();
        let name = (0..)
            .map(|i| format!("runtimed-{i}"))
            .find(|n| !taken.contains(n))
            .unwrap_or_default();
        let (pod, mut processes) = plan(pki, args, dirs, &name)?;
        for p in &mut processes {
            p.spawn(exe)?;
        }
        children.extend(processes);
        tracing::info!(instance = %name, address = %pod.address, "runtimed instance started");
        Ok(pod)
    }

    /// Takes instance `name`'s processes out of supervision and ends them:
    /// SIGTERM, SIGKILL after [`STOP_GRACE`]; reported once both are gone.
    fn stop(&mut self, name: &str, children: &mut Vec<Supervised>) {
        let (going, staying): (Vec<Supervised>, Vec<Supervised>) = std::mem::take(children)
            .into_iter()
            .partition(|c| instance_of(&c.name).as_deref() == Some(name));
        *children = staying;
        self.stopping.insert(name.to_owned());
        let done = self.stopped_tx.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            let mut going = going;
            super::stop_within(&mut going, STOP_GRACE).await;
            let _ = done.send(name);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::instance_of;

    #[test]
    fn both_processes_of_an_instance_are_known_by_its_name() {
        assert_eq!(instance_of("runtimed-3").as_deref(), Some("runtimed-3"));
        assert_eq!(
            instance_of("runtime-server-12").as_deref(),
            Some("runtimed-12")
        );
        assert_eq!(instance_of("gateway"), None);
        assert_eq!(instance_of("runtimed-x"), None);
    }
}
