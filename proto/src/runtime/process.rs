//! The rules of a session's background processes both sides of the contract
//! check: a terminal's size and the signals a process may be sent. Pure.

/// Most rows or columns of a terminal.
pub const MAX_TERMINAL_SIDE: u32 = 1000;

/// Checks a terminal's `rows` and `cols` (1 to [`MAX_TERMINAL_SIDE`] each);
/// both as `u16`.
pub fn terminal_size(rows: u32, cols: u32) -> Result<(u16, u16), String> {
    let side = |n: u32, what: &str| match u16::try_from(n) {
        Ok(v) if (1..=MAX_TERMINAL_SIDE).contains(&n) => Ok(v),
        _ => Err(format!("{what} must be 1 to {MAX_TERMINAL_SIDE}, not {n}")),
    };
    Ok((side(rows, "rows")?, side(cols, "cols")?))
}

/// The signals a process may be sent, by name, with their numbers (Linux):
/// `SIGTERM` ends its tree after a grace, `SIGKILL` at once, the others go
/// to the process itself.
pub const PROCESS_SIGNALS: [(&str, i32); 10] = [
    ("SIGTERM", 15),
    ("SIGKILL", 9),
    ("SIGINT", 2),
    ("SIGHUP", 1),
    ("SIGQUIT", 3),
    ("SIGUSR1", 10),
    ("SIGUSR2", 12),
    ("SIGWINCH", 28),
    ("SIGCONT", 18),
    ("SIGTSTP", 20),
];

/// The number of a signal a process may be sent, by name (`SIGINT` or
/// `INT`).
pub fn signal_number(name: &str) -> Option<i32> {
    let name = name.strip_prefix("SIG").unwrap_or(name);
    PROCESS_SIGNALS
        .iter()
        .find(|(n, _)| n.strip_prefix("SIG") == Some(name))
        .map(|(_, number)| *number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_sides_are_one_to_a_thousand() {
        assert_eq!(terminal_size(24, 80), Ok((24, 80)));
        assert_eq!(terminal_size(1, 1000), Ok((1, 1000)));
        assert!(terminal_size(0, 80).unwrap_err().contains("rows"));
        assert!(terminal_size(24, 1001).unwrap_err().contains("cols"));
        assert!(terminal_size(70_000, 80).is_err());
    }

    #[test]
    fn signals_go_by_name_with_or_without_sig() {
        assert_eq!(signal_number("SIGINT"), Some(2));
        assert_eq!(signal_number("INT"), Some(2));
        assert_eq!(signal_number("SIGKILL"), Some(9));
        assert_eq!(signal_number("SIGWINCH"), Some(28));
        for bad in ["sigint", "SIGSTOP", "SIGSEGV", "9", "", "SIG"] {
            assert_eq!(signal_number(bad), None, "{bad:?}");
        }
    }
}
