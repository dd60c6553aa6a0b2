//! Wire contracts of kruntimes: the protobuf services (`FunctionRuntime`,
//! `SessionRuntime`, `RuntimeServer`, `OwnershipTable`), the public HTTP error shape and header names shared by
//! the gateway and runtimed, and the ownership watch protocol's publisher and
//! consumer, which every component speaks the same way.
#![forbid(unsafe_code)]

pub mod api;
pub mod watch;

/// `kruntimes.function.v1`: the control plane's registration interface to
/// runtimed.
pub mod function {
    /// Version 1 of the FunctionRuntime contract.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.function.v1");
    }
}

/// `kruntimes.session.v1`: session lifecycle on a Runtime Server.
pub mod session {
    /// Version 1 of the SessionRuntime contract.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.session.v1");
    }
}

/// `kruntimes.runtime.v1`: the Runtime Server contract between runtimed and
/// the process that runs user code.
pub mod runtime {
    /// Version 1 of the RuntimeServer contract.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.runtime.v1");
    }

    /// Largest message on the Runtime Server socket: a 32 MiB file plus
    /// framing.
    pub const MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;
}

/// `kruntimes.ownership.v1`: the ownership table watch.
pub mod ownership {
    /// Version 1 of the OwnershipTable watch.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.ownership.v1");
    }
}
