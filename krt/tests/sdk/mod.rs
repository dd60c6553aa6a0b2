//! Live targets for the SDKs' own suites (`sdk/python`, `sdk/go`), and the
//! environment that names them (`KRT_TEST_*`, read by each suite):
//!
//! - [`Target::embedded`]: a `krt up` stack with the fixture function Run;
//!   sandboxes are created as manifests in its runs directory.
//! - [`Target::kubernetes`]: the API server harness (operator, gateway with
//!   TokenReview / SubjectAccessReview, runtimed processes playing Pods); the
//!   fixture function Run is created through the API, sandboxes are created
//!   by the SDKs through it. Users: alice may do everything an SDK does
//!   (`examples/rbac/sdk-user-role.yaml`), bob may only read Runs, carol may
//!   invoke through a RoleBinding the suites delete; alice is also reached
//!   through an exec credential plugin.
//!
//! Both name a Python function Run ([`handler`]) with a 2 s invocation
//! deadline, and a session Runtime. [`tls_fixture`] writes a CA, a server
//! and a client certificate for the suites' client-certificate tests.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use kruntimes_kubetest::cluster::Cluster;
use kruntimes_kubetest::{ApiServer, Subject, User};
use kruntimes_testkit::fixtures::{BROKEN_PY, broken_python_run};
use kruntimes_testkit::{Options, Stack, function_run};
use serde_json::json;

/// The fixture function Run.
pub const FUNCTION: &str = "sdk-hello";
/// A function Run whose handler does not load: it ends `Failed`.
const BROKEN: &str = "sdk-broken";
/// Its handler (`main.invoke`): the end-to-end tests' greeter (sleeps and
/// raises on request), which also crashes its worker, returns 2 MiB, or
/// writes `{"report": TEXT}` to `report.txt` in its artifacts directory
/// (when its Runtime has a store: `krt up`'s do, the harness's do not).
pub fn handler() -> String {
    format!(
        "{}\n_greet = invoke\n\n\ndef invoke(request):\n    if request.get(\"crash\"):\n        os._exit(3)\n    if request.get(\"big\"):\n        return \"x\" * (2 * 1024 * 1024)\n{REPORT}    return _greet(request)\n",
        kruntimes_testkit::prelude::PY
    )
}

/// The handler's `report` branch: the file, and a value that says whether
/// there was a directory to write it in.
const REPORT: &str = r#"    if "report" in request:
        where = os.environ.get("KRUNTIME_ARTIFACTS_DIR")
        if where:
            with open(os.path.join(where, "report.txt"), "w") as f:
                f.write(request["report"])
        return {"reported": len(request["report"]), "stored": bool(where)}
"#;
/// The namespace of the harness's Runs and grants.
const NAMESPACE: &str = "sdk";
/// carol's RoleBinding, deleted by the revocation tests.
const REVOKED_BINDING: &str = "carol-invokes";

/// What keeps a target running.
enum Hold {
    Embedded(Stack),
    Kubernetes(Box<(ApiServer, Cluster)>),
}

/// A running target and the environment that describes it to a suite.
pub struct Target {
    /// `KRT_TEST_*` variables.
    pub env: Vec<(String, String)>,
    /// Files of the target (kubeconfigs, the exec plugin, the CA).
    pub dir: tempfile::TempDir,
    hold: Hold,
}

fn krt() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_krt"))
}

fn rbac(file: &str) -> PathBuf {
    kruntimes_testkit::checkout()
        .join("examples/rbac")
        .join(file)
}

/// A Python function Run `name` of `source` in the test namespace.
fn python_function(name: &str, source: &str, timeout: Option<u32>) -> kruntimes_api::Run {
    let mut function = json!({"handler": "main.invoke"});
    if let Some(t) = timeout {
        function["invocationTimeoutSeconds"] = t.into();
    }
    serde_json::from_value(json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "runtime": "python",
            "source": {"inlinePath": "main.py", "inline": source},
            "mode": {"function": function},
        }
    }))
    .unwrap()
}

fn var(name: &str, value: impl Into<String>) -> (String, String) {
    (name.to_owned(), value.into())
}

impl Target {
    /// A `krt up` stack: three runtimed (the function holds one, sandboxes
    /// take the others whole).
    pub async fn embedded() -> Target {
        let manifest = function_run(
            FUNCTION,
            "python",
            "main.invoke",
            "main.py",
            &handler(),
            "      invocationTimeoutSeconds: 2\n",
        );
        let stack = Stack::start(
            krt(),
            Options {
                env: Vec::new(),
                // `krt up`'s own pool, as the SDK pages start it: every
                // sandbox takes a whole instance and another starts.
                runtimed: 2,
                max_runtimed: Some(16),
                runs: vec![
                    (format!("{FUNCTION}.yaml"), manifest),
                    broken_python_run(BROKEN),
                ],
                extra_args: Vec::new(),
            },
        )
        .expect("start the embedded stack");
        stack.wait_phase(BROKEN, "Failed").await.unwrap();
        let run = stack.wait_phase(FUNCTION, "Ready").await.unwrap();
        stack.wait_routable(&run).await.unwrap();
        // The embedded policy allows only its admins: bob is authenticated and denied.
        let bob = stack.krt(&["token", "--subject", "bob"]).unwrap();
        assert!(bob.status.success(), "krt token: {bob:?}");
        let client: serde_json::Value =
            serde_json::from_slice(&std::fs::read(stack.state_dir().join("client.json")).unwrap())
                .unwrap();
        let env = vec![
            var("KRT_TEST_MODE", "embedded"),
            var(
                "KRT_TEST_STATE_DIR",
                stack.state_dir().display().to_string(),
            ),
            var("KRT_TEST_NAMESPACE", "default"),
            var("KRT_TEST_FUNCTION", FUNCTION),
            var("KRT_TEST_BROKEN_FUNCTION", BROKEN),
            var("KRT_TEST_SESSION_RUNTIME", "bash"),
            var(
                "KRT_TEST_FORBIDDEN_TOKEN",
                String::from_utf8(bob.stdout).unwrap().trim(),
            ),
            var("KRT_TEST_GATEWAY", stack.gateway.clone()),
            var("KRT_TEST_GATEWAY_CA", client["caFile"].as_str().unwrap()),
            var("KRT_TEST_TOKEN", stack.token.clone()),
        ];
        Target {
            env,
            dir: tempfile::tempdir().unwrap(),
            hold: Hold::Embedded(stack),
        }
    }

    /// The API server harness with Runtimes `python` (one Pod, the
    /// function) and `bash` (two Pods, the sandboxes).
    pub async fn kubernetes() -> Target {
        let server = ApiServer::start().await.expect("start the test API server");
        let cluster = Cluster::start(krt(), &server)
            .await
            .expect("start the installation");
        server.create_namespace(NAMESPACE).await.unwrap();
        for role in [
            "sdk-user-role.yaml",
            "run-invoker-role.yaml",
            "run-reader-role.yaml",
        ] {
            server
                .apply_role_file(Some(NAMESPACE), &rbac(role))
                .await
                .unwrap();
        }
        for (binding, role, user) in [
            ("alice-sdk", "sdk-user", User::Alice),
            ("bob-reads", "run-reader", User::Bob),
            (REVOKED_BINDING, "run-invoker", User::Carol),
        ] {
            server
                .bind(Some(NAMESPACE), binding, role, Subject::User(user))
                .await
                .unwrap();
        }
        cluster.create_runtime("python", 1, 8).await.unwrap();
        cluster.create_runtime("bash", 2, 1).await.unwrap();
        for (pod, runtime) in [
            ("python-0", "python"),
            ("bash-0", "bash"),
            ("bash-1", "bash"),
        ] {
            cluster.add_pod(pod, runtime).await.unwrap();
        }
        let runs =
            kube::Api::<kruntimes_api::Run>::namespaced(server.client().await.unwrap(), NAMESPACE);
        for (name, source, timeout) in [
            (FUNCTION, handler(), Some(2)),
            (BROKEN, BROKEN_PY.into(), None),
        ] {
            runs.create(
                &kube::api::PostParams::default(),
                &python_function(name, &source, timeout),
            )
            .await
            .unwrap();
        }
        cluster
            .wait_phase(NAMESPACE, BROKEN, "Failed")
            .await
            .unwrap();
        let run = cluster
            .wait_phase(NAMESPACE, FUNCTION, "Ready")
            .await
            .unwrap();
        let url = run["status"]["endpoint"]["url"].as_str().unwrap();
        invoke_until_routed(&cluster, url, server.token(User::Alice)).await;

        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("gateway-ca.crt");
        std::fs::write(&ca, &cluster.public_ca_pem).unwrap();
        let kubeconfig = |user: User| server.write_kubeconfig(user).unwrap().display().to_string();
        let (exec, count) = exec_kubeconfig(&server, dir.path());
        let env = vec![
            var("KRT_TEST_MODE", "kubernetes"),
            var("KRT_TEST_NAMESPACE", NAMESPACE),
            var("KRT_TEST_FUNCTION", FUNCTION),
            var("KRT_TEST_BROKEN_FUNCTION", BROKEN),
            var("KRT_TEST_SESSION_RUNTIME", "bash"),
            var("KRT_TEST_KUBECONFIG", kubeconfig(User::Alice)),
            var("KRT_TEST_KUBECONFIG_BOB", kubeconfig(User::Bob)),
            var("KRT_TEST_KUBECONFIG_CAROL", kubeconfig(User::Carol)),
            var("KRT_TEST_KUBECONFIG_ADMIN", kubeconfig(User::Admin)),
            var("KRT_TEST_KUBECONFIG_EXEC", exec.display().to_string()),
            var("KRT_TEST_EXEC_COUNT", count.display().to_string()),
            var("KRT_TEST_REVOKE_BINDING", REVOKED_BINDING),
            var("KRT_TEST_GATEWAY", cluster.gateway.clone()),
            var("KRT_TEST_GATEWAY_CA", ca.display().to_string()),
            var("KRT_TEST_TOKEN", server.token(User::Alice)),
        ];
        Target {
            env,
            dir,
            hold: Hold::Kubernetes(Box::new((server, cluster))),
        }
    }

    /// Every log of the target, for failure messages.
    pub fn logs(&self) -> String {
        match &self.hold {
            Hold::Embedded(stack) => stack.all_logs(),
            Hold::Kubernetes(held) => held.1.logs(),
        }
    }

    /// Asserts that no token the target issued appears in its logs.
    pub async fn assert_no_token_in_logs(&self) {
        let logs = match &self.hold {
            Hold::Embedded(stack) => stack.settled_logs().await,
            Hold::Kubernetes(held) => held.1.settled_logs().await,
        };
        for (name, value) in &self.env {
            if name.ends_with("TOKEN") && !value.is_empty() {
                assert!(
                    !logs.contains(value.as_str()),
                    "{name} leaked into the logs"
                );
            }
        }
        if let Hold::Kubernetes(held) = &self.hold {
            for token in held.0.tokens() {
                assert!(!logs.contains(token), "a static token leaked into the logs");
            }
        }
    }
}

/// Invokes until the gateway routes the Run (it learns routes from watches).
async fn invoke_until_routed(cluster: &Cluster, url: &str, token: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = cluster
            .http
            .post(url)
            .bearer_auth(token)
            .body(r#"{"name":"warm"}"#)
            .send()
            .await;
        if r.as_ref().is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} not routed: {r:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A kubeconfig for alice whose token comes from an exec credential plugin
/// (a shell script that counts its runs); returns it and the count file.
fn exec_kubeconfig(server: &ApiServer, dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt as _;
    let token = server.token(User::Alice);
    let count = dir.join("exec-runs");
    let script = dir.join("credential-plugin.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nn=$(cat '{count}' 2>/dev/null || echo 0)\necho $((n + 1)) > '{count}'\nprintf '%s\\n' '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\"}}}}'\n",
            count = count.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    let yaml = server.kubeconfig_yaml(User::Alice).replace(
        &format!("    token: {token}\n"),
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\n",
            script.display()
        ),
    );
    assert!(
        yaml.contains("exec:"),
        "the kubeconfig's user changed shape"
    );
    let path = dir.join("alice-exec.kubeconfig");
    kruntimes_certs::write_private(&path, yaml.as_bytes()).unwrap();
    (path, count)
}

/// Writes `ca.crt`, `server.crt`/`server.key` (for 127.0.0.1) and
/// `client.crt`/`client.key` (CN `kruntimes-sdk-test-user`) into `dir`.
pub fn tls_fixture(dir: &Path) {
    let ca = kruntimes_certs::Ca::generate("kruntimes-sdk-test-ca", 1).unwrap();
    std::fs::write(dir.join("ca.crt"), &ca.cert_pem).unwrap();
    for (name, cn, server) in [
        ("server", "127.0.0.1", true),
        ("client", "kruntimes-sdk-test-user", false),
    ] {
        let leaf = ca
            .issue(&kruntimes_certs::LeafSpec {
                common_name: cn.into(),
                dns_names: vec!["localhost".into()],
                ips: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
                server,
                client: !server,
                valid_days: 1,
            })
            .unwrap();
        std::fs::write(dir.join(format!("{name}.crt")), &leaf.cert_pem).unwrap();
        kruntimes_certs::write_private(&dir.join(format!("{name}.key")), leaf.key_pem.as_bytes())
            .unwrap();
    }
}

/// A suite's output as text, failing the test (with the target's logs) when
/// it did not pass.
pub fn passed(what: &str, out: &Output, target: Option<&Target>) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let logs = target.map(Target::logs).unwrap_or_default();
        panic!(
            "{what} failed ({}):\n{stdout}\n{stderr}\n==== logs\n{logs}",
            out.status
        );
    }
    stdout
}
