use clap::CommandFactory;

use super::*;

const BASE: &[&str] = &[
    "kruntimes-gateway",
    "--control-plane=127.0.0.1:1",
    "--internal-ca=ca.pem",
    "--client-cert=c.pem",
    "--client-key=k.pem",
];

fn config(extra: &[&str]) -> Result<Config, ConfigError> {
    let argv: Vec<&str> = BASE.iter().chain(extra).copied().collect();
    Args::try_parse_from(argv).unwrap().into_config()
}

#[test]
fn every_flag_is_also_a_kruntimes_gateway_variable() {
    assert_eq!(
        kruntimes_process::config::flags_without_env(&Args::command(), "KRUNTIMES_GATEWAY_"),
        Vec::<String>::new()
    );
}

#[test]
fn a_gateway_needs_a_public_listener_and_https_its_certificate() {
    let jwt = ["--jwt-public-key=j.pem", "--policy=p.yaml"];
    assert_eq!(config(&jwt).unwrap_err(), ConfigError::NoListener);
    let https = config(&[&jwt[..], &["--https-listen=127.0.0.1:0", "--tls-cert=c"]].concat());
    assert_eq!(
        https.unwrap_err(),
        ConfigError::Requires {
            missing: "--tls-key",
            with: "--https-listen"
        }
    );
    let ok = config(
        &[
            &jwt[..],
            &["--https-listen=127.0.0.1:0", "--tls-cert=c", "--tls-key=k"],
        ]
        .concat(),
    )
    .unwrap();
    assert_eq!(ok.listen.https.unwrap().key, PathBuf::from("k"));
}

#[test]
fn each_auth_mode_takes_what_it_needs_and_only_that() {
    let listen = "--http-listen=127.0.0.1:0";
    let no_policy = config(&[listen, "--jwt-public-key=j.pem"]).unwrap_err();
    assert_eq!(
        no_policy,
        ConfigError::Requires {
            missing: "--policy",
            with: "--auth jwt"
        }
    );
    let kube = config(&[
        listen,
        "--auth=kubernetes",
        "--token-audiences=a,b",
        "--kube-api-timeout-ms=250",
    ])
    .unwrap();
    match kube.auth {
        AuthConfig::Kubernetes {
            token_audiences,
            api_timeout,
            sa_jwt_local,
            ..
        } => {
            assert_eq!(token_audiences, ["a", "b"]);
            assert_eq!(api_timeout, Duration::from_millis(250));
            assert!(!sa_jwt_local);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        config(&[listen, "--auth=none"]).unwrap().auth,
        AuthConfig::None
    ));
}

#[test]
fn durations_and_bounds_come_out_typed() {
    let c = config(&[
        "--http-listen=127.0.0.1:0",
        "--auth=none",
        "--route-settle-ms=40",
        "--idle-timeout-secs=7",
        "--authz-denied-ttl-secs=3",
    ])
    .unwrap();
    assert_eq!(c.limits.route_settle, Duration::from_millis(40));
    assert_eq!(c.listen.idle_timeout, Duration::from_secs(7));
    assert_eq!(
        (c.cache.denied_ttl, c.cache.rejected_ttl),
        (Duration::from_secs(3), Duration::from_secs(3))
    );
    assert_eq!((c.threads, c.work_stealing), (2, false));
    // Out-of-range values are refused by the parser, before any Config.
    let argv: Vec<&str> = BASE
        .iter()
        .copied()
        .chain(["--http-listen=127.0.0.1:0", "--threads=0"])
        .collect();
    assert!(Args::try_parse_from(argv).is_err());
}
