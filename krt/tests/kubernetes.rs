//! kruntimes on a real kube-apiserver: the operator, the gateway and
//! runtimed processes playing Runtime Pods (kubetest's cluster harness).
//! Function Runs go Pending → Ready with an endpoint and CA bundle, are
//! invoked through the gateway, cancelled, deleted through their finalizer,
//! end on idle timeout, move to another Pod when their owner Pod is deleted
//! (attempt + 1, old owner fenced), and survive an operator restart.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cases;
#[path = "kubernetes/support.rs"]
mod support;

use std::time::Duration;

use base64::Engine as _;
use kruntimes_api::{Run, Runtime};
use kruntimes_kubetest::cluster::SYSTEM_NAMESPACE;
use kruntimes_kubetest::{Subject, User};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use support::{
    error_code, function_run, invoke, invoke_ok, rbac, ready_function, runs, served_certificate,
    serving_port, setup,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_runs_live_their_whole_lifecycle_on_the_api_server() {
    let (server, cluster) = setup(2).await;
    let client = server.client().await.unwrap();

    // The Runtime controller: a Deployment and a headless Service per
    // Runtime, and the ready Pods counted in its status.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let runtimes: Api<Runtime> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rt = runtimes.get("python").await.unwrap();
        if rt.status.as_ref().is_some_and(|s| s.ready_replicas == 2)
            && deployments
                .get_opt("runtime-python")
                .await
                .unwrap()
                .is_some()
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", rt.status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = deployments.get("runtime-python").await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        d.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Runtime"
    );
    let svc = services.get("runtime-python").await.unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));

    // Pending → Ready with endpoint and caBundle (from the ConfigMap).
    let api = runs(&server).await;
    api.create(&PostParams::default(), &function_run("hello", json!({})))
        .await
        .unwrap();
    let run = cluster.wait_phase("a", "hello", "Ready").await.unwrap();
    let uid = run["metadata"]["uid"].as_str().unwrap().to_owned();
    let status = &run["status"];
    assert_eq!(status["attempt"], 1);
    assert!(
        status["assignedPod"]
            .as_str()
            .unwrap()
            .starts_with("python-")
    );
    assert!(status["assignedPodUID"].as_str().is_some());
    assert_eq!(status["endpoint"]["protocol"], "HTTPS");
    let url = status["endpoint"]["url"].as_str().unwrap().to_owned();
    assert_eq!(
        url,
        format!(
            "{}/v1/namespaces/a/runtimes/python/runs/{uid}:invoke",
            cluster.gateway
        )
    );
    let ca = base64::engine::general_purpose::STANDARD
        .decode(status["endpoint"]["caBundle"].as_str().unwrap())
        .unwrap();
    assert_eq!(String::from_utf8(ca).unwrap(), cluster.public_ca_pem);

    // The operator's metrics saw the passes and the decisions that led here.
    let metrics = reqwest::get(&cluster.operator_metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for needle in [
        "kruntimes_operator_passes_total{result=\"ok\"}",
        "kruntimes_operator_pass_duration_seconds_count",
        "kruntimes_operator_decisions_total{phase=\"Scheduled\"}",
        "kruntimes_operator_writes_total{kind=\"status\",result=\"ok\"}",
    ] {
        assert!(metrics.contains(needle), "{needle} missing:\n{metrics}");
    }
    assert!(!metrics.contains("hello"), "no Run names in metrics");
    assert!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    );
    assert_eq!(
        run["metadata"]["finalizers"],
        json!(["kruntimes.io/function-cleanup"])
    );

    // Invoke through the gateway, routed by the operator's stream.
    let alice = server.token(User::Alice).to_owned();
    let r = invoke_ok(&cluster, &url, &alice).await;
    let owner = r.headers()["x-kruntimes-served-by"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(owner, status["assignedPod"].as_str().unwrap());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["message"], "hello cluster");
    let r = invoke(&cluster, &url, server.token(User::Bob)).await;
    assert_eq!(r.status(), 403);

    // Cancellation: termination Immediate → Cancelled, no longer routed.
    api.create(
        &PostParams::default(),
        &function_run("cancel-me", json!({})),
    )
    .await
    .unwrap();
    let c = cluster.wait_phase("a", "cancel-me", "Ready").await.unwrap();
    let c_url = c["status"]["endpoint"]["url"].as_str().unwrap().to_owned();
    invoke_ok(&cluster, &c_url, &alice).await;
    api.patch(
        "cancel-me",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"termination": {"mode": "Immediate"}}})),
    )
    .await
    .unwrap();
    let c = cluster
        .wait_phase("a", "cancel-me", "Cancelled")
        .await
        .unwrap();
    assert!(c["status"]["completionTime"].is_string());
    cluster
        .wait_run(
            "a",
            "cancel-me",
            Duration::from_secs(20),
            "unrouted",
            |_| true,
        )
        .await
        .unwrap();
    // An ended Run still exists: its URL answers 410 RunEnded (never routed
    // again) until it is deleted.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = invoke(&cluster, &c_url, &alice).await;
        let status = r.status();
        if status == 410 && error_code(r).await == "RunEnded" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cancelled Run still answered {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Idle timeout ends the Run as Timeout/IdleTimeout.
    api.create(
        &PostParams::default(),
        &function_run("idle", json!({"function": {"idleTimeoutSeconds": 4}})),
    )
    .await
    .unwrap();
    cluster.wait_phase("a", "idle", "Ready").await.unwrap();
    let idle = cluster.wait_phase("a", "idle", "Timeout").await.unwrap();
    assert_eq!(idle["status"]["reason"], "IdleTimeout");

    // spec.timeout bounds the Run's whole life, busy or not.
    api.create(
        &PostParams::default(),
        &function_run("short", json!({"timeout": 10})),
    )
    .await
    .unwrap();
    cluster.wait_phase("a", "short", "Ready").await.unwrap();
    let short = cluster.wait_phase("a", "short", "Timeout").await.unwrap();
    assert_eq!(short["status"]["reason"], "RunTimeout");

    // Deletion goes through the finalizer: the owner unregisters, then the
    // object disappears and its URL answers 404.
    api.delete("hello", &DeleteParams::default()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while api.get_opt("hello").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "Run not deleted:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The owner released the finalizer (it logs after the API answered).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cluster.log(&owner).contains("finalizer removed") {
        assert!(
            std::time::Instant::now() < deadline,
            "the owner did not release the finalizer:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = invoke(&cluster, &url, &alice).await;
        if r.status() == 404 {
            assert_eq!(error_code(r).await, "NotFound");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.status());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Capacity is released: four more Runs fit on the two Pods (4 each).
    // Ready means routable here too: a client that watches its Run until
    // Ready (as `kubectl wait` and the SDKs do) and calls at once gets 200
    // from its first call, never 503 `NotReady` because the owner's word
    // reached the gateway a moment after the control plane's.
    let names: Vec<String> = (0..4).map(|i| format!("more-{i}")).collect();
    let first_calls = names.iter().map(|name| {
        let (api, cluster, alice) = (api.clone(), &cluster, alice.clone());
        async move {
            api.create(&PostParams::default(), &function_run(name, json!({})))
                .await
                .unwrap();
            let ready = kube::runtime::wait::await_condition(api, name, |r: Option<&Run>| {
                r.and_then(|r| r.status.as_ref())
                    .is_some_and(|s| s.phase == Some(kruntimes_api::Phase::Ready))
            });
            let run = tokio::time::timeout(Duration::from_secs(60), ready)
                .await
                .unwrap_or_else(|_| panic!("{name} not Ready:\n{}", cluster.logs()))
                .unwrap()
                .expect("a Ready Run exists");
            let url = run.status.unwrap().endpoint.unwrap().url;
            let r = invoke(cluster, &url, &alice).await;
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            assert_eq!(status, 200, "first call to {name} after Ready: {body}");
        }
    });
    futures::future::join_all(first_calls).await;
    let logs = cluster.settled_logs().await;
    for token in server.tokens() {
        assert!(!logs.contains(token), "a token leaked into the logs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_owner_pod_is_fenced_and_the_run_moves_with_a_higher_attempt() {
    let (server, cluster) = setup(2).await;
    let api = runs(&server).await;
    api.create(
        &PostParams::default(),
        &function_run("mover", json!({"retryPolicy": {"maxRetries": 1}})),
    )
    .await
    .unwrap();
    let run = cluster.wait_phase("a", "mover", "Ready").await.unwrap();
    let uid = run["metadata"]["uid"].as_str().unwrap().to_owned();
    let first = run["status"]["assignedPod"].as_str().unwrap().to_owned();
    let first_uid = run["status"]["assignedPodUID"].as_str().unwrap().to_owned();
    let url = run["status"]["endpoint"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let alice = server.token(User::Alice).to_owned();
    invoke_ok(&cluster, &url, &alice).await;

    // The owner Pod object disappears; its runtimed process keeps running
    // (a partitioned owner).
    cluster.delete_pod(&first).await.unwrap();
    let moved = cluster
        .wait_run(
            "a",
            "mover",
            Duration::from_secs(60),
            "Ready elsewhere",
            |v| v["status"]["phase"] == "Ready" && v["status"]["attempt"] == 2,
        )
        .await
        .unwrap();
    let second = moved["status"]["assignedPod"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    let r = invoke_ok(&cluster, &url, &alice).await;
    assert_eq!(r.headers()["x-kruntimes-served-by"], second.as_str());

    // The old owner is fenced: even the gateway's own identity with the old
    // attempt's fencing headers is refused there.
    let old_port = serving_port(&cluster, &first);
    let (ca, cert, key) = cluster.gateway_client_identity().unwrap();
    let mut pem = cert;
    pem.extend(key);
    let direct = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .resolve(
            "runtimed.kruntimes.internal",
            ([127, 0, 0, 1], old_port).into(),
        )
        .build()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = direct
            .post(format!(
                "https://runtimed.kruntimes.internal:{old_port}/v1/namespaces/a/runtimes/python/runs/{uid}:invoke"
            ))
            .header("x-kruntimes-invocation-id", "stale-1")
            .header("x-kruntimes-run-uid", &uid)
            .header("x-kruntimes-owner-pod-uid", &first_uid)
            .header("x-kruntimes-attempt", "1")
            .header("x-kruntimes-hop", "gateway")
            .body("{}")
            .send()
            .await
            .unwrap();
        if r.status() != 200 {
            let code = error_code(r).await;
            assert!(code == "NotFound" || code == "StaleOwner", "{code}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the old owner still serves"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Retries exhausted (maxRetries 1): losing the second owner fails the Run.
    cluster.delete_pod(&second).await.unwrap();
    let failed = cluster.wait_phase("a", "mover", "Failed").await.unwrap();
    assert_eq!(failed["status"]["reason"], "OwnerLost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restart_mid_lifecycle_loses_nothing() {
    let (server, cluster) = setup(1).await;
    let api = runs(&server).await;
    let (steady, steady_url) = ready_function(&api, &cluster, "steady").await;
    let alice = server.token(User::Alice).to_owned();
    invoke_ok(&cluster, &steady_url, &alice).await;

    // While the operator is down: a new Run waits, the ready one is served
    // by its owner through the gateway's last table.
    cluster.kill("operator").unwrap();
    api.create(&PostParams::default(), &function_run("late", json!({})))
        .await
        .unwrap();
    assert_eq!(invoke(&cluster, &steady_url, &alice).await.status(), 200);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let late = cluster.run("a", "late").await.unwrap();
    assert!(
        late["status"]["phase"].is_null(),
        "nobody scheduled it: {late}"
    );

    cluster.restart("operator").unwrap();
    let late = cluster.wait_phase("a", "late", "Ready").await.unwrap();
    assert_eq!(late["status"]["attempt"], 1);
    let steady_again = cluster.run("a", "steady").await.unwrap();
    assert_eq!(steady_again["status"]["attempt"], 1, "not rescheduled");
    assert_eq!(
        steady_again["status"]["assignedPodUID"],
        steady["status"]["assignedPodUID"]
    );
    invoke_ok(&cluster, &steady_url, &alice).await;
    let late_url = late["status"]["endpoint"]["url"].as_str().unwrap();
    invoke_ok(&cluster, late_url, &alice).await;

    // A runtimed restart recovers its registrations at the same attempt.
    let pod = steady["status"]["assignedPod"].as_str().unwrap().to_owned();
    cluster.restart(&pod).unwrap();
    let r = invoke_ok(&cluster, &steady_url, &alice).await;
    assert_eq!(r.status(), 200);
    let after = cluster.run("a", "steady").await.unwrap();
    assert_eq!(after["status"]["attempt"], 1);
    assert_eq!(after["status"]["phase"], "Ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_internal_certificates_are_picked_up_without_dropping_ready_runs() {
    let (server, cluster) = setup(1).await;
    let api = runs(&server).await;
    let (steady, url) = ready_function(&api, &cluster, "steady").await;
    let alice = server.token(User::Alice).to_owned();
    invoke_ok(&cluster, &url, &alice).await;
    let pod = steady["status"]["assignedPod"].as_str().unwrap().to_owned();
    let port = serving_port(&cluster, &pod);
    let before = served_certificate(&cluster, port).await;

    // The renewed Secret lands on disk (new leaves, same internal CA).
    let rotated_der = cluster.rotate_internal_leaves().unwrap();
    assert_ne!(rotated_der, before);
    // runtimed serves it to new handshakes, without a restart; the Ready
    // Run answers through the gateway all along.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(invoke(&cluster, &url, &alice).await.status(), 200);
        if served_certificate(&cluster, port).await == rotated_der {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "runtimed still serves its old certificate:\n{}",
            cluster.log(&pod)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(cluster.log(&pod).contains("certificate reloaded"));
    let after = cluster.run("a", "steady").await.unwrap();
    assert_eq!(after["status"]["phase"], "Ready");
    assert_eq!(after["status"]["attempt"], steady["status"]["attempt"]);
    // A new Run registers over new connections with the rotated material.
    let (_, fresh_url) = ready_function(&api, &cluster, "fresh").await;
    invoke_ok(&cluster, &fresh_url, &alice).await;
    invoke_ok(&cluster, &url, &alice).await;
    // The gateway took its rotated client certificate too (checked every 2 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cluster.log("gateway").contains("certificate reloaded") {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway's client certificate:\n{}",
            cluster.log("gateway")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Calls still pass once it has (which pair a new connection of the hop
    // presents is checked against a TLS server in the gateway's tests).
    invoke_ok(&cluster, &url, &alice).await;
    invoke_ok(&cluster, &fresh_url, &alice).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_operator_exits_although_a_gateway_holds_its_watch() {
    let (server, cluster) = setup(1).await;
    let api = runs(&server).await;
    let (_, url) = ready_function(&api, &cluster, "held").await;
    let alice = server.token(User::Alice).to_owned();
    // The gateway routes it: its watch stream to the operator is open.
    invoke_ok(&cluster, &url, &alice).await;
    // It stops well within a kubelet's 30 s grace period (it used to wait
    // for the gateway's stream, which never ends, until it was killed).
    cluster
        .terminate("operator", Duration::from_secs(25))
        .await
        .unwrap();
    assert!(
        cluster
            .log("operator")
            .contains("closing the remaining ownership watch streams"),
        "{}",
        cluster.log("operator")
    );
    // The gateway keeps routing from its last table meanwhile.
    assert_eq!(invoke(&cluster, &url, &alice).await.status(), 200);
    cluster.restart("operator").unwrap();
    invoke_ok(&cluster, &url, &alice).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_run_holds_a_pod_alone_and_serves_commands() {
    let (server, cluster) = setup(1).await;
    server
        .apply_role_file(Some("a"), &rbac("session-user-role.yaml"))
        .await
        .unwrap();
    server
        .bind(
            Some("a"),
            "carol-sessions",
            "session-user",
            Subject::User(User::Carol),
        )
        .await
        .unwrap();
    let api = runs(&server).await;
    let sandbox: Run = serde_json::from_value(json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "sandbox", "namespace": "a"},
        "spec": {"runtime": "python", "mode": {"session": {"queueSize": 8}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &sandbox).await.unwrap();
    let s = cluster.wait_phase("a", "sandbox", "Ready").await.unwrap();
    let base = s["status"]["endpoint"]["url"].as_str().unwrap().to_owned();
    assert!(base.contains("/runtimes/python/sessions/"), "{base}");

    // The Pod is held alone: a function Run waits.
    api.create(&PostParams::default(), &function_run("waiter", json!({})))
        .await
        .unwrap();
    let waiter = cluster
        .wait_run("a", "waiter", Duration::from_secs(20), "NoIdlePod", |v| {
            v["status"]["reason"] == "NoIdlePod"
        })
        .await
        .unwrap();
    assert_eq!(waiter["status"]["phase"], "Pending");

    // carol may use runs/session; alice (runs/invoke only) may not.
    let exec = |token: String| {
        let http = cluster.http.clone();
        let url = format!("{base}/operations:execute");
        async move {
            http.post(url)
                .bearer_auth(token)
                .json(&json!({"command": {"shell": "echo from-the-cluster"}}))
                .send()
                .await
                .unwrap()
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let out = loop {
        let r = exec(server.token(User::Carol).to_owned()).await;
        if r.status() == 200 {
            break r.json::<Value>().await.unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.status());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(out.to_string().contains("from-the-cluster"), "{out}");
    assert_eq!(
        exec(server.token(User::Alice).to_owned()).await.status(),
        403
    );

    // A runtimed restart loses the session's processes: the Run ends
    // (never silently reopened with an empty workspace), releasing the Pod.
    let pod = s["status"]["assignedPod"].as_str().unwrap().to_owned();
    cluster.restart(&pod).unwrap();
    let lost = cluster.wait_phase("a", "sandbox", "Failed").await.unwrap();
    assert_eq!(lost["status"]["reason"], "SessionLost");
    cluster.wait_phase("a", "waiter", "Ready").await.unwrap();

    // Deleting the ended session goes through its owner's finalizer.
    api.delete("sandbox", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while api.get_opt("sandbox").await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtimed_that_cannot_watch_runs_never_opens_its_port() {
    let (_server, cluster) = setup(0).await;
    // bob may not list Runs: this runtimed's watch never syncs, so its
    // readiness probe (the dataplane port) must never succeed.
    let (_, port) = cluster
        .start_pod("mute", "python", User::Bob)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cluster
        .log("mute")
        .contains("waiting for the Run watch to sync")
    {
        assert!(std::time::Instant::now() < deadline, "{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "the port opened without a synced watch"
    );
    assert!(
        cluster.log("mute").contains("watch error"),
        "{}",
        cluster.log("mute")
    );
}

/// Plays the ReplicaSet of Runtime `python`: adds Pods `python-N` until
/// there are as many as its Deployment asks for (scale-down is left to the
/// assertions: this harness never deletes).
async fn follow_deployment(
    cluster: &kruntimes_kubetest::cluster::Cluster,
    deployments: &Api<k8s_openapi::api::apps::v1::Deployment>,
    pods: &mut usize,
) -> i32 {
    let want = deployments
        .get_opt("runtime-python")
        .await
        .unwrap()
        .and_then(|d| d.spec?.replicas)
        .unwrap_or(0);
    while (*pods as i32) < want {
        cluster
            .add_pod(&format!("python-{pods}"), "python")
            .await
            .unwrap();
        *pods += 1;
    }
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_refills_to_keep_an_idle_pod_and_shrinks_after_its_delay() {
    let (server, cluster) = setup(0).await;
    let client = server.client().await.unwrap();
    let runtimes: Api<Runtime> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let pod_api: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    runtimes
        .patch(
            "python",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1, "pool": {
                "minIdle": 1, "maxReplicas": 3, "scaleDownDelaySeconds": 1}}})),
        )
        .await
        .unwrap();
    let api = runs(&server).await;
    let session = |name: &str| -> Run {
        serde_json::from_value(json!({
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Run",
            "metadata": {"name": name, "namespace": "a"},
            "spec": {"runtime": "python", "mode": {"session": {}}}
        }))
        .unwrap()
    };
    let mut pods = 0usize;
    // Waits, playing the ReplicaSet, until the Runtime's status is
    // `(desired, ready)`.
    macro_rules! settle {
        ($desired:expr, $ready:expr) => {{
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                follow_deployment(&cluster, &deployments, &mut pods).await;
                let st = runtimes
                    .get("python")
                    .await
                    .unwrap()
                    .status
                    .unwrap_or_default();
                if (st.desired_replicas, st.ready_replicas) == ($desired, $ready) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "want {:?}, have {st:?}\n{}",
                    ($desired, $ready),
                    cluster.logs()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }};
    }

    // Nothing runs: the floor of one Pod is also the one idle Pod.
    settle!(1, 1);
    // Each session takes a whole Pod; the pool grows so one stays idle.
    api.create(&PostParams::default(), &session("s1"))
        .await
        .unwrap();
    settle!(2, 2);
    cluster.wait_phase("a", "s1", "Ready").await.unwrap();
    for name in ["s2", "s3"] {
        api.create(&PostParams::default(), &session(name))
            .await
            .unwrap();
    }
    // Three sessions on three Pods: maxReplicas caps the idle one.
    settle!(3, 3);
    for name in ["s2", "s3"] {
        cluster.wait_phase("a", name, "Ready").await.unwrap();
    }
    // Each runtimed watches only the Runs assigned to its own Pod: with its
    // own identity and selector, the API server lists it exactly those.
    let as_runtimed: Api<Run> = Api::all(server.client_as(User::Runtimed).await.unwrap());
    for i in 0..3 {
        let pod = pod_api.get(&format!("python-{i}")).await.unwrap();
        let uid = pod.metadata.uid.unwrap();
        let seen = as_runtimed
            .list(&kube::api::ListParams::default().fields(&kruntimes_runtimed::assigned_to(&uid)))
            .await
            .unwrap()
            .items;
        assert_eq!(seen.len(), 1, "python-{i}: {seen:?}");
        assert_eq!(
            seen[0].status.as_ref().unwrap().assigned_pod_uid.as_deref(),
            Some(uid.as_str())
        );
    }
    api.create(&PostParams::default(), &session("s4"))
        .await
        .unwrap();
    let waiting = cluster
        .wait_run("a", "s4", Duration::from_secs(20), "NoIdlePod", |v| {
            v["status"]["reason"] == "NoIdlePod"
        })
        .await
        .unwrap();
    assert_eq!(
        waiting["status"]["message"],
        "0/3 python Pods can take this session: 3 held by a session"
    );

    // Readiness counts both ways.
    cluster.set_pod_ready("python-2", false).await.unwrap();
    settle!(3, 2);
    cluster.set_pod_ready("python-2", true).await.unwrap();
    settle!(3, 3);

    // The waiting session goes: nothing waits now, yet the three busy Pods
    // still count, and the pool does not shrink below them after its delay.
    api.delete("s4", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    settle!(3, 3);

    // The sessions end: after the delay the pool shrinks back to one idle
    // Pod, and its idle Pods are marked to be removed first.
    for name in ["s1", "s2", "s3"] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    settle!(1, 3);
    let marked = pod_api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| {
            p.metadata.annotations.as_ref().is_some_and(|a| {
                a.get("controller.kubernetes.io/pod-deletion-cost")
                    .map(String::as_str)
                    == Some("-100")
            })
        })
        .count();
    assert_eq!(marked, 3, "every idle Pod of the shrinking pool goes first");
}

/// Waits until the metrics at `url` show `needle`.
async fn metric_shows(url: &str, needle: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = reqwest::get(url).await
            && r.text().await.is_ok_and(|t| t.contains(needle))
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{url} never showed {needle}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_burst_hands_over_and_nothing_is_double_bound() {
    // Two Pods of 4 slots, two operator replicas electing a leader.
    let (server, cluster) = setup(2).await;
    let standby = cluster.start_operator_replica("operator-2").unwrap();
    metric_shows(&cluster.operator_metrics, "kruntimes_operator_leader 1").await;
    metric_shows(&standby, "kruntimes_operator_leader 0").await;

    let api = runs(&server).await;
    for i in 0..20 {
        api.create(
            &PostParams::default(),
            &function_run(&format!("burst-{i:02}"), json!({})),
        )
        .await
        .unwrap();
    }
    // Mid-burst: once the leader has bound some, it dies.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let bound = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|r| {
                r.status
                    .as_ref()
                    .is_some_and(|s| s.assigned_pod_uid.is_some())
            })
            .count();
        if bound >= 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.kill("operator").unwrap();
    metric_shows(&standby, "kruntimes_operator_leader 1").await;

    // The new leader finishes the burst: 8 bound (4 per Pod), 12 waiting.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let items = loop {
        let items = api.list(&Default::default()).await.unwrap().items;
        let ready = items
            .iter()
            .filter(|r| {
                r.status.as_ref().and_then(|s| s.phase) == Some(kruntimes_api::Phase::Ready)
            })
            .count();
        let waiting = items
            .iter()
            .filter(|r| r.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("NoIdlePod"))
            .count();
        if ready == 8 && waiting == 12 {
            break items;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ready {ready}, waiting {waiting}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut per_pod: std::collections::BTreeMap<String, usize> = Default::default();
    for r in &items {
        let s = r.status.as_ref().unwrap();
        assert!(s.attempt.unwrap_or(0) <= 1, "{r:?}: bound twice");
        if let Some(uid) = &s.assigned_pod_uid {
            *per_pod.entry(uid.clone()).or_default() += 1;
        }
    }
    assert_eq!(per_pod.len(), 2, "{per_pod:?}");
    assert!(
        per_pod.values().all(|n| *n == 4),
        "over-committed: {per_pod:?}"
    );
}

/// The placement case table ([`cases::placement`]) on the API server.
struct OnApiServer<'a> {
    cluster: &'a kruntimes_kubetest::cluster::Cluster,
    api: Api<Run>,
}

impl cases::placement::Target for OnApiServer<'_> {
    async fn create(&self, name: &str, labels: Value, spec: Value) {
        let run: Run =
            serde_json::from_value(cases::placement::manifest(name, "a", labels, spec)).unwrap();
        self.api.create(&PostParams::default(), &run).await.unwrap();
    }

    async fn delete(&self, name: &str) {
        self.api
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    async fn wait(
        &self,
        name: &str,
        what: &str,
        check: fn(&cases::placement::Seen) -> bool,
    ) -> cases::placement::Seen {
        let run = self
            .cluster
            .wait_run("a", name, Duration::from_secs(60), what, move |v| {
                check(&cases::placement::Seen::from_status(&v["status"]))
            })
            .await
            .unwrap();
        cases::placement::Seen::from_status(&run["status"])
    }

    async fn seen(&self, name: &str) -> cases::placement::Seen {
        let run = self.cluster.run("a", name).await.unwrap();
        cases::placement::Seen::from_status(&run["status"])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_affinity_and_priority_decide_placement_on_the_api_server() {
    // One Pod of 4 slots and 1 CPU.
    let (server, cluster) = setup(1).await;
    let client = server.client().await.unwrap();
    let runtimes: Api<Runtime> = Api::namespaced(client, SYSTEM_NAMESPACE);
    runtimes
        .patch(
            "python",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"capacity": {"runs": 4, "resources": {"cpu": "1"}}}})),
        )
        .await
        .unwrap();
    let target = OnApiServer {
        cluster: &cluster,
        api: runs(&server).await,
    };
    cases::placement::resources_affinity_and_priority(&target).await;
}
