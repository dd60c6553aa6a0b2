//! kruntimes on a real node: the chart installed with helm into a single-node
//! cluster of real components (`kubetest/node/cluster.sh`: etcd, API server,
//! controller manager, scheduler, kubelet + containerd + runc, bridge CNI,
//! kube-proxy, CoreDNS), its images imported from the project's image
//! builder, and used the way users use it: Runs applied with kubectl, callers
//! in Pods reaching the gateway by its cluster DNS name with a ServiceAccount
//! token, the host through a NodePort.
//!
//! Each test brings up a cluster of its own (about 15 s) and installs the
//! chart; the tests take turns (a lock), since two clusters on two cores
//! would only slow each other down. A failed test keeps the cluster's
//! directory and prints where its logs are (docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod node_support;

use std::time::Duration;

use node_support::*;
use serde_json::{Value, json};
use sha2::Digest as _;

/// One cluster at a time (an async lock: a failed test does not poison it).
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_run_is_invoked_from_a_client_pod_and_through_a_node_port() {
    let _turn = TURN.lock().await;
    let k = Installed::new(&[]).await;
    let Invoker { path, token, .. } = k.invoker("hello").await;
    k.service_account("team-a", "stranger", None);

    // The Run's own status names the endpoint and the CA bundle, as callers in
    // the cluster are told to use them.
    let run = k.run("team-a", "hello");
    let url = run["status"]["endpoint"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(url, format!("https://{GATEWAY_HOST}{path}"));
    assert_eq!(run["status"]["endpoint"]["caBundle"], b64(k.ca_bundle()));

    // A client Pod: cluster DNS, the published bundle, a projected token with
    // the gateway's audience; TokenReview and SubjectAccessReview for real.
    let steps = json!([
        {"name": "invoke", "method": "POST", "path": path, "json": {"name": "pod"}},
        {"name": "again", "method": "POST", "path": path, "json": {"name": "again"}},
    ]);
    let out = k
        .client_pod("team-a", "bot", "kruntimes-gateway", steps.clone())
        .await;
    for (step, name) in [("invoke", "pod"), ("again", "again")] {
        assert_eq!(out[step]["status"], 200, "{}", out[step]);
        assert_eq!(out[step]["json"]["message"], format!("hello {name}"));
    }
    // Without the RoleBinding: 403 naming the verb; without the audience: 401.
    let out = k
        .client_pod("team-a", "stranger", "kruntimes-gateway", steps.clone())
        .await;
    assert_eq!(out["invoke"]["status"], 403, "{}", out["invoke"]);
    assert_eq!(out["invoke"]["json"]["error"]["code"], "Forbidden");
    let out = k
        .client_pod("team-a", "bot", "some-other-audience", steps)
        .await;
    assert_eq!(out["invoke"]["status"], 401, "{}", out["invoke"]);
    assert_eq!(out["invoke"]["json"]["error"]["code"], "Unauthenticated");

    // The host, through the NodePort on the node's address.
    let host = k.host_client();
    let (status, body) = k
        .host_invoke(&host, &path, &token, json!({"name": "host"}))
        .await;
    assert_eq!(
        (status, body["message"].clone()),
        (200, json!("hello host")),
        "{body}"
    );
    let (status, body) = k.host_invoke(&host, &path, "not-a-token", json!({})).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("Unauthenticated"))
    );
}

/// A task Run of `runtime` in `team-a` running `script`, as one document of
/// a `kubectl apply` stream.
fn task(name: &str, runtime: &str, script: &str) -> String {
    format!(
        "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {{name: {name}, namespace: team-a}}\nspec:\n  runtime: {runtime}\n  source:\n    inline: {script:?}\n  mode:\n    task: {{}}\n---\n"
    )
}

/// Whether a Run has ended, whichever way.
fn ended(r: &Value) -> bool {
    matches!(
        r["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed" | "Timeout" | "Cancelled")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_runs_run_once_on_the_warm_pods_of_the_chart_images() {
    let _turn = TURN.lock().await;
    let k = Installed::new(&[]).await;
    k.namespace("team-a");
    let manifests = [
        task("hello", "python", "import sys\nprint('hello')\nprint('careful', file=sys.stderr)\n"),
        task("three", "bash", "echo failing; exit 3"),
        task("killed", "bash", "kill -9 $$"),
        task(
            "flood",
            "python",
            "import sys\nfor i in range(80):\n    sys.stdout.write(str(i % 10) * 131072 + '\\n')\nprint('end')\n",
        ),
    ]
    .concat();
    k.node.apply(&manifests).unwrap();
    let hello = k.wait_run("team-a", "hello", ended).await;
    let s = &hello["status"];
    assert_eq!(
        (&s["phase"], &s["reason"]),
        (&json!("Succeeded"), &json!("Completed")),
        "{s:#}"
    );
    assert_eq!(
        (
            &s["task"]["exitCode"],
            &s["task"]["stdoutTail"],
            &s["task"]["stderrTail"]
        ),
        (&json!(0), &json!("hello\n"), &json!("careful\n"))
    );
    let three = k.wait_run("team-a", "three", ended).await;
    let s = &three["status"];
    assert_eq!(
        (&s["phase"], &s["reason"]),
        (&json!("Failed"), &json!("NonZeroExit")),
        "{s:#}"
    );
    assert_eq!(
        (&s["task"]["exitCode"], &s["task"]["stdoutTail"]),
        (&json!(3), &json!("failing\n"))
    );
    let killed = k.wait_run("team-a", "killed", ended).await;
    assert_eq!(
        killed["status"]["task"]["exitCode"], 137,
        "{:#}",
        killed["status"]
    );
    let flood = k.wait_run("team-a", "flood", ended).await;
    let t = &flood["status"]["task"];
    assert_eq!(
        t["stdoutTail"].as_str().unwrap().len(),
        4096,
        "{:#}",
        flood["status"]
    );
    assert!(t["stdoutTail"].as_str().unwrap().ends_with("9999\nend\n"));
    assert_eq!(t["stdoutTruncated"], true);

    // `krt run` against the cluster, as its users run it: the tails, and
    // the task's own exit code.
    let out = std::process::Command::new(kruntimes_testkit::krt_binary())
        .args(["run", "--kubeconfig"])
        .arg(k.node.kubeconfig())
        .args([
            "-n",
            "team-a",
            "--name",
            "cli",
            "--runtime",
            "bash",
            "--inline",
            "echo from-krt; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).contains("from-krt")
        ),
        (Some(3), true),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The S3-compatible store of the artifacts test, installed into the
/// cluster as a platform team installs theirs: versitygw (the object-store
/// tests' server) in namespace `storage`, its bucket made by an init
/// container, behind Service `versitygw`.
fn store_manifests(
    node: &kruntimes_kubetest::node::NodeCluster,
    access: &str,
    secret: &str,
) -> String {
    let versitygw = image_ref(node, "versitygw");
    let python = image_ref(node, "runtime-python");
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: storage}}
---
apiVersion: v1
kind: Secret
metadata: {{name: versitygw, namespace: storage}}
stringData: {{ROOT_ACCESS_KEY: {access}, ROOT_SECRET_KEY: {secret}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: versitygw, namespace: storage}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: versitygw}}}}
  template:
    metadata: {{labels: {{app: versitygw}}}}
    spec:
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        seccompProfile: {{type: RuntimeDefault}}
      initContainers:
        - name: bucket
          image: {python}
          command: [python3, -c, "import os; os.makedirs('/data/artifacts', exist_ok=True)"]
          volumeMounts: [{{name: data, mountPath: /data}}]
      containers:
        - name: versitygw
          image: {versitygw}
          args: [--port, ":7070", --region, us-east-1, posix, /data]
          envFrom: [{{secretRef: {{name: versitygw}}}}]
          ports: [{{name: s3, containerPort: 7070}}]
          readinessProbe: {{tcpSocket: {{port: s3}}, periodSeconds: 1}}
          securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
          volumeMounts: [{{name: data, mountPath: /data}}]
      volumes: [{{name: data, emptyDir: {{}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: versitygw, namespace: storage}}
spec:
  selector: {{app: versitygw}}
  ports: [{{name: s3, port: 7070, targetPort: s3}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: kruntimes-artifacts, namespace: kruntimes-system}}
stringData: {{accessKeyId: {access}, secretAccessKey: {secret}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_artifacts_go_to_a_store_in_the_cluster_and_come_back_through_the_gateway() {
    let _turn = TURN.lock().await;
    let (access, secret) = ("kruntimes-node", "node-store-secret-5d1c9e07a4b2");
    let k = Installed::with_setup(
        &[
            "--set",
            "artifactStore.endpoint=http://versitygw.storage.svc.cluster.local:7070",
            "--set",
            "artifactStore.bucket=artifacts",
            "--set",
            "artifactStore.pathStyle=true",
            "--set",
            "artifactStore.credentialsSecret.name=kruntimes-artifacts",
        ],
        |node| {
            node.apply(&store_manifests(node, access, secret)).unwrap();
        },
    )
    .await;
    k.node
        .kubectl(&[
            "rollout",
            "status",
            "-n",
            "storage",
            "deployment/versitygw",
            "--timeout=120s",
        ])
        .unwrap_or_else(|e| panic!("the store did not start: {e:#}\n{}", diagnose(&k.node)));
    k.namespace("team-a");
    k.service_account("team-a", "reader", Some("artifacts-reader"));
    k.service_account("team-a", "caller", Some("run-invoker"));
    let content = "{\"rows\": 3}\n";
    k.node
        .apply(
            &[
                task(
                    "exports",
                    "python",
                    &format!(
                        "import os\nd = os.environ['KRUNTIME_ARTIFACTS_DIR']\nos.makedirs(d + '/out')\nopen(d + '/out/data.json', 'w').write({content:?})\nprint(sorted(k for k in os.environ if any(w in k for w in ('ARTIFACT', 'SECRET', 'ACCESS', 'AWS'))))\n"
                    ),
                ),
                task(
                    "escapes",
                    "python",
                    "import os\nos.symlink('/etc/passwd', os.environ['KRUNTIME_ARTIFACTS_DIR'] + '/passwd')\n",
                ),
            ]
            .concat(),
        )
        .unwrap();
    let run = k.wait_run("team-a", "exports", ended).await;
    let s = &run["status"];
    assert_eq!(s["phase"], "Succeeded", "{s:#}\n{}", diagnose(&k.node));
    // User code saw its directory and nothing of the store's credentials.
    assert_eq!(
        s["task"]["stdoutTail"], "['KRUNTIME_ARTIFACTS_DIR']\n",
        "{s:#}"
    );
    let uid = run["metadata"]["uid"].as_str().unwrap();
    let digest: String = sha2::Sha256::digest(content.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        s["artifacts"],
        json!([{
            "name": "out/data.json",
            "uri": format!("s3://artifacts/kruntimes/team-a/{uid}/files/out/data.json"),
            "size": content.len(),
            "sha256": digest,
        }]),
        "{s:#}"
    );
    // Read back from the store through the gateway (NodePort), by a caller
    // allowed `get` on `runs/artifacts`: whole, and a range.
    let url = s["endpoint"]["url"].as_str().unwrap();
    let path = &url[url.find("/v1/").unwrap()..];
    let file = format!("https://{GATEWAY_HOST}:{NODE_PORT}{path}/out/data.json");
    let http = k.host_client();
    let reader = k.token("team-a", "reader");
    let whole = http.get(&file).bearer_auth(&reader).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(
        whole.headers()["x-kruntimes-artifact-sha256"],
        digest.as_str()
    );
    assert_eq!(whole.text().await.unwrap(), content);
    let part = http
        .get(&file)
        .bearer_auth(&reader)
        .header("range", "bytes=1-6")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(part.text().await.unwrap(), &content[1..7]);
    // A caller who may invoke, not read artifacts: 403.
    let refused = http
        .get(&file)
        .bearer_auth(k.token("team-a", "caller"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    // A link out of the directory fails its Run, named; nothing uploaded.
    let escapes = k.wait_run("team-a", "escapes", ended).await;
    let s = &escapes["status"];
    assert_eq!(
        (&s["phase"], &s["reason"]),
        (&json!("Failed"), &json!("ArtifactInvalid")),
        "{s:#}"
    );
    assert!(s["message"].as_str().unwrap().contains("passwd"), "{s:#}");
    // The store's secret is in no log of the release's Pods.
    let logs = k
        .node
        .kubectl(&[
            "logs",
            "-n",
            NAMESPACE,
            "-l",
            "kruntimes.io/runtime=python",
            "--all-containers",
            "--tail=-1",
        ])
        .unwrap();
    assert!(!logs.is_empty());
    assert!(
        !logs.contains(secret),
        "a runtime Pod's log holds the store's secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_run_is_driven_from_a_client_pod() {
    let _turn = TURN.lock().await;
    let k = Installed::new(&[]).await;
    k.namespace("team-a");
    k.node
        .apply(
            r#"
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata: {name: sandbox, namespace: team-a}
spec:
  runtime: bash
  env: [{name: GREETING, value: hello}]
  mode:
    session: {idleTimeoutSeconds: 600}
"#,
        )
        .unwrap();
    let run = k.wait_ready("team-a", "sandbox").await;
    let uid = run["metadata"]["uid"].as_str().unwrap().to_owned();
    k.service_account("team-a", "agent", Some("session-user"));
    let base = format!("/v1/namespaces/team-a/runtimes/bash/sessions/{uid}");
    let steps = json!([
        {"name": "info", "method": "GET", "path": base},
        {"name": "write", "method": "POST", "path": format!("{base}/operations:execute"),
         "json": {"writeFile": {"path": "work/a.txt", "contentBase64": b64(b"from a pod\n")}}},
        {"name": "shell", "method": "POST", "path": format!("{base}/operations:execute"),
         "json": {"command": {"shell": "echo \"$GREETING $(cat work/a.txt)\"; echo err >&2; exit 3"}}},
        {"name": "list", "method": "GET", "path": format!("{base}/files?path=work")},
        {"name": "content", "method": "GET", "path": format!("{base}/files:content?path=work/a.txt")},
        {"name": "ws", "ws": format!("{base}/operations:ws"), "completed": 2, "send": [
            {"type": "send", "operation": {"command": {"shell": "for i in 1 2 3; do echo line$i; done"}}},
            {"type": "send", "operation": {"command": {"argv": ["cat", "work/a.txt"]}}},
        ]},
        {"name": "after", "method": "POST", "path": format!("{base}/operations:execute"),
         "json": {"command": {"argv": ["ls", "work"]}}},
    ]);
    let out = k
        .client_pod("team-a", "agent", "kruntimes-gateway", steps.clone())
        .await;
    assert_eq!(out["info"]["status"], 200, "{}", out["info"]);
    assert_eq!(out["info"]["json"]["uid"], uid.as_str());
    assert_eq!(
        out["write"]["json"]["state"], "Succeeded",
        "{}",
        out["write"]
    );
    let shell = &out["shell"]["json"];
    assert_eq!(
        (shell["state"].clone(), shell["exitCode"].clone()),
        (json!("Failed"), json!(3)),
        "{shell}"
    );
    assert_eq!(shell["stdout"], "hello from a pod\n");
    assert_eq!(shell["stderr"], "err\n");
    let names: Vec<&str> = out["list"]["json"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.txt"], "{}", out["list"]);
    assert_eq!(out["content"]["status"], 200);
    assert_eq!(out["content"]["body"], "from a pod\n", "{}", out["content"]);

    // The WebSocket: two operations over one connection, events in sequence.
    let ws = &out["ws"];
    assert_eq!(ws["status"], 101, "{ws}");
    let events = ws["events"].as_array().unwrap();
    let sequences: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
    let output: String = events
        .iter()
        .filter(|e| e["type"] == "output")
        .map(|e| e["data"].as_str().unwrap())
        .collect();
    assert_eq!(output, "line1\nline2\nline3\nfrom a pod\n", "{ws}");
    let completed: Vec<&Value> = events.iter().filter(|e| e["type"] == "completed").collect();
    assert_eq!(completed.len(), 2, "{ws}");
    assert!(completed.iter().all(|e| e["state"] == "Succeeded"), "{ws}");
    assert_eq!(
        out["after"]["json"]["stdout"], "a.txt\n",
        "{}",
        out["after"]
    );

    // Without `runs/session` (an invoker only): 403 for every path.
    k.service_account("team-a", "invoker", Some("run-invoker"));
    let out = k
        .client_pod("team-a", "invoker", "kruntimes-gateway", steps)
        .await;
    for step in ["info", "write", "list", "content"] {
        assert_eq!(out[step]["status"], 403, "{step}: {}", out[step]);
    }
    assert_eq!(out["ws"]["status"], 403, "{}", out["ws"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_pod_deleted_is_replaced_and_the_run_moves_at_the_next_attempt() {
    let _turn = TURN.lock().await;
    let k = Installed::new(&[]).await;
    let Invoker { uid, path, token } = k.invoker("mover").await;
    let host = k.host_client();
    assert_eq!(k.host_invoke(&host, &path, &token, json!({})).await.0, 200);

    let before = k.run("team-a", "mover");
    let old_pod = before["status"]["assignedPod"].as_str().unwrap().to_owned();
    let old_uid = before["status"]["assignedPodUID"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(before["status"]["attempt"], 1);
    k.node
        .kubectl(&["delete", "pod", "-n", NAMESPACE, &old_pod, "--wait=false"])
        .unwrap();

    // The Deployment controller replaces the Pod; the Run is Ready again on the
    // new one, one attempt later.
    let after = k
        .wait_run("team-a", "mover", |r| {
            r["status"]["phase"] == "Ready" && r["status"]["attempt"] == 2
        })
        .await;
    let new_pod = after["status"]["assignedPod"].as_str().unwrap().to_owned();
    let new_uid = after["status"]["assignedPodUID"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(new_pod, old_pod);
    let pod = k.pod(&new_pod);
    assert_eq!(pod["metadata"]["uid"], new_uid.as_str());
    assert!(
        pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet",
        "{pod}"
    );
    let (status, body) = k.host_invoke(&host, &path, &token, json!({})).await;
    assert_eq!(status, 200, "{body}");

    // The new owner's runtimed fences the old registration: a request carrying
    // the old attempt or the old Pod is refused, the current one is served.
    let pod_ip = pod["status"]["podIP"].as_str().unwrap().to_owned();
    let direct = k.runtimed_client(&pod_ip);
    let fenced = |attempt: &'static str, owner: String| {
        let direct = direct.clone();
        let url = format!("https://{RUNTIMED_HOST}:7443{path}");
        let uid = uid.clone();
        async move {
            let r = direct
                .post(url)
                .header("x-kruntimes-invocation-id", format!("fence-{attempt}"))
                .header("x-kruntimes-run-uid", uid)
                .header("x-kruntimes-owner-pod-uid", owner)
                .header("x-kruntimes-attempt", attempt)
                .header("x-kruntimes-hop", "gateway")
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, body) = fenced("1", new_uid.clone()).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (503, json!("StaleOwner")),
        "{body}"
    );
    let (status, body) = fenced("2", old_uid).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (503, json!("StaleOwner")),
        "{body}"
    );
    let (status, body) = fenced("2", new_uid).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_restarts_of_the_gateway_and_the_operator_lose_no_ready_run() {
    let _turn = TURN.lock().await;
    let k = Installed::new(&[]).await;
    let Invoker { path, token, .. } = k.invoker("steady").await;
    let before = k.run("team-a", "steady");

    for deployment in [GATEWAY, OPERATOR] {
        let load = Load::start(&k, &path, &token);
        k.node
            .kubectl(&[
                "rollout",
                "restart",
                "deployment",
                "-n",
                NAMESPACE,
                deployment,
            ])
            .unwrap();
        k.node
            .kubectl(&[
                "rollout",
                "status",
                "deployment",
                "-n",
                NAMESPACE,
                deployment,
                "--timeout=180s",
            ])
            .unwrap();
        // The load goes on until the replaced Pods are gone (they serve
        // through their shutdown grace, after the rollout counts them out).
        let component = deployment.trim_start_matches("kruntimes-");
        wait_until(Duration::from_secs(60), "the replaced Pods gone", || {
            k.only_current_pods(component)
        })
        .await;
        let report = load.stop().await;
        eprintln!("{deployment}: {report}");
        assert!(report.ok > 0, "{deployment}: {report}");
        assert!(
            report.unexpected.is_empty(),
            "{deployment}: {:?}",
            report.unexpected
        );
        // No new connection failed (docs/operations.md#rollouts): a gateway
        // Pod being replaced keeps serving for `gateway.shutdownGraceSeconds`
        // while kube-proxy drops it; an operator restart leaves the gateways
        // their last tables.
        assert_eq!(report.failed(), 0, "{deployment}: {report}");
        let run = k.run("team-a", "steady");
        assert_eq!(run["status"]["phase"], "Ready", "{deployment}: {run}");
        assert_eq!(
            run["status"]["attempt"], before["status"]["attempt"],
            "{deployment}"
        );
        assert_eq!(
            run["status"]["assignedPodUID"],
            before["status"]["assignedPodUID"]
        );
    }
    // Served on: a new connection after both rollouts (the load's own calls
    // are one at a time: a Run serves one call at once).
    k.invoke_eventually(&path, &token, Duration::from_secs(5))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_managed_certificates_rotated_early_keep_callers_working() {
    let _turn = TURN.lock().await;
    // The operator checks every 10 s (the least the chart allows), so a removed
    // leaf is reissued within seconds.
    let k = Installed::new(&["--set", "tls.certificateCheckSeconds=10"]).await;
    let Invoker { path, token, .. } = k.invoker("steady").await;
    let before = k.run("team-a", "steady");
    let bundle = k.ca_bundle();
    let serving = k.secret_serial(&format!("{FULLNAME}-gateway-tls"));
    let runtimed = k.secret_serial(&format!("{FULLNAME}-internal-runtimed"));
    let owner_ip = k.pod(before["status"]["assignedPod"].as_str().unwrap())["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        k.served_serial(&k.node.node_ip().unwrap().to_string(), 30443, GATEWAY_HOST),
        serving
    );
    assert_eq!(k.served_serial(&owner_ip, 7443, RUNTIMED_HOST), runtimed);

    // Forced early: the leaves are deleted (what `kubectl delete secret` of a
    // certificate does with any certificate manager); the operator issues new
    // ones from the same CAs, the kubelet updates the mounted files, and the
    // gateway and runtimed reload them in place.
    let load = Load::start(&k, &path, &token);
    for leaf in ["gateway-tls", "internal-runtimed", "internal-gateway"] {
        k.node
            .kubectl(&[
                "delete",
                "secret",
                "-n",
                NAMESPACE,
                &format!("{FULLNAME}-{leaf}"),
            ])
            .unwrap();
    }
    let renewed = k
        .wait_secret_serial_changes(&format!("{FULLNAME}-gateway-tls"), &serving)
        .await;
    let renewed_runtimed = k
        .wait_secret_serial_changes(&format!("{FULLNAME}-internal-runtimed"), &runtimed)
        .await;
    // Every gateway replica serves the new leaf (each Pod asked directly),
    // and the owner's runtimed its new one.
    let gateways = k.pod_ips("gateway");
    assert_eq!(gateways.len(), 2, "{gateways:?}");
    wait_until(
        Duration::from_secs(120),
        "the gateways serve the renewed certificate",
        || {
            gateways
                .iter()
                .all(|ip| k.served_serial(ip, 8443, GATEWAY_HOST) == renewed)
        },
    )
    .await;
    wait_until(
        Duration::from_secs(120),
        "runtimed serves its renewed certificate",
        || k.served_serial(&owner_ip, 7443, RUNTIMED_HOST) == renewed_runtimed,
    )
    .await;
    // The load stops first: a Run serves one call at once, so a second
    // caller beside it could be answered 429 Busy.
    let report = load.stop().await;
    eprintln!("rotation: {report}");
    // New connections, with the bundle callers already held, still work: the
    // gateway's new client certificate is accepted by runtimed (every load
    // call is a new connection too).
    k.invoke_eventually(&path, &token, Duration::from_secs(5))
        .await;
    assert_eq!(
        report.failed(),
        0,
        "no invoke may fail during a leaf rotation: {report}"
    );
    assert_eq!(k.ca_bundle(), bundle, "the CA and its bundle are unchanged");
    let run = k.run("team-a", "steady");
    assert_eq!(run["status"]["phase"], "Ready");
    assert_eq!(run["status"]["attempt"], before["status"]["attempt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_policies_upgrade_and_uninstall() {
    let _turn = TURN.lock().await;
    let k = Installed::new(&[]).await;
    let Invoker { path, token, .. } = k.invoker("hello").await;

    // helm upgrade with changed values: one gateway, two warm Python Pods,
    // network policies on (the API server's endpoint is the node's address).
    let node_ip = k.node.node_ip().unwrap();
    k.upgrade(&[
        "--set",
        "gateway.replicas=1",
        "--set",
        "runtimes[0].name=python",
        "--set",
        "runtimes[0].backend=python",
        "--set",
        "runtimes[0].replicas=2",
        "--set",
        "runtimes[0].capacity.runs=8",
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        &format!("networkPolicy.kubeAPIServer.cidrs={{{node_ip}/32}}"),
    ]);
    wait_until(
        Duration::from_secs(180),
        "one gateway and two Python Pods",
        || k.ready_replicas(GATEWAY) == (1, 1) && k.ready_replicas("runtime-python") == (2, 2),
    )
    .await;
    // The bridge CNI does not enforce policies; what can be checked is that
    // every selector of every policy selects the running Pods it is meant for.
    let policies = get_json(&k.node, &["get", "networkpolicy", "-n", NAMESPACE]);
    let policies = policies["items"].as_array().unwrap();
    assert!(policies.len() >= 3, "{policies:?}");
    for policy in policies {
        let name = policy["metadata"]["name"].as_str().unwrap();
        let spec = &policy["spec"];
        assert!(
            k.selects(NAMESPACE, &spec["podSelector"]) > 0,
            "{name} selects no Pod"
        );
        for rule in spec["ingress"].as_array().into_iter().flatten() {
            for peer in rule["from"].as_array().into_iter().flatten() {
                if peer.get("podSelector").is_some() && peer.get("namespaceSelector").is_none() {
                    assert!(
                        k.selects(NAMESPACE, &peer["podSelector"]) > 0,
                        "{name}: {peer}"
                    );
                }
            }
        }
        for rule in spec["egress"].as_array().into_iter().flatten() {
            for peer in rule["to"].as_array().into_iter().flatten() {
                if let (Some(ns), Some(pods)) =
                    (peer.get("namespaceSelector"), peer.get("podSelector"))
                {
                    let dns = ns["matchLabels"]["kubernetes.io/metadata.name"]
                        .as_str()
                        .unwrap();
                    assert!(k.selects(dns, pods) > 0, "{name}: {peer}");
                }
                if let Some(cidr) = peer["ipBlock"]["cidr"].as_str() {
                    assert_eq!(cidr, format!("{node_ip}/32"), "{name}: {peer}");
                }
            }
        }
    }
    // Everything the policies allow still flows: callers → gateway → runtimed,
    // runtimed → API server (a new Run registers), DNS.
    let uid2 = k.function_run("team-a", "after-upgrade").await;
    k.invoke_eventually(&path, &token, Duration::from_secs(60))
        .await;
    let path2 = format!("/v1/namespaces/team-a/runtimes/python/runs/{uid2}:invoke");
    k.invoke_eventually(&path2, &token, Duration::from_secs(60))
        .await;
    let out = k
        .client_pod(
            "team-a",
            "bot",
            "kruntimes-gateway",
            json!([
                {"name": "invoke", "method": "POST", "path": path2, "json": {"name": "policy"}},
            ]),
        )
        .await;
    assert_eq!(out["invoke"]["status"], 200, "{}", out["invoke"]);

    // Uninstall, after the Runs are deleted (their finalizers need the
    // operator): nothing of the release is left but the CRDs.
    for run in ["hello", "after-upgrade"] {
        k.node
            .kubectl(&["delete", "krun", "-n", "team-a", run, "--timeout=120s"])
            .unwrap();
    }
    k.node
        .helm(
            &k.helm,
            &[
                "uninstall",
                RELEASE,
                "-n",
                NAMESPACE,
                "--wait",
                "--timeout",
                "3m",
            ],
        )
        .unwrap();
    wait_until(
        Duration::from_secs(120),
        "every Pod of the release gone",
        || {
            k.node
                .kubectl(&["get", "pods", "-n", NAMESPACE, "-o", "name"])
                .unwrap()
                .trim()
                .is_empty()
        },
    )
    .await;
    let left = k.leftovers();
    assert!(left.is_empty(), "left after helm uninstall: {left:#?}");
    for crd in ["runs.kruntimes.io", "runtimes.kruntimes.io"] {
        k.node.kubectl(&["get", "crd", crd]).unwrap();
    }
}
