//! `krt`: the kruntimes CLI. `krt up` runs the embedded stack; `krt runs`
//! and `krt invoke` are its clients. `krt runtimed`, `krt runtime-server`
//! and `krt gateway` run the daemons themselves (the stack starts them as
//! child processes).
#![forbid(unsafe_code)]

mod client;
mod pki;
mod session;
mod up;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "krt",
    version,
    about = "kruntimes: warm execution on Kubernetes, and on one machine"
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
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the embedded stack: control plane, runtimed instances, gateway.
    Up(up::UpArgs),
    /// List Runs with their phase, owner and endpoint.
    Runs {
        /// Output format.
        #[arg(short, long, value_parser = ["table", "json"], default_value = "table")]
        output: String,
    },
    /// Invoke a function Run through the gateway.
    Invoke {
        /// Run name.
        name: String,
        /// Namespace.
        #[arg(short, long, default_value = "default")]
        namespace: String,
        /// JSON input.
        #[arg(long, conflicts_with = "data_file")]
        data: Option<String>,
        /// File holding the JSON input (`-` for stdin).
        #[arg(long)]
        data_file: Option<PathBuf>,
    },
    /// Session (sandbox) Runs: create, exec, cp, ls, close.
    #[command(subcommand)]
    Session(session::SessionCommand),
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
        args: kruntimes_runtimed::cli::Args,
        /// Exit when the parent process exits.
        #[arg(long)]
        exit_with_parent: bool,
    },
    /// Run a Runtime Server (the user code of one runtimed).
    #[command(hide = true)]
    RuntimeServer {
        #[command(flatten)]
        args: kruntimes_runtime_server::cli::Args,
        /// Exit when the parent process exits.
        #[arg(long)]
        exit_with_parent: bool,
    },
    /// Run the operator against a Kubernetes cluster.
    #[command(hide = true)]
    Operator {
        #[command(flatten)]
        args: Box<kruntimes_operator::cli::Args>,
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

/// The parent's pid; a change means the parent died and we were reparented.
pub(crate) fn parent_pid() -> i32 {
    nix::unistd::getppid().as_raw()
}

/// Exits this process once its parent is gone, so children of a killed
/// `krt up` never linger.
fn exit_with_parent() {
    let parent = parent_pid();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(250));
            if parent_pid() != parent {
                std::process::exit(0);
            }
        }
    });
}

/// Makes a file readable by its owner only (it holds a token).
pub(crate) fn restrict(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", path.display()))
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
    let cli = Cli::parse();
    match cli.command {
        Command::Gateway {
            args,
            exit_with_parent: e,
        } => {
            if e {
                exit_with_parent();
            }
            // Pingora owns its runtimes; run it outside of any tokio runtime.
            kruntimes_gateway::run(*args)
        }
        Command::Runtimed {
            args,
            exit_with_parent: e,
        } => {
            if e {
                exit_with_parent();
            }
            kruntimes_runtimed::cli::init_logging();
            tokio::runtime::Runtime::new()?.block_on(kruntimes_runtimed::cli::run(args))
        }
        Command::RuntimeServer {
            args,
            exit_with_parent: e,
        } => {
            if e {
                exit_with_parent();
            }
            kruntimes_runtime_server::cli::main(args, &["runtime-server"])
        }
        Command::Operator {
            args,
            exit_with_parent: e,
        } => {
            if e {
                exit_with_parent();
            }
            tokio::runtime::Runtime::new()?.block_on(kruntimes_operator::cli::run(*args))
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
            Ok(())
        }
        Command::Session(cmd) => {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            init_logging();
            let code =
                tokio::runtime::Runtime::new()?.block_on(session::run(&cli.state_dir, cmd))?;
            std::process::exit(code);
        }
        Command::Runs { output } => client::print_runs(&cli.state_dir, output == "json"),
        Command::Invoke {
            name,
            namespace,
            data,
            data_file,
        } => {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            init_logging();
            let body = read_data(data, data_file)?;
            let code = tokio::runtime::Runtime::new()?.block_on(client::invoke(
                &cli.state_dir,
                &namespace,
                &name,
                body,
            ))?;
            std::process::exit(code);
        }
    }
}
