//! The embedded static policy: subjects and groups → namespaces → verbs.
//!
//! ```yaml
//! rules:
//!   - groups: ["kruntimes:admins"]
//!     namespaces: ["*"]
//!     verbs: ["invoke", "session"]
//!   - subjects: ["ci-bot"]
//!     namespaces: ["ci"]
//!     verbs: ["invoke"]
//! ```

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{AuthError, Authorizer, Identity, Target};

/// One grant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Subjects the rule applies to.
    #[serde(default)]
    pub subjects: Vec<String>,
    /// Groups the rule applies to.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Namespaces (`*` for all).
    pub namespaces: Vec<String>,
    /// `invoke` and/or `session`.
    pub verbs: Vec<String>,
}

/// A static policy: allowed when any rule matches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Grants.
    pub rules: Vec<Rule>,
}

impl Policy {
    /// Whether `identity` may use `target`. Pure.
    pub fn allows(&self, identity: &Identity, target: &Target<'_>) -> bool {
        self.rules.iter().any(|r| {
            let who = r.subjects.contains(&identity.subject)
                || r.groups.iter().any(|g| identity.groups.contains(g));
            let ns = r
                .namespaces
                .iter()
                .any(|n| n == "*" || n == target.namespace);
            let verb = r.verbs.iter().any(|v| v == target.verb.as_str());
            who && ns && verb
        })
    }
}

/// [`Authorizer`] over a [`Policy`].
pub struct PolicyAuthorizer(pub Policy);

#[async_trait]
impl Authorizer for PolicyAuthorizer {
    async fn authorize(&self, identity: &Identity, target: &Target<'_>) -> Result<bool, AuthError> {
        Ok(self.0.allows(identity, target))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Verb;
    use super::*;

    fn id(sub: &str, groups: &[&str]) -> Identity {
        Identity::new(sub, groups.iter().map(|g| g.to_string()).collect())
    }

    fn target(ns: &str, verb: Verb) -> Target<'_> {
        Target {
            namespace: ns,
            name: "r",
            uid: "u",
            verb,
        }
    }

    fn policy() -> Policy {
        serde_yaml::from_str(
            "rules:\n- groups: [admins]\n  namespaces: ['*']\n  verbs: [invoke, session]\n- subjects: [bot]\n  namespaces: [ci]\n  verbs: [invoke]\n",
        )
        .unwrap()
    }

    #[test]
    fn groups_and_subjects_grant_per_namespace_and_verb() {
        let p = policy();
        assert!(p.allows(&id("x", &["admins"]), &target("any", Verb::Session)));
        assert!(p.allows(&id("bot", &[]), &target("ci", Verb::Invoke)));
        assert!(!p.allows(&id("bot", &[]), &target("prod", Verb::Invoke)));
        assert!(!p.allows(&id("bot", &[]), &target("ci", Verb::Session)));
        assert!(!p.allows(&id("eve", &["devs"]), &target("ci", Verb::Invoke)));
        assert!(!Policy::default().allows(&id("x", &["admins"]), &target("a", Verb::Invoke)));
    }
}
