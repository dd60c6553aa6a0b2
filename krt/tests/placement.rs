//! The placement case table ([`cases::placement`]) on `krt up`: the same
//! cases the Kubernetes suite runs on a real API server, here against the
//! embedded control plane and real runtimed processes — one instance of 4
//! run slots and 1 CPU (`--resources cpu=1`), a fixed set.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cases;

use std::time::Duration;

use cases::placement::{Seen, Target};
use kruntimes_testkit::{Options, Stack, krt_binary};
use serde_json::Value;

struct Embedded(Stack);

impl Target for Embedded {
    async fn create(&self, name: &str, labels: Value, spec: Value) {
        let manifest = cases::placement::manifest(name, "default", labels, spec);
        let yaml = serde_yaml::to_string(&manifest).unwrap();
        self.0.add_run(&format!("{name}.yaml"), &yaml).unwrap();
    }

    async fn delete(&self, name: &str) {
        self.0.remove_run(&format!("{name}.yaml")).unwrap();
    }

    async fn wait(&self, name: &str, _what: &str, check: fn(&Seen) -> bool) -> Seen {
        let run = self
            .0
            .wait_run(name, Duration::from_secs(60), |r| {
                check(&Seen::from_status(r))
            })
            .await
            .unwrap();
        Seen::from_status(&run)
    }

    async fn seen(&self, name: &str) -> Seen {
        Seen::from_status(&self.0.run(name).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_affinity_and_priority_decide_placement_on_krt_up() {
    let stack = Stack::start(
        krt_binary(),
        Options {
            env: Vec::new(),
            runtimed: 1,
            max_runtimed: None,
            runs: Vec::new(),
            extra_args: ["--capacity", "4", "--resources", "cpu=1"]
                .map(String::from)
                .to_vec(),
        },
    )
    .unwrap();
    cases::placement::resources_affinity_and_priority(&Embedded(stack)).await;
}
