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
