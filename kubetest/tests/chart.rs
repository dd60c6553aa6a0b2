//! The Helm chart, rendered by a real helm (built by `kubetest/helm/build.sh`)
//! over the defaults and every `charts/kruntimes/ci/*-values.yaml`, asserted on
//! the parsed objects: which exist, how TLS and the protocol set are wired,
//! hardening, network policies, the admission policy, and the schema's
//! refusals. `chart_apiserver.rs` sends the same renders to a real API server.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chart_support;

use std::collections::BTreeSet;

use chart_support::*;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kruntimes_kubetest::helm::{Helm, chart_dir};
use serde_json::Value;

fn helm() -> Helm {
    Helm::new().expect("build helm with kubetest/helm/build.sh")
}

fn name(suffix: &str) -> String {
    format!("{FULLNAME}-{suffix}")
}

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
        ("ConfigMap", name("gateway-ca")),
        ("ServiceAccount", "kruntimes-runtime".into()),
        ("ClusterRole", name("runtimed")),
        ("ClusterRoleBinding", name("runtimed")),
        ("ClusterRole", name("run-invoker")),
        ("ClusterRole", name("session-user")),
        ("ClusterRole", name("run-reader")),
        ("ValidatingAdmissionPolicy", name("runtimed-own-runs")),
        (
            "ValidatingAdmissionPolicyBinding",
            name("runtimed-own-runs"),
        ),
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

    let r = Rendered::ci(&helm, "tls-cert-manager-values.yaml");
    assert_eq!(
        r.names("Issuer"),
        ["selfsigned", "internal-ca", "public-ca"]
            .iter()
            .map(|n| name(n))
            .collect()
    );
    assert_eq!(
        r.names("Certificate"),
        [
            "internal-ca",
            "public-ca",
            "gateway",
            "internal-runtimed",
            "internal-gateway",
            "internal-operator"
        ]
        .iter()
        .map(|n| name(n))
        .collect()
    );
    // With an Issuer of the cluster's, no public CA of the chart's.
    let r = Rendered::ci(&helm, "tls-cert-manager-issuer-values.yaml");
    assert!(!has(&r, "Issuer", &name("public-ca")));
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
    assert_eq!(
        r.find("Runtime", "bash-cold").unwrap()["spec"]["replicas"],
        0
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
fn the_gateway_mounts_the_secret_of_its_tls_mode() {
    let helm = helm();
    for (file, secret, ca_source) in [
        ("tls-chart-values.yaml", name("gateway-tls"), "operator"),
        (
            "tls-existing-secret-values.yaml",
            "corp-gateway-tls".into(),
            "values",
        ),
        (
            "tls-existing-secret-no-ca-values.yaml",
            "corp-gateway-tls".into(),
            "operator",
        ),
        (
            "tls-cert-manager-values.yaml",
            name("gateway-tls"),
            "operator",
        ),
    ] {
        let r = Rendered::ci(&helm, file);
        let gw = r.gateway();
        let t = pod_template(&gw);
        assert_eq!(
            secret_of_volume(t, "public-tls"),
            Some(secret.clone()),
            "{file}"
        );
        assert_eq!(
            secret_of_volume(t, "internal-tls"),
            Some(name("internal-gateway")),
            "{file}"
        );
        let a = args(&gw);
        assert_eq!(
            flag(&a, "--tls-cert"),
            Some("/etc/kruntimes/public/tls.crt")
        );
        assert_eq!(flag(&a, "--tls-key"), Some("/etc/kruntimes/public/tls.key"));
        // The operator's watch certificate and the Runtime Pods' Secret.
        let op = r.operator();
        assert_eq!(
            secret_of_volume(pod_template(&op), "watch-tls"),
            Some(name("internal-operator"))
        );
        assert_eq!(
            flag(&args(&op), "--internal-tls-secret"),
            Some(name("internal-runtimed").as_str())
        );
        assert_eq!(
            flag(&args(&op), "--ca-configmap"),
            Some(format!("{NAMESPACE}/{}", name("gateway-ca")).as_str())
        );
        // The published bundle: a certificate, never a key.
        let cm: ConfigMap = r.get("ConfigMap", &name("gateway-ca"));
        let annotations = cm.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations["kruntimes.io/ca-bundle-source"], ca_source,
            "{file}"
        );
        let data = cm.data.unwrap_or_default();
        assert!(data.keys().all(|k| k == "ca.crt"), "{file}: {data:?}");
        assert_eq!(data.contains_key("ca.crt"), ca_source == "values", "{file}");
        for pem in data.values() {
            assert!(
                !pem.contains("PRIVATE KEY"),
                "{file}: a key in the CA bundle"
            );
        }
        // In cert-manager mode, the Certificate writes exactly the mounted Secrets.
        if file.contains("cert-manager") {
            let written: BTreeSet<String> = r
                .of_kind("Certificate")
                .map(|c| str_at(c, "/spec/secretName"))
                .collect();
            for s in [
                secret.clone(),
                name("internal-gateway"),
                name("internal-operator"),
            ] {
                assert!(
                    written.contains(&s),
                    "{file}: nothing writes {s}: {written:?}"
                );
            }
            for c in r.of_kind("Certificate") {
                let issuer = str_at(c, "/spec/issuerRef/name");
                assert!(
                    r.find("Issuer", &issuer).is_some(),
                    "{file}: no Issuer {issuer}"
                );
            }
        }
    }
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
        // The operator publishes that URL and, with HTTPS, the CA bundle.
        let op = args(&r.operator());
        assert_eq!(flag(&op, "--gateway-url"), Some(url.as_str()), "{file}");
        assert_eq!(flag(&op, "--ca-configmap").is_some(), https, "{file}");
        assert_eq!(
            r.find("ConfigMap", &name("gateway-ca")).is_some(),
            https,
            "{file}"
        );
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
    // The operator is never rolled with two replicas at once.
    let op = r.operator();
    let spec = op.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.as_ref().unwrap().type_.as_deref(),
        Some("Recreate")
    );
}

#[test]
fn every_pod_template_is_hardened() {
    let helm = helm();
    let mut renders = vec![Rendered::new(&helm, &[], &[])];
    renders.extend(
        ci_files()
            .iter()
            .map(|(_, p)| Rendered::new(&helm, &[p], &[])),
    );
    let mut checked = 0;
    for r in &renders {
        for d in r.deployments() {
            let n = d.metadata.name.clone().unwrap();
            let spec = pod_template(&d).spec.clone().unwrap();
            let what = format!("{}: {n}", r.what);
            let pod = spec.security_context.clone().unwrap();
            assert_eq!(pod.run_as_non_root, Some(true), "{what}");
            assert_eq!(
                pod.seccomp_profile.unwrap().type_,
                "RuntimeDefault",
                "{what}"
            );
            assert!(
                spec.host_network != Some(true) && spec.host_pid != Some(true),
                "{what}"
            );
            assert!(spec.host_ipc != Some(true), "{what}");
            for v in spec.volumes.iter().flatten() {
                assert!(v.host_path.is_none(), "{what}: hostPath volume {}", v.name);
            }
            let containers = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten());
            for c in containers {
                let sc = c.security_context.clone().unwrap_or_default();
                let what = format!("{what}/{}", c.name);
                assert_eq!(sc.read_only_root_filesystem, Some(true), "{what}");
                assert_eq!(sc.allow_privilege_escalation, Some(false), "{what}");
                assert_ne!(sc.privileged, Some(true), "{what}");
                assert_eq!(sc.run_as_non_root, Some(true), "{what}");
                let caps = sc.capabilities.unwrap_or_default();
                assert_eq!(caps.drop, Some(vec!["ALL".to_string()]), "{what}");
                assert!(caps.add.unwrap_or_default().is_empty(), "{what}");
                assert_eq!(
                    sc.seccomp_profile.unwrap().type_,
                    "RuntimeDefault",
                    "{what}"
                );
                assert!(
                    c.readiness_probe.is_some() && c.liveness_probe.is_some(),
                    "{what}"
                );
                let image = c.image.clone().unwrap_or_default();
                assert!(
                    !image.ends_with(":") && image.contains(':'),
                    "{what}: {image}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} containers checked");
}

#[test]
fn runtime_pods_are_the_operators_and_templates_put_no_credential_beside_user_code() {
    let helm = helm();
    for (file, path) in ci_files() {
        let r = Rendered::new(&helm, &[&path], &[]);
        // The chart renders no Runtime Pod of its own: the operator does, with the token and
        // the internal key in runtimed alone.
        for d in r.deployments() {
            let labels = pod_template(&d).metadata.clone().unwrap().labels.unwrap();
            assert!(!labels.contains_key("kruntimes.io/runtime"), "{file}");
        }
        for rt in r.of_kind("Runtime") {
            let Some(t) = rt.pointer("/spec/template/spec") else {
                continue;
            };
            let what = format!("{file}: Runtime {}", str_at(rt, "/metadata/name"));
            assert_ne!(
                t.get("automountServiceAccountToken"),
                Some(&Value::Bool(true)),
                "{what}"
            );
            let credential_volumes: BTreeSet<String> = t["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v.get("secret").is_some() || v.get("projected").is_some())
                .map(|v| str_at(v, "/name"))
                .collect();
            for c in t["containers"].as_array().into_iter().flatten() {
                for m in c["volumeMounts"].as_array().into_iter().flatten() {
                    let v = str_at(m, "/name");
                    assert!(!credential_volumes.contains(&v), "{what}: mounts {v}");
                    assert!(
                        !str_at(m, "/mountPath").contains("serviceaccount"),
                        "{what}"
                    );
                }
                let env_from = c["envFrom"].as_array().into_iter().flatten();
                assert!(
                    env_from.filter(|e| e.get("secretRef").is_some()).count() == 0,
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn network_policies_confine_runtime_pods_and_never_reach_the_metadata_address() {
    let helm = helm();
    let r = Rendered::ci(&helm, "network-policy-values.yaml");
    let ingress: NetworkPolicy = r.get("NetworkPolicy", &name("runtime-ingress"));
    let spec = ingress.spec.unwrap();
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
    let rules = spec.ingress.unwrap();
    assert_eq!(rules.len(), 1);
    let from = rules[0].from.clone().unwrap();
    assert_eq!(from.len(), 1, "only the gateway Pods: {from:?}");
    let gw = r.gateway();
    assert_eq!(
        from[0].pod_selector.as_ref().unwrap().match_labels,
        gw.spec.as_ref().unwrap().selector.match_labels
    );
    let ports = rules[0].ports.clone().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(
        ports[0].port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(7443))
    );
    // Runtime Pods are what the operator labels kruntimes.io/runtime.
    let sel = spec.pod_selector.clone().unwrap();
    assert_eq!(
        sel.match_expressions.unwrap()[0].key,
        "kruntimes.io/runtime".to_string()
    );

    let egress: NetworkPolicy = r.get("NetworkPolicy", &name("runtime-egress"));
    let spec = egress.spec.unwrap();
    assert_eq!(spec.policy_types, Some(vec!["Egress".to_string()]));
    let rules = spec.egress.unwrap();
    // DNS, the API server, and the three allowlist entries.
    assert_eq!(rules.len(), 5, "{rules:?}");
    let dns = &rules[0];
    assert!(dns.to.as_ref().unwrap()[0].pod_selector.is_some());
    let dns_ports: Vec<i32> = dns
        .ports
        .iter()
        .flatten()
        .map(|p| match p.port {
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => n,
            _ => 0,
        })
        .collect();
    assert_eq!(dns_ports, vec![53, 53]);
    let mut blocks = 0;
    for rule in &rules {
        assert!(
            rule.to.as_ref().is_some_and(|t| !t.is_empty()),
            "a rule to everywhere"
        );
        for peer in rule.to.iter().flatten() {
            let Some(b) = &peer.ip_block else { continue };
            blocks += 1;
            let except = b.except.clone().unwrap_or_default();
            let holds_metadata = ["169.254.0.0/16", "0.0.0.0/0"].contains(&b.cidr.as_str());
            assert_eq!(
                except.contains(&"169.254.169.254/32".to_string()),
                holds_metadata,
                "{}: {except:?}",
                b.cidr
            );
        }
    }
    assert_eq!(
        blocks, 5,
        "API server, link-local, mirror, 0.0.0.0/0 and ::/0"
    );
    // A value naming the metadata address itself is refused.
    let err = helm
        .template(
            RELEASE,
            NAMESPACE,
            &[&ci_file("network-policy-values.yaml")],
            &[
                "--set",
                "networkPolicy.runtimeEgress[0].to[0].ipBlock.cidr=169.254.169.254/32",
            ],
        )
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("cloud metadata address"),
        "{err:#}"
    );

    // Without a gateway, only networkPolicy.dataplaneFrom reaches the dataplane.
    let r = Rendered::ci(&helm, "gateway-disabled-values.yaml");
    let ingress: NetworkPolicy = r.get("NetworkPolicy", &name("runtime-ingress"));
    let from = ingress.spec.unwrap().ingress.unwrap()[0]
        .from
        .clone()
        .unwrap();
    assert_eq!(from.len(), 1);
    assert!(from[0].namespace_selector.is_some() && from[0].pod_selector.is_none());
}

#[test]
fn the_admission_policy_is_the_shipped_file_for_this_release() {
    let helm = helm();
    let shipped = kruntimes_kubetest::helm::parse_manifests(
        &std::fs::read_to_string(chart_dir().join("files/runtimed-admission-policy.yaml")).unwrap(),
    )
    .unwrap();
    for (file, sa) in [
        ("tls-chart-values.yaml", "kruntimes-runtime"),
        ("custom-runtimes-values.yaml", "platform-runtime"),
    ] {
        let r = Rendered::ci(&helm, file);
        let policy = r
            .find("ValidatingAdmissionPolicy", &name("runtimed-own-runs"))
            .unwrap();
        assert_eq!(
            policy["spec"]["validations"],
            shipped[0]["spec"]["validations"]
        );
        assert_eq!(policy["spec"]["variables"], shipped[0]["spec"]["variables"]);
        assert_eq!(
            policy["spec"]["matchConstraints"],
            shipped[0]["spec"]["matchConstraints"]
        );
        let condition = str_at(policy, "/spec/matchConditions/0/expression");
        assert!(
            condition.ends_with(&format!("endsWith(':{sa}')")),
            "{condition}"
        );
        let binding = r
            .find(
                "ValidatingAdmissionPolicyBinding",
                &name("runtimed-own-runs"),
            )
            .unwrap();
        assert_eq!(binding["spec"]["policyName"], name("runtimed-own-runs"));
        assert_eq!(
            binding["spec"]["validationActions"],
            serde_json::json!(["Deny"])
        );
    }
    let r = Rendered::new(&helm, &[], &["admissionPolicy.enabled=false"]);
    assert!(r.names("ValidatingAdmissionPolicy").is_empty());
    assert!(r.names("ValidatingAdmissionPolicyBinding").is_empty());
}

#[test]
fn callers_cluster_roles_separate_reading_from_invoking() {
    let helm = helm();
    let r = Rendered::new(&helm, &[], &[]);
    let rules = |n: &str| -> BTreeSet<(String, String)> {
        let role: ClusterRole = r.get("ClusterRole", &name(n));
        role.rules
            .unwrap()
            .into_iter()
            .flat_map(|rule| {
                let verbs = rule.verbs.clone();
                rule.resources
                    .unwrap_or_default()
                    .into_iter()
                    .flat_map(move |res| verbs.clone().into_iter().map(move |v| (res.clone(), v)))
            })
            .collect()
    };
    assert!(rules("run-invoker").contains(&("runs/invoke".into(), "create".into())));
    assert!(rules("session-user").contains(&("runs/session".into(), "create".into())));
    let reader = rules("run-reader");
    assert!(
        reader
            .iter()
            .all(|(_, v)| ["get", "list", "watch"].contains(&v.as_str()))
    );
    assert!(
        !reader.iter().any(|(res, _)| res.contains('/')),
        "{reader:?}"
    );
    let labels = |n: &str| -> BTreeSet<String> {
        let role: ClusterRole = r.get("ClusterRole", &name(n));
        role.metadata
            .labels
            .unwrap()
            .into_iter()
            .filter(|(k, v)| {
                k.starts_with("rbac.authorization.k8s.io/aggregate-to-") && v == "true"
            })
            .map(|(k, _)| {
                k.trim_start_matches("rbac.authorization.k8s.io/aggregate-to-")
                    .into()
            })
            .collect()
    };
    assert_eq!(
        labels("run-invoker"),
        ["admin", "edit"].map(String::from).into()
    );
    assert_eq!(
        labels("session-user"),
        ["admin", "edit"].map(String::from).into()
    );
    assert_eq!(labels("run-reader"), ["view"].map(String::from).into());
    // The gateway may review, and read nothing.
    let gw: ClusterRole = r.get("ClusterRole", &name("gateway"));
    let resources: BTreeSet<String> = gw
        .rules
        .unwrap()
        .into_iter()
        .flat_map(|rule| rule.resources.unwrap_or_default())
        .collect();
    assert_eq!(
        resources,
        ["subjectaccessreviews", "tokenreviews"]
            .map(String::from)
            .into()
    );
    let r = Rendered::ci(&helm, "custom-runtimes-values.yaml");
    let role: ClusterRole = r.get("ClusterRole", &name("run-invoker"));
    assert!(
        !role
            .metadata
            .labels
            .unwrap()
            .keys()
            .any(|k| k.contains("aggregate-to"))
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

#[test]
fn the_schema_rejects_bad_values_naming_the_key() {
    let helm = helm();
    for (set, key) in [
        ("gateway.protocols={ftp}", "/gateway/protocols/0"),
        ("gateway.protocols=null", "missing property 'protocols'"),
        ("tls.mode=selfSigned", "/tls/mode"),
        ("tls.mode=existingSecret", "/tls/existingSecret/name"),
        ("gateway.service.type=ExternalName", "/gateway/service/type"),
        ("gateway.auth.mode=jwt", "/gateway/auth/mode"),
        ("gateway.replicas=-1", "/gateway/replicas"),
        ("gateway.protocol=https", "protocol"),
        (
            "networkPolicy.enabled=true",
            "/networkPolicy/kubeAPIServer/cidrs",
        ),
        ("runtimes[0].name=python", "/runtimes/0"),
        ("runtimes[0].name=Bad_Name", "/runtimes/0/name"),
        ("runtimes[0].capacity.runs=0", "/runtimes/0/capacity/runs"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        (
            "tls.certManager.issuerRef.kind=Issuer",
            "/tls/certManager/issuerRef",
        ),
    ] {
        let mut extra = vec!["--set", set];
        if set.starts_with("runtimes[0].name=python") {
            // A custom backend needs an image.
            extra.extend(["--set", "runtimes[0].backend=custom"]);
        }
        let err = helm
            .template(RELEASE, NAMESPACE, &[], &extra)
            .expect_err(set);
        let msg = format!("{err:#}");
        assert!(
            msg.contains("values don't meet the specifications"),
            "{set}: {msg}"
        );
        assert!(
            msg.contains(key),
            "{set}: the message does not name {key}: {msg}"
        );
    }
}
