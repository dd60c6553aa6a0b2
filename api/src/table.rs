//! The lifecycle's view of an ownership table, mapped to and from the wire
//! (`kruntimes.ownership.v1`): the one place the core's [`TablePhase`] meets
//! the protobuf enum.

use kruntimes_core::lifecycle::owner::Local;
use kruntimes_core::lifecycle::{Phase, TablePhase};
use kruntimes_proto::ownership::v1 as own;

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
}
