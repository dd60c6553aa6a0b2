//! Who owns what the operator writes: its Deployment in its namespace, the
//! Runtimes elsewhere (so the garbage collector removes the CAs and
//! certificates with the installation), or nobody (`keep_after_uninstall`).
//! [`Owners`] is the pure rule; [`adopt`] applies it to an object kept as it is.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kruntimes_api::Runtime;
use kube::ResourceExt as _;
use kube::api::{Api, PostParams};

use super::{Ensured, ManagedTls};
use crate::error::Doing as _;

/// The owners the operator's objects should have: `add` (kept once, after
/// the owners already there) and none of those `drop` matches; every other
/// owner is kept, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Owners {
    /// Owners every object should carry.
    pub add: Vec<OwnerReference>,
    /// `(kind, name)` of owners to remove; a `None` name: every one of that kind.
    pub drop: Vec<(String, Option<String>)>,
}

impl Owners {
    /// `held` as it should be, or `None` when it is already.
    pub fn apply(&self, held: &[OwnerReference]) -> Option<Vec<OwnerReference>> {
        let mut all: Vec<OwnerReference> =
            held.iter().filter(|o| !self.drops(o)).cloned().collect();
        for o in &self.add {
            if !all.iter().any(|h| h.uid == o.uid) {
                all.push(o.clone());
            }
        }
        (all != held).then_some(all)
    }

    /// The owner references an object written now carries, given those it
    /// had (`None` for none, as the API server stores it).
    pub fn resolved(&self, held: &[OwnerReference]) -> Option<Vec<OwnerReference>> {
        let all = self.apply(held).unwrap_or_else(|| held.to_vec());
        (!all.is_empty()).then_some(all)
    }

    fn drops(&self, o: &OwnerReference) -> bool {
        self.drop
            .iter()
            .any(|(kind, name)| o.kind == *kind && name.as_ref().is_none_or(|n| *n == o.name))
    }
}

/// A reference to `kind` `name` (`uid`) that the garbage collector follows
/// and nothing else (no controller, no blocking of its deletion).
pub(super) fn owner_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        ..Default::default()
    }
}

/// Makes the owners of `held` what `owners` says (a Secret or ConfigMap
/// written before they were known, by an older operator, or before
/// `keep_after_uninstall` changed): the object read, replaced at its
/// `resourceVersion` (the chart grants `update` by name, never `patch`).
pub(super) async fn adopt<K>(api: &Api<K>, held: &K, owners: &Owners) -> crate::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Some(all) = owners.apply(held.meta().owner_references.as_deref().unwrap_or_default())
    else {
        return Ok(());
    };
    let name = held.name_any();
    let mut object = held.clone();
    let count = all.len();
    object.meta_mut().owner_references = Some(all).filter(|a| !a.is_empty());
    api.replace(&name, &PostParams::default(), &object)
        .await
        .doing(|| format!("set the owners of {name}"))?;
    tracing::info!(object = %name, owners = count, "owners set");
    Ok(())
}

/// The owners of what is written in the operator's namespace: its
/// Deployment, when one is named and found (a warning otherwise: the pass
/// goes on, and what it writes outlives the installation until a later pass
/// finds the Deployment).
pub(super) async fn release_owners(
    client: &kube::Client,
    cfg: &ManagedTls,
    out: &mut Ensured,
) -> crate::Result<Owners> {
    let Some(name) = &cfg.owner_deployment else {
        return Ok(Owners::default());
    };
    if cfg.keep_after_uninstall {
        return Ok(Owners {
            add: Vec::new(),
            drop: vec![("Deployment".into(), Some(name.clone()))],
        });
    }
    let found = Api::<Deployment>::namespaced(client.clone(), &cfg.namespace)
        .get_opt(name)
        .await
        .doing(|| format!("read Deployment {name}"))?;
    match found.and_then(|d| d.uid()) {
        Some(uid) => Ok(Owners {
            add: vec![owner_ref("apps/v1", "Deployment", name, &uid)],
            drop: Vec::new(),
        }),
        None => {
            let why = format!(
                "the owner Deployment {}/{name} was not found: what the operator writes is not removed with it",
                cfg.namespace
            );
            tracing::warn!(deployment = %name, "{why}");
            out.warnings.push(why);
            Ok(Owners::default())
        }
    }
}

/// The owners of runtimed's Secret in namespace `ns`, not the operator's:
/// the Runtimes there (it goes with the last), none with
/// `keep_after_uninstall`, and unchanged without an owner Deployment.
pub(super) fn namespace_owners(cfg: &ManagedTls, runtimes: &[Runtime], ns: &str) -> Owners {
    if cfg.owner_deployment.is_none() {
        return Owners::default();
    }
    if cfg.keep_after_uninstall {
        return Owners {
            add: Vec::new(),
            drop: vec![("Runtime".into(), None)],
        };
    }
    let add = runtimes
        .iter()
        .filter(|r| r.namespace().as_deref() == Some(ns))
        .filter_map(|r| {
            let uid = r.uid()?;
            Some(owner_ref(
                "kruntimes.io/v1alpha1",
                "Runtime",
                &r.name_any(),
                &uid,
            ))
        })
        .collect();
    Owners {
        add,
        drop: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(uid: &str) -> OwnerReference {
        owner_ref("apps/v1", "Deployment", "op", uid)
    }

    fn add(refs: &[OwnerReference]) -> Owners {
        Owners {
            add: refs.to_vec(),
            drop: Vec::new(),
        }
    }

    fn uids(refs: &[OwnerReference]) -> Vec<&str> {
        refs.iter().map(|o| o.uid.as_str()).collect()
    }

    #[test]
    fn owners_already_held_need_nothing() {
        assert_eq!(add(&[r("a")]).apply(&[r("a")]), None);
        assert_eq!(add(&[r("a")]).apply(&[r("x"), r("a")]), None);
        assert_eq!(add(&[]).apply(&[]), None);
        assert_eq!(add(&[]).apply(&[r("x")]), None);
    }

    #[test]
    fn missing_owners_are_added_after_the_held_ones_in_order() {
        let all = add(&[r("a"), r("x"), r("b")]).apply(&[r("x")]).unwrap();
        assert_eq!(uids(&all), ["x", "a", "b"]);
        assert_eq!(add(&[r("a")]).apply(&[]).unwrap(), [r("a")]);
    }

    #[test]
    fn dropped_owners_go_and_every_other_stays() {
        let runtime = owner_ref("kruntimes.io/v1alpha1", "Runtime", "python", "rt");
        let other = owner_ref("apps/v1", "Deployment", "someone-else", "other");
        let held = [r("a"), runtime.clone(), other.clone()];
        let by_name = Owners {
            add: Vec::new(),
            drop: vec![("Deployment".into(), Some("op".into()))],
        };
        assert_eq!(uids(&by_name.apply(&held).unwrap()), ["rt", "other"]);
        let every_runtime = Owners {
            add: Vec::new(),
            drop: vec![("Runtime".into(), None)],
        };
        assert_eq!(uids(&every_runtime.apply(&held).unwrap()), ["a", "other"]);
        // Nothing to drop: unchanged.
        assert_eq!(by_name.apply(&[runtime, other]), None);
    }

    #[test]
    fn an_owner_reference_neither_controls_nor_blocks_deletion() {
        let o = r("a");
        assert_eq!((o.controller, o.block_owner_deletion), (None, None));
        assert_eq!(
            (o.api_version.as_str(), o.kind.as_str()),
            ("apps/v1", "Deployment")
        );
    }
}
