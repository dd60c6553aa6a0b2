//! Wire contracts of kruntimes: the Runtime Server contract
//! ([`runtime`]: its protobuf services and the Rust types both sides of that
//! process boundary share), runtimed's [`agent`] interface for the control
//! plane, the [`ownership`] table watch with its publisher and consumer
//! ([`watch`]), and the public HTTP API's error table, header names and path
//! parser ([`api`]), which the gateway and runtimed both speak.
#![forbid(unsafe_code)]

pub mod api;
pub mod watch;

pub mod runtime;

/// `kruntimes.agent.v1`: the control plane's interface to a runtimed
/// (assign a Run at an attempt, release it).
pub mod agent {
    /// Version 1 of the Agent contract.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.agent.v1");
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
