//! Authorization with `SubjectAccessReview`: verb `create` on
//! `kruntimes.io/runs/<invoke|session>` for the exact Run, so RBAC can
//! separate "may read Runs" from "may invoke them".

use async_trait::async_trait;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

use super::{GROUP, KubeCalls, RUNS_RESOURCE};
use crate::auth::{AuthError, Authorizer, Identity, Target};

/// Authorizes with `SubjectAccessReview`: verb `create` on
/// `kruntimes.io/runs/<invoke|session>` for the exact Run.
pub struct SubjectAccessReviewAuthorizer {
    calls: KubeCalls,
}

impl SubjectAccessReviewAuthorizer {
    /// Wraps the API client.
    pub fn new(calls: KubeCalls) -> Self {
        Self { calls }
    }
}

/// The review sent for `identity` and `target` (pure; unit tested).
pub fn access_review(identity: &Identity, target: &Target<'_>) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(identity.subject.clone()),
            groups: Some(identity.groups.clone()),
            uid: identity.uid.clone(),
            extra: (!identity.extra.is_empty()).then(|| identity.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some(RUNS_RESOURCE.into()),
                subresource: Some(target.verb.as_str().into()),
                verb: Some(target.verb.review_verb().into()),
                namespace: Some(target.namespace.to_owned()),
                name: Some(target.name.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

#[async_trait]
impl Authorizer for SubjectAccessReviewAuthorizer {
    async fn authorize(&self, identity: &Identity, target: &Target<'_>) -> Result<bool, AuthError> {
        let review = access_review(identity, target);
        let result = self.calls.create("subjectaccessreview", review).await?;
        let status = result.status.unwrap_or_default();
        Ok(status.allowed && status.denied != Some(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Verb;

    #[test]
    fn access_review_names_the_exact_run_and_subresource() {
        let mut id = Identity::new("alice", vec!["devs".into()]);
        id.uid = Some("u-1".into());
        id.extra.insert("k".into(), vec!["v".into()]);
        for (verb, sub) in [(Verb::Invoke, "invoke"), (Verb::Session, "session")] {
            let t = Target {
                namespace: "a",
                name: "hello",
                uid: "0e0c",
                verb,
            };
            let r = access_review(&id, &t).spec;
            let ra = r.resource_attributes.unwrap();
            assert_eq!(ra.group.as_deref(), Some("kruntimes.io"));
            assert_eq!(ra.resource.as_deref(), Some("runs"));
            assert_eq!(ra.subresource.as_deref(), Some(sub));
            assert_eq!(ra.verb.as_deref(), Some("create"));
            assert_eq!(ra.namespace.as_deref(), Some("a"));
            assert_eq!(ra.name.as_deref(), Some("hello"));
            assert_eq!(r.user.as_deref(), Some("alice"));
            assert_eq!(r.groups, Some(vec!["devs".to_string()]));
            assert_eq!(r.uid.as_deref(), Some("u-1"));
            assert_eq!(r.extra.unwrap()["k"], vec!["v".to_string()]);
        }
    }
}
