//! A session's file mutation, as both sides hold it: runtimed validates an
//! API request into a [`FileOp`] and queues it; the server reads the same
//! type back off `FileOperationRequest` and applies it beneath the
//! workspace.

use super::v1 as pb;
use super::v1::file_operation_request::Op;

/// One file mutation beneath a session's workspace (paths are
/// workspace-relative; the server resolves them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// Write (replace) a file, creating its missing parent directories.
    Write {
        /// Path.
        path: String,
        /// Content.
        content: Vec<u8>,
    },
    /// Create a directory and its parents.
    Mkdir {
        /// Path.
        path: String,
    },
    /// Delete a file, link or tree.
    Delete {
        /// Path.
        path: String,
    },
    /// Rename within the workspace.
    Rename {
        /// Source.
        from: String,
        /// Destination.
        to: String,
    },
}

impl FileOp {
    /// The operation's name in the public API and the logs (never a path
    /// or content).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Write { .. } => "writeFile",
            Self::Mkdir { .. } => "mkdir",
            Self::Delete { .. } => "delete",
            Self::Rename { .. } => "rename",
        }
    }

    /// The request that applies it to the session of `run_uid`.
    pub fn request(&self, run_uid: &str) -> pb::FileOperationRequest {
        let op = match self.clone() {
            Self::Write { path, content } => Op::Write(pb::WriteFile { path, content }),
            Self::Mkdir { path } => Op::Mkdir(pb::PathRequest { path }),
            Self::Delete { path } => Op::Delete(pb::PathRequest { path }),
            Self::Rename { from, to } => Op::Rename(pb::RenameRequest { from, to }),
        };
        pb::FileOperationRequest {
            run_uid: run_uid.to_owned(),
            op: Some(op),
        }
    }

    /// The operation a request carries (`None`: it carries none).
    pub fn from_request(req: pb::FileOperationRequest) -> Option<(String, Self)> {
        let op = match req.op? {
            Op::Write(w) => Self::Write {
                path: w.path,
                content: w.content,
            },
            Op::Mkdir(p) => Self::Mkdir { path: p.path },
            Op::Delete(p) => Self::Delete { path: p.path },
            Op::Rename(r) => Self::Rename {
                from: r.from,
                to: r.to,
            },
        };
        Some((req.run_uid, op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_survives_the_request() {
        let ops = [
            FileOp::Write {
                path: "a/b".into(),
                content: b"hi".to_vec(),
            },
            FileOp::Mkdir { path: "d".into() },
            FileOp::Delete { path: "x".into() },
            FileOp::Rename {
                from: "a".into(),
                to: "b".into(),
            },
        ];
        for op in ops {
            let back = FileOp::from_request(op.request("uid-1"));
            assert_eq!(back, Some(("uid-1".to_owned(), op)));
        }
        let empty = pb::FileOperationRequest {
            run_uid: "uid-1".into(),
            op: None,
        };
        assert_eq!(FileOp::from_request(empty), None);
    }
}
