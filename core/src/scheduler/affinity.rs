//! Run affinity and anti-affinity (`spec.affinity`): label selectors over
//! the Runs that hold a Runtime Pod, in the Run's own namespace. The
//! topology is the Runtime Pod: "together" means on the same Pod.
//!
//! These types are the API's own (`kruntimes-api` puts them in the Run's
//! spec), so the scheduler reads exactly what the user wrote.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most terms of one kind (`required` or `preferred`) a Run may list.
pub const MAX_TERMS: usize = 8;

/// Labels of a Run.
pub type Labels = BTreeMap<String, String>;

/// `spec.affinity`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Affinity {
    /// Runs this Run wants to share a Pod with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_affinity: Option<RunAffinity>,
    /// Runs this Run must not (or would rather not) share a Pod with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_anti_affinity: Option<RunAffinity>,
}

/// Required and preferred terms of one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunAffinity {
    /// Every term must hold on the chosen Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub required: Vec<RunAffinityTerm>,
    /// Terms that hold add their weight to a Pod's score.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub preferred: Vec<WeightedRunAffinityTerm>,
}

/// One term: Runs on the same Pod whose labels match the selector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunAffinityTerm {
    /// Which Runs (of the same namespace) the term is about.
    pub label_selector: LabelSelector,
}

/// A preferred term and its weight.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WeightedRunAffinityTerm {
    /// 1 to 100.
    #[schemars(range(min = 1, max = 100))]
    pub weight: u32,
    /// Which Runs (of the same namespace) the term is about.
    pub label_selector: LabelSelector,
}

/// A Kubernetes label selector: every `matchLabels` pair and every
/// expression must hold. An empty selector matches every Run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Hash)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    /// Labels that must be present with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Further requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Hash)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// How the label's value is tested.
    pub operator: Operator,
    /// Values for `In` and `NotIn` (empty for `Exists` and `DoesNotExist`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub values: Vec<String>,
}

/// `matchExpressions[].operator`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Hash)]
pub enum Operator {
    /// The label is present with one of the values.
    #[default]
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    Operator::In => value.is_some_and(|v| r.values.contains(v)),
                    Operator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    Operator::Exists => value.is_some(),
                    Operator::DoesNotExist => value.is_none(),
                }
            })
    }

    /// Why the selector is malformed, as the API server says it.
    pub fn validate(&self, at: &str) -> Result<(), String> {
        for (i, r) in self.match_expressions.iter().enumerate() {
            let set = matches!(r.operator, Operator::In | Operator::NotIn);
            if set == r.values.is_empty() {
                return Err(format!(
                    "{at}.matchExpressions[{i}]: {:?} {}",
                    r.operator,
                    if set {
                        "needs at least one value"
                    } else {
                        "takes no values"
                    }
                ));
            }
        }
        Ok(())
    }
}

impl Affinity {
    /// The required affinity terms.
    pub fn required(&self) -> &[RunAffinityTerm] {
        self.run_affinity.as_ref().map_or(&[], |a| &a.required)
    }

    /// The required anti-affinity terms.
    pub fn required_anti(&self) -> &[RunAffinityTerm] {
        self.run_anti_affinity.as_ref().map_or(&[], |a| &a.required)
    }

    /// The preferred affinity terms.
    pub fn preferred(&self) -> &[WeightedRunAffinityTerm] {
        self.run_affinity.as_ref().map_or(&[], |a| &a.preferred)
    }

    /// The preferred anti-affinity terms.
    pub fn preferred_anti(&self) -> &[WeightedRunAffinityTerm] {
        self.run_anti_affinity
            .as_ref()
            .map_or(&[], |a| &a.preferred)
    }

    /// Whether any term is set.
    pub fn is_empty(&self) -> bool {
        self.required().is_empty()
            && self.required_anti().is_empty()
            && self.preferred().is_empty()
            && self.preferred_anti().is_empty()
    }

    /// Why the affinity is malformed (bounds, weights, selectors).
    pub fn validate(&self) -> Result<(), String> {
        for (kind, a) in [
            ("runAffinity", &self.run_affinity),
            ("runAntiAffinity", &self.run_anti_affinity),
        ] {
            let Some(a) = a else { continue };
            if a.required.len() > MAX_TERMS || a.preferred.len() > MAX_TERMS {
                return Err(format!(
                    "spec.affinity.{kind} lists more than {MAX_TERMS} required or preferred terms"
                ));
            }
            for (i, t) in a.required.iter().enumerate() {
                t.label_selector
                    .validate(&format!("spec.affinity.{kind}.required[{i}].labelSelector"))?;
            }
            for (i, t) in a.preferred.iter().enumerate() {
                if !(1..=100).contains(&t.weight) {
                    return Err(format!(
                        "spec.affinity.{kind}.preferred[{i}].weight must be 1 to 100"
                    ));
                }
                t.label_selector.validate(&format!(
                    "spec.affinity.{kind}.preferred[{i}].labelSelector"
                ))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn expr(key: &str, operator: Operator, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: vec![Requirement {
                key: key.into(),
                operator,
                values: values.iter().map(|v| (*v).into()).collect(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn selectors_match_as_kubernetes_label_selectors_do() {
        let l = labels(&[("app", "web"), ("tier", "gold")]);
        assert!(LabelSelector::default().matches(&l));
        let by_label = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            ..Default::default()
        };
        assert!(by_label.matches(&l));
        assert!(!by_label.matches(&labels(&[("app", "db")])));
        assert!(expr("tier", Operator::In, &["gold", "silver"]).matches(&l));
        assert!(!expr("tier", Operator::In, &["bronze"]).matches(&l));
        assert!(!expr("tier", Operator::NotIn, &["gold"]).matches(&l));
        assert!(expr("zone", Operator::NotIn, &["a"]).matches(&l));
        assert!(expr("app", Operator::Exists, &[]).matches(&l));
        assert!(!expr("app", Operator::DoesNotExist, &[]).matches(&l));
        assert!(expr("zone", Operator::DoesNotExist, &[]).matches(&l));
    }

    #[test]
    fn malformed_affinity_is_refused_with_its_path() {
        let mut a = Affinity {
            run_affinity: Some(RunAffinity {
                required: vec![RunAffinityTerm {
                    label_selector: expr("app", Operator::In, &[]),
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = a.validate().unwrap_err();
        assert!(
            err.contains("spec.affinity.runAffinity.required[0]"),
            "{err}"
        );
        a.run_affinity = Some(RunAffinity {
            preferred: vec![WeightedRunAffinityTerm {
                weight: 0,
                label_selector: LabelSelector::default(),
            }],
            ..Default::default()
        });
        assert!(
            a.validate()
                .unwrap_err()
                .contains("weight must be 1 to 100")
        );
        a.run_affinity = None;
        a.run_anti_affinity = Some(RunAffinity {
            required: vec![RunAffinityTerm::default(); MAX_TERMS + 1],
            ..Default::default()
        });
        assert!(a.validate().unwrap_err().contains("more than 8"));
        assert!(Affinity::default().validate().is_ok() && Affinity::default().is_empty());
    }

    #[test]
    fn the_api_shape_round_trips() {
        let yaml = serde_json::json!({
            "runAffinity": {"required": [{"labelSelector": {"matchLabels": {"app": "web"}}}]},
            "runAntiAffinity": {"preferred": [{"weight": 50, "labelSelector": {
                "matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}}]}
        });
        let a: Affinity = serde_json::from_value(yaml.clone()).unwrap();
        assert_eq!(a.required().len(), 1);
        assert_eq!(a.preferred_anti()[0].weight, 50);
        assert_eq!(serde_json::to_value(&a).unwrap(), yaml);
        let unknown = serde_json::json!({"podAffinity": {}});
        assert!(serde_json::from_value::<Affinity>(unknown).is_err());
    }
}
