//! runtimed's TLS port under abuse, end to end: a flood of idle,
//! unauthenticated connections past its open-file limit never ends it (the
//! same process keeps serving Runs through the gateway), a peer that never
//! finishes its TLS handshake or its request headers is cut off, and
//! connections past `--max-connections` are closed at once. Deadlines are
//! asserted as "eventually", never as a measured time. And the gateway after
//! SIGTERM: new connections served through its shutdown grace, then it stops.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use kruntimes_testkit::Stack;
use kruntimes_testkit::prelude::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

fn runtimed(stack: &Stack, name: &str) -> (u32, String) {
    let p = stack.processes().unwrap();
    (
        p[name]["pid"].as_u64().unwrap() as u32,
        p[name]["address"].as_str().unwrap().to_owned(),
    )
}

/// A stack started with `flags` and one Python Run, `fn`, Ready.
async fn ready_fn(flags: &[&str]) -> Stack {
    let stack = start(1, vec![python_run("fn")], flags);
    stack.wait_phase("fn", "Ready").await.unwrap();
    stack
}

/// A stack whose gateway closes a connection idle for 1 s, and one whose
/// next request has not come 2 s after the previous one ended.
async fn short_idle() -> Stack {
    ready_fn(&[
        "--gateway-flag=--idle-timeout-secs=1",
        "--gateway-flag=--header-timeout-ms=1000",
    ])
    .await
}

/// Reads until the peer closes (0 bytes) or errors; returns what it read.
async fn until_closed(s: &mut (impl tokio::io::AsyncRead + Unpin)) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

async fn invoke_ok(stack: &Stack, name: &str) {
    let r = stack.invoke(name, r#"{"name": "flood"}"#).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await["message"], "hello flood");
}

/// Lowers `name`'s open-file limit to 512, holds 700 idle connections (no
/// TLS) to `address` until the process has run out of descriptors and
/// backed off, and checks each is closed and the same process still runs.
async fn flood_past_the_file_limit(stack: &Stack, name: &str, pid: u32, address: &str) {
    let limit = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--nofile=512:512"])
        .status()
        .unwrap();
    assert!(limit.success(), "prlimit failed");
    let mut flood = Vec::new();
    for _ in 0..700 {
        flood.push(TcpStream::connect(address).await.unwrap());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !stack.log_of(name).contains("accept failed; backing off") {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} never ran out of descriptors:\n{}",
            stack.log_of(name)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Each is cut off at the handshake deadline (or was refused while the
    // process was out of descriptors) — and the process goes on.
    for s in &mut flood {
        until_closed(s).await;
    }
    drop(flood);
    let now = stack.processes().unwrap()[name]["pid"].as_u64().unwrap() as u32;
    assert_eq!(now, pid, "{name} was restarted");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "{name} exited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_past_the_file_limit_never_end_runtimed() {
    let stack = ready_fn(&["--runtimed-flag=--handshake-timeout-ms=5000"]).await;
    invoke_ok(&stack, "fn").await;
    let (pid, address) = runtimed(&stack, "runtimed-0");
    flood_past_the_file_limit(&stack, "runtimed-0", pid, &address).await;
    invoke_ok(&stack, "fn").await;
    // A fresh connection of the gateway's is served too: a second Run
    // placed on the same runtimed registers and answers.
    stack.add_run("fn2.yaml", &python_run("fn2").1).unwrap();
    stack.wait_phase("fn2", "Ready").await.unwrap();
    invoke_ok(&stack, "fn2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_handshakes_and_headers_are_cut_off_and_the_bound_holds() {
    let metrics_port = kruntimes_testkit::free_port();
    let metrics_flag = format!("--runtimed-flag=--metrics-listen=127.0.0.1:{metrics_port}");
    let stack = ready_fn(&[
        "--runtimed-flag=--handshake-timeout-ms=300",
        "--runtimed-flag=--header-timeout-ms=300",
        "--runtimed-flag=--max-connections=8",
        &metrics_flag,
    ])
    .await;
    let (pid, address) = runtimed(&stack, "runtimed-0");

    // A partial TLS ClientHello, never finished: closed.
    let mut partial = TcpStream::connect(&address).await.unwrap();
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
        .await
        .unwrap();
    until_closed(&mut partial).await;

    // A client with the gateway's certificate that never finishes its
    // request headers: closed, with no answer.
    let pki = stack.state_dir().join("pki");
    let tls = kruntimes_certs::client_config(
        &pki.join("internal-ca.crt"),
        Some((
            &pki.join("gateway-client.crt"),
            &pki.join("gateway-client.key"),
        )),
        &[b"http/1.1"],
    )
    .unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let tcp = TcpStream::connect(&address).await.unwrap();
    let name =
        rustls::pki_types::ServerName::try_from(kruntimes_certs::install::RUNTIMED_SERVER_NAME)
            .unwrap();
    let mut slow = connector.connect(name, tcp).await.unwrap();
    slow.write_all(b"GET /v1/healthz HTTP/1.1\r\nHost: runtimed\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut slow).await;
    assert!(
        answer.is_empty() || String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    // Past the bound (8, of which the gateway holds some): the surplus is
    // closed at once, then every one is cut off at the handshake deadline.
    let mut many = Vec::new();
    for _ in 0..20 {
        many.push(TcpStream::connect(&address).await.unwrap());
    }
    for s in &mut many {
        until_closed(s).await;
    }
    drop(many);
    assert_eq!(runtimed(&stack, "runtimed-0").0, pid);
    // The gateway's pooled connection was never displaced.
    let r = stack.invoke("fn", "{}").await.unwrap();
    assert_eq!(r.status(), 200);

    // runtimed's metrics count what its port refused, and the invocation.
    let text = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |needle: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    assert!(
        count("kruntimes_runtimed_connections_total{event=\"refused_at_bound\"}") > 0,
        "{text}"
    );
    assert!(
        count("kruntimes_runtimed_connections_total{event=\"handshake_timeout\"}") > 0,
        "{text}"
    );
    assert!(
        count("kruntimes_runtimed_invocations_total{outcome=\"ok\"}") >= 1,
        "{text}"
    );
    assert!(
        count("kruntimes_runtimed_registrations_total{result=\"ok\"}") >= 1,
        "{text}"
    );
}

/// One whole `/healthz` answer (its body is `ok\n`), however it is split.
async fn healthz_answer(s: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.ends_with(b"\r\n\r\nok\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The gateway's pid and `host:port` of its HTTPS listener.
fn gateway(stack: &Stack) -> (u32, String) {
    let p = stack.processes().unwrap();
    (
        p["gateway"]["pid"].as_u64().unwrap() as u32,
        p["gateway"]["address"].as_str().unwrap().to_owned(),
    )
}

/// A TLS connection to the gateway's HTTPS listener, trusting the stack's
/// public CA and offering `alpn`.
async fn public_tls(stack: &Stack, alpn: &[&[u8]]) -> tokio_rustls::client::TlsStream<TcpStream> {
    let client: serde_json::Value =
        serde_json::from_slice(&std::fs::read(stack.state_dir().join("client.json")).unwrap())
            .unwrap();
    let tls = kruntimes_certs::client_config(
        std::path::Path::new(client["caFile"].as_str().unwrap()),
        None,
        alpn,
    )
    .unwrap();
    let (_, address) = gateway(stack);
    let tcp = TcpStream::connect(&address).await.unwrap();
    let host = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(host, tcp)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_past_the_file_limit_never_end_the_gateway() {
    let stack = ready_fn(&["--gateway-flag=--handshake-timeout-ms=3000"]).await;
    invoke_ok(&stack, "fn").await;
    let (pid, address) = gateway(&stack);
    flood_past_the_file_limit(&stack, "gateway", pid, &address).await;
    invoke_ok(&stack, "fn").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_cuts_off_slow_handshakes_and_silent_connections_and_bounds_them() {
    let stack = ready_fn(&[
        "--gateway-flag=--handshake-timeout-ms=1000",
        "--gateway-flag=--header-timeout-ms=1000",
        "--gateway-flag=--max-connections=8",
    ])
    .await;
    let (pid, address) = gateway(&stack);

    // A partial ClientHello, never finished: closed.
    let mut partial = TcpStream::connect(&address).await.unwrap();
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
        .await
        .unwrap();
    until_closed(&mut partial).await;

    // HTTP/1.1 after the handshake: headers begun, never finished — closed
    // without a response.
    let mut slow = public_tls(&stack, &[b"http/1.1"]).await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut slow).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));

    // HTTP/2 negotiated, then silence (not even the preface): closed.
    let mut silent = public_tls(&stack, &[b"h2"]).await;
    assert_eq!(silent.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    until_closed(&mut silent).await;

    // A connection that speaks in time is served past the deadline: its
    // keep-alive request after a pause is answered too.
    let mut polite = public_tls(&stack, &[b"http/1.1"]).await;
    polite
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answer = healthz_answer(&mut polite).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    polite
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answer = healthz_answer(&mut polite).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(polite);

    // Past the bound of 8: the surplus is closed at once, the rest at the
    // handshake deadline.
    let mut many = Vec::new();
    for _ in 0..20 {
        many.push(TcpStream::connect(&address).await.unwrap());
    }
    for s in &mut many {
        until_closed(s).await;
    }
    drop(many);
    assert_eq!(gateway(&stack).0, pid);
    let r = stack.invoke("fn", "{}").await.unwrap();
    assert_eq!(r.status(), 200);

    let text = stack.metrics().await.unwrap();
    let count = |event: &str| -> u64 {
        let needle =
            format!("kruntimes_gateway_connections_total{{event=\"{event}\",listener=\"https\"}}");
        text.lines()
            .find(|l| l.starts_with(&needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    assert!(count("refused_at_bound") > 0, "{text}");
    assert!(count("handshake_timeout") > 0, "{text}");
    assert!(count("header_timeout") >= 2, "{text}");
    assert!(count("accepted") > 0, "{text}");
}

/// HTTP/1.1 keep-alive: a next request whose header trickles in a byte at a
/// time (each read inside the idle timeout, each inside Pingora's read
/// timeout) is cut off at the next-request deadline, idle timeout plus
/// header deadline after the previous answer, not served whenever it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_keep_alive_header_is_cut_off_at_the_next_request_deadline() {
    let stack = short_idle().await;
    let mut s = public_tls(&stack, &[b"http/1.1"]).await;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answer = healthz_answer(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // ~20 s of header at 300 ms a byte; the deadline is 2 s away.
    let next = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut sent = 0;
    let mut buf = [0u8; 512];
    for b in next {
        if s.write_all(std::slice::from_ref(b)).await.is_err() {
            break;
        }
        sent += 1;
        match tokio::time::timeout(std::time::Duration::from_millis(300), s.read(&mut buf)).await {
            // Still open, nothing to read: the next byte.
            Err(_) => {}
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => panic!(
                "answered a trickled header: {}",
                String::from_utf8_lossy(&buf[..n])
            ),
        }
    }
    assert!(
        sent < next.len(),
        "the whole header went through ({sent} bytes)"
    );
    let text = stack.metrics().await.unwrap();
    assert!(
        text.lines().any(|l| l.starts_with(
            "kruntimes_gateway_connections_total{event=\"header_timeout\",listener=\"https\"}"
        )),
        "{text}"
    );
}

/// A client that opens a new HTTP/1.1 connection for every request.
fn fresh_connections(stack: &Stack) -> reqwest::Client {
    let client: serde_json::Value =
        serde_json::from_slice(&std::fs::read(stack.state_dir().join("client.json")).unwrap())
            .unwrap();
    let ca = std::fs::read(client["caFile"].as_str().unwrap()).unwrap();
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .pool_max_idle_per_host(0)
        .http1_only()
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigterm_the_gateway_serves_new_connections_through_its_grace_then_stops() {
    let stack = ready_fn(&["--gateway-flag=--shutdown-grace-secs=4"]).await;
    invoke_ok(&stack, "fn").await;
    let (pid, _) = gateway(&stack);
    let client = fresh_connections(&stack);
    let url = stack.endpoint("fn").unwrap();
    let call = || {
        client
            .post(&url)
            .bearer_auth(&stack.token)
            .body(r#"{"name": "grace"}"#)
            .send()
    };
    assert_eq!(call().await.unwrap().status(), 200);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // Within the grace a new connection is accepted and served, and told to
    // close after its one request (keep-alive clients move elsewhere).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let r = call().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get("connection").map(|v| v.to_str().unwrap()),
        Some("close"),
        "{:?}",
        r.headers()
    );
    let id = r.headers()["x-kruntimes-invocation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(json(r).await["message"], "hello grace");
    assert!(
        !kruntimes_testkit::process_gone(pid as i32),
        "exited inside its grace"
    );
    // Then the process stops on its own (grace, then 2 s for requests in flight).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !kruntimes_testkit::process_gone(pid as i32) {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway never stopped"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Its log ends with what it logged last: nothing waiting in the log
    // buffer is lost at exit (the line after the drain is written ~0 ms
    // before the process ends, far inside the writer's 1 s batches).
    let log = stack.log_of("gateway");
    let served = log
        .lines()
        .position(|l| l.contains(&id))
        .unwrap_or_else(|| panic!("no access-log line for {id}:\n{log}"));
    let stopped = log
        .lines()
        .position(|l| l.contains("gateway stopped"))
        .unwrap_or_else(|| panic!("no last line:\n{log}"));
    assert!(served < stopped, "{log}");
}

/// The gateway's connections in `listener`, from its metrics.
async fn open_connections(stack: &Stack, listener: &str) -> f64 {
    let text = stack.metrics().await.unwrap();
    let series = format!("kruntimes_gateway_open_connections{{listener=\"{listener}\"}}");
    series_value(&text, &series).unwrap_or_else(|| panic!("no {series}:\n{text}"))
}

/// The idle timeout (`--idle-timeout-secs`) is the gateway's own, on
/// tokio's timer: an HTTP/2 connection with nothing in flight is closed, one
/// whose request outlasts the timeout is not cut, and Pingora's clock thread
/// (10 ms ticks for the life of the process) never starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_and_pingoras_clock_thread_never_starts() {
    let stack = ready_fn(&["--gateway-flag=--idle-timeout-secs=1"]).await;
    let (pid, _) = gateway(&stack);
    // A request in flight for 2.5 idle timeouts, over HTTP/2.
    let r = stack.invoke("fn", r#"{"sleep": 2.5}"#).await.unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    // Then idle: every public connection is closed, the pooled one too.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while open_connections(&stack, "https").await > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "an idle connection stayed open"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The client reconnects as clients do (once it has seen the close).
    let again = stack
        .invoke_until_ok("fn", "{}", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .collect();
    assert!(
        !threads.iter().any(|t| t == "Timer thread"),
        "Pingora's clock thread runs in the gateway: {threads:?}"
    );
}

/// An HTTP/2 client that PINGs an idle connection (as hyper's and gRPC's
/// keep-alives do) cannot hold it for ever: with no stream since its last
/// request ended for the idle timeout plus the header deadline, it is
/// closed, the PINGs notwithstanding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_do_not_keep_an_idle_http2_connection_open() {
    use http_body_util::Empty;
    use hyper::body::Bytes;
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

    let stack = short_idle().await;
    let tls = public_tls(&stack, &[b"h2"]).await;
    // A PING every 200 ms, idle or not: always inside the idle timeout.
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(std::time::Duration::from_millis(200))
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(tls))
        .await
        .unwrap();
    let connection = tokio::spawn(conn);
    let request = hyper::Request::get("https://localhost/healthz")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let answer = send.send_request(request).await.unwrap();
    assert_eq!(answer.status(), 200);
    drop(answer);
    // Closed 2 s after that request ended; a generous bound on this machine.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), connection).await;
    assert!(
        ended.is_ok(),
        "an HTTP/2 connection PINGing with no stream stayed open for 30 s"
    );
    // Nothing else was cut: the gateway goes on serving.
    invoke_ok(&stack, "fn").await;
}
