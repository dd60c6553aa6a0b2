//! The file-backed Run store of the embedded control plane: every `*.yaml` /
//! `*.yml` file in its directories (the user's, and the one clients write
//! into) holds one or more Run manifests, read straight into the API's
//! [`Run`] (the same YAML as the CRD). Adding or removing a file while
//! running adds or removes those Runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use kruntimes_api::{API_VERSION, RUN_KIND, Run};

/// Largest manifest file read.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A manifest that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileError {
    /// The file.
    pub file: String,
    /// Why.
    pub message: String,
}

/// One scan of the directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scan {
    /// Manifests by `namespace/name` (no UID, no status).
    pub runs: BTreeMap<String, Run>,
    /// Files (or documents) that were skipped.
    pub errors: Vec<FileError>,
}

/// Reads every manifest in `dirs`, in order: a Run named again in a later
/// directory is a duplicate (skipped, and said so).
pub fn scan_all(dirs: &[PathBuf]) -> Scan {
    let mut out = Scan::default();
    for dir in dirs {
        let one = scan(dir);
        out.errors.extend(one.errors);
        for (key, run) in one.runs {
            match out.runs.entry(key) {
                std::collections::btree_map::Entry::Occupied(e) => out.errors.push(FileError {
                    file: dir.display().to_string(),
                    message: format!("duplicate Run {} (also in an earlier directory)", e.key()),
                }),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(run);
                }
            }
        }
    }
    out
}

/// Reads every manifest in `dir`; a missing directory is empty.
pub fn scan(dir: &Path) -> Scan {
    let mut out = Scan::default();
    let Ok(read) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut files: Vec<PathBuf> = read
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    for file in files {
        let name = file.display().to_string();
        let err = |message: String| FileError {
            file: name.clone(),
            message,
        };
        match std::fs::metadata(&file) {
            Ok(md) if md.len() > MAX_FILE_BYTES => {
                out.errors
                    .push(err(format!("larger than {MAX_FILE_BYTES} bytes")));
                continue;
            }
            Err(e) => {
                out.errors.push(err(e.to_string()));
                continue;
            }
            Ok(_) => {}
        }
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                out.errors.push(err(e.to_string()));
                continue;
            }
        };
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = match serde_yaml::Value::deserialize(doc) {
                Ok(serde_yaml::Value::Null) => continue,
                Ok(v) => v,
                Err(e) => {
                    out.errors.push(err(e.to_string()));
                    break;
                }
            };
            match parse(value) {
                Ok(m) => {
                    let key = m.key();
                    match out.runs.entry(key) {
                        std::collections::btree_map::Entry::Occupied(e) => {
                            out.errors.push(err(format!("duplicate Run {}", e.key())));
                        }
                        std::collections::btree_map::Entry::Vacant(e) => {
                            e.insert(m);
                        }
                    }
                }
                Err(e) => out.errors.push(err(e)),
            }
        }
    }
    out
}

/// One YAML document as a Run: `apiVersion` and `kind` must name a Run;
/// `status` and server-set metadata (UID) are dropped.
fn parse(value: serde_yaml::Value) -> Result<Run, String> {
    let field = |k: &str| value.get(k).and_then(|v| v.as_str()).unwrap_or("");
    if field("apiVersion") != API_VERSION {
        return Err(format!("apiVersion must be {API_VERSION}"));
    }
    if field("kind") != RUN_KIND {
        return Err(format!("kind must be {RUN_KIND}"));
    }
    let mut run: Run = serde_yaml::from_value(value).map_err(|e| e.to_string())?;
    run.status = None;
    run.metadata.uid = None;
    if run.metadata.namespace.is_none() {
        run.metadata.namespace = Some("default".into());
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: NAME\nspec:\n  runtime: python\n  mode:\n    function:\n      handler: main.invoke\n";

    #[test]
    fn several_directories_merge_and_a_run_named_twice_is_refused_once() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let run = |name: &str| {
            format!(
                "apiVersion: {API_VERSION}\nkind: Run\nmetadata:\n  name: {name}\nspec:\n  runtime: python\n  mode:\n    function: {{handler: main.invoke}}\n"
            )
        };
        std::fs::write(a.path().join("one.yaml"), run("one")).unwrap();
        std::fs::write(b.path().join("two.yaml"), run("two")).unwrap();
        std::fs::write(b.path().join("again.yaml"), run("one")).unwrap();
        let s = scan_all(&[a.path().to_owned(), b.path().to_owned()]);
        assert_eq!(
            s.runs.keys().collect::<Vec<_>>(),
            ["default/one", "default/two"]
        );
        assert_eq!(s.errors.len(), 1, "{:?}", s.errors);
        assert!(s.errors[0].message.contains("duplicate Run default/one"));
        // A missing directory is empty.
        let gone = a.path().join("missing");
        assert_eq!(scan_all(&[gone]).runs.len(), 0);
    }

    #[test]
    fn scans_single_and_multi_document_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), RUN.replace("NAME", "a")).unwrap();
        let multi = format!(
            "{}---\n{}",
            RUN.replace("NAME", "b"),
            RUN.replace("NAME", "c")
        );
        std::fs::write(dir.path().join("bc.yml"), multi).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let s = scan(dir.path());
        assert_eq!(
            s.runs.keys().collect::<Vec<_>>(),
            ["default/a", "default/b", "default/c"]
        );
        assert!(s.errors.is_empty());
    }

    #[test]
    fn bad_files_and_duplicates_are_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), RUN.replace("NAME", "a")).unwrap();
        std::fs::write(dir.path().join("b.yaml"), RUN.replace("NAME", "a")).unwrap();
        std::fs::write(dir.path().join("c.yaml"), "spec: [unclosed").unwrap();
        std::fs::write(dir.path().join("d.yaml"), "kind: Run\n").unwrap();
        std::fs::write(
            dir.path().join("e.yaml"),
            RUN.replace("NAME", "e")
                .replace("kind: Run", "kind: Runtime"),
        )
        .unwrap();
        let s = scan(dir.path());
        assert_eq!(s.runs.len(), 1);
        assert_eq!(s.errors.len(), 4);
        assert!(
            s.errors
                .iter()
                .any(|e| e.message.contains("apiVersion must be"))
        );
        assert!(
            s.errors
                .iter()
                .any(|e| e.message.contains("kind must be Run"))
        );
        assert!(s.errors.iter().any(|e| e.message.contains("duplicate")));
    }

    #[test]
    fn manifests_become_runs_in_their_namespace_without_status_or_uid() {
        let dir = tempfile::tempdir().unwrap();
        let with_extras = RUN.replace("NAME", "a").replace(
            "metadata:\n  name: a\n",
            "metadata:\n  name: a\n  namespace: team\n  uid: made-up\nstatus:\n  phase: Ready\n",
        );
        std::fs::write(dir.path().join("a.yaml"), with_extras).unwrap();
        std::fs::write(dir.path().join("b.yaml"), RUN.replace("NAME", "b")).unwrap();
        let s = scan(dir.path());
        let a = &s.runs["team/a"];
        assert_eq!(a.metadata.uid, None);
        assert_eq!(a.status, None);
        assert_eq!(a.spec.runtime, "python");
        assert_eq!(
            s.runs["default/b"].metadata.namespace.as_deref(),
            Some("default")
        );
    }

    #[test]
    fn missing_directory_is_empty() {
        assert_eq!(scan(Path::new("/nonexistent/krt-runs")), Scan::default());
    }
}
