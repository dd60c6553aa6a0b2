//! The built-in backends of the Runtime Server (`Runtime.spec.backend`), as
//! runtimed names them in `RegisterFunctionRequest.backend` and the built-in
//! server parses them.

/// A built-in backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// `module.function`, a persistent worker.
    Python,
    /// `file.function`, `file.sh` sourced by warm shells.
    Bash,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 2] = [Backend::Python, Backend::Bash];

    /// The backend of a name on the wire (`python`, `bash`).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.as_str() == name)
    }

    /// The backend for a Runtime name: the built-in runtimes are named after
    /// their backends; custom Runtimes are served by their own Runtime
    /// Server.
    pub fn for_runtime(runtime: &str) -> Option<Self> {
        Self::parse(runtime)
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Python => "python",
            Self::Bash => "bash",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or_else(|| format!("unknown backend {s:?} (python or bash)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_builtins_have_backends() {
        for b in Backend::ALL {
            assert_eq!(b.as_str().parse::<Backend>(), Ok(b));
            assert_eq!(Backend::for_runtime(&b.to_string()), Some(b));
        }
        assert_eq!(Backend::for_runtime("node"), None);
        assert!("Python".parse::<Backend>().is_err());
    }
}
