//! What the real-node tests share: a cluster with the chart installed, and the
//! ways users reach it (kubectl, helm, a client Pod, the host via NodePort).

#![allow(dead_code)] // each test uses a part of it

mod client_pod;
mod load;
mod tls;

pub use load::Load;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kruntimes_kubetest::helm::{Helm, chart_dir};
use kruntimes_kubetest::node::NodeCluster;
use serde_json::{Value, json};

pub const RELEASE: &str = "kruntimes";
pub const NAMESPACE: &str = "kruntimes-system";
/// The chart's name prefix for release `kruntimes`.
pub const FULLNAME: &str = "kruntimes";
pub const GATEWAY: &str = "kruntimes-gateway";
pub const OPERATOR: &str = "kruntimes-operator";
/// The gateway Service's name, in its certificate and in every Run's URL.
pub const GATEWAY_HOST: &str = "kruntimes-gateway.kruntimes-system.svc";
/// The name runtimed's certificate carries (the gateway's `--runtimed-server-name`).
pub const RUNTIMED_HOST: &str = "runtimed.kruntimes.internal";
pub const NODE_PORT: u16 = 30443;
/// The image client Pods run (it has Python 3 and nothing else the client needs).
const CLIENT_IMAGE: &str = "runtime-python";

/// A node cluster with the chart installed as release `kruntimes` in
/// `kruntimes-system`, the gateway's Service a NodePort on 30443.
pub struct Installed {
    pub node: NodeCluster,
    pub helm: Helm,
    client_pods: std::sync::atomic::AtomicUsize,
}

/// A Run in `team-a` and a caller allowed to invoke it ([`Installed::invoker`]).
pub struct Invoker {
    pub uid: String,
    /// Its invoke path.
    pub path: String,
    /// A token of `team-a:bot` for the gateway's audience.
    pub token: String,
}

/// The values every install and upgrade passes.
const BASE_VALUES: [&str; 4] = [
    "--set",
    "gateway.service.type=NodePort",
    "--set",
    "gateway.service.httpsNodePort=30443",
];

impl Installed {
    /// Brings a cluster up and runs `helm install --wait` with `extra` arguments.
    pub async fn new(extra: &[&str]) -> Self {
        Self::with_setup(extra, |_| {}).await
    }

    /// [`Self::new`], with `setup` run on the cluster once the release
    /// namespace exists, before the install (what a platform team creates
    /// first: a Secret the values name, a service the release uses).
    pub async fn with_setup(extra: &[&str], setup: impl FnOnce(&NodeCluster)) -> Self {
        let node = NodeCluster::up().unwrap_or_else(|e| panic!("{e:#}"));
        let helm = Helm::new().expect("build helm");
        node.kubectl(&["create", "namespace", NAMESPACE]).unwrap();
        setup(&node);
        let started = Instant::now();
        release(&node, &helm, "install", extra);
        eprintln!("helm install --wait: {:?}", started.elapsed());
        let installed = Self {
            node,
            helm,
            client_pods: Default::default(),
        };
        installed.wait_node_port(Duration::from_secs(60)).await;
        installed
    }

    /// Waits until the NodePort routes to a gateway (any HTTP answer). `helm
    /// --wait` returns once the gateway Pods are Ready; kube-proxy programs
    /// the NodePort for their endpoints a moment later, and until then a
    /// connection is refused. A platform team checks the same after install.
    async fn wait_node_port(&self, within: Duration) {
        let started = Instant::now();
        let url = format!("https://{GATEWAY_HOST}:{NODE_PORT}/v1/namespaces");
        self.poll_node_port(within, |c| c.get(&url), |_| true).await;
        eprintln!("NodePort routable: {:?}", started.elapsed());
    }

    /// `helm upgrade --wait` with the base values and `extra`.
    pub fn upgrade(&self, extra: &[&str]) {
        release(&self.node, &self.helm, "upgrade", extra);
    }

    pub fn namespace(&self, namespace: &str) {
        self.node
            .kubectl(&["create", "namespace", namespace])
            .unwrap();
    }

    /// A ServiceAccount, bound in its namespace to the chart's ClusterRole
    /// `FULLNAME-ROLE` when `role` is given.
    pub fn service_account(&self, namespace: &str, name: &str, role: Option<&str>) {
        self.node
            .kubectl(&["create", "serviceaccount", "-n", namespace, name])
            .unwrap();
        if let Some(role) = role {
            self.node
                .kubectl(&[
                    "create",
                    "rolebinding",
                    &format!("{name}-{role}"),
                    "-n",
                    namespace,
                    &format!("--clusterrole={FULLNAME}-{role}"),
                    &format!("--serviceaccount={namespace}:{name}"),
                ])
                .unwrap();
        }
    }

    /// A token of the ServiceAccount for the gateway's audience (`kubectl create token`).
    pub fn token(&self, namespace: &str, name: &str) -> String {
        self.node
            .kubectl(&[
                "create",
                "token",
                "-n",
                namespace,
                name,
                "--audience",
                "kruntimes-gateway",
            ])
            .unwrap()
            .trim()
            .to_owned()
    }

    /// The published CA bundle of the gateway (the ConfigMap the operator keeps).
    pub fn ca_bundle(&self) -> String {
        self.node
            .kubectl(&[
                "get",
                "configmap",
                "-n",
                NAMESPACE,
                &format!("{FULLNAME}-gateway-ca"),
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ])
            .unwrap()
    }

    /// The Python function Run `name` of the docs (`hello NAME`), Ready; its UID.
    pub async fn function_run(&self, namespace: &str, name: &str) -> String {
        self.node
            .apply(&format!(
                r#"
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  runtime: python
  source:
    inlinePath: main.py
    inline: |
      def invoke(request):
          return {{"message": "hello " + request.get("name", "world")}}
  mode:
    function:
      handler: main.invoke
"#
            ))
            .unwrap();
        let run = self.wait_ready(namespace, name).await;
        run["metadata"]["uid"].as_str().unwrap().to_owned()
    }

    /// Namespace `team-a`, the Python function Run `name` there (Ready), and
    /// ServiceAccount `bot` allowed to invoke it: what most tests start from.
    pub async fn invoker(&self, name: &str) -> Invoker {
        self.namespace("team-a");
        let uid = self.function_run("team-a", name).await;
        self.service_account("team-a", "bot", Some("run-invoker"));
        Invoker {
            path: format!("/v1/namespaces/team-a/runtimes/python/runs/{uid}:invoke"),
            uid,
            token: self.token("team-a", "bot"),
        }
    }

    pub fn run(&self, namespace: &str, name: &str) -> Value {
        get_json(&self.node, &["get", "krun", "-n", namespace, name])
    }

    pub fn pod(&self, name: &str) -> Value {
        get_json(&self.node, &["get", "pod", "-n", NAMESPACE, name])
    }

    pub async fn wait_ready(&self, namespace: &str, name: &str) -> Value {
        self.wait_run(namespace, name, |r| r["status"]["phase"] == "Ready")
            .await
    }

    /// The Run once `done` holds (within 3 minutes).
    pub async fn wait_run(
        &self,
        namespace: &str,
        name: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let run = self.run(namespace, name);
            if done(&run) {
                return run;
            }
            if Instant::now() > deadline {
                panic!(
                    "Run {namespace}/{name} never got there: {:#}\n{}",
                    run["status"],
                    diagnose(&self.node)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// (spec replicas, ready replicas) of a Deployment in the release namespace.
    pub fn ready_replicas(&self, deployment: &str) -> (u64, u64) {
        let d = get_json(
            &self.node,
            &["get", "deployment", "-n", NAMESPACE, deployment],
        );
        (
            d["spec"]["replicas"].as_u64().unwrap_or(0),
            d["status"]["readyReplicas"].as_u64().unwrap_or(0),
        )
    }

    /// How many running Pods of `namespace` a label selector (as in a
    /// NetworkPolicy) selects.
    pub fn selects(&self, namespace: &str, selector: &Value) -> usize {
        let mut terms: Vec<String> = selector["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
            .collect();
        for e in selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let key = e["key"].as_str().unwrap();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap())
                .collect();
            terms.push(match e["operator"].as_str().unwrap() {
                "Exists" => key.to_owned(),
                "DoesNotExist" => format!("!{key}"),
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                other => panic!("operator {other}"),
            });
        }
        let pods = get_json(
            &self.node,
            &[
                "get",
                "pods",
                "-n",
                namespace,
                "-l",
                &terms.join(","),
                "--field-selector=status.phase=Running",
            ],
        );
        pods["items"].as_array().map_or(0, Vec::len)
    }

    /// The release's Pods of `component`, listed with `extra` kubectl flags.
    fn component_pods(&self, component: &str, extra: &[&str]) -> Vec<serde_json::Value> {
        let selector = format!("app.kubernetes.io/component={component}");
        let mut args = vec!["get", "pods", "-n", NAMESPACE, "-l", &selector];
        args.extend_from_slice(extra);
        let pods = get_json(&self.node, &args);
        pods["items"].as_array().cloned().unwrap_or_default()
    }

    /// The Pod IPs of the release's running Pods of `component`.
    pub fn pod_ips(&self, component: &str) -> Vec<String> {
        self.component_pods(component, &["--field-selector=status.phase=Running"])
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_owned))
            .collect()
    }

    /// Whether the release's Pods of `component` (`gateway`, `operator`) are
    /// as many as their Deployment wants, none of them terminating.
    pub fn only_current_pods(&self, component: &str) -> bool {
        let pods = self.component_pods(component, &[]);
        let wanted = self.ready_replicas(&format!("{FULLNAME}-{component}")).0 as usize;
        pods.len() == wanted
            && pods
                .iter()
                .all(|p| p["metadata"]["deletionTimestamp"].is_null())
    }

    /// An HTTPS client on the host that reaches the gateway's Service name at
    /// the node's NodePort and trusts the published bundle.
    pub fn host_client(&self) -> reqwest::Client {
        self.host_client_builder().build().unwrap()
    }

    pub fn host_client_builder(&self) -> reqwest::ClientBuilder {
        let addr = SocketAddr::new(self.node.node_ip().unwrap().into(), NODE_PORT);
        reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.ca_bundle().as_bytes()).unwrap(),
            )
            .tls_built_in_root_certs(false)
            .resolve(GATEWAY_HOST, addr)
            .timeout(Duration::from_secs(30))
    }

    /// POST to the gateway through the NodePort: (status, JSON body).
    pub async fn host_invoke(
        &self,
        client: &reqwest::Client,
        path: &str,
        token: &str,
        body: Value,
    ) -> (u16, Value) {
        let r = client
            .post(format!("https://{GATEWAY_HOST}:{NODE_PORT}{path}"))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!("invoke through the NodePort: {:#}", anyhow::Error::from(e))
            });
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or_default())
    }

    /// Invokes through the NodePort (new connections each time) until one
    /// answers 200, within `within`.
    pub async fn invoke_eventually(&self, path: &str, token: &str, within: Duration) {
        let url = format!("https://{GATEWAY_HOST}:{NODE_PORT}{path}");
        self.poll_node_port(
            within,
            |c| c.post(&url).bearer_auth(token).json(&json!({})),
            |r| r.status() == 200,
        )
        .await;
    }

    /// Sends `request` through the NodePort, on a new client (a new
    /// connection) each try, until `done` accepts the answer; panics after
    /// `within` with the last answer or error and the cluster's state.
    async fn poll_node_port(
        &self,
        within: Duration,
        request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
        done: impl Fn(&reqwest::Response) -> bool,
    ) {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            match request(&self.host_client()).send().await {
                Ok(r) if done(&r) => return,
                Ok(r) => last = format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => last = format!("{:#}", anyhow::Error::from(e)),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "no answer accepted through the NodePort within {within:?}; last: {last}\n{}",
            diagnose(&self.node)
        );
    }

    /// Objects of the release left in the cluster (CRDs, events, the
    /// namespace's own defaults and what the tests created aside).
    pub fn leftovers(&self) -> Vec<String> {
        let kinds = self
            .node
            .kubectl(&["api-resources", "--verbs=list", "-o", "name"])
            .unwrap();
        let kinds: Vec<&str> = kinds
            .lines()
            .filter(|k| !k.starts_with("events") && !k.starts_with("customresourcedefinitions"))
            .collect();
        let all = get_json(&self.node, &["get", &kinds.join(","), "-A"]);
        let mut left = vec![];
        for o in all["items"].as_array().unwrap() {
            let kind = o["kind"].as_str().unwrap_or_default();
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            let namespace = o["metadata"]["namespace"].as_str().unwrap_or_default();
            // The namespace is the test's; the CRDs' API group registration goes with the CRDs.
            if kind == "Namespace" || (kind == "APIService" && name.ends_with(".kruntimes.io")) {
                continue;
            }
            let ours_by_name = name.contains("kruntimes") || name.starts_with("runtime-");
            let ours_by_label = o["metadata"]["labels"].as_object().is_some_and(|l| {
                l.values()
                    .any(|v| v.as_str().is_some_and(|v| v.contains("kruntimes")))
            });
            let in_release_namespace = namespace == NAMESPACE
                && !(kind == "ConfigMap" && name == "kube-root-ca.crt")
                && !(kind == "ServiceAccount" && name == "default");
            if ours_by_name || ours_by_label || in_release_namespace {
                left.push(format!("{kind} {namespace}/{name}"));
            }
        }
        left
    }
}

/// `helm VERB` (install, upgrade) of the chart as the release, with the base
/// values and `extra`, waiting for it.
fn release(node: &NodeCluster, helm: &Helm, verb: &str, extra: &[&str]) {
    let chart = chart_dir();
    let mut args = vec![verb, RELEASE, chart.to_str().unwrap(), "-n", NAMESPACE];
    args.extend(BASE_VALUES);
    args.extend(extra);
    args.extend(["--wait", "--timeout", "5m"]);
    if let Err(e) = node.helm(helm, &args) {
        panic!("{e:#}\n{}", diagnose(node));
    }
}

/// The reference of one of the project's images (as imported into the node).
pub fn image_ref(node: &NodeCluster, name: &str) -> String {
    let images: Value =
        serde_json::from_str(&std::fs::read_to_string(node.env("IMAGES_JSON").unwrap()).unwrap())
            .unwrap();
    images
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("no image {name}"))["ref"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `kubectl get … -o json`, parsed.
pub fn get_json(node: &NodeCluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = node.kubectl(&all).unwrap_or_else(|e| panic!("{e:#}"));
    serde_json::from_str(&text).unwrap()
}

/// What a failing wait prints: the Pods, recent events and the operator's log.
pub fn diagnose(node: &NodeCluster) -> String {
    let pods = node
        .kubectl(&["get", "pods", "-A", "-o", "wide"])
        .unwrap_or_default();
    let events = node
        .kubectl(&["get", "events", "-A", "--sort-by=.lastTimestamp"])
        .unwrap_or_default();
    let events: Vec<&str> = events.lines().rev().take(30).collect();
    let operator = node
        .kubectl(&[
            "logs",
            "-n",
            NAMESPACE,
            "deployment/kruntimes-operator",
            "--tail=40",
        ])
        .unwrap_or_default();
    format!(
        "pods:\n{pods}\nrecent events:\n{}\noperator log:\n{operator}\n(cluster logs: {}/logs)",
        events.join("\n"),
        node.dir().display()
    )
}

/// Polls the blocking check `f` every 500 ms until it holds, within `within`.
pub async fn wait_until(within: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
