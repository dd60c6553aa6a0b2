//! The chart's security properties, on parsed renders: every Pod template
//! hardened for the `restricted` Pod Security Standard, no credential beside
//! user code, network policies that confine Runtime Pods and never reach the
//! cloud metadata address, the runtimed admission policy, callers'
//! ClusterRoles, the operator's rights on the Secrets and ConfigMap it keeps,
//! and the values schema's refusals naming the bad key.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chart_support;

use std::collections::BTreeSet;

use chart_support::*;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kruntimes_kubetest::helm::chart_dir;
use serde_json::Value;

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
fn the_task_input_policy_is_the_shipped_file_and_only_warns() {
    let helm = helm();
    let shipped = kruntimes_kubetest::helm::parse_manifests(
        &std::fs::read_to_string(chart_dir().join("files/run-task-input-policy.yaml")).unwrap(),
    )
    .unwrap();
    let r = Rendered::new(&helm, &[], &[]);
    let policy = r
        .find("ValidatingAdmissionPolicy", &name("run-task-input"))
        .unwrap();
    assert_eq!(policy["spec"], shipped[0]["spec"]);
    let binding = r
        .find("ValidatingAdmissionPolicyBinding", &name("run-task-input"))
        .unwrap();
    assert_eq!(binding["spec"]["policyName"], name("run-task-input"));
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Warn"])
    );
}

#[test]
fn the_priority_policy_is_the_shipped_file_trusting_the_configured_group() {
    let helm = helm();
    let shipped = kruntimes_kubetest::helm::parse_manifests(
        &std::fs::read_to_string(chart_dir().join("files/run-priority-policy.yaml")).unwrap(),
    )
    .unwrap();
    // The default group: the file as it is.
    let r = Rendered::new(&helm, &[], &[]);
    let policy = r
        .find("ValidatingAdmissionPolicy", &name("run-priority"))
        .unwrap();
    assert_eq!(policy["spec"], shipped[0]["spec"]);
    let binding = r
        .find("ValidatingAdmissionPolicyBinding", &name("run-priority"))
        .unwrap();
    assert_eq!(binding["spec"]["policyName"], name("run-priority"));
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
    // Another group: trusted by the check and named by its message; nothing
    // else changes.
    let r = Rendered::new(
        &helm,
        &[],
        &["admissionPolicy.priorityGroup=platform:urgent"],
    );
    let policy = r
        .find("ValidatingAdmissionPolicy", &name("run-priority"))
        .unwrap();
    let trusted = str_at(policy, "/spec/variables/3/expression");
    assert!(
        trusted.contains("'platform:urgent' in request.userInfo.groups"),
        "{trusted}"
    );
    assert!(!trusted.contains("kruntimes:priority-high"), "{trusted}");
    let message = str_at(policy, "/spec/validations/0/messageExpression");
    assert!(message.contains("platform:urgent"), "{message}");
    assert_eq!(
        policy["spec"]["validations"][0]["expression"],
        shipped[0]["spec"]["validations"][0]["expression"]
    );
    assert_eq!(
        policy["spec"]["matchConstraints"],
        shipped[0]["spec"]["matchConstraints"]
    );
    let r = Rendered::new(&helm, &[], &["admissionPolicy.enabled=false"]);
    assert!(
        r.find("ValidatingAdmissionPolicy", &name("run-priority"))
            .is_none()
    );
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
    // Reading artifacts: `get` on its own subresource, nothing that runs code.
    let artifacts = rules("artifacts-reader");
    assert!(artifacts.contains(&("runs/artifacts".into(), "get".into())));
    assert!(
        artifacts
            .iter()
            .all(|(res, v)| res == "runs/artifacts" || (res == "runs" && v != "create")),
        "{artifacts:?}"
    );
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
fn the_operator_may_write_its_secrets_and_the_ca_configmap_in_the_release_namespace_only() {
    let helm = helm();
    let internal = [
        "internal-ca",
        "internal-runtimed",
        "internal-gateway",
        "internal-operator",
    ];
    for (file, public_managed, serving, configmap) in [
        ("tls-chart-values.yaml", true, name("gateway-tls"), true),
        (
            "tls-existing-secret-values.yaml",
            false,
            "corp-gateway-tls".to_string(),
            true,
        ),
        (
            "tls-existing-secret-no-ca-values.yaml",
            false,
            "corp-gateway-tls".to_string(),
            true,
        ),
        (
            "tls-cert-manager-values.yaml",
            false,
            name("gateway-tls"),
            true,
        ),
        // Plain HTTP: no CA bundle to publish, the (absent) serving Secret only read.
        (
            "protocols-http-values.yaml",
            false,
            name("gateway-tls"),
            false,
        ),
    ] {
        let r = Rendered::ci(&helm, file);
        let role: Role = r.get("Role", &name("operator-certificates"));
        assert_eq!(role.metadata.namespace.as_deref(), Some(NAMESPACE));
        let got = grants(&role.rules.unwrap_or_default());
        let mut want = grant_set(&[("secrets", "create", "*")]);
        let mut owned: Vec<String> = internal.iter().map(|n| name(n)).collect();
        if public_managed {
            owned.extend([name("public-ca"), serving.clone()]);
        } else {
            want.insert(("secrets".into(), "get".into(), serving.clone()));
        }
        for n in &owned {
            for verb in ["get", "update"] {
                want.insert(("secrets".into(), verb.into(), n.clone()));
            }
        }
        if configmap {
            want.insert(("configmaps".into(), "create".into(), "*".into()));
            for verb in ["get", "update"] {
                want.insert(("configmaps".into(), verb.into(), name("gateway-ca")));
            }
        }
        assert_eq!(got, want, "{file}");
        // Every Secret the operator is told to keep is one it may replace.
        let a = operator_cli(&r);
        for s in [
            format!("{}-ca", a.internal_tls_prefix),
            format!("{}-gateway", a.internal_tls_prefix),
            format!("{}-operator", a.internal_tls_prefix),
            a.internal_tls_secret.clone(),
        ] {
            assert!(
                got.contains(&("secrets".into(), "update".into(), s.clone())),
                "{file}: {s}"
            );
        }
        let binding: RoleBinding = r.get("RoleBinding", &name("operator-certificates"));
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(binding.role_ref.name, name("operator-certificates"));
        let subject = &binding.subjects.unwrap()[0];
        assert_eq!(
            (
                subject.kind.as_str(),
                subject.name.as_str(),
                subject.namespace.as_deref()
            ),
            ("ServiceAccount", name("operator").as_str(), Some(NAMESPACE))
        );
        // Nothing cluster-wide on Secrets, nor a write on ConfigMaps.
        let cluster: ClusterRole = r.get("ClusterRole", &name("operator"));
        let cluster = grants(&cluster.rules.unwrap_or_default());
        assert!(
            !cluster.iter().any(|(res, _, _)| res == "secrets"),
            "{file}: {cluster:?}"
        );
        assert!(
            !cluster
                .iter()
                .any(|(res, verb, _)| res == "configmaps" && verb != "get"),
            "{file}: {cluster:?}"
        );
        assert_eq!(r.names("Role"), [name("operator-certificates")].into());
    }

    // Runtimes elsewhere: runtimed's Secret, and only it, in each extra namespace.
    let r = Rendered::new(
        &helm,
        &[],
        &["operator.extraSecretNamespaces={team-a,team-b,kruntimes-system}"],
    );
    let roles: BTreeSet<(String, String)> = r
        .of_kind("Role")
        .map(|o| {
            (
                str_at(o, "/metadata/namespace"),
                str_at(o, "/metadata/name"),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            (NAMESPACE.to_string(), name("operator-certificates")),
            ("team-a".to_string(), name("operator-runtimed-tls")),
            ("team-b".to_string(), name("operator-runtimed-tls")),
        ]
        .into()
    );
    for o in r.of_kind("Role") {
        if str_at(o, "/metadata/namespace") == NAMESPACE {
            continue;
        }
        let role: Role = serde_json::from_value(o.clone()).unwrap();
        assert_eq!(
            grants(&role.rules.unwrap()),
            grant_set(&[
                ("secrets", "create", "*"),
                ("secrets", "get", &name("internal-runtimed")),
                ("secrets", "update", &name("internal-runtimed")),
            ])
        );
    }
    let bindings: Vec<RoleBinding> = r
        .of_kind("RoleBinding")
        .map(|o| serde_json::from_value(o.clone()).unwrap())
        .collect();
    assert_eq!(bindings.len(), 3);
    for b in bindings {
        let s = &b.subjects.unwrap()[0];
        assert_eq!(
            (s.name.as_str(), s.namespace.as_deref()),
            (name("operator").as_str(), Some(NAMESPACE))
        );
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
        ("tls.extraNames[0]=a b", "/tls/extraNames/0"),
        ("tls.extraNames[0]=", "/tls/extraNames/0"),
        (
            "tls.certificateCheckSeconds=0",
            "/tls/certificateCheckSeconds",
        ),
        ("tls.leafValidityDays=0", "/tls/leafValidityDays"),
        (
            "gateway.limits.routeSettleMilliseconds=10001",
            "/gateway/limits/routeSettleMilliseconds",
        ),
        (
            "gateway.limits.routeSettleMilliseconds=-1",
            "/gateway/limits/routeSettleMilliseconds",
        ),
        ("tls.caValidityDays=1.5", "/tls/caValidityDays"),
        (
            "operator.extraSecretNamespaces={Team_A}",
            "/operator/extraSecretNamespaces/0",
        ),
        (
            "operator.extraSecretNamespaces={team-a,team-a}",
            "/operator/extraSecretNamespaces",
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
