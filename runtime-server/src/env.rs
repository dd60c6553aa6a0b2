//! The environment of user processes: only what the request names, on top
//! of a few basics (PATH, HOME, LANG, TMPDIR and the Run's UID). The server's own
//! environment is never passed on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// PATH when the server itself has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The server's PATH, handed to user processes so they find their tools.
pub fn path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.into())
}

/// The temporary directory of user processes: the server's `TMPDIR`, or
/// `/tmp`.
pub fn tmp_dir() -> PathBuf {
    std::env::var_os("TMPDIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

/// The basics for processes that belong to no Run yet (spare interpreters).
pub fn spare() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("PATH".to_owned(), path()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("TMPDIR".to_owned(), tmp_dir().display().to_string()),
    ])
}

/// The environment of a Run's processes: the basics, `HOME` at its working
/// directory, `KRUNTIMES_RUN_UID`, then the request's own variables (which
/// win).
pub fn for_run(
    run_uid: &str,
    home: &Path,
    requested: impl IntoIterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let mut env = spare();
    env.insert("HOME".into(), home.display().to_string());
    env.insert("KRUNTIMES_RUN_UID".into(), run_uid.to_owned());
    env.extend(requested);
    env
}

/// Whether `name` may be an environment variable's name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('=') && !name.contains('\0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_get_the_basics_and_their_own_variables_only() {
        let env = for_run(
            "uid-1",
            Path::new("/work/uid-1"),
            [
                ("LANG".to_owned(), "de_DE.UTF-8".to_owned()),
                ("GREETING".to_owned(), "hi".to_owned()),
            ],
        );
        assert_eq!(env["KRUNTIMES_RUN_UID"], "uid-1");
        assert_eq!(env["HOME"], "/work/uid-1");
        assert_eq!(env["LANG"], "de_DE.UTF-8", "the Run's env wins");
        assert_eq!(env["GREETING"], "hi");
        assert!(env.contains_key("PATH"));
        assert!(
            !env.contains_key("CARGO"),
            "the server's environment is not passed on"
        );
    }

    #[test]
    fn variable_names_cannot_hold_equals_or_nul() {
        assert!(valid_name("A_1"));
        for bad in ["", "A=B", "A\0"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
