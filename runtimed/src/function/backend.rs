//! Which built-in backend of the Runtime Server serves a function: the
//! Pod's Runtime names it (`--backend`), or else the Run's runtime name.

/// A built-in backend (`Runtime.spec.backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// `module.function`, persistent worker.
    Python,
    /// `file.function`, `file.sh` sourced per call.
    Bash,
}

impl Kind {
    /// The backend for a Runtime name; custom Runtimes are served by their
    /// own Runtime Server, not by the built-ins.
    pub fn for_runtime(runtime: &str) -> Option<Self> {
        match runtime {
            "python" => Some(Self::Python),
            "bash" => Some(Self::Bash),
            _ => None,
        }
    }

    /// The name the Runtime Server knows it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Python => "python",
            Self::Bash => "bash",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_builtin_runtimes_have_backends() {
        assert_eq!(Kind::for_runtime("python"), Some(Kind::Python));
        assert_eq!(Kind::for_runtime("bash"), Some(Kind::Bash));
        assert_eq!(Kind::for_runtime("node"), None);
        assert_eq!(Kind::Bash.as_str(), "bash");
    }
}
