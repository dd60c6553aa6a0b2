//! `krt run`: runs a task Run once and exits with its exit code — from a
//! manifest (`-f task.yaml`) or from flags (`--runtime python --inline
//! 'print(1)'`). It creates the Run, prints the task's output as it comes
//! (stdout to stdout, stderr to stderr: from the Run's log under `krt up`;
//! on a cluster, the last 4 KiB of each stream from the Run's status once
//! it ends), and exits with the task's code. `--detach` returns once the
//! Run is created; `--rm` deletes it after it ended; Ctrl-C cancels it.
//!
//! Exit codes: the task's own when its process ran and exited; 124 when
//! `spec.timeout` ended it; 130 when Ctrl-C cancelled it; 125 when it ended
//! without an exit of its own (it could not start, was cancelled or lost
//! its owner past its retries); krt's usual codes when the Run could not be
//! created or followed.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use kruntimes_api::{EnvVar, Run, RunMode, RunSpec, SourceSpec, TaskMode, TerminationMode};
use kruntimes_client::{RunInfo, Target};

use super::{read_input, yaml_documents};

/// Exit code of a task that `spec.timeout` ended.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code of a task that ended without an exit of its own.
pub const EXIT_NO_EXIT: i32 = 125;
/// Exit code of a task cancelled by Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;

/// How often the Run and its log are read while it runs.
const POLL: Duration = Duration::from_millis(50);
/// How long `--rm` waits for the Run to be gone.
const RM_WAIT: Duration = Duration::from_secs(60);

/// `krt run`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// A manifest holding one task Run (`-` for stdin).
    #[arg(short, long, conflicts_with_all = ["runtime", "inline", "entrypoint", "args"])]
    pub filename: Option<PathBuf>,
    /// The Runtime (`python`, `bash`, or a custom one).
    #[arg(long, required_unless_present = "filename")]
    pub runtime: Option<String>,
    /// A script to run as it is.
    #[arg(long, conflicts_with = "entrypoint")]
    pub inline: Option<String>,
    /// A script file of the Runtime's working directory to run with ARGS.
    #[arg(long)]
    pub entrypoint: Option<String>,
    /// The Run's name (default: `task-` and a random suffix).
    #[arg(long)]
    pub name: Option<String>,
    /// An environment variable of the task, `NAME=VALUE` (repeatable).
    #[arg(short, long = "env", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// `spec.timeout`: the Run ends (its process tree killed) after this.
    #[arg(long, value_parser = super::parse_duration)]
    pub timeout: Option<Duration>,
    /// Delete the Run once it has ended.
    #[arg(long, conflicts_with = "detach")]
    pub rm: bool,
    /// Return once the Run is created.
    #[arg(short, long)]
    pub detach: bool,
    /// The entrypoint's arguments; without inline source or an entrypoint,
    /// shell commands for a shell-style Runtime (`krt run --runtime bash --
    /// 'echo hi' 'ls'`).
    #[arg(last = true)]
    pub args: Vec<String>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

/// The task Run the flags or the manifest describe.
pub fn task_run(args: &RunArgs, namespace: &str) -> anyhow::Result<Run> {
    let mut run = match &args.filename {
        Some(file) => {
            let text = String::from_utf8(read_input(file)?)?;
            let docs = yaml_documents(&text)?;
            let [doc] = docs.as_slice() else {
                bail!(
                    "{} holds {} documents; krt run takes one task Run",
                    file.display(),
                    docs.len()
                );
            };
            let run: Run = serde_json::from_value(doc.clone())
                .with_context(|| format!("{} is not a Run", file.display()))?;
            if run.spec.mode.task.is_none() {
                bail!(
                    "run {} is not a task Run (spec.mode.task): krt run runs tasks; use krt apply",
                    run.key()
                );
            }
            run
        }
        None => Run::new(
            &args.name.clone().unwrap_or_else(generated_name),
            RunSpec {
                runtime: args.runtime.clone().unwrap_or_default(),
                source: SourceSpec {
                    inline: args.inline.clone(),
                    inline_path: None,
                },
                mode: RunMode {
                    task: Some(TaskMode {
                        entrypoint: args.entrypoint.clone(),
                        args: args.args.clone(),
                    }),
                    ..Default::default()
                },
                ..Default::default()
            },
        ),
    };
    if let Some(name) = &args.name {
        run.metadata.name = Some(name.clone());
    }
    if run.metadata.namespace.is_none() {
        run.metadata.namespace = Some(namespace.to_owned());
    }
    for (name, value) in &args.env {
        run.spec.env.retain(|e| &e.name != name);
        run.spec.env.push(EnvVar {
            name: name.clone(),
            value: value.clone(),
        });
    }
    if let Some(t) = args.timeout {
        run.spec.timeout = Some(u32::try_from(t.as_secs().max(1)).unwrap_or(u32::MAX));
    }
    run.validate()
        .map_err(|why| anyhow::anyhow!("run {}: {why}", run.key()))?;
    Ok(run)
}

fn generated_name() -> String {
    format!("task-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// `krt run`; returns the exit code.
pub async fn run(t: &Target, namespace: &str, args: RunArgs) -> anyhow::Result<i32> {
    let run = task_run(&args, namespace)?;
    let (ns, name) = (
        run.namespace_or_default().to_owned(),
        run.name_str().to_owned(),
    );
    if t.run(&ns, &name).await.is_ok() {
        bail!("run {ns}/{name} already exists (delete it, or choose another --name)");
    }
    for w in run.warnings() {
        eprintln!("Warning: run {}: {w}", run.key());
    }
    // Listening before the Run exists: a Ctrl-C never ends krt with the
    // task left running.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    t.create(&run).await?;
    if args.detach {
        println!("run.kruntimes.io/{name} created");
        return Ok(0);
    }
    let mut output = Output::default();
    let mut cancelled = false;
    // Listed once: gone after that is deleted (krt up lists a new Run a
    // moment after it is written).
    let mut seen = false;
    let info = loop {
        let info = match t.run(&ns, &name).await {
            Ok((info, _)) => Some(info),
            Err(kruntimes_client::Error::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        if let (Target::Embedded(e), Some(info)) = (t, &info) {
            output.follow(e, info);
        }
        seen |= info.is_some();
        match info {
            Some(info) if info.ended() => break info,
            None if cancelled => bail!("run {ns}/{name} was deleted"),
            None if seen => bail!(
                "run {ns}/{name} was deleted before krt run saw it end (by krt delete, or a ttlSecondsAfterFinished shorter than a poll): its result went with it"
            ),
            _ => {}
        }
        tokio::select! {
            _ = &mut interrupted, if !cancelled => {
                cancelled = true;
                eprintln!("cancelling run {ns}/{name}");
                t.terminate(&ns, &name, TerminationMode::Immediate).await?;
            }
            _ = tokio::time::sleep(POLL) => {}
        }
    };
    match t {
        Target::Embedded(e) => output.follow(e, &info),
        Target::Cluster(_) => print_tails(&info),
    }
    let code = exit_code(&info, cancelled);
    if code == EXIT_NO_EXIT || code == EXIT_TIMEOUT {
        eprintln!(
            "error: run {ns}/{name} {} ({}): {}",
            info.phase, info.reason, info.message
        );
    }
    if args.rm {
        // Gone when krt run returns: the same name can be run again at once.
        super::runs::delete_quietly(t, &ns, &name, RM_WAIT).await?;
    }
    Ok(code)
}

/// The exit code of an ended task Run.
pub fn exit_code(info: &RunInfo, interrupted: bool) -> i32 {
    let exited = matches!(info.reason.as_str(), "Completed" | "NonZeroExit");
    match (info.phase.as_str(), &info.task) {
        (_, _) if interrupted && info.phase == "Cancelled" => EXIT_INTERRUPTED,
        ("Succeeded" | "Failed", Some(t)) if exited => t.exit_code,
        ("Timeout", _) => EXIT_TIMEOUT,
        _ => EXIT_NO_EXIT,
    }
}

/// On a cluster the Run's log stays on its Pod: what is printed is the end
/// of each stream its status keeps.
fn print_tails(info: &RunInfo) {
    let Some(t) = &info.task else {
        return;
    };
    print!("{}", t.stdout_tail);
    let _ = std::io::stdout().flush();
    eprint!("{}", t.stderr_tail);
    for (cut, stream) in [
        (t.stdout_truncated, "stdout"),
        (t.stderr_truncated, "stderr"),
    ] {
        if cut {
            eprintln!("(krt: {stream} shown from its last 4 KiB)");
        }
    }
}

/// The Run's log on `krt up`, printed as it grows: followed across its
/// rotation, and from the new owner's when the Run moves.
#[derive(Default)]
struct Output {
    log: Option<LogFollower>,
}

impl Output {
    fn follow(&mut self, e: &kruntimes_client::embedded::Embedded, info: &RunInfo) {
        let Some(pod) = &info.assigned_pod else {
            return;
        };
        let path = e.run_log_dir(pod).join(format!("{}.log", info.uid));
        if self.log.as_ref().is_none_or(|l| l.path != path) {
            self.log = Some(LogFollower::new(path));
        }
        let Some(log) = self.log.as_mut() else {
            return;
        };
        let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
        for line in log.poll() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let text = v["line"].as_str().unwrap_or_default();
            let _ = match v["stream"].as_str() {
                Some("stderr") => writeln!(err, "{text}"),
                _ => writeln!(out, "{text}"),
            };
        }
        let _ = out.flush();
    }
}

/// Complete lines appended to a file that is rotated by renaming (to
/// `.log.1`) and written anew: a rotated file is read to its end before
/// the new one.
pub struct LogFollower {
    path: PathBuf,
    open: Option<(std::io::BufReader<std::fs::File>, u64)>,
    partial: String,
}

impl LogFollower {
    /// Follows `path` (which may not exist yet).
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            open: None,
            partial: String::new(),
        }
    }

    fn inode(path: &Path) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| m.ino())
    }

    /// The complete lines written since the last call.
    pub fn poll(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            if self.open.is_none() {
                let Ok(f) = std::fs::File::open(&self.path) else {
                    return lines;
                };
                let ino = Self::inode(&self.path).unwrap_or(0);
                self.open = Some((std::io::BufReader::new(f), ino));
            }
            let Some((reader, ino)) = self.open.as_mut() else {
                return lines;
            };
            loop {
                let mut buf = String::new();
                match reader.read_line(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        self.partial.push_str(&buf);
                        if self.partial.ends_with('\n') {
                            let mut line = std::mem::take(&mut self.partial);
                            line.pop();
                            lines.push(line);
                        }
                    }
                }
            }
            // Rotated: the path names a new file; this one is read out.
            if Self::inode(&self.path).is_some_and(|now| now != *ino) {
                self.open = None;
                continue;
            }
            return lines;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> RunArgs {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let mut argv = vec!["krt"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|c| c.run).unwrap()
    }

    #[test]
    fn flags_describe_a_task_run() {
        let run = task_run(
            &args(&[
                "--runtime",
                "python",
                "--inline",
                "print(1)",
                "-e",
                "A=1",
                "--timeout",
                "2m",
            ]),
            "team",
        )
        .unwrap();
        assert!(run.name_str().starts_with("task-"));
        assert_eq!(run.namespace_or_default(), "team");
        assert_eq!(run.spec.source.inline.as_deref(), Some("print(1)"));
        assert_eq!(run.spec.timeout, Some(120));
        assert_eq!(run.spec.env[0].name, "A");
        let run = task_run(
            &args(&[
                "--runtime",
                "bash",
                "--name",
                "ci",
                "--",
                "echo one",
                "false",
            ]),
            "default",
        )
        .unwrap();
        assert_eq!(run.name_str(), "ci");
        assert_eq!(run.spec.mode.task.unwrap().args, ["echo one", "false"]);
        // Nothing to run is refused before anything is created.
        let e = task_run(&args(&["--runtime", "bash"]), "default").unwrap_err();
        assert!(e.to_string().contains("needs something to run"), "{e}");
    }

    #[test]
    fn the_exit_code_is_the_tasks_or_says_why_there_is_none() {
        let info = |phase: &str, reason: &str, code: Option<i32>| RunInfo {
            name: "t".into(),
            namespace: "default".into(),
            runtime: "python".into(),
            uid: "u".into(),
            mode: "task".into(),
            phase: phase.into(),
            reason: reason.into(),
            message: String::new(),
            assigned_pod: None,
            attempt: 1,
            endpoint: None,
            task: code.map(|exit_code| kruntimes_api::TaskStatus {
                exit_code,
                ..Default::default()
            }),
            artifacts: Vec::new(),
        };
        assert_eq!(
            exit_code(&info("Succeeded", "Completed", Some(0)), false),
            0
        );
        assert_eq!(exit_code(&info("Failed", "NonZeroExit", Some(3)), false), 3);
        assert_eq!(
            exit_code(&info("Failed", "NonZeroExit", Some(137)), false),
            137
        );
        assert_eq!(
            exit_code(&info("Timeout", "RunTimeout", None), false),
            EXIT_TIMEOUT
        );
        assert_eq!(
            exit_code(&info("Cancelled", "Terminated", None), true),
            EXIT_INTERRUPTED
        );
        assert_eq!(
            exit_code(&info("Cancelled", "Terminated", None), false),
            EXIT_NO_EXIT
        );
        // An earlier attempt's exit is not this end's.
        assert_eq!(
            exit_code(&info("Failed", "StartFailed", Some(3)), false),
            EXIT_NO_EXIT
        );
        assert_eq!(
            exit_code(&info("Failed", "OwnerLost", None), false),
            EXIT_NO_EXIT
        );
    }

    #[test]
    fn a_followed_log_is_read_across_its_rotation() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("u.log");
        let mut f = LogFollower::new(path.clone());
        assert!(f.poll().is_empty(), "not there yet");
        std::fs::write(&path, "one\ntw").unwrap();
        assert_eq!(f.poll(), ["one"]);
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(w, "o").unwrap();
        writeln!(w, "three").unwrap();
        std::fs::rename(&path, path.with_extension("log.1")).unwrap();
        std::fs::write(&path, "four\n").unwrap();
        assert_eq!(f.poll(), ["two", "three", "four"]);
        assert!(f.poll().is_empty());
    }
}
