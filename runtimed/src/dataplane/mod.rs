//! The one TLS port runtimed serves: the accept loop and its router
//! ([`server`]), who may call what ([`peer`]), WebSocket upgrades
//! ([`websocket`]), the `/v1/…` routes the gateway
//! forwards with their fencing headers ([`dispatch`]), and the control
//! plane's `Agent` service ([`agent`]). This is the only folder that sees
//! both function and session mode.

pub mod agent;
pub mod dispatch;
pub mod peer;
pub mod server;
pub mod websocket;

pub use peer::PeerPolicy;
pub use server::{ServeConfig, serve};
