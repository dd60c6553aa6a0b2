//! The harness itself: a real API server with static tokens and RBAC.

use k8s_openapi::api::core::v1::Namespace;
use kruntimes_kubetest::{ApiServer, User};
use kube::api::{Api, PostParams};

#[tokio::test]
async fn api_server_authenticates_static_users_and_enforces_rbac() {
    let server = ApiServer::start().await.expect("start the test API server");
    let admin: Api<Namespace> = Api::all(server.client().await.unwrap());
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("harness".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    admin.create(&PostParams::default(), &ns).await.unwrap();
    assert!(admin.get("harness").await.is_ok());

    // alice has no bindings: RBAC denies her.
    let alice: Api<Namespace> = Api::all(server.client_as(User::Alice).await.unwrap());
    match alice.get("harness").await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "{e:?}"),
        other => panic!("alice read a namespace: {other:?}"),
    }

    // An unknown token is rejected outright.
    let r = server
        .http()
        .unwrap()
        .get(format!("{}/api/v1/namespaces", server.url()))
        .bearer_auth("not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // The CRDs of this checkout are installed and served.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(server.client().await.unwrap());
    let names: Vec<String> = crds
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(
        names.contains(&"runs.kruntimes.io".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"runtimes.kruntimes.io".to_string()),
        "{names:?}"
    );
}
