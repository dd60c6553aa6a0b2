//! Wire contracts of kruntimes: the protobuf services (`FunctionRuntime`,
//! `OwnershipTable`), the public HTTP error shape and header names shared by
//! the gateway and runtimed, and the ownership watch protocol's publisher and
//! consumer, which every component speaks the same way.
#![forbid(unsafe_code)]

pub mod api;
pub mod watch;

/// `kruntimes.function.v1`: the Runtime Server contract.
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

/// `kruntimes.ownership.v1`: the ownership table watch.
pub mod ownership {
    /// Version 1 of the OwnershipTable watch.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.ownership.v1");
    }
}
