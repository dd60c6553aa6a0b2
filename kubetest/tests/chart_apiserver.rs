//! The Helm chart against a real API server (etcd + kube-apiserver of
//! `kubetest/envtest/build.sh`): every object of every ci values file passes
//! server-side validation (dry-run create; the CRDs' schemas, CEL of the
//! admission policy, RBAC), every Pod template is admitted by Pod Security
//! `restricted`, the operator's certificate pass succeeds with the chart's
//! flags as the chart's operator ServiceAccount (its RBAC), and `helm install`
//! / `upgrade` / `uninstall` go through and leave alone what the operator
//! creates.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chart_support;

use std::collections::BTreeMap;

use chart_support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruntimes_api::Runtime;
use kruntimes_kubetest::helm::{Helm, chart_dir};
use kruntimes_kubetest::{ApiServer, User};
use kruntimes_operator::cluster::certificates;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};

/// The release namespace, enforcing the `restricted` Pod Security Standard.
async fn restricted_namespace(client: &kube::Client) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.into()),
            labels: Some(BTreeMap::from([(
                "pod-security.kubernetes.io/enforce".to_string(),
                "restricted".to_string(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: None,
    }
}

/// Dry-run creates `obj` as the API server would store it.
async fn create_dry(client: &kube::Client, obj: &Value) -> Result<(), kube::Error> {
    let (group, version) = match str_at(obj, "/apiVersion").split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), str_at(obj, "/apiVersion")),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, &str_at(obj, "/kind"));
    let (resource, caps) = pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), NAMESPACE, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let dynamic: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    api.create(&dry_run(), &dynamic).await.map(|_| ())
}

/// A Pod made of a Deployment's template, as its ReplicaSet would create it.
fn pod_of(d: &Deployment) -> Pod {
    let t = pod_template(d).clone();
    let mut meta = t.metadata.unwrap_or_default();
    meta.name = Some(format!("{}-0", d.metadata.name.clone().unwrap()));
    meta.namespace = Some(NAMESPACE.into());
    Pod {
        metadata: meta,
        spec: t.spec,
        status: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_object_of_every_values_file_passes_server_side_validation_and_restricted() {
    let server = ApiServer::start().await.expect("start the test API server");
    let client = server.client().await.unwrap();
    restricted_namespace(&client).await;
    let helm = Helm::new().expect("build helm");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut renders = vec![("defaults".to_string(), Rendered::new(&helm, &[], &[]))];
    for (file, path) in ci_files() {
        renders.push((file, Rendered::new(&helm, &[&path], &[])));
    }
    let (mut accepted, mut skipped) = (0, 0);
    for (file, r) in &renders {
        for obj in &r.objects {
            let id = format!(
                "{file}: {} {}",
                str_at(obj, "/kind"),
                str_at(obj, "/metadata/name")
            );
            // cert-manager's kinds need its CRDs, which this API server does not have.
            if str_at(obj, "/apiVersion").starts_with("cert-manager.io/") {
                skipped += 1;
                continue;
            }
            create_dry(&client, obj)
                .await
                .unwrap_or_else(|e| panic!("{id} refused: {e}"));
            accepted += 1;
        }
        for d in r.deployments() {
            let pod = pod_of(&d);
            pods.create(&dry_run(), &pod)
                .await
                .unwrap_or_else(|e| panic!("{file}: a Pod of {:?} refused: {e}", d.metadata.name));
        }
    }
    assert!(
        accepted > 200 && skipped > 0,
        "{accepted} accepted, {skipped} skipped"
    );

    // Controls: the checks are live. A Pod that keeps a capability is refused by Pod Security;
    // a Runtime with a bad capacity by the CRD's schema.
    let r = &renders[0].1;
    let mut pod = pod_of(&r.gateway());
    let c = &mut pod.spec.as_mut().unwrap().containers[0];
    c.security_context.as_mut().unwrap().capabilities = None;
    let err = pods.create(&dry_run(), &pod).await.unwrap_err();
    assert!(err.to_string().contains("violates PodSecurity"), "{err}");
    let mut runtime = r.find("Runtime", "python").unwrap().clone();
    runtime["spec"]["capacity"]["runs"] = json!(0);
    let err = create_dry(&client, &runtime).await.unwrap_err();
    assert!(err.to_string().contains("spec.capacity.runs"), "{err}");
}

/// A client authenticated as the chart's operator ServiceAccount, with a real
/// token from the TokenRequest API: what it may do is what the chart's RBAC
/// grants.
async fn operator_client(server: &ApiServer) -> kube::Client {
    let token = server
        .service_account_token(NAMESPACE, &name("operator"), 600)
        .await
        .unwrap();
    let yaml = server
        .kubeconfig_yaml(User::Admin)
        .replace(server.token(User::Admin), &token);
    let kubeconfig = Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// `resourceVersion` of every Secret and ConfigMap of `namespace` the
/// operator wrote (its label), by name.
async fn operator_objects(client: &kube::Client, namespace: &str) -> BTreeMap<String, String> {
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=kruntimes-operator");
    let mut out = BTreeMap::new();
    for s in Api::<Secret>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await
        .unwrap()
    {
        out.insert(
            format!("Secret/{}", s.metadata.name.unwrap()),
            s.metadata.resource_version.unwrap(),
        );
    }
    for c in Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await
        .unwrap()
    {
        out.insert(
            format!("ConfigMap/{}", c.metadata.name.unwrap()),
            c.metadata.resource_version.unwrap(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_and_uninstall_keep_what_the_operator_owns() {
    let server = ApiServer::start().await.expect("start the test API server");
    let client = server.client().await.unwrap();
    restricted_namespace(&client).await;
    let kubeconfig = server.write_kubeconfig(User::Admin).unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let helm = Helm::new().expect("build helm");
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    let base = [
        "--namespace",
        NAMESPACE,
        "--kubeconfig",
        kubeconfig,
        "--timeout",
        "60s",
    ];
    let helm_run = |verb: &[&str], extra: &[&str]| {
        let mut args: Vec<&str> = verb.to_vec();
        args.extend_from_slice(&base);
        args.extend_from_slice(extra);
        helm.run(&args).unwrap_or_else(|e| panic!("{e:#}"))
    };

    // Install with the defaults. The CRDs are there already (the harness installs them).
    let out = helm_run(&["install", RELEASE, chart], &[]);
    assert!(out.contains("STATUS: deployed"), "{out}");
    assert!(
        out.contains("curl --cacert"),
        "NOTES with a first invoke: {out}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let runtimes: Api<Runtime> = Api::namespaced(client.clone(), NAMESPACE);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let policies: Api<DynamicObject> = {
        let gvk = GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        );
        let (ar, _) = pinned_kind(&client, &gvk).await.unwrap();
        Api::all_with(client.clone(), &ar)
    };
    let gateway = format!("{FULLNAME}-gateway");
    assert_eq!(
        deployments
            .get(&gateway)
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas,
        Some(2)
    );
    deployments
        .get(&format!("{FULLNAME}-operator"))
        .await
        .unwrap();
    for rt in ["python", "bash"] {
        runtimes.get(rt).await.unwrap();
    }
    roles.get(&format!("{FULLNAME}-run-invoker")).await.unwrap();
    let policy = format!("{FULLNAME}-runtimed-own-runs");
    policies.get(&policy).await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let ca = name("gateway-ca");
    assert!(
        configmaps.get_opt(&ca).await.unwrap().is_none(),
        "the chart renders no CA ConfigMap in chart mode"
    );

    // The operator's certificate pass, with the flags the chart renders, as the operator's
    // ServiceAccount: the chart's RBAC is enough for it to create every Secret and the CA
    // ConfigMap.
    let operator = operator_client(&server).await;
    let cli = operator_cli(&Rendered::new(&helm, &[], &[]));
    let tls = managed_tls(&cli, "the default values");
    let done = certificates::ensure(&operator, &tls)
        .await
        .unwrap_or_else(|e| panic!("the first pass as the operator: {e:#}"));
    assert!(done.warnings.is_empty(), "{:?}", done.warnings);
    let issued: Vec<&str> = done.issued.keys().map(String::as_str).collect();
    let mut want: Vec<String> = [
        "gateway-tls",
        "internal-ca",
        "internal-gateway",
        "internal-operator",
        "internal-runtimed",
        "public-ca",
    ]
    .iter()
    .map(|n| format!("{NAMESPACE}/{}", name(n)))
    .collect();
    want.sort();
    assert_eq!(issued, want);
    let dir = tempfile::tempdir().unwrap();
    certificates::write_own(&operator, &tls, dir.path())
        .await
        .unwrap();
    assert!(
        std::fs::read_to_string(dir.path().join("tls.crt"))
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    let bundle = configmaps.get(&ca).await.unwrap().data.unwrap()["ca.crt"].clone();
    assert_eq!(bundle, done.public_bundle);
    assert!(!bundle.contains("PRIVATE KEY"));
    let owned = operator_objects(&client, NAMESPACE).await;
    assert_eq!(owned.len(), 7, "six Secrets and the ConfigMap: {owned:?}");

    // Objects without the operator's owner (written by an older operator) are
    // adopted, and with tls.keepAfterUninstall disowned — with the chart's
    // RBAC, which grants `update` by name and never `patch`.
    let secrets = Api::<Secret>::namespaced(client.clone(), NAMESPACE);
    let owners = |s: &Secret| s.metadata.owner_references.clone().unwrap_or_default();
    let internal_ca = name("internal-ca");
    let mut older = secrets.get(&internal_ca).await.unwrap();
    assert_eq!(
        owners(&older).len(),
        1,
        "owned by the operator's Deployment"
    );
    assert_eq!(owners(&older)[0].name, name("operator"));
    older.metadata.owner_references = None;
    secrets
        .replace(&internal_ca, &PostParams::default(), &older)
        .await
        .unwrap();
    let adopted = certificates::ensure(&operator, &tls)
        .await
        .unwrap_or_else(|e| panic!("adoption as the operator: {e:#}"));
    assert!(
        adopted.issued.is_empty() && adopted.warnings.is_empty(),
        "{adopted:?}"
    );
    assert_eq!(owners(&secrets.get(&internal_ca).await.unwrap()).len(), 1);
    let keep = operator_cli(&Rendered::new(&helm, &[], &["tls.keepAfterUninstall=true"]));
    let keep = managed_tls(&keep, "tls.keepAfterUninstall=true");
    certificates::ensure(&operator, &keep)
        .await
        .unwrap_or_else(|e| panic!("disowning as the operator: {e:#}"));
    for secret in secrets.list(&Default::default()).await.unwrap().items {
        assert!(
            owners(&secret).is_empty(),
            "{:?} still owned",
            secret.metadata.name
        );
    }
    let cm = configmaps.get(&ca).await.unwrap();
    assert!(
        cm.metadata.owner_references.is_none(),
        "the CA ConfigMap still owned"
    );
    // Owned again for the rest of the test, which keeps these versions.
    certificates::ensure(&operator, &tls).await.unwrap();
    let owned = operator_objects(&client, NAMESPACE).await;

    // A Runtime in a namespace where the operator may not keep runtimed's Secret is a
    // warning of every pass, until operator.extraSecretNamespaces grants it.
    server.create_namespace("team-a").await.unwrap();
    let mut runtime: Runtime = serde_json::from_value(
        Rendered::new(&helm, &[], &[])
            .find("Runtime", "python")
            .unwrap()
            .clone(),
    )
    .unwrap();
    runtime.metadata.namespace = Some("team-a".into());
    Api::<Runtime>::namespaced(client.clone(), "team-a")
        .create(&PostParams::default(), &runtime)
        .await
        .unwrap();
    // Without the grant: a warning naming the refusal, and the rest of
    // the pass (the operator's own namespace) not held up by it.
    let held = certificates::ensure(&operator, &tls).await.unwrap();
    assert_eq!(held.warnings.len(), 1, "{:?}", held.warnings);
    assert!(
        held.warnings[0].contains("forbidden") && held.warnings[0].contains("team-a"),
        "team-a without the grant: {:?}",
        held.warnings
    );
    assert!(!held.issued.keys().any(|k| k.starts_with("team-a/")));

    // Upgrade: more gateways, network policies on, team-a granted.
    let values = chart_dir().join("ci/network-policy-values.yaml");
    let out = helm_run(
        &["upgrade", RELEASE, chart],
        &[
            "--values",
            values.to_str().unwrap(),
            "--set",
            "gateway.replicas=3",
            "--set",
            "operator.extraSecretNamespaces={team-a}",
        ],
    );
    assert!(out.contains("REVISION: 2"), "{out}");
    assert_eq!(
        deployments
            .get(&gateway)
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas,
        Some(3)
    );
    let netpols: Api<NetworkPolicy> = Api::namespaced(client.clone(), NAMESPACE);
    assert_eq!(
        netpols.list(&Default::default()).await.unwrap().items.len(),
        4
    );
    // The upgrade left every Secret and the ConfigMap of the operator's alone.
    assert_eq!(operator_objects(&client, NAMESPACE).await, owned);
    let done = certificates::ensure(&operator, &tls).await.unwrap();
    assert_eq!(
        done.issued.keys().collect::<Vec<_>>(),
        vec![&format!("team-a/{}", name("internal-runtimed"))],
        "only runtimed's Secret in team-a is new"
    );
    assert_eq!(operator_objects(&client, NAMESPACE).await, owned);

    // Upgrade to a Secret of one's own: the operator publishes its ca.crt in the ConfigMap it
    // created (no longer issuing the gateway's), the internal certificates stay.
    let corp = kruntimes_certs::Ca::generate("corp CA", 30).unwrap();
    let leaf = corp
        .issue(&kruntimes_certs::LeafSpec {
            common_name: "kruntimes.example.com".into(),
            dns_names: vec!["kruntimes.example.com".into()],
            ips: vec![],
            server: true,
            client: false,
            valid_days: 30,
        })
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let corp_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "corp-gateway-tls"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem, "ca.crt": corp.cert_pem},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &corp_secret)
        .await
        .unwrap();
    let values = chart_dir().join("ci/tls-existing-secret-no-ca-values.yaml");
    let out = helm_run(
        &["upgrade", RELEASE, chart],
        &[
            "--values",
            values.to_str().unwrap(),
            "--set",
            "operator.extraSecretNamespaces={team-a}",
        ],
    );
    assert!(out.contains("REVISION: 3"), "{out}");
    let cli = operator_cli(&Rendered::new(
        &helm,
        &[&values],
        &["operator.extraSecretNamespaces={team-a}"],
    ));
    let tls = managed_tls(&cli, "operator.extraSecretNamespaces={team-a}");
    let done = certificates::ensure(&operator, &tls)
        .await
        .unwrap_or_else(|e| panic!("existingSecret as the operator: {e:#}"));
    assert!(done.issued.is_empty(), "{:?}", done.issued);
    assert!(done.warnings.is_empty(), "{:?}", done.warnings);
    let bundle = configmaps.get(&ca).await.unwrap().data.unwrap()["ca.crt"].clone();
    assert_eq!(bundle.trim(), corp.cert_pem.trim());

    // Uninstall: the chart's objects go; the CRDs stay, and so does what the
    // operator created here: this API server runs no garbage collector to
    // follow its owner references (tests/node.rs shows them removed).
    helm_run(&["uninstall", RELEASE], &[]);
    assert!(deployments.get_opt(&gateway).await.unwrap().is_none());
    assert!(runtimes.get_opt("python").await.unwrap().is_none());
    assert!(
        roles
            .get_opt(&format!("{FULLNAME}-run-invoker"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(policies.get_opt(&policy).await.unwrap().is_none());
    assert!(
        netpols
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.get("runtimes.kruntimes.io").await.unwrap();
    crds.get("runs.kruntimes.io").await.unwrap();
    let left = operator_objects(&client, NAMESPACE).await;
    assert_eq!(
        left.keys().collect::<Vec<_>>(),
        owned.keys().collect::<Vec<_>>()
    );
    Api::<Secret>::namespaced(client.clone(), "team-a")
        .get(&name("internal-runtimed"))
        .await
        .unwrap();
}
