//! Artifacts on a real kube-apiserver with the operator, the gateway and
//! runtimed as on a cluster (kubetest's harness), the store a real
//! S3-compatible server (versitygw on loopback): a task's artifacts in its
//! status and in the store, read through the gateway by a caller RBAC
//! allows `get` on `runs/artifacts` — and refused (403) to one it does not,
//! though that one may invoke; a function invocation's files in its answer
//! and in the bucket, read the same way.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "kubernetes/support.rs"]
mod support;

use kruntimes_kubetest::{Subject, User};
use kruntimes_testkit::S3Server;
use kube::api::PostParams;
use serde_json::json;
use sha2::{Digest as _, Sha256};

use support::{rbac, run_in_a, runs, setup_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_artifacts_are_read_through_the_gateway_under_runs_artifacts() {
    let s3 = S3Server::start().await.unwrap();
    s3.create_bucket("artifacts").await.unwrap();
    let store = json!({"s3": {
        "endpoint": s3.endpoint(),
        "bucket": "artifacts",
        "prefix": "cluster",
        "pathStyle": true,
    }})
    .to_string();
    let credentials = vec![
        (
            "KRUNTIMES_ARTIFACT_ACCESS_KEY_ID".to_owned(),
            s3.access_key().to_owned(),
        ),
        (
            "KRUNTIMES_ARTIFACT_SECRET_ACCESS_KEY".to_owned(),
            s3.secret_key().to_owned(),
        ),
        // As the operator passes `retainAfterRunSeconds`.
        (
            "KRUNTIMES_RUNTIMED_ARTIFACT_RETAIN_SECS".to_owned(),
            "25".to_owned(),
        ),
        // The sweep (retention and orphans), quicker than its defaults.
        (
            "KRUNTIMES_RUNTIMED_ARTIFACT_SWEEP_SECS".to_owned(),
            "1".to_owned(),
        ),
        (
            "KRUNTIMES_RUNTIMED_ARTIFACT_ORPHAN_GRACE_SECS".to_owned(),
            "3".to_owned(),
        ),
    ];
    let (server, cluster) = setup_with(1, |c| c.use_artifact_store(&store, credentials)).await;
    // Carol may read artifacts in `a`; alice may invoke there, not read
    // artifacts.
    server
        .apply_role_file(Some("a"), &rbac("run-artifacts-reader-role.yaml"))
        .await
        .unwrap();
    server
        .bind(
            Some("a"),
            "carol",
            "run-artifacts-reader",
            Subject::User(User::Carol),
        )
        .await
        .unwrap();
    let runs = runs(&server).await;
    let script = "import os\nd = os.environ['KRUNTIME_ARTIFACTS_DIR']\nos.makedirs(d + '/out')\nopen(d + '/out/report.json', 'w').write('{\"ok\": true}')\nprint(sorted(k for k in os.environ if 'ARTIFACT' in k))\n";
    runs.create(
        &PostParams::default(),
        &run_in_a(
            "exports",
            json!({"runtime": "python", "source": {"inline": script}, "mode": {"task": {}}}),
        ),
    )
    .await
    .unwrap();
    let run = cluster
        .wait_phase("a", "exports", "Succeeded")
        .await
        .unwrap();
    let status = &run["status"];
    // User code saw its directory and nothing of the store.
    assert_eq!(
        status["task"]["stdoutTail"], "['KRUNTIME_ARTIFACTS_DIR']\n",
        "{status}"
    );
    let art = &status["artifacts"][0];
    let content = br#"{"ok": true}"#;
    let digest: String = Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(art["name"], "out/report.json");
    assert_eq!(art["sha256"], digest);
    let uid = run["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        art["uri"],
        format!("s3://artifacts/cluster/a/{uid}/files/out/report.json")
    );
    assert_eq!(
        s3.get_object(
            "artifacts",
            &format!("cluster/a/{uid}/files/out/report.json")
        )
        .await
        .unwrap(),
        content
    );
    // The task's endpoint is its artifacts URL.
    let url = status["endpoint"]["url"].as_str().unwrap().to_owned();
    assert!(url.ends_with(&format!("/runs/{uid}/artifacts")), "{url}");
    let get = |token: Option<&str>, path: &str| {
        let mut req = cluster.http.get(format!("{url}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let carol = server.token(User::Carol);
    let listed: serde_json::Value = get(Some(carol), "").await.unwrap().json().await.unwrap();
    assert_eq!(listed["artifacts"][0]["name"], "out/report.json");
    let body = get(Some(carol), "/out/report.json").await.unwrap();
    assert_eq!(body.status(), 200);
    assert_eq!(body.bytes().await.unwrap(), &content[..]);
    let part = cluster
        .http
        .get(format!("{url}/out/report.json"))
        .bearer_auth(carol)
        .header("range", "bytes=1-4")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(part.bytes().await.unwrap(), &content[1..5]);
    // Alice may invoke in `a`, not read artifacts: 403, typed.
    let refused = get(Some(server.token(User::Alice)), "/out/report.json")
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let e: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(e["error"]["code"], "Forbidden");
    // Bob may only read Runs: refused too; nobody: 401.
    assert_eq!(
        get(Some(server.token(User::Bob)), "")
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(get(None, "").await.unwrap().status(), 401);
    // Deleting a Run deletes its artifacts before its finalizer goes.
    let manifest = |uid: &str| format!("cluster/a/{uid}/manifest.json");
    runs.create(
        &PostParams::default(),
        &run_in_a(
            "deleted",
            json!({"runtime": "python", "source": {"inline": script}, "mode": {"task": {}}}),
        ),
    )
    .await
    .unwrap();
    let deleted = cluster
        .wait_phase("a", "deleted", "Succeeded")
        .await
        .unwrap();
    let deleted_uid = deleted["metadata"]["uid"].as_str().unwrap().to_owned();
    assert!(
        s3.get_object("artifacts", &manifest(&deleted_uid))
            .await
            .is_ok()
    );
    runs.delete("deleted", &Default::default()).await.unwrap();
    let gone = |uid: String| {
        let s3 = &s3;
        async move {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
            while s3.get_object("artifacts", &manifest(&uid)).await.is_ok() {
                if tokio::time::Instant::now() > deadline {
                    return false;
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            true
        }
    };
    assert!(gone(deleted_uid).await, "a deleted Run's artifacts stayed");
    // Artifacts of Runs the API server does not know — deleted while no
    // runtimed could clean up, in a namespace that exists or not — go
    // once they have been missing for the grace.
    for (ns, orphan) in [
        ("a", "9a0e5a52-0000-4000-8000-000000000001"),
        ("gone-ns", "9a0e5a52-0000-4000-8000-000000000002"),
    ] {
        s3.put_object(
            "artifacts",
            &format!("cluster/{ns}/{orphan}/manifest.json"),
            b"{}".to_vec(),
        )
        .await
        .unwrap();
    }
    let orphans_gone = async {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let mut left = 0;
            for key in [
                "cluster/a/9a0e5a52-0000-4000-8000-000000000001/manifest.json",
                "cluster/gone-ns/9a0e5a52-0000-4000-8000-000000000002/manifest.json",
            ] {
                left += usize::from(s3.get_object("artifacts", key).await.is_ok());
            }
            if left == 0 || tokio::time::Instant::now() > deadline {
                return left;
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    };
    assert_eq!(orphans_gone.await, 0, "orphans stayed");
    // The first Run stays; its artifacts go once its retention (25 s) has
    // passed since it ended (the sweep's, not its owner's).
    assert!(gone(uid.to_owned()).await, "retention did not delete");
    assert!(runs.get("exports").await.is_ok());
    let after = get(Some(carol), "/out/report.json").await.unwrap();
    assert_eq!(after.status(), 404);
    // A function's invocation: its files come back with its answer, in the
    // bucket under the Run, read through the gateway under `runs/artifacts`.
    let writer = "import os\ndef invoke(request):\n    d = os.environ['KRUNTIME_ARTIFACTS_DIR']\n    open(d + '/diagnosis.json', 'w').write('{\"cause\": \"cpu\"}')\n    return {'summary': 'written', 'seen': sorted(k for k in os.environ if 'ARTIFACT' in k)}\n";
    runs.create(
        &PostParams::default(),
        &run_in_a(
            "writer",
            json!({"runtime": "python", "source": {"inlinePath": "main.py", "inline": writer}, "mode": {"function": {"handler": "main.invoke"}}}),
        ),
    )
    .await
    .unwrap();
    let ready = cluster.wait_phase("a", "writer", "Ready").await.unwrap();
    let invoke_url = ready["status"]["endpoint"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let writer_uid = ready["metadata"]["uid"].as_str().unwrap().to_owned();
    let alice = server.token(User::Alice);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let answer = loop {
        let r = cluster
            .http
            .post(&invoke_url)
            .bearer_auth(alice)
            .header("x-kruntimes-invocation-id", "k-1")
            .body("{}")
            .send()
            .await
            .unwrap();
        // The gateway learns the route from its watch stream.
        if r.status() == 200 || tokio::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-kruntimes-artifacts"], "1");
    let v: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(v["outputs"]["summary"], "written", "{v}");
    assert_eq!(
        v["outputs"]["seen"],
        json!(["KRUNTIME_ARTIFACTS_DIR"]),
        "{v}"
    );
    let name = "invocations/k-1/diagnosis.json";
    assert_eq!(v["artifactRefs"][0]["name"], name, "{v}");
    let key = format!("cluster/a/{writer_uid}/files/{name}");
    assert_eq!(v["artifactRefs"][0]["uri"], format!("s3://artifacts/{key}"));
    assert_eq!(
        s3.get_object("artifacts", &key).await.unwrap(),
        br#"{"cause": "cpu"}"#
    );
    assert!(ready["status"].get("artifacts").is_none());
    let download = invoke_url.replace(":invoke", &format!("/artifacts/{name}"));
    let read = |token: &str| cluster.http.get(&download).bearer_auth(token).send();
    let got = read(carol).await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap(), &br#"{"cause": "cpu"}"#[..]);
    assert_eq!(read(alice).await.unwrap().status(), 403);
    // The store's secret is in no log of the installation.
    let logs = cluster.settled_logs().await;
    assert!(
        !logs.contains(s3.secret_key()),
        "a log holds the secret key"
    );
}
