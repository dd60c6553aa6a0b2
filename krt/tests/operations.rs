//! Operating the stack: probes and metrics, the plain HTTP listener, idle
//! timeout, and clean shutdown.

use std::time::Duration;

use kruntimes_testkit::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_metrics_report_the_gateway_state() {
    let stack = start(1, vec![python_run("probed")], &[]);
    stack.wait_phase("probed", "Ready").await.unwrap();
    let get = |path: &str| stack.http.get(format!("{}{path}", stack.gateway)).send();
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    assert_eq!(stack.invoke("probed", "{}").await.unwrap().status(), 200);
    assert_eq!(stack.invoke("probed", "{}").await.unwrap().status(), 200);
    // Metrics are on their own listener; the public one does not serve them.
    expect_error(get("/metrics").await.unwrap(), 400, "InvalidPath").await;
    let text = stack.metrics().await.unwrap();
    for needle in [
        "kruntimes_gateway_requests_total{code=\"200\",route=\"invoke\"} 2",
        "kruntimes_gateway_request_duration_seconds_bucket{route=\"invoke\"",
        "kruntimes_gateway_in_flight_requests 0",
        "kruntimes_gateway_ownership_table_entries{source=\"control-plane\"} 1",
        // One token throughout: one miss in each layer, hits after it.
        "kruntimes_gateway_auth_cache_total{layer=\"authn\",result=\"miss\"} 1\n",
        "kruntimes_gateway_auth_cache_total{layer=\"authz\",result=\"miss\"} 1\n",
        "kruntimes_gateway_auth_decisions_total{outcome=\"denied\"} 0\n",
        // The metrics listener is bounded and counted like the public ones;
        // this scrape is one of its open connections.
        "kruntimes_gateway_open_connections{listener=\"metrics\"} 1\n",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
    let value = |series: &str| {
        series_value(&text, series).unwrap_or_else(|| panic!("no {series}:\n{text}"))
    };
    let allowed = value("kruntimes_gateway_auth_decisions_total{outcome=\"allowed\"}");
    assert!(allowed >= 2.0, "{text}");
    for layer in ["authn", "authz"] {
        let hits = value(&format!(
            "kruntimes_gateway_auth_cache_total{{layer=\"{layer}\",result=\"hit\"}}"
        ));
        assert_eq!(
            hits,
            allowed - 1.0,
            "every allowed call but the first hit {layer}"
        );
    }
    assert!(!text.contains(&stack.token), "no token in metrics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_listener_serves_the_same_api_when_enabled() {
    let port = kruntimes_testkit::free_port();
    let addr = format!("127.0.0.1:{port}");
    let stack = start(1, vec![bash_run("plain")], &["--gateway-http-addr", &addr]);
    let run = stack.wait_phase("plain", "Ready").await.unwrap();
    let url = format!(
        "http://{addr}/v1/namespaces/default/runtimes/bash/runs/{}:invoke",
        run["uid"].as_str().unwrap()
    );
    let client = reqwest::Client::new();
    let ok = client
        .post(&url)
        .bearer_auth(&stack.token)
        .body(r#"{"name": "plain"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(json(ok).await["message"], "hello plain");
    let denied = client.post(&url).body("{}").send().await.unwrap();
    expect_error(denied, 401, "Unauthenticated").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_runs_time_out_and_release_their_capacity() {
    let stack = start(
        1,
        vec![python_run_with("idle", "      idleTimeoutSeconds: 1\n")],
        &["--capacity", "1"],
    );
    stack.wait_phase("idle", "Ready").await.unwrap();
    let (file, yaml) = python_run("waiting");
    stack.add_run(&file, &yaml).unwrap();
    let waiting = stack
        .wait_run("waiting", Duration::from_secs(30), |r| {
            r["reason"].as_str().is_some_and(|x| !x.is_empty())
        })
        .await
        .unwrap();
    assert_eq!(
        waiting["phase"], "Pending",
        "capacity 1 is taken by the first Run"
    );
    let ended = stack
        .wait_run("idle", Duration::from_secs(30), |r| r["phase"] == "Timeout")
        .await
        .unwrap();
    assert_eq!(ended["reason"], "IdleTimeout");
    let r = stack.invoke("idle", "{}").await.unwrap();
    let body = expect_error(r, 410, "RunEnded").await;
    assert_eq!(
        (&body["error"]["phase"], &body["error"]["reason"]),
        (&"Timeout".into(), &"IdleTimeout".into()),
        "{body}"
    );
    // The freed capacity goes to the waiting Run.
    stack.wait_phase("waiting", "Ready").await.unwrap();
    // Ready in runs.json is the control plane's view; the gateway routes once
    // the owner's readiness reached it too (milliseconds later).
    stack
        .invoke_until_ok("waiting", "{}", Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_every_process_of_the_stack() {
    let stack = start(2, vec![python_run("bye")], &[]);
    stack.wait_phase("bye", "Ready").await.unwrap();
    let mut pids: Vec<u64> = stack
        .processes()
        .unwrap()
        .values()
        .filter_map(|v| v["pid"].as_u64())
        .collect();
    assert_eq!(
        pids.len(),
        5,
        "two runtimed, a runtime server for each, and a gateway"
    );
    // The Python workers and spares under the runtime servers, too.
    let user: Vec<u64> = pids
        .iter()
        .flat_map(|p| kruntimes_testkit::descendants(*p as i32))
        .map(|p| p as u64)
        .collect();
    assert!(!user.is_empty(), "the runtime servers run the interpreters");
    pids.extend(user);
    drop(stack); // SIGTERM to krt up, then waits for it to exit.
    for pid in pids {
        let mut gone = false;
        for _ in 0..100 {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone, "process {pid} outlived krt up");
    }
}

/// A `krt up` killed outright (SIGKILL: no chance to stop anything) leaves
/// no process of its stack behind: each child watches it and exits with it,
/// without waking up to check until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_krt_up_leaves_no_process_behind() {
    let mut stack = start(2, vec![python_run("orphaned")], &[]);
    stack.wait_phase("orphaned", "Ready").await.unwrap();
    let children: Vec<i32> = stack
        .processes()
        .unwrap()
        .values()
        .filter_map(|v| v["pid"].as_i64())
        .map(|p| p as i32)
        .collect();
    assert_eq!(
        children.len(),
        5,
        "two runtimed, two runtime servers, a gateway"
    );

    // Each child's watch blocks until its parent exits: at rest it is never
    // scheduled (a check every 250 ms used to wake it four times a second).
    // Nor are the certificate watches, which wait for a change to their
    // files (they used to read them every 2 s in the gateway, 10 s in
    // runtimed).
    let mut watches: Vec<(i32, String)> = Vec::new();
    for &pid in &children {
        let parent = threads_named(pid, "parent-watch");
        assert_eq!(parent.len(), 1, "process {pid} has no parent-watch thread");
        watches.extend(parent.into_iter().map(|t| (pid, t)));
        watches.extend(
            threads_named(pid, "cert-watch")
                .into_iter()
                .map(|t| (pid, t)),
        );
    }
    assert_eq!(
        watches.len(),
        5 + 4,
        "a parent watch per process; certificate watches: the gateway's serving and client \
         certificates, each runtimed's serving certificate"
    );
    // The control plane's watch of the runs directory wakes for the events
    // of its own backstop scan (every 2 s: opening the directory and the
    // Run's file), and for nothing else at rest. It used to take those
    // events for changes and rescan, ~160 wake-ups a second.
    let up = stack.up_pid() as i32;
    let runs_watch = threads_named(up, "notify-rs inoti");
    assert_eq!(runs_watch.len(), 1, "krt up has no runs-directory watch");
    let switches = |task: &str| kruntimes_testkit::wake_ups(std::path::Path::new(task));
    let before: Vec<u64> = watches.iter().map(|(_, t)| switches(t)).collect();
    let runs_before = switches(&runs_watch[0]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    for ((pid, task), before) in watches.iter().zip(before) {
        assert_eq!(
            switches(task),
            before,
            "process {pid}'s {task} woke up at rest"
        );
    }
    let runs_woke = switches(&runs_watch[0]) - runs_before;
    assert!(
        runs_woke <= 2 * 8,
        "the runs-directory watch woke {runs_woke} times in 3 s at rest: at most two scans' \
         events (the directory and one file opened and closed) are expected"
    );

    let mut pids = children.clone();
    pids.extend(
        children
            .iter()
            .flat_map(|&p| kruntimes_testkit::descendants(p)),
    );
    stack.kill_up().unwrap();
    let left = kruntimes_testkit::wait_gone(&pids, Duration::from_secs(30)).await;
    assert_eq!(
        left,
        Vec::<i32>::new(),
        "processes outlived a killed krt up"
    );
}

/// The `/proc` task directories of `pid`'s threads called `name`.
fn threads_named(pid: i32, name: &str) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .map(|t| t.path().display().to_string())
        .filter(|t| std::fs::read_to_string(format!("{t}/comm")).is_ok_and(|c| c.trim() == name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_gateway_certificates_are_served_without_dropping_connections() {
    let stack = start(1, vec![python_run("tls")], &[]);
    stack.wait_phase("tls", "Ready").await.unwrap();
    // The stack's client keeps its pooled connection through the rotation.
    assert_eq!(stack.invoke("tls", "{}").await.unwrap().status(), 200);

    let ca = kruntimes_certs::Ca::generate("rotated CA", 1).unwrap();
    let leaf = ca
        .issue(&kruntimes_certs::LeafSpec {
            common_name: "kruntimes-gateway".into(),
            dns_names: vec!["localhost".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
            server: true,
            valid_days: 1,
            ..Default::default()
        })
        .unwrap();
    let pki = stack.state_dir().join("pki");
    for (name, pem) in [
        ("gateway.key", &leaf.key_pem),
        ("gateway.crt", &leaf.cert_pem),
    ] {
        let tmp = pki.join(format!("{name}.new"));
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, pki.join(name)).unwrap();
    }
    let rotated = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = stack.endpoint("tls").unwrap();
    let mut served = false;
    for _ in 0..100 {
        if let Ok(r) = rotated
            .post(&url)
            .bearer_auth(&stack.token)
            .body("{}")
            .send()
            .await
        {
            assert_eq!(r.status(), 200);
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "new handshakes get the rotated certificate");
    assert_eq!(
        stack.invoke("tls", "{}").await.unwrap().status(),
        200,
        "the connection established before the rotation still works"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stack_per_state_directory_and_no_stale_state_after_it_stops() {
    let mut stack = start(1, vec![python_run("only")], &[]);
    stack.wait_phase("only", "Ready").await.unwrap();
    let client_json = std::fs::read(stack.state_dir().join("client.json")).unwrap();
    let certs = std::fs::read(stack.state_dir().join("pki").join("public-ca.crt")).unwrap();

    // A second krt up on the same state directory is refused before it
    // writes anything, naming the running one.
    let port = kruntimes_testkit::free_port();
    let mut second = std::process::Command::new(kruntimes_testkit::krt_binary())
        .arg("--state-dir")
        .arg(stack.state_dir())
        .args(["up", "--exit-with-parent", "--gateway-addr"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = second.kill();
            panic!("a second krt up on the same state directory is still running");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {}", stack.up_pid())) && stderr.contains(&stack.gateway),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(stack.state_dir().join("client.json")).unwrap(),
        client_json
    );
    assert_eq!(
        std::fs::read(stack.state_dir().join("pki").join("public-ca.crt")).unwrap(),
        certs
    );
    // The first stack is untouched.
    assert_eq!(stack.invoke("only", "{}").await.unwrap().status(), 200);
    let runs = stack.krt(&["runs"]).unwrap();
    assert!(runs.status.success());

    // Once it is gone, its state files are not read as a running stack.
    stack.kill_up().unwrap();
    for verb in [
        &["runs"][..],
        &["invoke", "only", "--data", "{}"],
        &["get", "run", "only"],
    ] {
        let out = stack.krt(verb).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{verb:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "no krt up running for {}",
                stack.state_dir().display()
            )),
            "{verb:?}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_means_the_first_runs_answer_and_names_those_that_cannot() {
    let sandbox = "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: sandbox\nspec:\n  runtime: bash\n  mode:\n    session: {}\n";
    let stack = kruntimes_testkit::Stack::start(
        kruntimes_testkit::krt_binary(),
        kruntimes_testkit::Options {
            env: Vec::new(),
            runtimed: 2,
            max_runtimed: Some(4),
            runs: vec![
                python_run("py"),
                bash_run("sh"),
                ("sandbox.yaml".into(), sandbox.into()),
                broken_python_run("broken"),
                ("garbled.yaml".into(), "kind: Run\nmetadata: [".into()),
            ],
            extra_args: Vec::new(),
        },
    )
    .unwrap();
    // No waiting, no retry: once krt up says ready, its Runs answer.
    for (name, body) in [("py", r#"{"name": "now"}"#), ("sh", r#"{"name": "now"}"#)] {
        let r = stack.invoke(name, body).await.unwrap();
        assert_eq!(r.status(), 200, "{name} right after the ready line");
    }
    let out = stack.all_logs();
    let line = out
        .lines()
        .find(|l| l.starts_with("kruntimes ready"))
        .unwrap()
        .to_owned();
    assert!(
        line.contains("3 Runs Ready (py, sandbox, sh)"),
        "the ready Runs are named: {line}"
    );
    assert!(
        line.contains("1 Run ended (broken: Failed (RegistrationFailed:"),
        "a Run that cannot work says why: {line}"
    );
    assert!(
        line.contains("1 file skipped (") && line.contains("garbled.yaml: did not find"),
        "a manifest that cannot be read is named: {line}"
    );
}
