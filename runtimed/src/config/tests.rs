use clap::CommandFactory;

use super::*;

const BASE: &[&str] = &[
    "runtimed",
    "--name=runtimed-0",
    "--tls-cert=c.pem",
    "--tls-key=k.pem",
    "--client-ca=ca.pem",
    "--runtime-server=/run/kruntimes/runtime.sock",
];

fn config(extra: &[&str]) -> Result<Config, ConfigError> {
    let argv: Vec<&str> = BASE.iter().chain(extra).copied().collect();
    Args::try_parse_from(argv).unwrap().into_config()
}

#[test]
fn every_flag_is_also_a_kruntimes_runtimed_variable() {
    assert_eq!(
        kruntimes_process::config::flags_without_env(&Args::command(), "KRUNTIMES_RUNTIMED_"),
        Vec::<String>::new()
    );
}

#[test]
fn kubernetes_mode_needs_its_pods_identity_and_an_address_to_publish() {
    assert_eq!(
        config(&["--kubernetes", "--pod-uid=u"]).unwrap_err(),
        ConfigError::NoPodIdentity
    );
    let pod = ["--kubernetes", "--pod-uid=u", "--pod-namespace=ns"];
    assert_eq!(
        config(&[&pod[..], &["--listen=0.0.0.0:0"]].concat()).unwrap_err(),
        ConfigError::NoAdvertisedAddress
    );
    let ok = config(&[&pod[..], &["--advertise=fd00::5:7443"]].concat()).unwrap();
    assert_eq!(ok.advertise.as_deref(), Some("[fd00::5]:7443"));
    assert_eq!(ok.kubernetes.unwrap().pod_namespace, "ns");
    assert!(config(&[]).unwrap().kubernetes.is_none());
}

#[test]
fn bounds_come_out_typed_and_consistent() {
    let c = config(&["--default-timeout-secs=5", "--max-timeout-secs=60"]).unwrap();
    assert_eq!(c.engine.default_timeout, Duration::from_secs(5));
    assert_eq!(c.engine.max_timeout, Duration::from_secs(60));
    assert_eq!(
        config(&["--default-timeout-secs=61", "--max-timeout-secs=60"]).unwrap_err(),
        ConfigError::DefaultOverMax {
            default: 61,
            max: 60
        }
    );
    assert_eq!(
        config(&["--advertise=host"]).unwrap_err(),
        ConfigError::BadAdvertise("host".into())
    );
}

#[test]
fn advertised_addresses_get_brackets_when_ipv6_needs_them() {
    for (raw, want) in [
        ("10.0.0.5:7443", "10.0.0.5:7443"),
        ("[fd00::5]:7443", "[fd00::5]:7443"),
        ("fd00::5:7443", "[fd00::5]:7443"),
        ("::1:7443", "[::1]:7443"),
        ("runtimed-0.pods.local:7443", "runtimed-0.pods.local:7443"),
    ] {
        assert_eq!(advertised(raw).unwrap(), want, "{raw}");
    }
    for bad in ["", "7443", "host", "host:port", "[fd00::5]", "a:b:c"] {
        assert!(advertised(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn an_artifact_store_that_cannot_be_used_is_refused_at_start() {
    let err =
        config(&["--artifact-store={\"s3\":{\"bucket\":\"b\",\"secret\":\"x\"}}"]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::ArtifactStore(m) if m.contains("unknown field")),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let json = format!(
        "{{\"directory\":{{\"path\":{:?}}}}}",
        dir.path().join("store").display().to_string()
    );
    let ok = config(&[
        &format!("--artifact-store={json}"),
        "--artifact-max-files=7",
    ])
    .unwrap();
    let a = ok.artifacts.unwrap();
    assert_eq!(a.limits.max_files, 7);
    assert!(dir.path().join("store").is_dir(), "created");
    assert!(config(&[]).unwrap().artifacts.is_none());
}
