//! The lifecycle's view of an ownership table, mapped to and from the wire
//! (`kruntimes.ownership.v1`): the one place the core's [`TablePhase`] meets
//! the protobuf enum.

use kruntimes_core::ModeKind;
use kruntimes_core::lifecycle::owner::Local;
use kruntimes_core::lifecycle::{Life, Phase, Reason, TablePhase};
use kruntimes_proto::api::truncate_utf8;
use kruntimes_proto::ownership::v1 as own;

/// Longest status message a control plane entry carries, in bytes.
pub const MAX_ENTRY_MESSAGE_BYTES: usize = 512;

/// One Run as a control plane (the embedded one or the operator) publishes
/// it in its ownership table.
#[derive(Debug, Clone, Copy)]
pub struct Published<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// UID.
    pub uid: &'a str,
    /// `spec.runtime`.
    pub runtime: &'a str,
    /// Its mode (function or session: only those are routed).
    pub mode: ModeKind,
    /// Phase, reason and attempt.
    pub life: &'a Life,
    /// `status.reason` as written (a control plane may read reasons it does
    /// not know).
    pub reason: &'a str,
    /// `status.message`.
    pub message: &'a str,
}

/// The control plane's table entry of `run`, owned by `owner` (none while
/// pending). A Run that has ended or is ending carries its phase and
/// bounded message, so the gateway answers why it no longer serves.
pub fn control_entry(run: &Published<'_>, owner: Option<own::Owner>) -> own::OwnershipEntry {
    let phase = run.life.phase;
    let ending = phase.is_terminal() || phase == Phase::Finalizing;
    own::OwnershipEntry {
        namespace: run.namespace.to_owned(),
        run_name: run.name.to_owned(),
        run_uid: run.uid.to_owned(),
        runtime: run.runtime.to_owned(),
        mode: match run.mode {
            ModeKind::Session => own::Mode::Session as i32,
            ModeKind::Task => own::Mode::Task as i32,
            ModeKind::Function => own::Mode::Function as i32,
        },
        owner,
        attempt: run.life.attempt,
        phase: published(phase),
        limits: None,
        reason: run.reason.to_owned(),
        run_phase: if ending { phase.as_str() } else { "" }.to_owned(),
        message: if ending {
            truncate_utf8(run.message.to_owned(), MAX_ENTRY_MESSAGE_BYTES)
        } else {
            String::new()
        },
        task: None,
        export: None,
    }
}

/// The wire phase of a table phase.
pub fn wire(phase: TablePhase) -> own::Phase {
    match phase {
        TablePhase::Pending => own::Phase::Pending,
        TablePhase::Scheduled => own::Phase::Scheduled,
        TablePhase::Running => own::Phase::Running,
        TablePhase::Ready => own::Phase::Ready,
        TablePhase::Draining => own::Phase::Draining,
        TablePhase::Failed => own::Phase::Failed,
    }
}

/// The wire phase a Run in `phase` is published with.
pub fn published(phase: Phase) -> i32 {
    wire(phase.table_phase()) as i32
}

/// The table phase of a wire phase (`None` for unknown values and
/// `UNSPECIFIED`).
pub fn parse(phase: i32) -> Option<TablePhase> {
    Some(match own::Phase::try_from(phase).ok()? {
        own::Phase::Unspecified => return None,
        own::Phase::Pending => TablePhase::Pending,
        own::Phase::Scheduled => TablePhase::Scheduled,
        own::Phase::Running => TablePhase::Running,
        own::Phase::Ready => TablePhase::Ready,
        own::Phase::Draining => TablePhase::Draining,
        own::Phase::Failed => TablePhase::Failed,
    })
}

/// An owner's own table entry as the lifecycle reads it.
pub fn local(entry: &own::OwnershipEntry) -> Local {
    Local {
        attempt: entry.attempt,
        phase: parse(entry.phase),
        reason: entry.reason.clone(),
        exit: entry.task.as_ref().filter(|t| t.ended).map(|t| t.exit_code),
        exported: entry.export.is_some(),
        artifacts_failed: entry
            .export
            .as_ref()
            .filter(|x| !x.failure.is_empty())
            .map(|x| {
                (
                    x.failure == Reason::ArtifactInvalid.as_str(),
                    x.message.clone(),
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_phase_round_trips_through_the_wire() {
        for p in [
            TablePhase::Pending,
            TablePhase::Scheduled,
            TablePhase::Running,
            TablePhase::Ready,
            TablePhase::Draining,
            TablePhase::Failed,
        ] {
            assert_eq!(parse(wire(p) as i32), Some(p));
        }
        assert_eq!(parse(own::Phase::Unspecified as i32), None);
        assert_eq!(parse(99), None);
        assert_eq!(published(Phase::Finalizing), own::Phase::Draining as i32);
        assert_eq!(published(Phase::Cancelled), own::Phase::Failed as i32);
    }

    fn entry(phase: Phase, message: &str) -> own::OwnershipEntry {
        let life = Life {
            phase,
            reason: None,
            attempt: 2,
        };
        control_entry(
            &Published {
                namespace: "ns",
                name: "hello",
                uid: "u1",
                runtime: "python",
                mode: ModeKind::Session,
                life: &life,
                reason: "Closed",
                message,
            },
            None,
        )
    }

    #[test]
    fn ended_and_ending_runs_carry_their_phase_and_a_bounded_message() {
        let e = entry(Phase::Failed, "RegistrationFailed: SyntaxError");
        assert_eq!(e.phase, own::Phase::Failed as i32);
        assert_eq!(e.run_phase, "Failed");
        assert_eq!(e.message, "RegistrationFailed: SyntaxError");
        assert_eq!((e.attempt, e.reason.as_str()), (2, "Closed"));
        assert_eq!(e.mode, own::Mode::Session as i32);
        assert_eq!(entry(Phase::Finalizing, "m").run_phase, "Finalizing");
        for p in [Phase::Succeeded, Phase::Timeout, Phase::Cancelled] {
            assert_eq!(entry(p, "m").run_phase, p.as_str());
        }
        let long = "é".repeat(MAX_ENTRY_MESSAGE_BYTES);
        let e = entry(Phase::Timeout, &long);
        assert!(e.message.len() <= MAX_ENTRY_MESSAGE_BYTES);
        assert!(long.starts_with(&e.message));
    }

    #[test]
    fn live_runs_carry_no_phase_or_message() {
        for p in [
            Phase::Pending,
            Phase::Scheduled,
            Phase::Running,
            Phase::Ready,
        ] {
            let e = entry(p, "waiting for a pod");
            assert_eq!(
                (e.run_phase.as_str(), e.message.as_str()),
                ("", ""),
                "{p:?}"
            );
        }
    }
}
