//! The admission policy that restricts runtimed identities
//! (`charts/kruntimes/files/runtimed-admission-policy.yaml`), enforced by a
//! real kube-apiserver on tokens from the TokenRequest API bound to Pods: a
//! runtimed may report the status of a Run assigned to its own Pod, and
//! nothing else — not another Pod's Run, not the assignment fields, not the
//! spec, not with a token bound to no Pod.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ServiceAccount};
use kruntimes_api::Run;
use kruntimes_kubetest::{ApiServer, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "team-a";
const SA: &str = "kruntimes-runtime";

fn repo(path: &str) -> std::path::PathBuf {
    kruntimes_testkit::checkout().join(path)
}

async fn pod(client: &kube::Client, name: &str) -> String {
    let p = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            service_account_name: Some(SA.into()),
            automount_service_account_token: Some(false),
            containers: vec![Container {
                name: "runtimed".into(),
                image: Some("ghcr.io/kruntimes/runtimed:test".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

/// A Run assigned (by the admin, as the operator would) to `pod_uid`.
async fn assigned_run(client: &kube::Client, name: &str, pod: &str, pod_uid: &str) {
    let run: Run = serde_json::from_value(json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name},
        "spec": {"runtime": "python", "mode": {"function": {"handler": "main.invoke"}}}
    }))
    .unwrap();
    let api = Api::<Run>::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &run).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Scheduled", "assignedPod": pod, "assignedPodUID": pod_uid, "attempt": 1
        }})),
    )
    .await
    .unwrap();
}

/// A token of the runtimed ServiceAccount, bound to Pod `pod` when given.
async fn token(client: &kube::Client, pod: Option<(&str, &str)>) -> String {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(600),
            bound_object_ref: pod.map(|(name, uid)| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
            }),
        },
        ..Default::default()
    };
    let issued: TokenRequest = Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .create_subresource("token", SA, &PostParams::default(), &request)
        .await
        .unwrap();
    issued.status.unwrap().token
}

async fn client_with(server: &ApiServer, token: &str) -> kube::Client {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.root_cert = Some(vec![pem_der(server.ca_pem())]);
    config.auth_info.token = Some(token.to_owned().into());
    kube::Client::try_from(config).unwrap()
}

fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

async fn status_patch(
    client: &kube::Client,
    run: &str,
    status: serde_json::Value,
) -> Result<(), String> {
    Api::<Run>::namespaced(client.clone(), NS)
        .patch_status(
            run,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn refused(r: Result<(), String>, why: &str) {
    let e = r.expect_err("the policy let it through");
    assert!(e.contains(why), "refused for another reason: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtimed_changes_only_the_runs_of_its_own_pod_and_never_their_assignment() {
    let server = ApiServer::start().await.unwrap();
    let admin = server.client().await.unwrap();
    server.create_namespace(NS).await.unwrap();
    server.create_service_account(NS, SA).await.unwrap();
    let role = server
        .apply_role_file(None, &repo("examples/rbac/runtimed-clusterrole.yaml"))
        .await
        .unwrap();
    server
        .bind(
            None,
            "runtimed",
            &role,
            Subject::ServiceAccount(NS.into(), SA.into()),
        )
        .await
        .unwrap();
    let p1 = pod(&admin, "rt-1").await;
    let p2 = pod(&admin, "rt-2").await;
    assigned_run(&admin, "mine", "rt-1", &p1).await;
    assigned_run(&admin, "theirs", "rt-2", &p2).await;
    server
        .apply_admission_policy_file(&repo(
            "charts/kruntimes/files/runtimed-admission-policy.yaml",
        ))
        .await
        .unwrap();

    let own = client_with(&server, &token(&admin, Some(("rt-1", &p1))).await).await;
    // The policy takes effect once the API server has loaded it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while status_patch(&own, "theirs", json!({"phase": "Ready"}))
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the policy never took effect");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Its own Run: status reports and the finalizer, allowed.
    status_patch(
        &own,
        "mine",
        json!({"phase": "Ready", "reason": "Registered"}),
    )
    .await
    .unwrap();
    Api::<Run>::namespaced(own.clone(), NS)
        .patch(
            "mine",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"seen": "yes"}}})),
        )
        .await
        .unwrap();
    // Another Pod's Run: refused.
    refused(
        status_patch(&own, "theirs", json!({"phase": "Failed"})).await,
        "not assigned to the caller's Pod",
    );
    // The assignment of its own Run: refused, each field.
    for change in [
        json!({"assignedPod": "rt-2"}),
        json!({"assignedPodUID": p2}),
        json!({"attempt": 2}),
    ] {
        refused(
            status_patch(&own, "mine", change).await,
            "only the operator assigns Runs",
        );
    }
    // Its spec: refused.
    refused(
        Api::<Run>::namespaced(own.clone(), NS)
            .patch(
                "mine",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"termination": {"mode": "Immediate"}}})),
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        "may not change a Run's spec",
    );
    // A token bound to no Pod: refused everything.
    let unbound = client_with(&server, &token(&admin, None).await).await;
    refused(
        status_patch(&unbound, "mine", json!({"phase": "Failed"})).await,
        "must use a token bound to their Pod",
    );
    // The operator (the admin here) still assigns.
    status_patch(
        &admin,
        "theirs",
        json!({"assignedPod": "rt-1", "assignedPodUID": p1, "attempt": 2}),
    )
    .await
    .unwrap();
    status_patch(&own, "theirs", json!({"phase": "Ready"}))
        .await
        .unwrap();
    let mine = Api::<Run>::namespaced(admin.clone(), NS)
        .get("mine")
        .await
        .unwrap();
    let status = mine.status.unwrap();
    assert_eq!(status.assigned_pod.as_deref(), Some("rt-1"));
    assert_eq!(status.attempt, Some(1));
}
