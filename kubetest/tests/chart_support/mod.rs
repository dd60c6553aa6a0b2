//! What the chart tests share: renders as a set of objects, looked up by kind
//! and name, and converted to the typed Kubernetes structs to assert on.

#![allow(dead_code)] // each test binary uses a part of it

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kruntimes_kubetest::helm::{Helm, chart_dir, ci_values_files};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Release and namespace of every render.
pub const RELEASE: &str = "kr";
pub const NAMESPACE: &str = "kruntimes-system";
/// The name prefix of RELEASE's objects.
pub const FULLNAME: &str = "kr-kruntimes";

/// One render of the chart.
pub struct Rendered {
    pub objects: Vec<Value>,
    /// What was rendered, for messages.
    pub what: String,
}

impl Rendered {
    /// The chart with `values` files and `--set`s.
    pub fn new(helm: &Helm, values: &[&Path], set: &[&str]) -> Self {
        let mut extra = Vec::new();
        for s in set {
            extra.extend(["--set", s]);
        }
        let objects = helm
            .template(RELEASE, NAMESPACE, values, &extra)
            .unwrap_or_else(|e| panic!("render {values:?} {set:?}: {e:#}"));
        Self {
            objects,
            what: format!("{values:?} {set:?}"),
        }
    }

    /// One ci values file by its name (`tls-chart-values.yaml`).
    pub fn ci(helm: &Helm, file: &str) -> Self {
        Self::new(helm, &[&ci_file(file)], &[])
    }

    /// `(kind, name)` of every object.
    pub fn ids(&self) -> BTreeSet<(String, String)> {
        self.objects
            .iter()
            .map(|o| (str_at(o, "/kind"), str_at(o, "/metadata/name")))
            .collect()
    }

    /// Names of the objects of `kind`.
    pub fn names(&self, kind: &str) -> BTreeSet<String> {
        self.of_kind(kind)
            .map(|o| str_at(o, "/metadata/name"))
            .collect()
    }

    /// Objects of `kind`.
    pub fn of_kind<'a>(&'a self, kind: &str) -> impl Iterator<Item = &'a Value> + use<'a> {
        let kind = kind.to_owned();
        self.objects
            .iter()
            .filter(move |o| o.get("kind").and_then(Value::as_str) == Some(kind.as_str()))
    }

    /// The object `kind`/`name`, if rendered.
    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.of_kind(kind)
            .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
    }

    /// The object `kind`/`name` as `T`; panics when it is missing.
    pub fn get<T: DeserializeOwned>(&self, kind: &str, name: &str) -> T {
        let o = self
            .find(kind, name)
            .unwrap_or_else(|| panic!("{}: no {kind} {name} in {:?}", self.what, self.ids()));
        serde_json::from_value(o.clone())
            .unwrap_or_else(|e| panic!("{}: {kind} {name} does not parse: {e}", self.what))
    }

    /// Every Deployment, typed.
    pub fn deployments(&self) -> Vec<Deployment> {
        self.of_kind("Deployment")
            .map(|o| serde_json::from_value(o.clone()).expect("a Deployment"))
            .collect()
    }

    /// The gateway's Deployment, typed.
    pub fn gateway(&self) -> Deployment {
        self.get("Deployment", &format!("{FULLNAME}-gateway"))
    }

    /// The operator's Deployment, typed.
    pub fn operator(&self) -> Deployment {
        self.get("Deployment", &format!("{FULLNAME}-operator"))
    }
}

/// helm, built if needed.
pub fn helm() -> Helm {
    Helm::new().expect("build helm with kubetest/helm/build.sh")
}

/// The name of RELEASE's object `FULLNAME-suffix`.
pub fn name(suffix: &str) -> String {
    format!("{FULLNAME}-{suffix}")
}

/// `charts/kruntimes/ci/NAME`.
pub fn ci_file(name: &str) -> PathBuf {
    let p = chart_dir().join("ci").join(name);
    assert!(p.is_file(), "{} is missing", p.display());
    p
}

/// Every ci values file, with its name.
pub fn ci_files() -> Vec<(String, PathBuf)> {
    ci_values_files()
        .expect("list the ci values files")
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect()
}

/// The string at `pointer` of `v` ("" when absent).
pub fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The Pod template of a Deployment.
pub fn pod_template(d: &Deployment) -> &PodTemplateSpec {
    &d.spec.as_ref().expect("a Deployment spec").template
}

/// The arguments of the first container of a Deployment.
pub fn args(d: &Deployment) -> Vec<String> {
    let spec = pod_template(d).spec.as_ref().expect("a Pod spec");
    spec.containers[0].args.clone().unwrap_or_default()
}

/// The value of flag `--name=` in `args`, if given.
pub fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("{name}=");
    args.iter().find_map(|a| a.strip_prefix(&prefix))
}

/// The Secret a Pod template's volume `name` mounts, if it is a Secret volume.
pub fn secret_of_volume(t: &PodTemplateSpec, name: &str) -> Option<String> {
    t.spec
        .as_ref()?
        .volumes
        .as_ref()?
        .iter()
        .find(|v| v.name == name)?
        .secret
        .as_ref()?
        .secret_name
        .clone()
}

/// The operator's rendered arguments, parsed by its own flag parser.
pub fn operator_cli(r: &Rendered) -> kruntimes_operator::Args {
    use clap::Parser as _;
    let a = args(&r.operator());
    kruntimes_operator::Args::try_parse_from(
        std::iter::once("kruntimes-operator".to_string()).chain(a.clone()),
    )
    .unwrap_or_else(|e| panic!("{}: the operator refuses {a:?}: {e}", r.what))
}

/// What the operator keeps under `--internal-tls=managed`, from `args`
/// validated as the operator validates them; `label` names the case when
/// they are refused or name no managed TLS.
pub fn managed_tls(
    args: &kruntimes_operator::Args,
    label: &str,
) -> kruntimes_operator::cluster::certificates::ManagedTls {
    args.clone()
        .into_config()
        .unwrap_or_else(|e| panic!("{label}: {e:#}"))
        .managed_tls()
        .cloned()
        .unwrap_or_else(|| panic!("{label}: managed TLS"))
}

/// The in-cluster DNS names of Service `service` of the release namespace.
pub fn service_names(service: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{NAMESPACE}"),
        format!("{service}.{NAMESPACE}.svc"),
        format!("{service}.{NAMESPACE}.svc.cluster.local"),
    ]
}

/// `(resource, verb, name)` of every grant of `rules`, name `*` when a rule
/// names none (it then covers every object of the resource).
pub fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let names = rule
            .resource_names
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| vec!["*".into()]);
        for res in rule.resources.iter().flatten() {
            for verb in &rule.verbs {
                for n in &names {
                    out.insert((res.clone(), verb.clone(), n.clone()));
                }
            }
        }
    }
    out
}

/// Shorthand for a set of [`grants`].
pub fn grant_set(items: &[(&str, &str, &str)]) -> BTreeSet<(String, String, String)> {
    items
        .iter()
        .map(|(r, v, n)| (r.to_string(), v.to_string(), n.to_string()))
        .collect()
}
