//! The Run a request addresses: parsed from its path, with the method, the
//! authorization verb and the Run mode its route implies. Pure.

use http::Method;
use kruntimes_proto::api::{self, ApiPath, Methods, SessionOp};
use kruntimes_proto::ownership::v1::Mode;

use crate::auth::{Target, Verb};
use kruntimes_proto::api::ApiError;

/// The Run a request addresses, borrowed from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTarget<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Runtime name.
    pub runtime: &'a str,
    /// Run UID.
    pub uid: &'a str,
    /// The session route, or `None` for a function invoke or the artifacts
    /// route.
    pub session: Option<SessionOp>,
    /// The artifacts route (list or download; any mode).
    pub artifacts: bool,
}

impl<'a> RunTarget<'a> {
    /// Parses a request path (without query string); `400 InvalidPath` for
    /// anything but a Run route.
    pub fn parse(path: &'a str) -> Result<Self, ApiError> {
        let (namespace, runtime, uid, session, artifacts) = match api::parse_path(path)? {
            ApiPath::Invoke {
                namespace,
                runtime,
                uid,
            } => (namespace, runtime, uid, None, false),
            ApiPath::Session {
                namespace,
                runtime,
                uid,
                op,
            } => (namespace, runtime, uid, Some(op), false),
            ApiPath::Artifacts {
                namespace,
                runtime,
                uid,
                ..
            } => (namespace, runtime, uid, None, true),
            ApiPath::Healthz | ApiPath::Readyz | ApiPath::Metrics => {
                return Err(ApiError::not_a_run_route());
            }
        };
        Ok(Self {
            namespace,
            runtime,
            uid,
            session,
            artifacts,
        })
    }

    /// Whether this is a session route.
    pub fn is_session(&self) -> bool {
        self.session.is_some()
    }

    /// The methods the route takes.
    pub fn methods(&self) -> Methods {
        match self.session {
            _ if self.artifacts => Methods::Get,
            None => Methods::Post,
            Some(op) => op.methods(),
        }
    }

    /// Rejects any other method than [`Self::methods`] (405).
    pub fn check_method(&self, method: &Method) -> Result<(), ApiError> {
        let expected = self.methods();
        if !expected.allow(method.as_str()) {
            return Err(ApiError::method_not_allowed(expected.as_str()));
        }
        Ok(())
    }

    /// The authorization subresource.
    pub fn verb(&self) -> Verb {
        if self.artifacts {
            Verb::Artifacts
        } else if self.is_session() {
            Verb::Session
        } else {
            Verb::Invoke
        }
    }

    /// The mode the addressed Run must have (the artifacts route serves
    /// Runs of every mode and never asks).
    pub fn mode(&self) -> Mode {
        if self.is_session() {
            Mode::Session
        } else {
            Mode::Function
        }
    }

    /// What authorization is asked about, once the table named the Run.
    pub fn authz_target(&self, run_name: &'a str) -> Target<'a> {
        Target {
            namespace: self.namespace,
            name: run_name,
            uid: self.uid,
            verb: self.verb(),
        }
    }
}

#[cfg(test)]
mod tests;
