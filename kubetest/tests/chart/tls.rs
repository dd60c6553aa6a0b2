//! The chart's TLS modes: what the operator manages (the internal TLS and
//! the public TLS of each mode) and which Secrets the operator and the
//! gateway mount.

use std::collections::BTreeSet;

use super::chart_support::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kruntimes_operator::cluster::certificates::PublicTls;
use kruntimes_operator::{InternalTls, PublicTlsArg};
use serde_json::Value;

/// The TLS modes: `(ci file, public TLS of the operator, gateway serving Secret, whether the
/// chart renders the CA ConfigMap)`.
const TLS_MODES: [(&str, PublicTlsArg, &str, bool); 4] = [
    (
        "tls-chart-values.yaml",
        PublicTlsArg::Managed,
        "kr-kruntimes-gateway-tls",
        false,
    ),
    (
        "tls-existing-secret-values.yaml",
        PublicTlsArg::Provided,
        "corp-gateway-tls",
        true,
    ),
    (
        "tls-existing-secret-no-ca-values.yaml",
        PublicTlsArg::Provided,
        "corp-gateway-tls",
        false,
    ),
    (
        "tls-cert-manager-values.yaml",
        PublicTlsArg::Provided,
        "kr-kruntimes-gateway-tls",
        false,
    ),
];

#[test]
fn a_plain_http_gateway_has_no_public_tls_to_issue_or_publish() {
    let helm = helm();
    let a = operator_cli(&Rendered::ci(&helm, "protocols-http-values.yaml"));
    assert_eq!(a.internal_tls, InternalTls::Managed);
    assert_eq!(a.public_tls, PublicTlsArg::None);
    let m = managed_tls(&a, "publicTLS none");
    assert_eq!(m.public, PublicTls::None);
}

#[test]
fn the_operator_manages_the_internal_tls_and_the_public_tls_of_its_mode() {
    let helm = helm();
    for (file, public, secret, _) in TLS_MODES {
        let r = Rendered::ci(&helm, file);
        let what = format!("{file}: the operator");
        let a = operator_cli(&r);
        assert_eq!(a.internal_tls, InternalTls::Managed, "{what}");
        assert_eq!(a.public_tls, public, "{what}");
        assert_eq!(a.gateway_tls_secret, secret, "{what}");
        assert_eq!(a.public_ca_secret, name("public-ca"), "{what}");
        assert_eq!(a.internal_tls_prefix, name("internal"), "{what}");
        assert_eq!(a.internal_tls_secret, name("internal-runtimed"), "{what}");
        assert_eq!(
            a.ca_configmap.as_deref(),
            Some(format!("{NAMESPACE}/{}", name("gateway-ca")).as_str()),
            "{what}"
        );
        assert_eq!(
            a.managed_tls_dir,
            std::path::PathBuf::from("/var/run/kruntimes/tls"),
            "{what}"
        );
        assert_eq!(a.watch_names, service_names(&name("operator")), "{what}");
        // The gateway Service's names, then the host of the gateway URL when it is another.
        let mut want = service_names(&name("gateway"));
        if file.contains("cert-manager") {
            want.push("kruntimes.example.com".into());
        }
        assert_eq!(a.gateway_names, want, "{what}");
        assert_eq!(
            (
                a.certificate_check_secs,
                a.leaf_validity_days,
                a.ca_validity_days
            ),
            (3600, 90, 3650),
            "{what}"
        );
        // The files mode's flags are not given: the operator serves the watch with its own.
        assert!(
            a.tls_cert.is_none() && a.tls_key.is_none() && a.client_ca.is_none(),
            "{what}"
        );
        let m = managed_tls(&a, &what);
        assert_eq!(m.namespace, NAMESPACE, "{what}");
        assert_eq!(m.ca_configmap, name("gateway-ca"), "{what}");
        assert_eq!(
            m.public,
            match public {
                PublicTlsArg::Managed => PublicTls::Managed,
                PublicTlsArg::Provided => PublicTls::Provided,
                PublicTlsArg::None => PublicTls::None,
            },
            "{what}"
        );
    }

    // The values behind the flags.
    let r = Rendered::new(
        &helm,
        &[],
        &[
            "operator.gatewayURL=https://kruntimes.example.com:8443/base",
            "tls.extraNames={10.0.0.7,edge.example.com,kruntimes.example.com}",
            "tls.certificateCheckSeconds=600",
            "tls.leafValidityDays=30",
            "tls.caValidityDays=365",
        ],
    );
    let a = operator_cli(&r);
    let mut want = service_names(&name("gateway"));
    want.extend(["kruntimes.example.com", "10.0.0.7", "edge.example.com"].map(String::from));
    assert_eq!(a.gateway_names, want, "each name once, the port dropped");
    assert_eq!(
        (
            a.certificate_check_secs,
            a.leaf_validity_days,
            a.ca_validity_days
        ),
        (600, 30, 365)
    );
    // What the operator writes is owned by its Deployment, unless kept after uninstall.
    let owned = operator_cli(&Rendered::new(&helm, &[], &[]));
    assert_eq!(
        (
            owned.owner_deployment.as_deref(),
            owned.keep_after_uninstall
        ),
        (Some(name("operator").as_str()), false)
    );
    let kept = operator_cli(&Rendered::new(&helm, &[], &["tls.keepAfterUninstall=true"]));
    assert_eq!(
        (kept.owner_deployment.as_deref(), kept.keep_after_uninstall),
        (Some(name("operator").as_str()), true)
    );
    let r = Rendered::new(&helm, &[], &["operator.gatewayURL=https://[fd00::1]:8443"]);
    assert_eq!(
        operator_cli(&r).gateway_names.last().map(String::as_str),
        Some("fd00::1")
    );
    // In cert-manager mode the same names go into the Certificate, IP addresses apart.
    let r = Rendered::new(
        &helm,
        &[&ci_file("tls-cert-manager-values.yaml")],
        &["tls.extraNames={10.0.0.7,edge.example.com}"],
    );
    let cert = r.find("Certificate", &name("gateway")).unwrap();
    let list = |p: &str| -> Vec<String> {
        cert.pointer(p)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let mut dns = service_names(&name("gateway"));
    dns.extend(["kruntimes.example.com", "edge.example.com"].map(String::from));
    assert_eq!(list("/spec/dnsNames"), dns);
    assert_eq!(list("/spec/ipAddresses"), vec!["10.0.0.7".to_string()]);

    // Over plain HTTP there is no public certificate to issue nor CA to publish.
    let r = Rendered::ci(&helm, "protocols-http-values.yaml");
    assert_eq!(operator_cli(&r).public_tls, PublicTlsArg::None);
    // Without the chart's gateway, the mode serves the gateway at the https URL.
    let r = Rendered::ci(&helm, "gateway-disabled-values.yaml");
    let a = operator_cli(&r);
    assert_eq!(a.public_tls, PublicTlsArg::Managed);
    assert!(a.gateway_names.contains(&"gateway.example.com".to_string()));
}

#[test]
fn the_operator_mounts_no_secret_and_the_gateway_the_secrets_of_its_mode() {
    let helm = helm();
    for (file, _, secret, renders_ca) in TLS_MODES {
        let r = Rendered::ci(&helm, file);
        // The operator creates its Secrets, so it mounts none (it would wait for itself): its
        // own material goes into a memory emptyDir at --managed-tls-dir.
        let op = r.operator();
        let spec = pod_template(&op).spec.clone().unwrap();
        for v in spec.volumes.iter().flatten() {
            let projects_secret = v
                .projected
                .as_ref()
                .is_some_and(|p| p.sources.iter().flatten().any(|s| s.secret.is_some()));
            assert!(
                v.secret.is_none() && !projects_secret,
                "{file}: the operator mounts a Secret ({})",
                v.name
            );
        }
        let dir = operator_cli(&r).managed_tls_dir;
        let mount = spec.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| std::path::Path::new(&m.mount_path) == dir)
            .unwrap_or_else(|| panic!("{file}: nothing mounted at {}", dir.display()));
        assert_ne!(mount.read_only, Some(true), "{file}");
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .unwrap();
        let empty_dir = volume.empty_dir.clone().expect("an emptyDir");
        assert_eq!(empty_dir.medium.as_deref(), Some("Memory"), "{file}");

        // The gateway: the serving Secret of the mode, and the operator's internal client
        // certificate with the internal CA bundle.
        let gw = r.gateway();
        let t = pod_template(&gw);
        assert_eq!(
            secret_of_volume(t, "public-tls").as_deref(),
            Some(secret),
            "{file}"
        );
        assert_eq!(
            secret_of_volume(t, "internal-tls"),
            Some(name("internal-gateway")),
            "{file}"
        );
        let mounts: BTreeSet<(String, String)> = t.spec.as_ref().unwrap().containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.clone(), m.mount_path.clone()))
            .collect();
        assert!(
            mounts.contains(&("public-tls".into(), "/etc/kruntimes/public".into()))
                && mounts.contains(&("internal-tls".into(), "/etc/kruntimes/internal".into())),
            "{file}: {mounts:?}"
        );
        use clap::Parser as _;
        let a = args(&gw);
        let g = kruntimes_gateway::Args::try_parse_from(
            std::iter::once("kruntimes-gateway".to_string()).chain(a.clone()),
        )
        .unwrap();
        let path = |p: &str| std::path::PathBuf::from(p);
        assert_eq!(g.tls_cert, Some(path("/etc/kruntimes/public/tls.crt")));
        assert_eq!(g.tls_key, Some(path("/etc/kruntimes/public/tls.key")));
        assert_eq!(g.internal_ca, path("/etc/kruntimes/internal/ca.crt"));
        assert_eq!(g.client_cert, path("/etc/kruntimes/internal/tls.crt"));
        assert_eq!(g.client_key, path("/etc/kruntimes/internal/tls.key"));
        // The names the gateway checks are those the operator's certificates carry.
        assert_eq!(
            g.control_plane_server_name,
            kruntimes_certs::install::CONTROL_PLANE_NAME
        );
        assert_eq!(
            g.runtimed_server_name,
            kruntimes_certs::install::RUNTIMED_SERVER_NAME
        );
        assert_eq!(
            operator_cli(&r).watch_clients,
            vec![kruntimes_certs::install::GATEWAY_CLIENT_NAME.to_string()]
        );
        assert_eq!(
            g.control_plane,
            format!("{}.{NAMESPACE}.svc:7444", name("operator"))
        );

        // The CA ConfigMap: rendered only with tls.existingSecret.caBundle, else the operator's.
        let cm = r.find("ConfigMap", &name("gateway-ca"));
        assert_eq!(cm.is_some(), renders_ca, "{file}");
        if let Some(cm) = cm {
            let cm: ConfigMap = serde_json::from_value(cm.clone()).unwrap();
            let data = cm.data.unwrap_or_default();
            assert_eq!(
                data.keys().collect::<Vec<_>>(),
                vec!["ca.crt"],
                "{file}: {data:?}"
            );
            assert!(data["ca.crt"].contains("BEGIN CERTIFICATE"), "{file}");
            assert!(
                !data["ca.crt"].contains("PRIVATE KEY"),
                "{file}: a key in the CA bundle"
            );
        }
        // In cert-manager mode, the Certificates write exactly the serving Secret (and the
        // chart's own CA), never an internal Secret.
        if file.contains("cert-manager") {
            let written: BTreeSet<String> = r
                .of_kind("Certificate")
                .map(|c| str_at(c, "/spec/secretName"))
                .collect();
            assert_eq!(
                written,
                [secret.to_string(), name("cert-manager-ca")].into(),
                "{file}"
            );
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
