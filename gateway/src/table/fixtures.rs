//! Table fixtures shared by the table's tests and the admission tests.

use std::time::{Duration, Instant};

use kruntimes_proto::ownership::v1::{Mode, Owner, OwnershipEntry, Phase};
use kruntimes_proto::watch::SourceUpdate;

use super::Table;

/// Staleness window of the fixture tables.
pub(crate) const W: Duration = Duration::from_secs(10);

/// An entry of Run `uid` in `default/python`, owned by `pod_uid` at `addr`.
pub(crate) fn assignment(
    uid: &str,
    pod_uid: &str,
    addr: &str,
    attempt: u64,
    phase: Phase,
) -> OwnershipEntry {
    OwnershipEntry {
        namespace: "default".into(),
        run_name: format!("run-{uid}"),
        run_uid: uid.into(),
        runtime: "python".into(),
        owner: Some(Owner {
            pod_name: "runtimed-0".into(),
            pod_uid: pod_uid.into(),
            dataplane_address: addr.into(),
        }),
        attempt,
        phase: phase as i32,
        ..Default::default()
    }
}

/// A snapshot of `instance` holding `entries`.
pub(crate) fn snap(instance: &str, entries: Vec<OwnershipEntry>) -> SourceUpdate {
    SourceUpdate::Snapshot {
        instance_id: instance.into(),
        entries,
    }
}

/// A table where the control plane and the owner agree on Run `u1`.
pub(crate) fn ready_table(now: Instant) -> Table {
    let mut t = Table::new(W);
    t.apply_control_plane(
        snap(
            "cp",
            vec![assignment("u1", "pod-a", "10.0.0.1:1", 2, Phase::Ready)],
        ),
        now,
    );
    t.apply_runtimed(
        "10.0.0.1:1",
        snap(
            "pod-a",
            vec![assignment("u1", "pod-a", "10.0.0.1:1", 2, Phase::Ready)],
        ),
        now,
    );
    t
}

/// A table where `pod-a` (at `10.0.0.1:1`) owns and is ready for every
/// `(uid, mode)` of `runs`, and the control plane assigns each at `phase`.
pub(crate) fn owned_table(now: Instant, runs: &[(&str, Mode, Phase)]) -> Table {
    let entries = |ready: bool| {
        runs.iter()
            .map(|&(uid, mode, phase)| OwnershipEntry {
                mode: mode as i32,
                ..assignment(
                    uid,
                    "pod-a",
                    "10.0.0.1:1",
                    1,
                    if ready { Phase::Ready } else { phase },
                )
            })
            .collect()
    };
    let mut t = Table::new(W);
    t.apply_control_plane(snap("cp", entries(false)), now);
    t.apply_runtimed("10.0.0.1:1", snap("pod-a", entries(true)), now);
    t
}
