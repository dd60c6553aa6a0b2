//! What the Kubernetes end-to-end tests share: the API server and an
//! installation with RBAC for alice and bob, function Runs, invoking
//! through the gateway, and reading a Pod's runtimed port and certificate.

use std::path::Path;
use std::time::Duration;

use kruntimes_api::Run;
use kruntimes_kubetest::cluster::Cluster;
use kruntimes_kubetest::{ApiServer, Subject, User};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use kruntimes_testkit::prelude::PY;

pub(crate) fn rbac(file: &str) -> std::path::PathBuf {
    kruntimes_testkit::checkout()
        .join("examples/rbac")
        .join(file)
}

/// The API server, an installation with `pods` python Pods, namespace `a`
/// where alice may invoke and bob may only read.
pub(crate) async fn setup(pods: usize) -> (ApiServer, Cluster) {
    setup_with(pods, |_| {}).await
}

/// [`setup`], with `before_pods` applied to the installation before its
/// Pods start (an artifact store, say).
pub(crate) async fn setup_with(
    pods: usize,
    before_pods: impl FnOnce(&Cluster),
) -> (ApiServer, Cluster) {
    let server = ApiServer::start().await.expect("start the test API server");
    let cluster = Cluster::start(Path::new(env!("CARGO_BIN_EXE_krt")), &server)
        .await
        .expect("start the installation");
    server.create_namespace("a").await.unwrap();
    for role in ["run-invoker-role.yaml", "run-reader-role.yaml"] {
        server
            .apply_role_file(Some("a"), &rbac(role))
            .await
            .unwrap();
    }
    server
        .bind(
            Some("a"),
            "alice",
            "run-invoker",
            Subject::User(User::Alice),
        )
        .await
        .unwrap();
    server
        .bind(Some("a"), "bob", "run-reader", Subject::User(User::Bob))
        .await
        .unwrap();
    cluster
        .create_runtime("python", pods as i32, 4)
        .await
        .unwrap();
    before_pods(&cluster);
    for i in 0..pods {
        cluster
            .add_pod(&format!("python-{i}"), "python")
            .await
            .unwrap();
    }
    (server, cluster)
}

/// Run `name` in namespace `a` with `spec`.
pub(crate) fn run_in_a(name: &str, spec: Value) -> Run {
    serde_json::from_value(json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": "a"},
        "spec": spec,
    }))
    .unwrap()
}

pub(crate) fn function_run(name: &str, extra: Value) -> Run {
    let mut spec = json!({
        "runtime": "python",
        "source": {"inlinePath": "main.py", "inline": PY},
        "mode": {"function": {"handler": "main.invoke"}},
    });
    for (k, val) in extra.as_object().into_iter().flatten() {
        if k == "function" {
            spec["mode"]["function"]
                .as_object_mut()
                .unwrap()
                .extend(val.as_object().unwrap().clone());
        } else {
            spec[k] = val.clone();
        }
    }
    run_in_a(name, spec)
}

pub(crate) async fn runs(server: &ApiServer) -> Api<Run> {
    Api::namespaced(server.client().await.unwrap(), "a")
}

/// Creates function Run `name` in namespace `a`, waits until it is Ready
/// and returns it with its endpoint URL.
pub(crate) async fn ready_function(
    api: &Api<Run>,
    cluster: &Cluster,
    name: &str,
) -> (Value, String) {
    api.create(&PostParams::default(), &function_run(name, json!({})))
        .await
        .unwrap();
    let run = cluster.wait_phase("a", name, "Ready").await.unwrap();
    let url = run["status"]["endpoint"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    (run, url)
}

pub(crate) async fn invoke(cluster: &Cluster, url: &str, token: &str) -> reqwest::Response {
    cluster
        .http
        .post(url)
        .bearer_auth(token)
        .body(r#"{"name":"cluster"}"#)
        .send()
        .await
        .expect("request")
}

/// Invokes until 200 (the gateway learns routes from its watch streams).
pub(crate) async fn invoke_ok(cluster: &Cluster, url: &str, token: &str) -> reqwest::Response {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = invoke(cluster, url, token).await;
        if r.status() == 200 {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no 200 from {url}: {} {}\n{}",
            r.status(),
            r.text().await.unwrap_or_default(),
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn error_code(r: reqwest::Response) -> String {
    let v: Value = r.json().await.unwrap_or_default();
    v["error"]["code"].as_str().unwrap_or_default().to_owned()
}

/// The port a Pod's runtimed serves on, from its log.
pub(crate) fn serving_port(cluster: &Cluster, pod: &str) -> u16 {
    let log = cluster.log(pod);
    let line = log
        .lines()
        .find(|l| l.contains("runtimed serving"))
        .expect("serving line");
    let v: Value = serde_json::from_str(line).unwrap();
    v["fields"]["address"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The certificate runtimed on `port` presents to a new handshake (DER),
/// to a client holding the gateway's identity as it is on disk now.
pub(crate) async fn served_certificate(cluster: &Cluster, port: u16) -> Vec<u8> {
    let (ca, cert, key) = cluster.gateway_client_identity().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, pem) in [("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)] {
        std::fs::write(dir.path().join(name), pem).unwrap();
    }
    let tls = kruntimes_certs::client_config(
        &dir.path().join("ca.crt"),
        Some((&dir.path().join("tls.crt"), &dir.path().join("tls.key"))),
        &[b"h2"],
    )
    .unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("runtimed.kruntimes.internal").unwrap();
    let s = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
        .connect(name, tcp)
        .await
        .unwrap();
    s.get_ref().1.peer_certificates().unwrap()[0]
        .as_ref()
        .to_vec()
}
