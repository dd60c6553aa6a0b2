//! The admission policy on Run priorities
//! (`charts/kruntimes/files/run-priority-policy.yaml`), enforced by a real
//! kube-apiserver: anyone may create a Run at priority 100 or below, lower
//! one, or write a Run without changing its priority (the operator's
//! finalizer and status writes); above 100 — a number or the classes
//! `high` and `critical` — only members of `kruntimes:priority-high`. Every
//! named class is let through exactly when the scheduler's number for it is
//! 100 or below, so the policy's table and the queue's agree.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::rbac::v1::RoleBinding;
use kruntimes_api::Run;
use kruntimes_core::scheduler::queue::{OPEN_PRIORITY, PriorityClass};
use kruntimes_kubetest::{ApiServer, User};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

const NS: &str = "team-a";
const GROUP: &str = "kruntimes:priority-high";

fn repo(path: &str) -> std::path::PathBuf {
    kruntimes_testkit::checkout().join(path)
}

/// The admin impersonating user `name` in `groups`.
async fn as_user(server: &ApiServer, name: &str, groups: &[&str]) -> Api<Run> {
    let mut kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig_yaml(User::Admin)).unwrap();
    let auth = kubeconfig.auth_infos[0].auth_info.as_mut().unwrap();
    auth.impersonate = Some(name.into());
    auth.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Api::namespaced(kube::Client::try_from(config).unwrap(), NS)
}

fn run(name: &str, priority: Value) -> Run {
    let mut spec = json!({"runtime": "python", "mode": {"function": {"handler": "main.invoke"}}});
    if let Some(o) = priority.as_object() {
        for (k, v) in o {
            spec[k] = v.clone();
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

async fn create(api: &Api<Run>, name: &str, priority: Value) -> Result<(), String> {
    api.create(&PostParams::default(), &run(name, priority))
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

async fn patch(api: &Api<Run>, name: &str, body: Value) -> Result<(), String> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn refused(r: Result<(), String>, why: &str) {
    let e = r.expect_err("the policy let it through");
    assert!(e.contains(why), "refused for another reason: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_priority_group_gives_a_run_a_high_priority() {
    let server = ApiServer::start().await.unwrap();
    let admin = server.client().await.unwrap();
    server.create_namespace(NS).await.unwrap();
    let role = server
        .apply_role_file(Some(NS), &repo("examples/rbac/sdk-user-role.yaml"))
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "sdk-users"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    server
        .apply_admission_policy_file(&repo("charts/kruntimes/files/run-priority-policy.yaml"))
        .await
        .unwrap();

    let dana = as_user(&server, "dana", &["system:authenticated"]).await;
    let erin = as_user(&server, "erin", &["system:authenticated", GROUP]).await;
    // The policy takes effect once the API server has loaded it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut probe = 0;
    while create(&dana, &format!("probe-{probe}"), json!({"priority": 1000}))
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the policy never took effect");
        probe += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Anyone: up to 100.
    create(&dana, "at-100", json!({"priority": 100}))
        .await
        .unwrap();
    create(&dana, "default", json!({})).await.unwrap();
    refused(
        create(&dana, "at-101", json!({"priority": 101})).await,
        "a priority of 101 (above 100) needs the group kruntimes:priority-high",
    );
    // Every class is let through exactly when its number is 100 or below.
    for class in PriorityClass::ALL {
        let name = format!("class-{}", class.as_str());
        let r = create(&dana, &name, json!({"priorityClassName": class.as_str()})).await;
        if class.value() <= OPEN_PRIORITY {
            r.unwrap();
        } else {
            refused(r, &format!("a priority of {} (above 100)", class.value()));
            create(&erin, &name, json!({"priorityClassName": class.as_str()}))
                .await
                .unwrap();
        }
    }
    // The group: any priority.
    create(&erin, "urgent", json!({"priority": 900}))
        .await
        .unwrap();

    // Raising is a high priority too; lowering is anyone's.
    refused(
        patch(&dana, "at-100", json!({"spec": {"priority": 500}})).await,
        "a priority of 500",
    );
    patch(&dana, "urgent", json!({"spec": {"priority": 800}}))
        .await
        .unwrap();
    patch(&dana, "urgent", json!({"spec": {"priority": 50}}))
        .await
        .unwrap();
    // A write that leaves the priority as it is — a finalizer, as the
    // operator adds one — passes on a high-priority Run whoever makes it.
    patch(
        &dana,
        "class-critical",
        json!({"metadata": {"finalizers": ["kruntimes.io/cleanup"]}}),
    )
    .await
    .unwrap();
    // A status write is not the policy's (the subresource is not matched).
    Api::<Run>::namespaced(admin.clone(), NS)
        .patch_status(
            "class-critical",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Pending", "reason": "NoIdlePod"}})),
        )
        .await
        .unwrap();
    // Both at once is the CRD's error, for everyone.
    refused(
        create(
            &erin,
            "both",
            json!({"priority": 1, "priorityClassName": "low"}),
        )
        .await,
        "set spec.priority or spec.priorityClassName, not both",
    );
}
