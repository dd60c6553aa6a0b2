//! What a task Run runs: the seeds' input semantics, decided once. Pure.
//!
//! | `source.inline` | `entrypoint` | `args` | Runs |
//! | --- | --- | --- | --- |
//! | set | — | — | the inline script, as it is |
//! | set | set or not | set or not | the inline script; `entrypoint` and `args` have no effect (a warning says so) |
//! | — | set | any | the `entrypoint` file of the source with `args` as its arguments |
//! | — | — | set | `args` as shell commands, one per line (shell-style Runtimes only) |
//! | — | — | — | refused: there is nothing to run |

use kruntimes_proto::runtime::path::normalize;

use kruntimes_core::ModeKind;

use super::{RetryPolicy, SourceSpec, TaskMode};

/// Most retries a Run may ask for.
pub const MAX_RETRIES: u32 = 100;
/// Most exit codes `retryPolicy.onExitCodes` may name.
pub const MAX_RETRY_EXIT_CODES: usize = 32;

/// Checks `spec.retryPolicy` for a Run of `mode`: bounded retries; exit
/// codes 1–255, for task Runs only.
pub fn retry_policy(p: &RetryPolicy, mode: ModeKind) -> Result<(), String> {
    if p.max_retries > MAX_RETRIES {
        return Err(format!(
            "spec.retryPolicy.maxRetries {} is more than {MAX_RETRIES}",
            p.max_retries
        ));
    }
    if p.on_exit_codes.is_empty() {
        return Ok(());
    }
    if mode != ModeKind::Task {
        return Err("spec.retryPolicy.onExitCodes applies to task Runs only".into());
    }
    if p.on_exit_codes.len() > MAX_RETRY_EXIT_CODES {
        return Err(format!(
            "spec.retryPolicy.onExitCodes has {} codes; at most {MAX_RETRY_EXIT_CODES}",
            p.on_exit_codes.len()
        ));
    }
    if let Some(c) = p.on_exit_codes.iter().find(|c| !(1..=255).contains(*c)) {
        return Err(format!(
            "spec.retryPolicy.onExitCodes holds {c}; exit codes that fail are 1 to 255"
        ));
    }
    Ok(())
}

/// Longest `spec.ttlSecondsAfterFinished`: 30 days.
pub const MAX_TTL_SECONDS: u32 = 30 * 24 * 3600;

/// Checks `spec.ttlSecondsAfterFinished` for a Run of `mode`: bounded, and
/// for task Runs only (a function or session Run ends when it is told to,
/// and is deleted by whoever told it).
pub fn ttl(ttl: Option<u32>, mode: ModeKind) -> Result<(), String> {
    match ttl {
        None => Ok(()),
        Some(_) if mode != ModeKind::Task => {
            Err("spec.ttlSecondsAfterFinished applies to task Runs only".into())
        }
        Some(t) if t > MAX_TTL_SECONDS => Err(format!(
            "spec.ttlSecondsAfterFinished {t} is more than {MAX_TTL_SECONDS} (30 days)"
        )),
        Some(_) => Ok(()),
    }
}

/// Most arguments a task takes.
pub const MAX_TASK_ARGS: usize = 256;
/// Longest argument, in bytes.
pub const MAX_TASK_ARG_BYTES: usize = 4096;
/// Longest entrypoint path, in bytes.
pub const MAX_ENTRYPOINT_BYTES: usize = 255;

/// What a task Run runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskInput<'a> {
    /// The inline source as a standalone script.
    Inline,
    /// A script file of the source (workspace-relative, normalized) and
    /// its arguments.
    Entrypoint {
        /// The file.
        path: String,
        /// Its arguments.
        args: &'a [String],
    },
    /// Shell commands, one per line, for a shell-style Runtime.
    Commands(&'a [String]),
}

/// A task's input as its spec gives it, and a warning for what it sets
/// that has no effect; or why it is refused (the field named).
pub fn task_input<'a>(
    source: &SourceSpec,
    task: &'a TaskMode,
) -> Result<(TaskInput<'a>, Option<String>), String> {
    if task.args.len() > MAX_TASK_ARGS {
        return Err(format!(
            "spec.mode.task.args has {} items; at most {MAX_TASK_ARGS}",
            task.args.len()
        ));
    }
    if let Some(i) = task
        .args
        .iter()
        .position(|a| a.len() > MAX_TASK_ARG_BYTES || a.contains('\0'))
    {
        return Err(format!(
            "spec.mode.task.args[{i}] is longer than {MAX_TASK_ARG_BYTES} bytes or contains NUL"
        ));
    }
    let entrypoint = match task.entrypoint.as_deref() {
        None => None,
        Some(e) if e.is_empty() || e.len() > MAX_ENTRYPOINT_BYTES => {
            return Err(format!(
                "spec.mode.task.entrypoint must be 1 to {MAX_ENTRYPOINT_BYTES} bytes"
            ));
        }
        Some(e) => match normalize(e) {
            Ok(p) if !p.as_os_str().is_empty() => Some(p.to_string_lossy().into_owned()),
            Ok(_) => return Err("spec.mode.task.entrypoint names no file".into()),
            Err(why) => return Err(format!("spec.mode.task.entrypoint {e:?}: {why}")),
        },
    };
    if source.inline.is_some() {
        let ignored: Vec<&str> = [
            entrypoint.as_ref().map(|_| "entrypoint"),
            (!task.args.is_empty()).then_some("args"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let warning = (!ignored.is_empty()).then(|| {
            format!(
                "spec.mode.task.{} {} no effect: spec.source.inline is a standalone script and runs as it is",
                ignored.join(" and "),
                if ignored.len() > 1 { "have" } else { "has" }
            )
        });
        return Ok((TaskInput::Inline, warning));
    }
    match entrypoint {
        Some(path) => Ok((
            TaskInput::Entrypoint {
                path,
                args: &task.args,
            },
            None,
        )),
        None if !task.args.is_empty() => Ok((TaskInput::Commands(&task.args), None)),
        None => Err(
            "a task needs something to run: spec.source.inline, spec.mode.task.entrypoint, or spec.mode.task.args (shell commands)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(inline: Option<&str>) -> SourceSpec {
        SourceSpec {
            inline: inline.map(str::to_owned),
            inline_path: None,
        }
    }

    fn task(entrypoint: Option<&str>, args: &[&str]) -> TaskMode {
        TaskMode {
            entrypoint: entrypoint.map(str::to_owned),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn a_ttl_is_a_tasks_and_bounded() {
        assert_eq!(ttl(None, ModeKind::Function), Ok(()));
        assert_eq!(ttl(Some(0), ModeKind::Task), Ok(()));
        assert_eq!(ttl(Some(MAX_TTL_SECONDS), ModeKind::Task), Ok(()));
        let e = ttl(Some(MAX_TTL_SECONDS + 1), ModeKind::Task).unwrap_err();
        assert!(e.contains("more than 2592000"), "{e}");
        for mode in [ModeKind::Function, ModeKind::Session] {
            let e = ttl(Some(60), mode).unwrap_err();
            assert!(e.contains("applies to task Runs only"), "{e}");
        }
    }

    #[test]
    fn retry_policies_are_bounded_and_exit_codes_are_a_tasks() {
        let p = |max_retries, codes: &[i32]| RetryPolicy {
            max_retries,
            on_exit_codes: codes.to_vec(),
        };
        assert_eq!(retry_policy(&p(3, &[]), ModeKind::Function), Ok(()));
        assert_eq!(
            retry_policy(&p(100, &[1, 137, 255]), ModeKind::Task),
            Ok(())
        );
        for (policy, mode, why) in [
            (
                p(101, &[]),
                ModeKind::Task,
                "maxRetries 101 is more than 100",
            ),
            (p(3, &[3]), ModeKind::Function, "applies to task Runs only"),
            (p(3, &[3]), ModeKind::Session, "applies to task Runs only"),
            (
                p(3, &[0]),
                ModeKind::Task,
                "holds 0; exit codes that fail are 1 to 255",
            ),
            (p(3, &[256]), ModeKind::Task, "holds 256"),
            (p(3, &[-1]), ModeKind::Task, "holds -1"),
            (p(3, &[1; 33]), ModeKind::Task, "has 33 codes; at most 32"),
        ] {
            let e = retry_policy(&policy, mode).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn the_input_semantics_table_row_by_row() {
        let inline = source(Some("print(1)"));
        let none = source(None);
        // Inline alone: the script.
        assert_eq!(
            task_input(&inline, &task(None, &[])),
            Ok((TaskInput::Inline, None))
        );
        // Inline with entrypoint and/or args: the script, and a warning.
        for (t, ignored) in [
            (task(Some("main.py"), &[]), "entrypoint has"),
            (task(None, &["--verbose"]), "args has"),
            (task(Some("main.py"), &["-v"]), "entrypoint and args have"),
        ] {
            let (input, warning) = task_input(&inline, &t).unwrap();
            assert_eq!(input, TaskInput::Inline);
            assert_eq!(
                warning.unwrap(),
                format!(
                    "spec.mode.task.{ignored} no effect: spec.source.inline is a standalone script and runs as it is"
                )
            );
        }
        // An entrypoint with its arguments.
        let t = task(Some("./bin/run.py"), &["--verbose", "x y"]);
        assert_eq!(
            task_input(&none, &t),
            Ok((
                TaskInput::Entrypoint {
                    path: "bin/run.py".into(),
                    args: &t.args
                },
                None
            ))
        );
        // Args alone: shell commands.
        let t = task(None, &["echo hi", "ls"]);
        assert_eq!(
            task_input(&none, &t),
            Ok((TaskInput::Commands(&t.args), None))
        );
        // Nothing to run.
        let e = task_input(&none, &task(None, &[])).unwrap_err();
        assert!(e.starts_with("a task needs something to run"), "{e}");
    }

    #[test]
    fn bad_entrypoints_and_args_are_refused_naming_the_field() {
        let none = source(None);
        for (entrypoint, why) in [
            ("/etc/passwd", "must be relative"),
            ("../x.py", "must not contain '..'"),
            ("a/../../x", "must not contain '..'"),
            ("", "must be 1 to 255 bytes"),
            (".", "names no file"),
            ("a\0b", "contains NUL"),
        ] {
            let e = task_input(&none, &task(Some(entrypoint), &[])).unwrap_err();
            assert!(
                e.starts_with("spec.mode.task.entrypoint") && e.contains(why),
                "{entrypoint:?}: {e}"
            );
        }
        let long = "x".repeat(256);
        assert!(task_input(&none, &task(Some(&long), &[])).is_err());
        let many: Vec<&str> = vec!["a"; MAX_TASK_ARGS + 1];
        let e = task_input(&none, &task(None, &many)).unwrap_err();
        assert_eq!(e, "spec.mode.task.args has 257 items; at most 256");
        let big = "x".repeat(MAX_TASK_ARG_BYTES + 1);
        let e = task_input(&none, &task(None, &["ok", &big])).unwrap_err();
        assert!(e.starts_with("spec.mode.task.args[1]"), "{e}");
        // Refused even beside inline: the spec is wrong whatever runs.
        assert!(task_input(&source(Some("x")), &task(Some("/abs"), &[])).is_err());
        assert!(task_input(&source(Some("x")), &task(None, &["a\0"])).is_err());
    }
}
