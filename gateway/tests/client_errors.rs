//! Error replies every client reads: each error row below is sent by
//! `curl` over HTTP/1.1 and over HTTP/2, Python's `http.client`, httpx and
//! Go's `net/http` (`gateway/tests/clients/`), and each must read the status
//! and the typed JSON body — the 413 of a 2 MiB body still arriving
//! included, which the gateway answers and then drains (bounded) so the
//! client can finish sending and read it.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kruntimes_testkit::prelude::*;
use serde_json::Value;

const UNKNOWN_UID: &str = "00000000-0000-4000-8000-000000000000";

#[derive(Debug, Clone, Copy)]
enum Client {
    CurlHttp1,
    CurlHttp2,
    PyHttpLib,
    PyHttpx,
    Go,
}

const CLIENTS: [Client; 5] = [
    Client::CurlHttp1,
    Client::CurlHttp2,
    Client::PyHttpLib,
    Client::PyHttpx,
    Client::Go,
];

fn clients_dir() -> PathBuf {
    kruntimes_testkit::package_dir().join("tests/clients")
}

/// The Python that has httpx: the SDK's (`KRT_SDK_PYTHON`), else python3.
fn python() -> String {
    std::env::var("KRT_SDK_PYTHON").unwrap_or_else(|_| "python3".into())
}

struct Request<'a> {
    method: &'a str,
    url: String,
    body: Option<PathBuf>,
    headers: Vec<(String, String)>,
    token: Option<&'a str>,
}

/// Sends `r` with `client`; returns the status and the body.
fn send(client: Client, go: &Path, ca: &Path, r: &Request<'_>) -> (u16, String) {
    let body = r
        .body
        .as_ref()
        .map_or("-".to_owned(), |p| p.display().to_string());
    let mut cmd = match client {
        Client::CurlHttp1 | Client::CurlHttp2 => {
            let mut c = Command::new("curl");
            c.args(["-sS", "--max-time", "60", "--cacert"])
                .arg(ca)
                .args(["-X", r.method, "-w", "\n%{http_code}"])
                .arg(if matches!(client, Client::CurlHttp1) {
                    "--http1.1"
                } else {
                    "--http2"
                });
            if r.body.is_some() {
                c.arg("--data-binary").arg(format!("@{body}"));
            }
            for (k, v) in &r.headers {
                c.arg("-H").arg(format!("{k}: {v}"));
            }
            if let Some(t) = r.token {
                c.arg("-H").arg(format!("Authorization: Bearer {t}"));
            }
            c.arg(&r.url);
            c
        }
        Client::PyHttpLib | Client::PyHttpx => {
            let mut c = Command::new(python());
            c.arg(clients_dir().join("http_client.py"))
                .arg(if matches!(client, Client::PyHttpLib) {
                    "http.client"
                } else {
                    "httpx"
                })
                .args([r.method, &r.url])
                .arg(ca)
                .arg(&body);
            c
        }
        Client::Go => {
            let mut c = Command::new(go);
            c.args([r.method, &r.url]).arg(ca).arg(&body);
            c
        }
    };
    if !matches!(client, Client::CurlHttp1 | Client::CurlHttp2) {
        cmd.args(r.headers.iter().map(|(k, v)| format!("{k}={v}")));
        if let Some(t) = r.token {
            cmd.env("KRT_TOKEN", t);
        }
    }
    let out = cmd.output().expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{client:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    match client {
        Client::CurlHttp1 | Client::CurlHttp2 => {
            let (body, status) = stdout.rsplit_once('\n').unwrap();
            (status.trim().parse().unwrap(), body.to_owned())
        }
        _ => {
            let (status, body) = stdout.split_once('\n').unwrap();
            (status.trim().parse().unwrap(), body.to_owned())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_reads_every_error_reply() {
    let stack = start(
        2,
        vec![
            python_run("echo"),
            broken_python_run("broken"),
            python_run_with("idle", "      idleTimeoutSeconds: 1\n"),
        ],
        &[],
    );
    let echo = stack.wait_phase("echo", "Ready").await.unwrap();
    stack.wait_phase("broken", "Failed").await.unwrap();
    stack
        .wait_run("idle", Duration::from_secs(60), |r| r["phase"] == "Timeout")
        .await
        .unwrap();
    let uid = echo["uid"].as_str().unwrap().to_owned();
    let url = stack.endpoint("echo").unwrap();
    let ca = stack.state_dir().join("pki/public-ca.crt");
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go_client");
    let built = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&go)
        .arg(clients_dir().join("go_client.go"))
        .status()
        .expect("go build (install Go)");
    assert!(built.success(), "go build failed");
    let file = |name: &str, content: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        p
    };
    let big = file(
        "big.json",
        format!("{{\"pad\": \"{}\"}}", "x".repeat(2 * 1024 * 1024)).as_bytes(),
    );
    let bad_json = file("bad.json", b"{");
    let raises = file("raise.json", br#"{"raise": "input"}"#);
    let empty = file("empty.json", b"{}");
    let token = stack.token.as_str();
    let rows: Vec<(Request<'_>, u16, &str)> = vec![
        (
            Request {
                method: "POST",
                url: url.replace("/default/", "/Default/"),
                body: Some(empty.clone()),
                headers: vec![],
                token: Some(token),
            },
            400,
            "InvalidPath",
        ),
        (
            Request {
                method: "POST",
                url: url.clone(),
                body: Some(bad_json),
                headers: vec![],
                token: Some(token),
            },
            400,
            "InvalidJson",
        ),
        (
            Request {
                method: "POST",
                url: url.clone(),
                body: Some(empty.clone()),
                headers: vec![],
                token: None,
            },
            401,
            "Unauthenticated",
        ),
        (
            Request {
                method: "POST",
                url: url.replace(&uid, UNKNOWN_UID),
                body: Some(empty.clone()),
                headers: vec![],
                token: Some(token),
            },
            404,
            "NotFound",
        ),
        (
            Request {
                method: "GET",
                url: url.clone(),
                body: None,
                headers: vec![],
                token: Some(token),
            },
            405,
            "MethodNotAllowed",
        ),
        (
            Request {
                method: "POST",
                url: url.clone(),
                body: Some(big),
                headers: vec![],
                token: Some(token),
            },
            413,
            "PayloadTooLarge",
        ),
        (
            Request {
                method: "POST",
                url: url.clone(),
                body: Some(empty.clone()),
                headers: vec![("X-Padding".into(), "p".repeat(20 * 1024))],
                token: Some(token),
            },
            431,
            "HeadersTooLarge",
        ),
        (
            Request {
                method: "POST",
                url: stack.endpoint("broken").unwrap(),
                body: Some(empty.clone()),
                headers: vec![],
                token: Some(token),
            },
            409,
            "RunFailed",
        ),
        (
            Request {
                method: "POST",
                url: stack.endpoint("idle").unwrap(),
                body: Some(empty.clone()),
                headers: vec![],
                token: Some(token),
            },
            410,
            "RunEnded",
        ),
        (
            Request {
                method: "POST",
                url: url.clone(),
                body: Some(raises),
                headers: vec![],
                token: Some(token),
            },
            500,
            "FunctionError",
        ),
    ];
    let mut failures = Vec::new();
    for (req, status, code) in &rows {
        for client in CLIENTS {
            let (got, body) = send(client, &go, &ca, req);
            let typed: Option<Value> = serde_json::from_str(&body).ok();
            let got_code = typed
                .as_ref()
                .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
            if got != *status || got_code.as_deref() != Some(code) {
                failures.push(format!(
                    "{client:?} {} {status} {code}: got {got} {body:.200}",
                    req.method
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The gateway serves on after all of it.
    assert_eq!(stack.invoke("echo", "{}").await.unwrap().status(), 200);
}
