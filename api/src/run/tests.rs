use super::*;

fn parse(y: &str) -> Run {
    serde_yaml::from_str(y).unwrap()
}

const HELLO: &str = r#"
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata:
  name: hello-python
spec:
  runtime: python
  source:
    inlinePath: main.py
    inline: |
      def invoke(request):
          return {"message": "hello " + request["name"]}
  mode:
    function:
      handler: main.invoke
      idleTimeoutSeconds: 600
"#;

#[test]
fn function_manifest_validates_with_defaults() {
    let m = parse(HELLO);
    assert_eq!(m.validate(), Ok(ModeKind::Function));
    assert_eq!(m.key(), "default/hello-python");
    assert_eq!(m.spec.retry_policy.max_retries, 3);
    assert_eq!(m.termination(), None);
}

#[test]
fn modes_are_mutually_exclusive_and_required() {
    let mut m = parse(HELLO);
    m.spec.mode.session = Some(SessionMode::default());
    assert!(m.validate().unwrap_err().contains("exactly one"));
    assert_eq!(m.mode_kind(), None);
    m.spec.mode = RunMode::default();
    assert!(m.validate().unwrap_err().contains("exactly one"));
}

#[test]
fn bad_names_runtimes_handlers_and_env_are_rejected() {
    let mut m = parse(HELLO);
    m.metadata.name = Some("Hello".into());
    assert!(m.validate().unwrap_err().contains("metadata.name"));
    let mut m = parse(HELLO);
    m.metadata.namespace = Some("Team_A".into());
    assert!(m.validate().unwrap_err().contains("metadata.namespace"));
    let mut m = parse(HELLO);
    m.spec.runtime = "py thon".into();
    assert!(m.validate().unwrap_err().contains("spec.runtime"));
    let mut m = parse(HELLO);
    m.spec.env = vec![
        EnvVar {
            name: "A".into(),
            value: "1".into(),
        },
        EnvVar {
            name: "A".into(),
            value: "2".into(),
        },
    ];
    assert!(m.validate().unwrap_err().contains("spec.env"));
    let mut m = parse(HELLO);
    m.spec.mode.function.as_mut().unwrap().handler.clear();
    assert!(m.validate().unwrap_err().contains("handler"));
    let mut m = parse(HELLO);
    m.spec.source.inline = Some("x".repeat(crate::MAX_INLINE_SOURCE_BYTES + 1));
    assert!(m.validate().unwrap_err().contains("larger than"));
}

#[test]
fn digest_covers_execution_inputs_only() {
    let a = parse(HELLO);
    let mut b = a.clone();
    b.spec.retry_policy.max_retries = 9;
    b.spec.timeout = Some(5);
    assert_eq!(a.digest(), b.digest());
    assert!(a.same_inputs(&b));
    b.spec.source.inline = Some("def invoke(r): return 1".into());
    assert_ne!(a.digest(), b.digest());
    assert!(!a.same_inputs(&b));
    let mut c = a.clone();
    c.spec.env.push(EnvVar {
        name: "X".into(),
        value: "y".into(),
    });
    assert_ne!(a.digest(), c.digest());
    assert!(!a.same_inputs(&c));
}

#[test]
fn termination_may_change_in_place() {
    let a = parse(HELLO);
    let mut b = a.clone();
    b.spec.termination = Some(Termination {
        mode: TerminationMode::Immediate,
    });
    assert!(a.same_inputs(&b));
    assert_eq!(b.termination(), Some(TerminationMode::Immediate));
}

#[test]
fn endpoints_name_the_public_route_of_each_mode() {
    let mut f = parse(HELLO);
    f.metadata.uid = Some("u-1".into());
    let e = Endpoint::new("https://gw:8443/", &f, None);
    assert_eq!(e.protocol, "HTTPS");
    assert_eq!(
        e.url,
        "https://gw:8443/v1/namespaces/default/runtimes/python/runs/u-1:invoke"
    );
    let mut s = f.clone();
    s.spec.mode = RunMode {
        session: Some(SessionMode::default()),
        ..Default::default()
    };
    let e = Endpoint::new("http://gw", &s, None);
    assert_eq!(e.protocol, "HTTP");
    assert_eq!(
        e.url,
        "http://gw/v1/namespaces/default/runtimes/python/sessions/u-1"
    );
}

#[test]
fn scheduling_fields_are_validated_and_read() {
    let m = parse(&format!(
        "{HELLO}  resources:\n    requests:\n      cpu: 250m\n      memory: 64Mi\n  priority: 10\n  affinity:\n    runAntiAffinity:\n      required:\n        - labelSelector:\n            matchLabels: {{app: web}}\n"
    ));
    assert_eq!(m.validate(), Ok(ModeKind::Function));
    let r = m.requests().unwrap();
    assert_eq!(
        (r.get("cpu"), r.get("memory")),
        (250, 64 * 1024 * 1024 * 1000)
    );
    assert_eq!(m.priority(), 10);
    assert_eq!(m.spec.affinity.as_ref().unwrap().required_anti().len(), 1);

    let mut bad = m.clone();
    bad.spec.priority = Some(1001);
    assert!(bad.validate().unwrap_err().contains("spec.priority 1001"));
    let mut both = m.clone();
    both.spec.priority_class_name = Some(kruntimes_core::scheduler::queue::PriorityClass::High);
    assert_eq!(
        both.validate().unwrap_err(),
        "set spec.priority or spec.priorityClassName, not both"
    );
    let named = parse(&format!(
        "{HELLO}  priorityClassName: low
"
    ));
    assert_eq!(named.validate(), Ok(ModeKind::Function));
    assert_eq!(named.priority(), -500);
    assert_eq!(parse(HELLO).priority(), 0);
    let mut bad = m.clone();
    bad.spec.resources.as_mut().unwrap().requests.insert(
        "memory".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("-1Gi".into()),
    );
    assert!(
        bad.validate()
            .unwrap_err()
            .starts_with("spec.resources.requests.memory:")
    );
    let mut bad = m;
    bad.spec
        .affinity
        .as_mut()
        .unwrap()
        .run_anti_affinity
        .as_mut()
        .unwrap()
        .required[0]
        .label_selector
        .match_expressions
        .push(crate::Requirement {
            key: "app".into(),
            operator: crate::Operator::Exists,
            values: vec!["x".into()],
        });
    assert!(bad.validate().unwrap_err().contains("takes no values"));
}

#[test]
fn scheduling_inputs_are_immutable_but_priority_may_change() {
    let a = parse(HELLO);
    let mut b = a.clone();
    b.spec.priority = Some(5);
    assert!(a.same_inputs(&b));
    b.spec.resources = Some(RunResources::default());
    assert!(!a.same_inputs(&b));
    let mut c = a.clone();
    c.spec.affinity = Some(crate::Affinity::default());
    assert!(!a.same_inputs(&c));
}

#[test]
fn a_status_gives_the_life_it_records() {
    assert_eq!(
        RunStatus::default().life(),
        crate::lifecycle::Life::default()
    );
    let status = RunStatus {
        phase: Some(crate::Phase::Ready),
        reason: Some("Registered".into()),
        attempt: Some(2),
        ..Default::default()
    };
    let life = status.life();
    assert_eq!(
        (life.phase, life.reason, life.attempt),
        (crate::Phase::Ready, Some(crate::Reason::Registered), 2)
    );
    assert_eq!(parse(HELLO).life(), crate::lifecycle::Life::default());
}
