//! The cluster side of the daemons' plumbing (operator, runtimed's
//! Kubernetes adapter, the gateway, `krt`): the Kubernetes client, the
//! reflector caches and the finalizer patch ([`kube`]), and the Prometheus
//! listener ([`metrics`]). Nothing here decides anything about a Run.
//! What every process needs, the Runtime Server included, is in the
//! kube-free `kruntimes-process`.
#![forbid(unsafe_code)]

pub mod kube;
pub mod metrics;
