//! The kruntimes control plane. Its decision core — the `Run` model and
//! validation, capacity scheduling, the lifecycle state machine and the
//! controller that turns events into register/unregister actions — is pure
//! and shared by both deployments: the Kubernetes operator and the embedded
//! control plane (`embedded`), which reads Run manifests from a directory,
//! drives runtimed over gRPC and publishes the ownership table the gateway
//! routes from.
#![forbid(unsafe_code)]

pub mod cli;
pub mod cluster;
pub mod controller;
pub mod crd;
pub mod embedded;
pub mod lifecycle;
pub mod model;
pub mod scheduler;
pub mod store;
