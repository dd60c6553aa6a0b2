//! A real Kubernetes API server for tests: `etcd` + `kube-apiserver`, built
//! from the Go module proxy by `kubetest/envtest/build.sh`, started on free
//! loopback ports in a temporary directory.
//!
//! The API server runs with a generated serving certificate, a static token
//! file (one token per [`User`]), RBAC authorization, service-account signing
//! keys (so the TokenRequest API issues real JWTs), the default admission
//! plugins (Pod Security admission among them; the ServiceAccount plugin
//! only on request, [`ApiServerOptions`]) and the kruntimes CRDs from
//! `charts/kruntimes/crds/`. Both processes are stopped when the
//! [`ApiServer`] is dropped.
//!
//! There is no kubelet, no controller manager and no scheduler: tests create
//! the objects those would (Pods, their status) themselves.
//!
//! When the binaries are missing, [`ApiServer::start`] fails with the command
//! that builds them; a test that needs the API server never passes without it.
//!
//! Modules, by concern: `binaries` (where etcd, kube-apiserver and the CRDs
//! live), `pki` (the credentials a server starts with), `process` (the two
//! processes), `server` ([`ApiServer`]'s lifecycle), `access` (kubeconfigs
//! and clients), `crds`, `rbac`, `tokens` (service-account JWTs), `metrics`
//! (API-call counts), `users` ([`User`], [`Subject`]); [`cluster`] installs
//! kruntimes itself on top; [`helm`] builds helm and renders the chart;
//! [`node`] wraps `kubetest/node/cluster.sh`, a real single-node cluster
//! (kubelet, containerd, kube-proxy, CoreDNS) for the end-to-end tests.

mod access;
mod binaries;
pub mod cluster;
mod crds;
pub mod helm;
mod metrics;
pub mod node;
mod pki;
mod process;
mod rbac;
mod server;
mod tokens;
mod users;

pub use binaries::{binaries_dir, crd_dir};
pub use pki::{API_AUDIENCE, SA_ISSUER};
pub use server::{ApiServer, ApiServerOptions};
pub use tokens::{foreign_signing_key, mint_service_account_token};
pub use users::{Subject, User};
