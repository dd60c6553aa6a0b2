use clap::{Args as _, Parser};

use super::*;

fn config(argv: &[&str]) -> Result<Config, ConfigError> {
    let argv = std::iter::once("runtime-server").chain(argv.iter().copied());
    Args::try_parse_from(argv).unwrap().serve.into_config()
}

#[test]
fn every_serving_flag_is_also_a_kruntimes_runtime_server_variable() {
    let serving = ServeArgs::augment_args(clap::Command::new("runtime-server"));
    assert_eq!(
        kruntimes_process::config::flags_without_env(&serving, "KRUNTIMES_RUNTIME_SERVER_"),
        Vec::<String>::new()
    );
}

#[test]
fn the_shim_reads_no_variable() {
    let cmd = <Args as clap::CommandFactory>::command();
    let shim = cmd.find_subcommand("shim").unwrap();
    for arg in shim.get_arguments() {
        assert_eq!(arg.get_env(), None, "--{:?}", arg.get_long());
    }
}

#[test]
fn serving_needs_a_socket_that_names_a_file_and_a_work_root() {
    assert_eq!(
        config(&["--work-root=/w"]).unwrap_err(),
        ConfigError::NoSocket
    );
    assert_eq!(
        config(&["--socket=/run/rs.sock"]).unwrap_err(),
        ConfigError::NoWorkRoot
    );
    assert_eq!(
        config(&["--socket=/", "--work-root=/w"]).unwrap_err(),
        ConfigError::SocketNamesNoFile("/".into())
    );
}

#[test]
fn defaults_are_confined_with_two_spares_and_logs_under_the_work_root() {
    let c = config(&["--socket=/run/rs.sock", "--work-root=/w"]).unwrap();
    assert_eq!(c.socket_name, "rs.sock");
    assert_eq!(c.socket_mode, 0o600);
    assert!(c.confine);
    assert_eq!(c.python_spares, 2);
    assert_eq!(c.python, PathBuf::from("python3"));
    assert_eq!(c.run_logs, PathBuf::from("/w/.logs"));
}

#[test]
fn lists_repeat_or_split_on_commas_and_the_socket_mode_is_one_of_two() {
    let c = config(&[
        "--socket=/run/rs.sock",
        "--work-root=/w",
        "--allow-read=/a,/b",
        "--allow-read=/c",
        "--protect=/state",
        "--socket-mode=0660",
        "--no-confine",
    ])
    .unwrap();
    assert_eq!(c.allow_read, ["/a", "/b", "/c"].map(PathBuf::from));
    assert_eq!(c.protect, [PathBuf::from("/state")]);
    assert_eq!(c.socket_mode, 0o660);
    assert!(!c.confine);
    let refused = Args::try_parse_from(["runtime-server", "--socket-mode=777"]).unwrap_err();
    assert!(refused.to_string().contains("600 or 660"), "{refused}");
}
