//! The shim: `runtime-server shim [--control-fd N] [--grace-ms MS] -- PROGRAM
//! ARGS…`. Every user process the server starts runs under one. The shim
//! makes itself a child subreaper (so nothing its child starts can leave its
//! tree), runs the child with the shim's own stdio, and when the child
//! exits, when SIGTERM arrives, or when the server's end of the control
//! pipe closes (the server dropped the process, or died), kills every
//! descendant it has before it exits with the child's status (`128 + N`
//! for a child killed by signal N, as shells report it).
//!
//! SIGTERM first passes SIGTERM on to the whole tree and gives it
//! `--grace-ms` to end (session commands: a grace period, then SIGKILL);
//! a closed control pipe kills at once. SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
//! SIGUSR2, SIGWINCH, SIGCONT and SIGTSTP are passed on to the child alone
//! ([`FORWARDED`]): how a session signals a background process, and how a
//! terminal's hangup reaches its shell.
//!
//! Orphans of the tree that exit while the child runs are reaped when
//! their SIGCHLD comes. Nothing else wakes the shim: it used to read the
//! whole process table every second for them, ~1 ms of CPU a second for
//! each of a Pod's warm workers, shells and commands.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

use super::tree;

/// How long the shim tries to kill a tree before it gives up on processes
/// stuck in the kernel.
const KILL_WITHIN: Duration = Duration::from_secs(10);

/// The shim's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ShimArgs {
    /// Read end of the server's control pipe (inherited): its closing
    /// kills the tree.
    #[arg(long)]
    pub control_fd: Option<i32>,
    /// A descriptor (inherited) the child keeps under the same number.
    #[arg(long)]
    pub pass_fd: Option<i32>,
    /// On SIGTERM, how long the tree may take to end after SIGTERM before
    /// it is killed.
    #[arg(long, default_value_t = 0)]
    pub grace_ms: u64,
    /// The child runs on a terminal the shim leads: the terminal's signals
    /// reach the child's process group themselves (and the server signals
    /// that group), so the shim passes nothing on — it only keeps them from
    /// ending it.
    #[arg(long)]
    pub tty: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

/// What ended the shim's wait.
enum Ended {
    Exited(std::io::Result<ExitStatus>),
    ControlClosed,
    Terminated,
}

/// Takes the control pipe over as a fresh descriptor of the same pipe
/// (opened through `/proc/self/fd`, close-on-exec) and closes every other
/// inherited descriptor above stdio — the pipe's number, and whatever a
/// concurrent spawn in the server let slip through — so the child inherits
/// stdio only, and `pass_fd` when the server passed one.
fn take_descriptors(
    control_fd: Option<i32>,
    pass_fd: Option<i32>,
) -> std::io::Result<Option<std::fs::File>> {
    let control = match control_fd {
        Some(fd) => Some(std::fs::File::open(format!("/proc/self/fd/{fd}"))?),
        None => None,
    };
    let keep = control.as_ref().map(|f| f.as_raw_fd());
    let pass = pass_fd.filter(|fd| *fd > 2 && Some(*fd) != control_fd);
    let inherited: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    for fd in inherited {
        // The directory's own descriptor is in the list and already closed
        // again: EBADF is expected. Nothing else runs in this process yet,
        // so no number is reused meanwhile.
        if fd > 2 && Some(fd) != keep && Some(fd) != pass {
            let _ = nix::unistd::close(fd);
        }
    }
    Ok(control)
}

/// The exit code reporting `status` (a shell's convention for signals).
pub fn exit_code(status: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// Resolves once every writer of the control pipe is gone.
async fn closed(control: Option<std::fs::File>) {
    let Some(file) = control else {
        return std::future::pending().await;
    };
    let Ok(rx) = tokio::net::unix::pipe::Receiver::from_file(file) else {
        return std::future::pending().await;
    };
    let mut buf = [0u8; 64];
    loop {
        if rx.readable().await.is_err() {
            return;
        }
        match rx.try_read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

async fn supervise(args: ShimArgs, control: Option<std::fs::File>) -> i32 {
    let me = std::process::id() as i32;
    let Some((program, rest)) = args.command.split_first() else {
        return 2;
    };
    let mut term = match signal(SignalKind::terminate()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("runtime-server shim: SIGTERM handler: {e}");
            return 1;
        }
    };
    // An orphan of the tree re-parented to the shim signals its exit here:
    // it is reaped then, and the shim sleeps until something happens.
    let mut exited = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("runtime-server shim: SIGCHLD handler: {e}");
            return 1;
        }
    };
    // Caught before the child starts: a signal the shim was started with
    // ignored would otherwise stay ignored in the child (a shell then
    // cannot even trap it); caught ones start at their default there.
    let forwarded = catch_forwarded();
    let mut child = match tokio::process::Command::new(program).args(rest).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "runtime-server shim: start {}: {e}",
                program.to_string_lossy()
            );
            return 127;
        }
    };
    let child_pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(nix::unistd::Pid::from_raw);
    let forwarding = match child_pid {
        Some(child) => forward(forwarded, (!args.tty).then_some(child)),
        None => Vec::new(),
    };
    let closed = closed(control);
    tokio::pin!(closed);
    let ended = loop {
        tokio::select! {
            s = child.wait() => break Ended::Exited(s),
            _ = &mut closed => break Ended::ControlClosed,
            _ = term.recv() => break Ended::Terminated,
            // The child's own status belongs to its wait.
            Some(()) = exited.recv() => tree::reap_children_except(child_pid),
        }
    };
    // The child is reaped (or about to be killed): its pid may be reused.
    for task in &forwarding {
        task.abort();
    }
    let status = match ended {
        Ended::Exited(s) => s.ok(),
        Ended::ControlClosed => None,
        Ended::Terminated => {
            tree::signal_descendants(me, Signal::SIGTERM);
            let grace = tokio::time::sleep(Duration::from_millis(args.grace_ms));
            tokio::select! {
                s = child.wait() => s.ok(),
                _ = grace => None,
                _ = &mut closed => None,
            }
        }
    };
    if !tree::kill_descendants(me, KILL_WITHIN) {
        eprintln!("runtime-server shim: processes of the tree survived {KILL_WITHIN:?}");
    }
    status.map_or(128 + Signal::SIGKILL as i32, |s| exit_code(&s))
}

/// Signals the shim passes on to its child (SIGTERM and a closed control
/// pipe end the whole tree instead): what a session's `:signal` sends a
/// process, and a terminal's hangup. Caught, not ignored, so the child
/// starts with their default dispositions.
pub const FORWARDED: [Signal; 8] = [
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
    Signal::SIGTSTP,
];

/// Handlers of [`FORWARDED`], installed now.
fn catch_forwarded() -> Vec<(Signal, tokio::signal::unix::Signal)> {
    FORWARDED
        .into_iter()
        .filter_map(|sig| match signal(SignalKind::from_raw(sig as i32)) {
            Ok(stream) => Some((sig, stream)),
            Err(e) => {
                eprintln!("runtime-server shim: cannot catch {sig}: {e}");
                None
            }
        })
        .collect()
}

/// Passes each signal of `caught` the shim receives on to `child` (with
/// none, swallows them); the tasks, to stop once the child is gone.
fn forward(
    caught: Vec<(Signal, tokio::signal::unix::Signal)>,
    child: Option<nix::unistd::Pid>,
) -> Vec<tokio::task::JoinHandle<()>> {
    caught
        .into_iter()
        .map(|(sig, mut stream)| {
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    if let Some(child) = child {
                        // ESRCH: the child is gone; its wait ends the shim.
                        let _ = nix::sys::signal::kill(child, sig);
                    }
                }
            })
        })
        .collect()
}

/// Runs the shim; returns its exit code.
pub fn run(args: ShimArgs) -> i32 {
    let control = match take_descriptors(args.control_fd, args.pass_fd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("runtime-server shim: control pipe: {e}");
            return 1;
        }
    };
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("runtime-server shim: PR_SET_CHILD_SUBREAPER: {e}");
        return 1;
    }
    // The server's death closes the control pipe anyway; the signal is a
    // second, independent path. (It follows the *thread* that started the
    // shim: the server starts shims from its runtime's worker threads,
    // which live as long as the server.)
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime-server shim: runtime: {e}");
            return 1;
        }
    };
    rt.block_on(supervise(args, control))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_code(&ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(&ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(&ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code(&ExitStatus::from_raw(15)), 143);
    }
}
