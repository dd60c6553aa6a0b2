//! What every daemon's flags share: each long flag is also read from an
//! environment variable, the daemon's prefix and the flag in upper snake
//! case (`--max-in-flight` → `KRUNTIMES_GATEWAY_MAX_IN_FLIGHT`).

/// The variable a flag is read from.
pub fn env_name(prefix: &str, long: &str) -> String {
    format!("{prefix}{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// The flags of `cmd` (and of its subcommands) not read from the variable
/// [`env_name`] names, each with what it reads instead; empty when every
/// flag follows the rule. Help, version and positional arguments have none.
pub fn flags_without_env(cmd: &clap::Command, prefix: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        if matches!(long, "help" | "version") {
            continue;
        }
        let expected = env_name(prefix, long);
        let actual = arg.get_env().map(|e| e.to_string_lossy().into_owned());
        if actual.as_deref() != Some(expected.as_str()) {
            wrong.push(format!("--{long}: {actual:?}, expected {expected}"));
        }
    }
    for sub in cmd.get_subcommands() {
        wrong.extend(flags_without_env(sub, prefix));
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Good {
        #[arg(long, env = "KRUNTIMES_X_MAX_IN_FLIGHT")]
        max_in_flight: u32,
        #[arg(long, env = "KRUNTIMES_X_ON")]
        on: bool,
    }

    #[derive(clap::Parser)]
    struct Bad {
        #[arg(long)]
        bare: u32,
        #[arg(long, env = "OTHER")]
        misnamed: u32,
        #[arg(long, env = "KRUNTIMES_X_FINE")]
        fine: u32,
    }

    #[test]
    fn names_follow_the_flag() {
        assert_eq!(
            env_name("KRUNTIMES_GATEWAY_", "max-in-flight"),
            "KRUNTIMES_GATEWAY_MAX_IN_FLIGHT"
        );
    }

    #[test]
    fn a_flag_without_its_variable_or_with_another_is_named() {
        use clap::CommandFactory;
        assert_eq!(
            flags_without_env(&Good::command(), "KRUNTIMES_X_"),
            Vec::<String>::new()
        );
        let wrong = flags_without_env(&Bad::command(), "KRUNTIMES_X_");
        assert_eq!(wrong.len(), 2, "{wrong:?}");
        assert!(wrong[0].starts_with("--bare: None"), "{wrong:?}");
        assert!(wrong[1].contains("\"OTHER\""), "{wrong:?}");
    }
}
