//! Chart-managed TLS against a real kube-apiserver: the operator's
//! certificate pass creates the CAs, every component's Secret and the
//! public bundle ConfigMap when they are missing; keeps them when present;
//! renews a leaf near expiry (and only it), reissues one whose names
//! changed, keeps runtimed's Secret in every Runtime's namespace, and in
//! `provided` mode publishes an existing Secret's `ca.crt` without issuing
//! a public certificate; with an owner Deployment, everything it writes is
//! owned (by the Deployment in its namespace, by the Runtimes elsewhere), and
//! what an older pass wrote without owners is adopted. The material is
//! checked by building real TLS configurations from it.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kruntimes_certs::managed::{self, Lifetimes};
use kruntimes_kubetest::ApiServer;
use kruntimes_operator::cluster::certificates::{self, ManagedTls, PublicTls};
use kube::api::{Api, ObjectMeta, PostParams};

const NS: &str = "kruntimes-system";

fn cfg() -> ManagedTls {
    ManagedTls {
        namespace: NS.into(),
        public: PublicTls::Managed,
        public_ca_secret: "kr-public-ca".into(),
        gateway_secret: "kr-gateway-tls".into(),
        gateway_names: vec![
            "kr-gateway".into(),
            "kr-gateway.kruntimes-system.svc".into(),
            "127.0.0.1".into(),
        ],
        internal_prefix: "kr-internal".into(),
        runtimed_secret: "kr-internal-runtimed".into(),
        operator_names: vec!["kr-operator.kruntimes-system.svc".into()],
        ca_configmap: "kr-gateway-ca".into(),
        lifetimes: Lifetimes {
            ca_days: 3650,
            leaf_days: 90,
        },
        owner_deployment: None,
        keep_after_uninstall: false,
    }
}

fn text(s: &Secret, key: &str) -> String {
    String::from_utf8(s.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

async fn secret(client: &kube::Client, ns: &str, name: &str) -> Secret {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Secret {ns}/{name}: {e}"))
}

async fn bundle(client: &kube::Client) -> String {
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get("kr-gateway-ca")
        .await
        .unwrap()
        .data
        .unwrap()["ca.crt"]
        .clone()
}

/// `tls.crt`, `tls.key` and `ca.crt` of `s` written to a directory.
fn files(s: &Secret) -> (tempfile::TempDir, kruntimes_certs::TlsFiles) {
    let dir = tempfile::tempdir().unwrap();
    for k in ["tls.crt", "tls.key", "ca.crt"] {
        std::fs::write(dir.path().join(k), text(s, k)).unwrap();
    }
    let f = kruntimes_certs::TlsFiles {
        ca: dir.path().join("ca.crt"),
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    (dir, f)
}

/// A full TLS handshake in memory: `server` serving `name`, a client
/// trusting the server Secret's `ca.crt` and presenting `client`'s
/// certificate if given (then the server requires one from its `ca.crt`).
fn handshake(server: &Secret, name: &str, client: Option<&Secret>) {
    use std::sync::Arc;
    let (_sd, sf) = files(server);
    let client_files = client.map(files);
    let server_cfg = kruntimes_certs::server_config(
        &sf.cert,
        &sf.key,
        client.map(|_| sf.ca.as_path()),
        &[b"h2"],
    )
    .unwrap();
    let identity = client_files
        .as_ref()
        .map(|(_, f)| (f.cert.as_path(), f.key.as_path()));
    let client_cfg = kruntimes_certs::client_config(&sf.ca, identity, &[b"h2"]).unwrap();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let mut c = rustls::ClientConnection::new(Arc::new(client_cfg), server_name).unwrap();
    let mut s = rustls::ServerConnection::new(Arc::new(server_cfg)).unwrap();
    for _ in 0..10 {
        let mut buf = Vec::new();
        c.write_tls(&mut buf).unwrap();
        s.read_tls(&mut &buf[..]).unwrap();
        s.process_new_packets()
            .unwrap_or_else(|e| panic!("server side, {name}: {e}"));
        let mut buf = Vec::new();
        s.write_tls(&mut buf).unwrap();
        c.read_tls(&mut &buf[..]).unwrap();
        c.process_new_packets()
            .unwrap_or_else(|e| panic!("client side, {name}: {e}"));
        if !c.is_handshaking() && !s.is_handshaking() {
            return;
        }
    }
    panic!("no handshake for {name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_created_when_missing_kept_when_present_and_renewed_near_expiry() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server = ApiServer::start().await.unwrap();
    let client = server.client().await.unwrap();
    server.create_namespace(NS).await.unwrap();
    server.create_namespace("team-a").await.unwrap();
    let runtime: kruntimes_api::Runtime = serde_json::from_value(serde_json::json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": "python", "namespace": "team-a"},
        "spec": {"runtime": "python", "image": "python:3.12-slim"}
    }))
    .unwrap();
    Api::<kruntimes_api::Runtime>::namespaced(client.clone(), "team-a")
        .create(&PostParams::default(), &runtime)
        .await
        .unwrap();

    // Nothing exists: everything is issued.
    let first = certificates::ensure(&client, &cfg()).await.unwrap();
    for name in [
        "kruntimes-system/kr-public-ca",
        "kruntimes-system/kr-gateway-tls",
        "kruntimes-system/kr-internal-ca",
        "kruntimes-system/kr-internal-gateway",
        "kruntimes-system/kr-internal-operator",
        "kruntimes-system/kr-internal-runtimed",
        "team-a/kr-internal-runtimed",
    ] {
        assert_eq!(
            first.issued.get(name).map(String::as_str),
            Some("missing"),
            "{name}: {first:?}"
        );
    }
    let gateway = secret(&client, NS, "kr-gateway-tls").await;
    assert_eq!(gateway.type_.as_deref(), Some("kubernetes.io/tls"));
    let public_ca = secret(&client, NS, "kr-public-ca").await;
    assert_eq!(text(&gateway, "ca.crt"), bundle(&client).await);
    assert!(
        !bundle(&client).await.contains("PRIVATE KEY"),
        "the ConfigMap holds no key"
    );
    assert_eq!(
        managed::facts(&text(&gateway, "tls.crt")).unwrap().names,
        vec!["127.0.0.1", "kr-gateway", "kr-gateway.kruntimes-system.svc"]
    );
    let operator = secret(&client, NS, "kr-internal-operator").await;
    assert!(
        managed::facts(&text(&operator, "tls.crt"))
            .unwrap()
            .names
            .contains(&"kruntimes-control-plane".to_owned())
    );
    let gateway_client = secret(&client, NS, "kr-internal-gateway").await;
    let runtimed = secret(&client, "team-a", "kr-internal-runtimed").await;
    handshake(&gateway, "kr-gateway.kruntimes-system.svc", None);
    handshake(&operator, "kruntimes-control-plane", Some(&gateway_client));
    handshake(
        &runtimed,
        "runtimed.kruntimes.internal",
        Some(&gateway_client),
    );

    // Present and valid: nothing is written, the CAs are the same.
    let again = certificates::ensure(&client, &cfg()).await.unwrap();
    assert!(again.issued.is_empty(), "{again:?}");
    assert_eq!(
        text(&secret(&client, NS, "kr-public-ca").await, "tls.crt"),
        text(&public_ca, "tls.crt")
    );
    assert_eq!(
        secret(&client, NS, "kr-gateway-tls")
            .await
            .metadata
            .resource_version,
        gateway.metadata.resource_version
    );

    // Two months on, every leaf is in the last third of its 90 days: each
    // is renewed, by the same CA; the CAs are kept.
    let now = time::OffsetDateTime::now_utc();
    let later = certificates::ensure_at(&client, &cfg(), now + time::Duration::days(61))
        .await
        .unwrap();
    assert_eq!(later.issued.len(), 5, "every leaf: {later:?}");
    assert!(
        later.issued.values().all(|why| why == "near expiry"),
        "{later:?}"
    );
    assert_eq!(
        text(&secret(&client, NS, "kr-public-ca").await, "tls.crt"),
        text(&public_ca, "tls.crt"),
        "the CA is kept"
    );
    assert_ne!(
        text(&secret(&client, NS, "kr-gateway-tls").await, "tls.crt"),
        text(&gateway, "tls.crt")
    );
    let ca = kruntimes_certs::Ca {
        cert_pem: text(&public_ca, "tls.crt"),
        key_pem: text(&public_ca, "tls.key"),
    };
    let mut renamed = cfg();
    renamed.gateway_names.push("gateway.example.com".into());
    let reissued = certificates::ensure(&client, &renamed).await.unwrap();
    assert_eq!(
        reissued.issued,
        BTreeMap::from([(
            "kruntimes-system/kr-gateway-tls".to_owned(),
            "names changed".to_owned()
        )])
    );
    let gateway = secret(&client, NS, "kr-gateway-tls").await;
    let facts = managed::facts(&text(&gateway, "tls.crt")).unwrap();
    assert!(facts.names.contains(&"gateway.example.com".to_owned()));
    assert!(
        facts.not_after - facts.not_before > time::Duration::days(80),
        "a 90-day leaf"
    );
    assert_eq!(
        text(&secret(&client, NS, "kr-public-ca").await, "tls.crt"),
        ca.cert_pem,
        "the CA is kept"
    );

    // Seven years on, the CAs are in their last third: a successor of each
    // is staged and published in every bundle, while the current CA still
    // signs — a peer or caller holding only the old bundle still verifies
    // every leaf. (The 90-day leaves have long expired by then: they are
    // reissued, by the current CA.)
    let staged = certificates::ensure_at(&client, &renamed, now + time::Duration::days(2500))
        .await
        .unwrap();
    assert_eq!(
        staged.issued["kruntimes-system/kr-public-ca"],
        "successor staged"
    );
    assert_eq!(
        staged.issued["kruntimes-system/kr-internal-ca"],
        "successor staged"
    );
    let held = secret(&client, NS, "kr-gateway-tls").await;
    assert_eq!(
        managed::facts(&text(&held, "tls.crt"))
            .unwrap()
            .authority_key_id,
        managed::facts(&ca.cert_pem).unwrap().subject_key_id,
        "signed by the current CA, which the old bundle holds"
    );
    let published = bundle(&client).await;
    assert_eq!(
        published.matches("BEGIN CERTIFICATE").count(),
        2,
        "current and successor"
    );
    assert!(published.starts_with(ca.cert_pem.trim_end()));
    let with_next = secret(&client, NS, "kr-public-ca").await;
    assert_eq!(text(&with_next, "tls.crt"), ca.cert_pem);
    let successor = text(&with_next, "next.crt");
    assert!(published.contains(successor.trim_end()));
    let again = certificates::ensure_at(&client, &renamed, now + time::Duration::days(2600))
        .await
        .unwrap();
    assert!(
        !again.issued.contains_key("kruntimes-system/kr-public-ca")
            && !again.issued.contains_key("kruntimes-system/kr-internal-ca"),
        "staged once: {again:?}"
    );

    // In the last sixth the successor signs: every leaf is reissued by it,
    // the old CA stays in the bundles while it is valid.
    let promoted = certificates::ensure_at(&client, &renamed, now + time::Duration::days(3100))
        .await
        .unwrap();
    assert_eq!(
        promoted.issued["kruntimes-system/kr-public-ca"],
        "successor promoted"
    );
    assert_eq!(
        promoted.issued["kruntimes-system/kr-gateway-tls"],
        "issued by another CA"
    );
    let renewed = secret(&client, NS, "kr-public-ca").await;
    assert_eq!(text(&renewed, "tls.crt"), successor);
    assert_eq!(text(&renewed, "previous.crt"), ca.cert_pem);
    let published = bundle(&client).await;
    assert_eq!(
        published.matches("BEGIN CERTIFICATE").count(),
        2,
        "new and old CA"
    );
    assert!(published.contains(ca.cert_pem.trim_end()));
    handshake(
        &secret(&client, NS, "kr-gateway-tls").await,
        "kr-gateway",
        None,
    );
    assert!(
        certificates::ensure(&client, &renamed)
            .await
            .unwrap()
            .issued
            .is_empty(),
        "and then stable"
    );

    // A removed Secret is issued again; an unreadable one too.
    Api::<Secret>::namespaced(client.clone(), "team-a")
        .delete("kr-internal-runtimed", &Default::default())
        .await
        .unwrap();
    let mut broken = secret(&client, NS, "kr-internal-gateway").await;
    broken
        .data
        .as_mut()
        .unwrap()
        .insert("tls.crt".into(), ByteString(b"garbage".to_vec()));
    Api::<Secret>::namespaced(client.clone(), NS)
        .replace("kr-internal-gateway", &PostParams::default(), &broken)
        .await
        .unwrap();
    let repaired = certificates::ensure(&client, &renamed).await.unwrap();
    assert_eq!(repaired.issued.len(), 2, "{repaired:?}");
    assert_eq!(repaired.issued["team-a/kr-internal-runtimed"], "missing");
    assert!(repaired.issued["kruntimes-system/kr-internal-gateway"].starts_with("unreadable"));
    handshake(
        &secret(&client, NS, "kr-internal-runtimed").await,
        "runtimed.kruntimes.internal",
        Some(&secret(&client, NS, "kr-internal-gateway").await),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provided_gateway_secret_is_published_and_never_overwritten() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server = ApiServer::start().await.unwrap();
    let client = server.client().await.unwrap();
    server.create_namespace(NS).await.unwrap();
    let mut provided = cfg();
    provided.public = PublicTls::Provided;

    // The Secret does not exist yet (cert-manager has not issued it): a
    // clear warning, and the internal material is not blocked by it.
    let early = certificates::ensure(&client, &provided).await.unwrap();
    assert_eq!(
        early.warnings,
        vec!["Secret kruntimes-system/kr-gateway-tls (the gateway's) does not exist yet"]
    );
    assert!(
        early
            .issued
            .contains_key("kruntimes-system/kr-internal-operator")
    );
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .get_opt("kr-gateway-ca")
            .await
            .unwrap()
            .is_none(),
        "nothing to publish yet"
    );

    let ca = kruntimes_certs::Ca::generate("their CA", 30).unwrap();
    let leaf = ca
        .issue(&kruntimes_certs::LeafSpec::server(
            "gateway.example.com",
            30,
        ))
        .unwrap();
    let theirs = Secret {
        metadata: ObjectMeta {
            name: Some("kr-gateway-tls".into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_owned(),
                ByteString(leaf.cert_pem.clone().into_bytes()),
            ),
            (
                "tls.key".to_owned(),
                ByteString(leaf.key_pem.clone().into_bytes()),
            ),
            (
                "ca.crt".to_owned(),
                ByteString(ca.cert_pem.clone().into_bytes()),
            ),
        ])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let done = certificates::ensure(&client, &provided).await.unwrap();
    assert!(!done.issued.contains_key("kruntimes-system/kr-gateway-tls"));
    assert!(!done.issued.contains_key("kruntimes-system/kr-public-ca"));
    assert!(
        done.issued.is_empty(),
        "the internal material was made before: {done:?}"
    );
    assert!(done.warnings.is_empty());
    assert_eq!(bundle(&client).await, ca.cert_pem);
    assert_eq!(
        text(&secret(&client, NS, "kr-gateway-tls").await, "tls.crt"),
        leaf.cert_pem
    );
    assert!(
        Api::<Secret>::namespaced(client.clone(), NS)
            .get_opt("kr-public-ca")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_owner_deployment_everything_written_is_owned_older_objects_adopted_and_kept_ones_disowned()
 {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server = ApiServer::start().await.unwrap();
    let client = server.client().await.unwrap();
    server.create_namespace(NS).await.unwrap();
    server.create_namespace("team-a").await.unwrap();
    let runtimes: Api<kruntimes_api::Runtime> = Api::namespaced(client.clone(), "team-a");
    let mut runtime_uids = Vec::new();
    for name in ["python", "bash"] {
        let runtime: kruntimes_api::Runtime = serde_json::from_value(serde_json::json!({
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Runtime",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"runtime": name, "image": "img"}
        }))
        .unwrap();
        let created = runtimes
            .create(&PostParams::default(), &runtime)
            .await
            .unwrap();
        runtime_uids.push(created.metadata.uid.unwrap());
    }

    // An older pass (no owner known) wrote everything without owners; the
    // owner Deployment does not exist yet: a warning, nothing owned.
    let mut tls = cfg();
    certificates::ensure(&client, &tls).await.unwrap();
    tls.owner_deployment = Some("kr-operator".into());
    let missing = certificates::ensure(&client, &tls).await.unwrap();
    assert!(
        missing.warnings.iter().any(|w| w.contains("kr-operator")),
        "{missing:?}"
    );
    assert!(
        secret(&client, NS, "kr-internal-ca")
            .await
            .metadata
            .owner_references
            .is_none()
    );

    let deployment: k8s_openapi::api::apps::v1::Deployment =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "kr-operator", "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"app": "op"}},
                "template": {"metadata": {"labels": {"app": "op"}},
                             "spec": {"containers": [{"name": "op", "image": "img"}]}}
            }
        }))
        .unwrap();
    let deployment = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let deployment_uid = deployment.metadata.uid.unwrap();
    // A foreign owner on one of them is kept beside the operator's.
    let foreign = serde_json::json!({"metadata": {"ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "someone", "uid": "0000-foreign"}]}});
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch(
            "kr-internal-gateway",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&foreign),
        )
        .await
        .unwrap();

    // Adopted: nothing reissued, every object now owned.
    let adopted = certificates::ensure(&client, &tls).await.unwrap();
    assert!(adopted.issued.is_empty(), "{adopted:?}");
    assert!(adopted.warnings.is_empty(), "{adopted:?}");
    let uids =
        |refs: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            refs.unwrap_or_default()
                .into_iter()
                .map(|r| r.uid)
                .collect::<Vec<_>>()
        };
    for name in [
        "kr-public-ca",
        "kr-gateway-tls",
        "kr-internal-ca",
        "kr-internal-operator",
        "kr-internal-runtimed",
    ] {
        let s = secret(&client, NS, name).await;
        assert_eq!(
            uids(s.metadata.owner_references),
            std::slice::from_ref(&deployment_uid),
            "{name}"
        );
    }
    let gateway = secret(&client, NS, "kr-internal-gateway").await;
    assert_eq!(
        uids(gateway.metadata.owner_references),
        ["0000-foreign".to_owned(), deployment_uid.clone()]
    );
    let cm = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get("kr-gateway-ca")
        .await
        .unwrap();
    assert_eq!(
        uids(cm.metadata.owner_references),
        std::slice::from_ref(&deployment_uid)
    );
    // Elsewhere runtimed's Secret is owned by that namespace's Runtimes.
    let team = secret(&client, "team-a", "kr-internal-runtimed").await;
    let mut team_owners = uids(team.metadata.owner_references);
    team_owners.sort();
    runtime_uids.sort();
    assert_eq!(team_owners, runtime_uids);

    // A Secret issued anew (removed) carries its owners from the start, and
    // a further pass changes nothing.
    Api::<Secret>::namespaced(client.clone(), NS)
        .delete("kr-gateway-tls", &Default::default())
        .await
        .unwrap();
    let reissued = certificates::ensure(&client, &tls).await.unwrap();
    assert_eq!(
        reissued.issued.keys().collect::<Vec<_>>(),
        ["kruntimes-system/kr-gateway-tls"]
    );
    let s = secret(&client, NS, "kr-gateway-tls").await;
    assert_eq!(uids(s.metadata.owner_references), [deployment_uid]);
    let rv = s.metadata.resource_version;
    let again = certificates::ensure(&client, &tls).await.unwrap();
    assert!(again.issued.is_empty(), "{again:?}");
    assert_eq!(
        secret(&client, NS, "kr-gateway-tls")
            .await
            .metadata
            .resource_version,
        rv
    );

    // Switched to keep after uninstall: the operator's owners are removed
    // (the foreign one stays), nothing is reissued.
    tls.keep_after_uninstall = true;
    let kept = certificates::ensure(&client, &tls).await.unwrap();
    assert!(kept.issued.is_empty(), "{kept:?}");
    for name in [
        "kr-public-ca",
        "kr-gateway-tls",
        "kr-internal-ca",
        "kr-internal-runtimed",
    ] {
        let s = secret(&client, NS, name).await;
        assert!(uids(s.metadata.owner_references).is_empty(), "{name}");
    }
    let gateway = secret(&client, NS, "kr-internal-gateway").await;
    assert_eq!(
        uids(gateway.metadata.owner_references),
        ["0000-foreign".to_owned()]
    );
    let cm = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get("kr-gateway-ca")
        .await
        .unwrap();
    assert!(uids(cm.metadata.owner_references).is_empty());
    let team = secret(&client, "team-a", "kr-internal-runtimed").await;
    assert!(uids(team.metadata.owner_references).is_empty());
}
