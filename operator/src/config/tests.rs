use clap::CommandFactory;

use super::*;

fn config(extra: &[&str]) -> Result<Config, ConfigError> {
    let argv: Vec<&str> = ["kruntimes-operator", "--gateway-url=https://gw"]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    Args::try_parse_from(argv).unwrap().into_config()
}

const FILES: &[&str] = &["--tls-cert=c", "--tls-key=k", "--client-ca=ca"];

#[test]
fn every_flag_is_also_a_kruntimes_operator_variable() {
    assert_eq!(
        kruntimes_process::config::flags_without_env(&Args::command(), "KRUNTIMES_OPERATOR_"),
        Vec::<String>::new()
    );
}

#[test]
fn files_tls_takes_its_files_and_managed_tls_its_configmap() {
    match config(FILES).unwrap().internal_tls {
        InternalTlsConfig::Files(f) => assert_eq!(f.ca, PathBuf::from("ca")),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        config(&["--internal-tls=managed"]).unwrap_err(),
        ConfigError::ManagedWithoutConfigMap
    );
    let managed = config(&["--internal-tls=managed", "--ca-configmap=sys/ca"]).unwrap();
    let tls = managed.managed_tls().unwrap();
    assert_eq!(
        (tls.namespace.as_str(), tls.ca_configmap.as_str()),
        ("sys", "ca")
    );
    assert_eq!(managed.ca_configmap, Some(("sys".into(), "ca".into())));
}

#[test]
fn malformed_or_inconsistent_flags_are_refused_with_their_reason() {
    for bad in ["nameonly", "/name", "ns/"] {
        let flag = format!("--ca-configmap={bad}");
        let with: Vec<&str> = FILES.iter().copied().chain([flag.as_str()]).collect();
        assert_eq!(
            config(&with).unwrap_err(),
            ConfigError::BadCaConfigMap,
            "{bad}"
        );
    }
    assert_eq!(
        config(&[
            "--internal-tls=managed",
            "--ca-configmap=sys/ca",
            "--leaf-validity-days=400",
            "--ca-validity-days=1000",
        ])
        .unwrap_err(),
        ConfigError::LeafOutlivesCa {
            leaf: 400,
            ca: 1000
        }
    );
}
