//! The one TCP listener runtimed serves on: bound here, or handed over by
//! whoever started it (systemd's socket activation, as `krt up` does), so
//! the port it picked is never free between its pick and runtimed's start.

use std::net::SocketAddr;

use crate::error::{Error, Result};

/// The listener on `addr`: the one handed over, or a new one.
pub async fn listen(
    addr: SocketAddr,
    handed_over: Option<std::net::TcpListener>,
) -> Result<tokio::net::TcpListener> {
    let failed = |source| Error::Listen { addr, source };
    let Some(l) = handed_over else {
        return tokio::net::TcpListener::bind(addr).await.map_err(failed);
    };
    let bound = l.local_addr().map_err(failed)?;
    if !serves(addr, bound) {
        return Err(Error::HandedOver(format!(
            "the listener handed over (LISTEN_FDS) is bound to {bound}, not --listen {addr}"
        )));
    }
    l.set_nonblocking(true).map_err(failed)?;
    tokio::net::TcpListener::from_std(l).map_err(failed)
}

/// Whether a listener bound to `bound` is the one `--listen addr` asks for
/// (any port when it names port 0). Pure.
fn serves(addr: SocketAddr, bound: SocketAddr) -> bool {
    addr.ip() == bound.ip() && (addr.port() == 0 || addr.port() == bound.port())
}

/// The listener whoever started runtimed bound for it, if any, by systemd's
/// socket-activation protocol: `LISTEN_FDS=1` (and `LISTEN_PID`, when set,
/// naming this process), the listening TCP socket as descriptor 3.
///
/// Call it before any thread is started: it removes the protocol's
/// variables from the environment (so a child started later does not
/// take them for its own).
pub fn handed_over_listener() -> Result<Option<std::net::TcpListener>> {
    let mut fds = listenfd::ListenFd::from_env();
    match fds.len() {
        0 => return Ok(None),
        1 => {}
        n => {
            return Err(Error::HandedOver(format!(
                "runtimed takes one listener, but LISTEN_FDS={n}"
            )));
        }
    }
    let listener = fds
        .take_tcp_listener(0)
        .map_err(|e| {
            Error::HandedOver(format!(
                "the descriptor handed over (LISTEN_FDS) is not a TCP socket: {e}"
            ))
        })?
        .ok_or_else(|| Error::HandedOver("LISTEN_FDS names no descriptor".into()))?;
    let listening = nix::sys::socket::getsockopt(&listener, nix::sys::socket::sockopt::AcceptConn)
        .map_err(|e| Error::HandedOver(format!("the descriptor handed over (LISTEN_FDS): {e}")))?;
    if !listening {
        return Err(Error::HandedOver(
            "the socket handed over (LISTEN_FDS) is not listening".into(),
        ));
    }
    Ok(Some(listener))
}

#[cfg(test)]
mod tests {
    use super::serves;

    #[test]
    fn a_handed_over_listener_must_be_where_listen_says() {
        let at = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        assert!(serves(at("127.0.0.1:7443"), at("127.0.0.1:7443")));
        // Port 0: whatever port the listener has.
        assert!(serves(at("127.0.0.1:0"), at("127.0.0.1:40001")));
        assert!(!serves(at("127.0.0.1:7443"), at("127.0.0.1:7444")));
        // The address counts, whatever the port.
        assert!(!serves(at("127.0.0.1:0"), at("127.0.0.2:40001")));
        assert!(!serves(at("0.0.0.0:7443"), at("127.0.0.1:7443")));
        assert!(!serves(at("[::1]:7443"), at("127.0.0.1:7443")));
        assert!(serves(at("[::1]:0"), at("[::1]:7443")));
    }
}
