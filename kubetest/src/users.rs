//! The identities of the test API server: its static-token users and the
//! subjects a RoleBinding can grant to.

use k8s_openapi::api::rbac::v1::Subject as RbacSubject;

/// The static-token users of the test API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum User {
    /// Cluster admin (`system:masters`).
    Admin,
    /// A user tests grant access to.
    Alice,
    /// A user tests grant access to.
    Bob,
    /// A user tests grant access to.
    Carol,
    /// The identity the gateway runs as.
    Gateway,
    /// The identity the operator runs as.
    Operator,
    /// The identity runtimed runs as.
    Runtimed,
}

impl User {
    /// Every user.
    pub const ALL: [User; 7] = [
        User::Admin,
        User::Alice,
        User::Bob,
        User::Carol,
        User::Gateway,
        User::Operator,
        User::Runtimed,
    ];

    /// The user name the API server reports.
    pub fn name(self) -> &'static str {
        match self {
            User::Admin => "admin",
            User::Alice => "alice",
            User::Bob => "bob",
            User::Carol => "carol",
            User::Gateway => "kruntimes-gateway",
            User::Operator => "kruntimes-operator",
            User::Runtimed => "kruntimes-runtimed",
        }
    }

    /// The groups of the user's line in the static token file.
    pub(crate) fn groups(self) -> &'static str {
        match self {
            User::Admin => "system:masters",
            User::Alice | User::Bob | User::Carol => "kruntimes-testers",
            User::Gateway | User::Operator | User::Runtimed => "kruntimes-components",
        }
    }
}

/// Who a binding grants to.
#[derive(Debug, Clone)]
pub enum Subject {
    /// A static-token user.
    User(User),
    /// A ServiceAccount `(namespace, name)`.
    ServiceAccount(String, String),
}

impl Subject {
    /// The RBAC subject of a binding.
    pub(crate) fn to_rbac(&self) -> RbacSubject {
        match self {
            Subject::User(u) => RbacSubject {
                kind: "User".into(),
                name: u.name().into(),
                api_group: Some("rbac.authorization.k8s.io".into()),
                namespace: None,
            },
            Subject::ServiceAccount(ns, name) => RbacSubject {
                kind: "ServiceAccount".into(),
                name: name.clone(),
                api_group: None,
                namespace: Some(ns.clone()),
            },
        }
    }
}
