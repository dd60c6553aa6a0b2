//! The Helm chart, rendered by a real helm (built by `kubetest/helm/build.sh`)
//! over the defaults and every `charts/kruntimes/ci/*-values.yaml`, asserted on
//! the parsed objects: lint, which objects exist, how the protocol set is
//! wired, the gateway's spread; `chart/tls.rs` the TLS modes. `chart_security.rs` covers hardening,
//! network policies, RBAC and the schema; `chart_apiserver.rs` sends the same
//! renders to a real API server.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chart_support;
#[path = "chart/tls.rs"]
mod tls;

use std::collections::BTreeSet;

use chart_support::*;
use k8s_openapi::api::core::v1::Service;
use kruntimes_kubetest::helm::chart_dir;
use kruntimes_operator::{InternalTls, PublicTlsArg};

#[test]
fn chart_app_version_is_the_workspace_version() {
    let chart: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(chart["apiVersion"].as_str(), Some("v2"));
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "Chart.yaml's appVersion must follow [workspace.package] version"
    );
}

#[test]
fn lint_passes_for_the_defaults_and_every_ci_values_file() {
    let helm = helm();
    helm.lint(None).unwrap();
    let files = ci_files();
    assert!(files.len() >= 10, "{files:?}");
    for (file, path) in files {
        helm.lint(Some(&path))
            .unwrap_or_else(|e| panic!("{file}: {e:#}"));
    }
}

#[test]
fn every_values_file_renders_each_object_once() {
    let helm = helm();
    for (file, path) in ci_files() {
        let r = Rendered::new(&helm, &[&path], &[]);
        let mut seen = BTreeSet::new();
        for o in &r.objects {
            let id = (
                str_at(o, "/apiVersion"),
                str_at(o, "/kind"),
                str_at(o, "/metadata/namespace"),
                str_at(o, "/metadata/name"),
            );
            assert!(!id.3.is_empty(), "{file}: an object without a name: {o}");
            assert!(seen.insert(id.clone()), "{file}: {id:?} rendered twice");
            let labels = o.pointer("/metadata/labels").cloned().unwrap_or_default();
            assert_eq!(
                labels["app.kubernetes.io/instance"], RELEASE,
                "{file}: {id:?} lacks the release labels"
            );
        }
    }
}

#[test]
fn the_defaults_render_operator_gateway_rbac_policy_and_two_runtimes() {
    let r = Rendered::new(&helm(), &[], &[]);
    let ids = r.ids();
    for (kind, n) in [
        ("Deployment", name("operator")),
        ("ServiceAccount", name("operator")),
        ("ClusterRole", name("operator")),
        ("ClusterRoleBinding", name("operator")),
        ("Service", name("operator")),
        ("Service", name("operator-metrics")),
        ("Deployment", name("gateway")),
        ("ServiceAccount", name("gateway")),
        ("ClusterRole", name("gateway")),
        ("ClusterRoleBinding", name("gateway")),
        ("Service", name("gateway")),
        ("Service", name("gateway-metrics")),
        ("PodDisruptionBudget", name("gateway")),
        ("Role", name("operator-certificates")),
        ("RoleBinding", name("operator-certificates")),
        ("ServiceAccount", "kruntimes-runtime".into()),
        ("ClusterRole", name("runtimed")),
        ("ClusterRoleBinding", name("runtimed")),
        ("ClusterRole", name("run-invoker")),
        ("ClusterRole", name("session-user")),
        ("ClusterRole", name("artifacts-reader")),
        ("ClusterRole", name("run-reader")),
        ("ValidatingAdmissionPolicy", name("runtimed-own-runs")),
        (
            "ValidatingAdmissionPolicyBinding",
            name("runtimed-own-runs"),
        ),
        ("ValidatingAdmissionPolicy", name("run-priority")),
        ("ValidatingAdmissionPolicyBinding", name("run-priority")),
        ("Runtime", "python".into()),
        ("Runtime", "bash".into()),
    ] {
        assert!(
            ids.contains(&(kind.into(), n.clone())),
            "no {kind} {n} in {ids:?}"
        );
    }
    assert_eq!(r.names("NetworkPolicy"), BTreeSet::new(), "off by default");
    assert_eq!(r.names("Certificate"), BTreeSet::new());
    // The operator creates the CA ConfigMap and every Secret: the chart renders neither.
    assert_eq!(r.names("ConfigMap"), BTreeSet::new());
    assert_eq!(r.names("Secret"), BTreeSet::new());
    assert_eq!(r.names("Runtime").len(), 2);
    // The gateway's Service is internal unless asked otherwise.
    let svc: Service = r.get("Service", &name("gateway"));
    assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
    // The image follows the chart's appVersion.
    let op = r.operator();
    let image = pod_template(&op).spec.as_ref().unwrap().containers[0]
        .image
        .clone();
    assert_eq!(
        image.as_deref(),
        Some(format!("ghcr.io/kruntimes/operator:{}", env!("CARGO_PKG_VERSION")).as_str())
    );
}

#[test]
fn each_ci_values_file_renders_what_it_asks_for() {
    let helm = helm();
    let has = |r: &Rendered, kind: &str, n: &str| r.find(kind, n).is_some();
    let r = Rendered::ci(&helm, "gateway-disabled-values.yaml");
    for (kind, n) in [
        ("Deployment", "gateway"),
        ("Service", "gateway"),
        ("ClusterRole", "gateway"),
        ("PodDisruptionBudget", "gateway"),
        ("ConfigMap", "gateway-ca"),
    ] {
        assert!(!has(&r, kind, &name(n)), "gateway disabled, yet {kind} {n}");
    }
    assert!(has(&r, "Deployment", &name("operator")));
    assert_eq!(
        flag(&args(&r.operator()), "--gateway-url"),
        Some("https://gateway.example.com")
    );

    let r = Rendered::ci(&helm, "network-policy-values.yaml");
    assert_eq!(
        r.names("NetworkPolicy"),
        ["runtime-ingress", "runtime-egress", "operator", "gateway"]
            .iter()
            .map(|n| name(n))
            .collect()
    );
    let r = Rendered::ci(&helm, "network-policy-off-values.yaml");
    assert!(r.names("NetworkPolicy").is_empty());

    // cert-manager issues the gateway's certificate only (the internal ones are the
    // operator's), from a self-signed CA of the chart's named apart from the operator's
    // FULLNAME-public-ca.
    let r = Rendered::ci(&helm, "tls-cert-manager-values.yaml");
    assert_eq!(
        r.names("Issuer"),
        ["selfsigned", "cert-manager-ca"]
            .iter()
            .map(|n| name(n))
            .collect()
    );
    assert_eq!(
        r.names("Certificate"),
        ["cert-manager-ca", "gateway"]
            .iter()
            .map(|n| name(n))
            .collect()
    );
    // With an Issuer of the cluster's, no CA of the chart's.
    let r = Rendered::ci(&helm, "tls-cert-manager-issuer-values.yaml");
    assert_eq!(r.names("Issuer"), BTreeSet::new());
    assert_eq!(r.names("Certificate"), [name("gateway")].into());
    let cert = r.find("Certificate", &name("gateway")).unwrap();
    assert_eq!(cert["spec"]["issuerRef"]["name"], "letsencrypt");
    assert_eq!(cert["spec"]["issuerRef"]["kind"], "ClusterIssuer");
    let svc: Service = r.get("Service", &name("gateway"));
    assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("LoadBalancer"));

    let r = Rendered::ci(&helm, "custom-runtimes-values.yaml");
    assert_eq!(
        r.names("Runtime"),
        ["python", "node", "bash-cold"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    let node = r.find("Runtime", "node").unwrap();
    assert_eq!(node["spec"]["backend"], "custom");
    assert_eq!(
        node["spec"]["image"],
        "registry.example.com/platform/runtime-node:1.2.3"
    );
    let python = r.find("Runtime", "python").unwrap();
    assert_eq!(python["spec"]["replicas"], 4);
    assert_eq!(python["spec"]["capacity"]["runs"], 32);
    assert_eq!(
        python["spec"]["image"],
        "registry.example.com/platform/kruntimes/runtime-python:0.1.0-rc1"
    );
    let cold = r.find("Runtime", "bash-cold").unwrap();
    assert_eq!(cold["spec"]["replicas"], 0);
    assert_eq!(
        cold["spec"]["pool"],
        serde_json::json!({"minIdle": 1, "maxReplicas": 10, "scaleDownDelaySeconds": 120})
    );
    assert_eq!(
        node["spec"]["capacity"]["resources"],
        serde_json::json!({"cpu": "2", "memory": "4Gi"})
    );
    assert_eq!(
        flag(&args(&r.operator()), "--runtime-service-account"),
        Some("platform-runtime")
    );
    assert!(has(&r, "ServiceAccount", "platform-runtime"));
    assert_eq!(
        flag(&args(&r.operator()), "--runtimed-image"),
        Some("registry.example.com/platform/kruntimes/runtimed:0.1.0-rc1")
    );
}

#[test]
fn listeners_service_ports_and_probes_follow_the_protocol_set() {
    let helm = helm();
    for (file, protocols, url) in [
        (
            "tls-chart-values.yaml",
            &["https"][..],
            format!("https://{FULLNAME}-gateway.{NAMESPACE}.svc"),
        ),
        (
            "protocols-http-values.yaml",
            &["http"][..],
            format!("http://{FULLNAME}-gateway.{NAMESPACE}.svc"),
        ),
        (
            "protocols-both-values.yaml",
            &["https", "http"][..],
            format!("https://{FULLNAME}-gateway.{NAMESPACE}.svc"),
        ),
    ] {
        let r = Rendered::ci(&helm, file);
        let gw = r.gateway();
        let a = args(&gw);
        let https = protocols.contains(&"https");
        let http = protocols.contains(&"http");
        assert_eq!(flag(&a, "--https-listen").is_some(), https, "{file}");
        assert_eq!(flag(&a, "--tls-cert").is_some(), https, "{file}");
        assert_eq!(flag(&a, "--http-listen").is_some(), http, "{file}");
        assert_eq!(flag(&a, "--auth"), Some("kubernetes"));
        assert_eq!(flag(&a, "--token-audiences"), Some("kruntimes-gateway"));
        assert_eq!(
            flag(&a, "--control-plane"),
            Some(format!("{FULLNAME}-operator.{NAMESPACE}.svc:7444").as_str())
        );
        assert!(flag(&a, "--metrics-listen").is_some());
        let t = pod_template(&gw);
        assert_eq!(secret_of_volume(t, "public-tls").is_some(), https, "{file}");
        let svc: Service = r.get("Service", &name("gateway"));
        let ports: BTreeSet<String> = svc
            .spec
            .unwrap()
            .ports
            .unwrap()
            .into_iter()
            .map(|p| p.name.unwrap())
            .collect();
        let want: BTreeSet<String> = protocols.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            ports, want,
            "{file}: the public Service never carries metrics"
        );
        // The probes use a public listener, HTTPS when there is one.
        let c = &t.spec.as_ref().unwrap().containers[0];
        let probe = c
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(probe.path.as_deref(), Some("/readyz"));
        assert_eq!(
            probe.scheme.as_deref(),
            Some(if https { "HTTPS" } else { "HTTP" })
        );
        // The operator publishes that URL and, with HTTPS, issues the certificate and
        // publishes its CA bundle (into the ConfigMap it creates itself).
        let op = args(&r.operator());
        assert_eq!(flag(&op, "--gateway-url"), Some(url.as_str()), "{file}");
        assert_eq!(
            operator_cli(&r).public_tls,
            if https {
                PublicTlsArg::Managed
            } else {
                PublicTlsArg::None
            },
            "{file}"
        );
        assert!(r.find("ConfigMap", &name("gateway-ca")).is_none(), "{file}");
    }
    let r = Rendered::ci(&helm, "protocols-http-values.yaml");
    let svc: Service = r.get("Service", &name("gateway"));
    let spec = svc.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("NodePort"));
    assert_eq!(spec.ports.unwrap()[0].node_port, Some(30080));
}

#[test]
fn the_gateway_spreads_and_keeps_replicas_through_disruptions() {
    let helm = helm();
    let r = Rendered::new(&helm, &[], &[]);
    let gw = r.gateway();
    assert_eq!(gw.spec.as_ref().unwrap().replicas, Some(2));
    let aff = pod_template(&gw)
        .spec
        .as_ref()
        .unwrap()
        .affinity
        .clone()
        .unwrap();
    let anti = aff.pod_anti_affinity.unwrap();
    assert!(
        anti.required_during_scheduling_ignored_during_execution
            .is_none()
    );
    let soft = anti
        .preferred_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(
        soft[0].pod_affinity_term.topology_key,
        "kubernetes.io/hostname"
    );
    let pdb = r.find("PodDisruptionBudget", &name("gateway")).unwrap();
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        serde_json::to_value(
            gw.spec
                .as_ref()
                .unwrap()
                .selector
                .match_labels
                .clone()
                .unwrap()
        )
        .unwrap()
    );
    let r = Rendered::ci(&helm, "protocols-both-values.yaml");
    let gw = r.gateway();
    assert_eq!(gw.spec.as_ref().unwrap().replicas, Some(3));
    let anti = pod_template(&gw)
        .spec
        .as_ref()
        .unwrap()
        .affinity
        .clone()
        .unwrap();
    assert!(
        anti.pod_anti_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .is_some()
    );
    // Two operator replicas elect a leader (each knows its own name).
    let op = r.operator();
    let spec = op.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let container = &pod_template(&op).spec.as_ref().unwrap().containers[0];
    let args = container.args.clone().unwrap_or_default();
    assert!(args.contains(&"--leader-election".to_owned()), "{args:?}");
    assert!(
        args.contains(&"--lease-duration-secs=15".to_owned()),
        "{args:?}"
    );
    let env = container.env.clone().unwrap_or_default();
    let pod_name = env.iter().find(|e| e.name == "POD_NAME").unwrap();
    assert_eq!(
        pod_name
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str()),
        Some("metadata.name")
    );
}

#[test]
fn renders_are_stable() {
    let helm = helm();
    for (file, path) in ci_files() {
        let a = Rendered::new(&helm, &[&path], &[]).objects;
        let b = Rendered::new(&helm, &[&path], &[]).objects;
        assert_eq!(a, b, "{file}: two renders differ (randomness or lookup?)");
    }
}

/// Paths of the keys `values.yaml` documents with a `# --` comment (helm-docs
/// style): the comment opens on the lines just above the key.
fn documented_keys(values: &str) -> BTreeSet<String> {
    let mut documented = BTreeSet::new();
    let mut stack: Vec<String> = Vec::new();
    let mut pending = false;
    for line in values.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("# --") {
            pending = true;
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        let depth = (line.len() - trimmed.len()) / 2;
        stack.truncate(depth);
        stack.push(key.to_owned());
        if std::mem::take(&mut pending) {
            documented.insert(stack.join("."));
        }
    }
    documented
}

/// Paths of the leaves of `v`: scalars, lists and empty maps.
fn leaf_keys(prefix: &str, v: &serde_yaml::Value, out: &mut Vec<String>) {
    match v {
        serde_yaml::Value::Mapping(m) if !m.is_empty() => {
            for (k, child) in m {
                let k = k.as_str().unwrap();
                let path = if prefix.is_empty() {
                    k.to_owned()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_keys(&path, child, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

#[test]
fn every_value_is_documented_and_listed_in_the_readme() {
    let dir = chart_dir();
    let text = std::fs::read_to_string(dir.join("values.yaml")).unwrap();
    let documented = documented_keys(&text);
    let mut leaves = Vec::new();
    leaf_keys("", &serde_yaml::from_str(&text).unwrap(), &mut leaves);
    assert!(leaves.len() > 80, "{leaves:?}");
    for leaf in &leaves {
        let parts: Vec<&str> = leaf.split('.').collect();
        let covered = (1..=parts.len()).any(|n| documented.contains(&parts[..n].join(".")));
        assert!(
            covered,
            "values.yaml: {leaf} has no `# --` comment (nor has a parent)"
        );
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for key in &documented {
        assert!(
            readme.contains(&format!("| `{key}` |")),
            "README.md's values table lacks {key}"
        );
    }
}

#[test]
fn every_rendered_flag_is_one_the_binaries_parse() {
    use clap::Parser as _;
    let helm = helm();
    let mut renders = vec![Rendered::new(&helm, &[], &[])];
    renders.extend(
        ci_files()
            .iter()
            .map(|(_, p)| Rendered::new(&helm, &[p], &[])),
    );
    for r in &renders {
        let op = args(&r.operator());
        let parsed = kruntimes_operator::Args::try_parse_from(
            std::iter::once("kruntimes-operator".to_string()).chain(op.clone()),
        )
        .unwrap_or_else(|e| panic!("{}: the operator refuses {op:?}: {e}", r.what));
        assert_eq!(parsed.system_namespace, NAMESPACE);
        assert_eq!(parsed.internal_tls, InternalTls::Managed, "{}", r.what);
        managed_tls(&parsed, &r.what);
        assert_eq!(
            Some(parsed.gateway_url.as_str()),
            flag(&op, "--gateway-url")
        );
        if r.find("Deployment", &name("gateway")).is_none() {
            continue;
        }
        let gw = args(&r.gateway());
        let parsed = kruntimes_gateway::Args::try_parse_from(
            std::iter::once("kruntimes-gateway".to_string()).chain(gw.clone()),
        )
        .unwrap_or_else(|e| panic!("{}: the gateway refuses {gw:?}: {e}", r.what));
        assert_eq!(parsed.auth, kruntimes_gateway::AuthMode::Kubernetes);
        assert!(parsed.access_log);
        assert_eq!(parsed.https_listen.is_some(), parsed.tls_cert.is_some());
        // The Pod outlives the gateway's shutdown grace by 10 s.
        assert_eq!(parsed.shutdown_grace_secs, 5, "{}", r.what);
        // A Ready Run is routable: the settle window is on by default.
        assert_eq!(parsed.route_settle_ms, 250, "{}", r.what);
        let grace = r.find("Deployment", &name("gateway")).unwrap()["spec"]["template"]["spec"]
            ["terminationGracePeriodSeconds"]
            .as_u64();
        assert_eq!(grace, Some(15), "{}", r.what);
    }
    let r = Rendered::new(
        &helm,
        &[],
        &[
            "gateway.shutdownGraceSeconds=30",
            "gateway.limits.routeSettleMilliseconds=0",
        ],
    );
    let gw = args(&r.gateway());
    assert_eq!(flag(&gw, "--shutdown-grace-secs"), Some("30"));
    assert_eq!(flag(&gw, "--route-settle-ms"), Some("0"));
    let d = r.find("Deployment", &name("gateway")).unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        40
    );
}

#[test]
fn the_artifact_store_goes_to_every_runtime_and_is_checked() {
    let helm = helm();
    let r = Rendered::new(
        &helm,
        &[],
        &[
            "artifactStore.bucket=kruntimes-artifacts",
            "artifactStore.endpoint=https://minio.storage:9000",
            "artifactStore.credentialsSecret.name=kruntimes-artifacts",
            "artifactStore.retainAfterRunSeconds=604800",
        ],
    );
    for rt in ["python", "bash"] {
        let runtime: kruntimes_api::Runtime = r.get("Runtime", rt);
        let store = runtime.spec.artifact_store.expect("an artifact store");
        assert_eq!(store.bucket, "kruntimes-artifacts", "{rt}");
        assert_eq!(store.retain_after_run_seconds, Some(604_800));
        assert_eq!(
            store.credentials_secret.unwrap().name,
            "kruntimes-artifacts"
        );
    }
    // Off by default.
    let defaults = Rendered::new(&helm, &[], &[]);
    let runtime: kruntimes_api::Runtime = defaults.get("Runtime", "python");
    assert!(runtime.spec.artifact_store.is_none());
    // A store without a bucket, or with an unknown field, is refused.
    for bad in [
        "artifactStore.endpoint=https://minio:9000",
        "artifactStore.bucket=b,artifactStore.secretKey=x",
    ] {
        let err = helm
            .template("t", "kruntimes-system", &[], &["--set", bad])
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("artifactStore"),
            "{bad}: {err:#}"
        );
    }
}
