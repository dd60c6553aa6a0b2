//! Which built-in backend serves a function, and its handler name
//! (`module.function`, `file.function`), validated before anything runs.
//! Pure.

use kruntimes_proto::runtime::Backend;

/// A validated `a.b` handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    /// Module (Python) or file stem (Bash).
    pub module: String,
    /// Function name.
    pub function: String,
}

fn identifier(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Parses a handler. Python modules may be dotted packages; Bash files are a
/// single file stem (letters, digits, `_`, `-`). Function names are
/// identifiers. Nothing here is ever interpreted as shell source.
pub fn parse_handler(kind: Backend, handler: &str) -> Result<Handler, String> {
    if handler.len() > 256 {
        return Err("handler is longer than 256 bytes".into());
    }
    let (module, function) = handler
        .rsplit_once('.')
        .ok_or_else(|| format!("handler {handler:?} must look like module.function"))?;
    if !identifier(function) {
        return Err(format!(
            "handler function {function:?} is not an identifier"
        ));
    }
    let module_ok = match kind {
        Backend::Python => module.split('.').all(identifier),
        Backend::Bash => {
            !module.is_empty()
                && !module.starts_with('-')
                && module
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        }
    };
    if !module_ok {
        return Err(format!("handler module {module:?} is not valid"));
    }
    Ok(Handler {
        module: module.to_owned(),
        function: function.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_are_module_dot_function() {
        let h = parse_handler(Backend::Python, "pkg.main.invoke").unwrap();
        assert_eq!(h.module, "pkg.main");
        assert_eq!(h.function, "invoke");
        let h = parse_handler(Backend::Bash, "hello-world.greet").unwrap();
        assert_eq!(h.module, "hello-world");
        for bad in [
            "invoke",
            "main.",
            ".invoke",
            "main.in voke",
            "main.1x",
            "ma;in.f",
            "a..b",
        ] {
            assert!(parse_handler(Backend::Python, bad).is_err(), "{bad}");
        }
        for bad in ["../x.f", "a/b.f", "-rf.f", "$(id).f", "x.f;id", "x.`id`"] {
            assert!(parse_handler(Backend::Bash, bad).is_err(), "{bad}");
        }
    }
}
