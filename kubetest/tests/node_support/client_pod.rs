//! Client Pods: the standard-library client run inside the cluster, as a
//! caller there would, and the project's images it runs in.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kruntimes_kubetest::node::client_script;
use serde_json::{Value, json};

use super::{CLIENT_IMAGE, GATEWAY_HOST, Installed, diagnose, get_json};

impl Installed {
    /// Runs the standard-library client (`kubetest/node/client.py`) in a Pod
    /// of `namespace` as ServiceAccount `sa`, with a projected token of
    /// `audience` and the Run's published CA bundle; its results by step name.
    pub async fn client_pod(
        &self,
        namespace: &str,
        sa: &str,
        audience: &str,
        steps: Value,
    ) -> Value {
        let n = self.client_pods.fetch_add(1, Ordering::Relaxed);
        let name = format!("client-{n}");
        let plan = json!({
            "base": format!("https://{GATEWAY_HOST}"),
            "ca": "/client/ca.crt",
            "token": "/token/token",
            "steps": steps,
        });
        let script = std::fs::read_to_string(client_script()).unwrap();
        let configmap = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"client.py": script, "plan.json": plan.to_string(), "ca.crt": self.ca_bundle()},
        });
        let image = self.image(CLIENT_IMAGE);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "serviceAccountName": sa,
                "automountServiceAccountToken": false,
                "restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65533, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "client", "image": image, "imagePullPolicy": "Never",
                    "command": ["python3", "/client/client.py", "/client/plan.json"],
                    "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                        "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "client", "mountPath": "/client"},
                                     {"name": "token", "mountPath": "/token"}],
                }],
                "volumes": [
                    {"name": "client", "configMap": {"name": name}},
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {
                        "audience": audience, "expirationSeconds": 3600, "path": "token"}}]}},
                ],
            },
        });
        self.node.apply(&configmap.to_string()).unwrap();
        self.node.apply(&pod.to_string()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let phase =
                get_json(&self.node, &["get", "pod", "-n", namespace, &name])["status"]["phase"]
                    .clone();
            if phase == "Succeeded" || phase == "Failed" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "client Pod {namespace}/{name} is still {phase}\n{}",
                diagnose(&self.node)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let logs = self
            .node
            .kubectl(&["logs", "-n", namespace, &name])
            .unwrap();
        let mut results = serde_json::Map::new();
        let mut done = false;
        for line in logs.lines() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|_| panic!("client Pod printed {line:?}"));
            if v["done"] == true {
                done = true;
            } else {
                let step = v["name"].as_str().unwrap().to_owned();
                assert!(v.get("error").is_none(), "client Pod step {step}: {v}");
                results.insert(step, v);
            }
        }
        assert!(done, "client Pod {name} did not finish:\n{logs}");
        Value::Object(results)
    }

    /// The reference of one of the project's images (as imported into the node).
    pub fn image(&self, name: &str) -> String {
        super::image_ref(&self.node, name)
    }
}
