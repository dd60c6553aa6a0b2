//! The kruntimes control plane, in its two deployments: the embedded one of
//! `krt up` ([`embedded`]: a directory of Run manifests, runtimed driven
//! over gRPC) and the Kubernetes operator ([`cluster`]: Runs and Runtimes as
//! custom resources, Runtime Deployments, finalizers). Both are thin
//! adapters over the same pure parts — the lifecycle core of
//! `kruntimes-api` and the capacity [`scheduler`] — and both publish the
//! ownership table the gateway routes from.
#![forbid(unsafe_code)]

pub mod cli;
pub mod cluster;
pub mod embedded;
pub mod scheduler;
