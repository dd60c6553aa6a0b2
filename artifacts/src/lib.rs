//! The artifact store of kruntimes.
//!
//! A Run's artifacts are the files it leaves in `$KRUNTIME_ARTIFACTS_DIR`.
//! Its owner (runtimed, the one process of a Runtime Pod that holds the
//! store's credentials) reads them back from the Runtime Server, checks them
//! again and uploads them here ([`export`]); the gateway's artifacts route
//! reaches a runtimed of the Runtime, which streams them back from here
//! ([`Store::read`]), byte ranges included. Retention and the orphan sweep
//! compare [`Store::stored_runs`] with the Runs that exist ([`retention`]
//! decides, [`sweep`] deletes).
//!
//! One interface over S3-compatible servers and local directories: the
//! [`object_store`] crate. Keys:
//!
//! ```text
//! {prefix}/{namespace}/{runUID}/manifest.json     what the last export uploaded
//! {prefix}/{namespace}/{runUID}/files/{name}      each artifact
//! ```
//!
//! The manifest is written last: an export that did not finish has none,
//! and only what a manifest lists is ever served.

mod config;
mod export;
mod range;
pub mod retention;
mod store;
pub mod sweep;

pub use config::{
    ACCESS_KEY_ID_ENV, Credentials, S3Config, SECRET_ACCESS_KEY_ENV, STORE_ENV, StoreConfig,
};
pub use export::{ExportError, Limits, export};
pub use range::{ByteRange, parse_range};
pub use store::{
    INVOCATIONS, Manifest, Read, Scope, Store, StoreError, Upload, invocation_segment,
};
