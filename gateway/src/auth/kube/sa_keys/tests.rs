use super::*;

#[test]
fn service_account_claims_become_the_api_servers_identity() {
    let c: SaClaims = serde_json::from_value(serde_json::json!({
        "sub": "system:serviceaccount:a:bot",
        "exp": 2000000000u64,
        "kubernetes.io": {
            "namespace": "a",
            "serviceaccount": {"name": "bot", "uid": "sa-uid"},
            "pod": {"name": "p", "uid": "pod-uid"}
        }
    }))
    .unwrap();
    let id = identity_from_sa(c).unwrap();
    assert_eq!(id.subject, "system:serviceaccount:a:bot");
    assert_eq!(id.uid.as_deref(), Some("sa-uid"));
    assert!(id.groups.contains(&"system:serviceaccounts:a".to_string()));
    assert_eq!(
        id.extra["authentication.kubernetes.io/pod-name"],
        vec!["p".to_string()]
    );
    let forged: SaClaims = serde_json::from_value(serde_json::json!({
        "sub": "system:serviceaccount:kube-system:admin",
        "exp": 2000000000u64,
        "kubernetes.io": {"namespace": "a", "serviceaccount": {"name": "bot", "uid": "x"}}
    }))
    .unwrap();
    assert!(identity_from_sa(forged).is_err());
}
