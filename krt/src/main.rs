//! `krt`: the kruntimes CLI. The same verbs act on the embedded stack of
//! `krt up` (its state directory) or on a Kubernetes cluster (a kubeconfig,
//! a context, or the in-cluster service account): apply, runs, get, delete,
//! wait, invoke, session, runtime, logs, version. `krt up` runs the
//! embedded stack; `krt runtimed`, `krt runtime-server`, `krt operator` and
//! `krt gateway` run the daemons themselves (the stack and the test
//! harnesses start them).
#![forbid(unsafe_code)]

mod client;
mod cmd;
mod exit;
mod pki;
mod progress;
mod up;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kruntimes_api::Phase;

use cmd::Output;
use kruntimes_client::{Selector, Target};

/// The allocator of the production build ([`kruntimes_alloc`]).
#[global_allocator]
static ALLOCATOR: kruntimes_alloc::Allocator = kruntimes_alloc::Allocator;

#[derive(Debug, Parser)]
#[command(
    name = "krt",
    version,
    about = "kruntimes: warm execution on Kubernetes, and on one machine",
    after_help = "Against krt up by default (--state-dir); against a cluster with --kubeconfig, --context or --cluster.\nExit codes: 0 ok, 1 local or API-server failure, 2 usage, 9 HTTP error, 10-30 one per API error code; krt run: the task's own code, 124 timeout, 125 no exit of its own, 130 interrupted (docs/cli.md)."
)]
struct Cli {
    /// Directory of the embedded stack's state (certificates, client config, Run status).
    #[arg(
        long,
        global = true,
        env = "KRUNTIMES_STATE_DIR",
        default_value = ".kruntimes"
    )]
    state_dir: PathBuf,
    /// Kubeconfig of a cluster (selects the cluster mode).
    #[arg(long, global = true, env = "KRUNTIMES_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (selects the cluster mode).
    #[arg(long, global = true)]
    context: Option<String>,
    /// Use a cluster: KUBECONFIG, ~/.kube/config, or the in-cluster service account.
    #[arg(long, global = true)]
    cluster: bool,
    /// Namespace (default: `default`, or the kubeconfig context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    /// Bearer token for the gateway (default: client.json's, or the kubeconfig user's).
    #[arg(long, global = true, env = "KRUNTIMES_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    fn selector(&self) -> Selector {
        Selector {
            state_dir: self.state_dir.clone(),
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            cluster: self.cluster,
            token: self.token.clone(),
        }
    }
}

/// `krt get …`
#[derive(Debug, Subcommand)]
enum GetNoun {
    /// A Run.
    Run {
        /// Name.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
}

/// `krt delete …`
#[derive(Debug, Subcommand)]
enum DeleteNoun {
    /// A Run (its owner releases it first).
    Run {
        /// Name.
        name: String,
        /// How long to wait until it is gone (`0s`: do not wait).
        #[arg(long, default_value = "60s", value_parser = cmd::parse_duration)]
        wait: Duration,
    },
}

/// `krt wait …`
#[derive(Debug, Subcommand)]
enum WaitNoun {
    /// A Run.
    Run {
        /// Name.
        name: String,
        /// The phase (Ready, Succeeded, …).
        #[arg(long = "for", value_parser = parse_phase)]
        phase: Phase,
        /// How long to wait.
        #[arg(long, default_value = "60s", value_parser = cmd::parse_duration)]
        timeout: Duration,
    },
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the embedded stack: control plane, runtimed instances, gateway.
    Up(up::UpArgs),
    /// Create or update Runs (and, on a cluster, Runtimes) from a YAML file.
    Apply {
        /// Manifest file (`-` for stdin).
        #[arg(short, long)]
        filename: PathBuf,
    },
    /// List Runs with their phase, owner and endpoint.
    Runs {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Show one object.
    #[command(subcommand)]
    Get(GetNoun),
    /// Delete an object.
    #[command(subcommand)]
    Delete(DeleteNoun),
    /// Wait until an object reaches a state.
    #[command(subcommand)]
    Wait(WaitNoun),
    /// Run a task once: create it, print its output, exit with its exit code.
    Run(cmd::run::RunArgs),
    /// Invoke a function Run through the gateway.
    Invoke {
        /// Run name.
        name: String,
        /// JSON input.
        #[arg(long, conflicts_with = "data_file")]
        data: Option<String>,
        /// File holding the JSON input (`-` for stdin).
        #[arg(long)]
        data_file: Option<PathBuf>,
        /// Invocation id (echoed in errors and logs).
        #[arg(long)]
        invocation_id: Option<String>,
    },
    /// Session (sandbox) Runs: create, exec, cp, ls, close.
    #[command(subcommand)]
    Session(cmd::session::SessionCommand),
    /// Runtime pools: replicas and capacity in use.
    #[command(subcommand)]
    Runtime(RuntimeCommand),
    /// A Run's artifacts: list them, download one.
    #[command(subcommand)]
    Artifacts(cmd::artifacts::ArtifactsCommand),
    /// The owner's log lines about a Run.
    Logs {
        /// Run name.
        name: String,
        /// Keep printing new lines.
        #[arg(short, long)]
        follow: bool,
        /// `text` for people, `json` for the lines as logged.
        #[arg(short, long, value_enum, default_value = "text")]
        output: cmd::logs::LogFormat,
    },
    /// This build, and the versions of the components it can reach.
    Version,
    /// Mint a token for the embedded stack (signed with its key).
    Token {
        /// Subject.
        #[arg(long)]
        subject: String,
        /// Groups (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 3600)]
        ttl_secs: u64,
    },
    /// Run the per-Pod daemon.
    #[command(hide = true)]
    Runtimed {
        #[command(flatten)]
        args: Box<kruntimes_runtimed::Args>,
        /// Exit when the parent process exits.
        #[arg(long)]
        exit_with_parent: bool,
    },
    /// Run a Runtime Server (the user code of one runtimed).
    #[command(hide = true)]
    RuntimeServer {
        #[command(flatten)]
        args: kruntimes_runtime_server::Args,
        /// Exit when the parent process exits.
        #[arg(long)]
        exit_with_parent: bool,
    },
    /// Run the operator against a Kubernetes cluster.
    #[command(hide = true)]
    Operator {
        #[command(flatten)]
        args: Box<kruntimes_operator::Args>,
        /// Exit when the parent process exits.
        #[arg(long)]
        exit_with_parent: bool,
    },
    /// Run the gateway.
    #[command(hide = true)]
    Gateway {
        #[command(flatten)]
        args: Box<kruntimes_gateway::Args>,
        /// Exit when the parent process exits.
        #[arg(long)]
        exit_with_parent: bool,
    },
}

/// `krt runtime …`
#[derive(Debug, Subcommand)]
enum RuntimeCommand {
    /// Every Runtime.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// One Runtime.
    Get {
        /// Name.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
}

fn parse_phase(s: &str) -> Result<Phase, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("{s:?} is not a phase (Pending, Scheduled, Running, Ready, Finalizing, Succeeded, Failed, Timeout, Cancelled)"))
}

/// The parent's pid; a change means the parent died and we were reparented.
pub(crate) fn parent_pid() -> i32 {
    nix::unistd::getppid().as_raw()
}

/// Exits this process once its parent is gone, so children of a killed
/// `krt up` never linger.
///
/// A thread of its own blocks on a pidfd of the parent, which becomes
/// readable when the parent exits: nothing wakes the process until then.
/// (It used to check four times a second whether the process had been
/// reparented: ~100 µs of CPU a second in every child, the gateway's cost
/// per request included.) Where pidfds are missing (Linux before 5.3) it
/// falls back to that check.
fn exit_with_parent() {
    let parent = parent_pid();
    let watch = std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || {
            // The process's signals go to its other threads: this one only
            // waits, and is never woken by one.
            let _ = nix::sys::signal::pthread_sigmask(
                nix::sys::signal::SigmaskHow::SIG_BLOCK,
                Some(&nix::sys::signal::SigSet::all()),
                None,
            );
            wait_for_exit(parent);
            std::process::exit(0);
        });
    if let Err(e) = watch {
        // Nothing will stop this process with its parent: say so once.
        eprintln!("krt: cannot watch the parent process: {e}");
    }
}

/// Returns once the process `parent` (this process's parent when called)
/// has exited.
fn wait_for_exit(parent: i32) {
    use rustix::event::{PollFd, PollFlags, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let pidfd = Pid::from_raw(parent).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
    // A parent that exited before its pidfd was opened has already left
    // this process reparented (and its pid may name another process now).
    if parent_pid() != parent {
        return;
    }
    if let Some(fd) = pidfd {
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        loop {
            match poll(&mut fds, None) {
                Ok(_) => return,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        }
    }
    while parent_pid() == parent {
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn read_data(data: Option<String>, file: Option<PathBuf>) -> anyhow::Result<Vec<u8>> {
    Ok(match (data, file) {
        (Some(d), _) => d.into_bytes(),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)?;
            buf
        }
        (None, Some(f)) => std::fs::read(&f).with_context(|| format!("read {}", f.display()))?,
        (None, None) => b"{}".to_vec(),
    })
}

fn main() -> anyhow::Result<()> {
    kruntimes_alloc::tune();
    let cli = Cli::parse();
    // Every mode but the Runtime Server's holds keys or tokens in memory
    // (`krt up` the signing key and the control plane's): out of reach of
    // other processes of this uid, user code above all.
    if !matches!(cli.command, Command::RuntimeServer { .. }) {
        kruntimes_process::confine::forbid_inspection()?;
    }
    match cli.command {
        Command::Gateway {
            args,
            exit_with_parent: e,
        } => {
            if e {
                exit_with_parent();
            }
            kruntimes_gateway::set_build_commit(env!("KRT_GIT_COMMIT"));
            // Pingora owns its runtimes; run it outside of any tokio runtime.
            Ok(kruntimes_gateway::run(args.into_config()?)?)
        }
        Command::Runtimed {
            args,
            exit_with_parent: e,
        } => {
            // Before any thread (the parent watch's, the runtime's): it
            // edits the environment.
            let config = args.into_config()?;
            let handed_over = kruntimes_runtimed::handed_over_listener()?;
            if e {
                exit_with_parent();
            }
            kruntimes_runtimed::init_logging();
            let runtime = tokio::runtime::Runtime::new()?;
            Ok(runtime.block_on(kruntimes_runtimed::run(config, handed_over))?)
        }
        Command::RuntimeServer {
            args,
            exit_with_parent: e,
        } => {
            if e {
                exit_with_parent();
            }
            Ok(kruntimes_runtime_server::main(args, &["runtime-server"])?)
        }
        Command::Operator {
            args,
            exit_with_parent: e,
        } => {
            if e {
                exit_with_parent();
            }
            let config = args.into_config()?;
            Ok(tokio::runtime::Runtime::new()?.block_on(kruntimes_operator::run(config))?)
        }
        Command::Up(args) => {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            init_logging();
            tokio::runtime::Runtime::new()?.block_on(up::up(&cli.state_dir, args))
        }
        Command::Token {
            subject,
            groups,
            ttl_secs,
        } => {
            let key = cli.state_dir.join("pki").join("token-signing.key");
            let token = pki::issue_token(
                &key,
                &subject,
                &groups,
                std::time::Duration::from_secs(ttl_secs),
            )?;
            println!("{token}");
            if !groups.iter().any(|g| g == pki::ADMIN_GROUP) {
                eprintln!(
                    "note: what {subject} may call is up to {} (by default only the group {} may call anything: add a rule there and restart krt up, or mint with --group {})",
                    cli.state_dir.join("pki").join("policy.yaml").display(),
                    pki::ADMIN_GROUP,
                    pki::ADMIN_GROUP
                );
            }
            Ok(())
        }
        _ => {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            init_logging();
            let code = tokio::runtime::Runtime::new()?.block_on(client_verb(cli));
            std::process::exit(code);
        }
    }
}

/// Runs a client verb; returns the process exit code.
async fn client_verb(cli: Cli) -> i32 {
    match client_verb_inner(cli).await {
        Ok(code) => code,
        Err(e) => exit::report(&e),
    }
}

async fn client_verb_inner(cli: Cli) -> anyhow::Result<i32> {
    let sel = cli.selector();
    if let Command::Version = cli.command {
        let t = Target::open(&sel).await.ok();
        cmd::version::version(t.as_ref()).await?;
        return Ok(0);
    }
    let t = Target::open(&sel).await?;
    let ns = match (&cli.namespace, &t) {
        (Some(ns), _) => ns.clone(),
        (None, Target::Cluster(c)) => c.default_namespace().to_owned(),
        (None, Target::Embedded(_)) => "default".to_owned(),
    };
    match cli.command {
        Command::Apply { filename } => {
            cmd::runs::apply(&t, &filename, cli.namespace.as_deref()).await?
        }
        Command::Runs {
            output,
            all_namespaces,
        } => {
            let filter = (!all_namespaces).then_some(ns.as_str());
            cmd::runs::list(&t, filter, output).await?
        }
        Command::Get(GetNoun::Run { name, output }) => {
            cmd::runs::get(&t, &ns, &name, output).await?
        }
        Command::Delete(DeleteNoun::Run { name, wait }) => {
            cmd::runs::delete(&t, &ns, &name, wait).await?
        }
        Command::Wait(WaitNoun::Run {
            name,
            phase,
            timeout,
        }) => cmd::runs::wait(&t, &ns, &name, phase, timeout).await?,
        Command::Invoke {
            name,
            data,
            data_file,
            invocation_id,
        } => {
            let body = read_data(data, data_file)?;
            cmd::invoke::invoke(&t, &ns, &name, body, invocation_id.as_deref()).await?
        }
        Command::Session(c) => return cmd::session::run(&t, &ns, c).await,
        Command::Run(args) => return cmd::run::run(&t, &ns, args).await,
        Command::Runtime(RuntimeCommand::List { output }) => cmd::runtime::list(&t, output).await?,
        Command::Runtime(RuntimeCommand::Get { name, output }) => {
            cmd::runtime::get(&t, cli.namespace.as_deref(), &name, output).await?
        }
        Command::Artifacts(c) => cmd::artifacts::run(&t, &ns, c).await?,
        Command::Logs {
            name,
            follow,
            output,
        } => cmd::logs::logs(&t, &ns, &name, follow, output).await?,
        // main() runs these itself and never hands them here.
        Command::Up(_)
        | Command::Token { .. }
        | Command::Version
        | Command::Runtimed { .. }
        | Command::RuntimeServer { .. }
        | Command::Operator { .. }
        | Command::Gateway { .. } => unreachable!("handled by main"),
    }
    Ok(0)
}
