//! What `custom_runtime_server.rs` runs: the example server
//! (`examples/runtime-servers/python`) with real Python on a temporary
//! socket, and a real `runtimed` in front of it, driven as the control plane
//! drives it — `Agent/Assign` and `Release` over mTLS — and read through
//! its `OwnershipTable` watch, where the gateway and the Run's owner read it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kruntimes_certs::install::{InstallPki, RUNTIMED_SERVER_NAME};
use kruntimes_proto::agent::v1 as agent;
use kruntimes_proto::agent::v1::agent_client::AgentClient;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::ownership::v1::ownership_table_client::OwnershipTableClient;
use kruntimes_proto::runtime::Clients;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Generous bound on anything a test waits for (a loaded machine).
pub const WITHIN: Duration = Duration::from_secs(60);

/// A running example server, stopped on drop.
pub struct Server {
    child: Child,
    /// Its socket, work root, stubs and log.
    pub dir: tempfile::TempDir,
}

impl Server {
    /// The socket runtimed connects to.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("runtime.sock")
    }

    /// `KRUNTIMES_WORK_ROOT`.
    pub fn work_root(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    /// Stops the server as the kubelet does (SIGTERM), waiting for it to
    /// exit: it kills what still runs first.
    pub fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn example_dir() -> PathBuf {
    kruntimes_testkit::checkout().join("examples/runtime-servers/python")
}

/// Generates the stubs and starts the server with nothing but the
/// environment a Runtime Pod gives it (socket and work root), waiting until
/// the socket accepts connections.
pub async fn start() -> Server {
    let dir = tempfile::Builder::new()
        .prefix("custom-runtime-server-")
        .tempdir()
        .unwrap();
    let stubs = dir.path().join("stubs");
    let out = Command::new("bash")
        .arg(example_dir().join("generate.sh"))
        .arg(&stubs)
        .output()
        .expect("run generate.sh");
    assert!(
        out.status.success(),
        "generating the stubs failed (pip install -r examples/runtime-servers/python/requirements.txt):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let child = Command::new("python3")
        .arg(example_dir().join("server.py"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PYTHONPATH", &stubs)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("KRUNTIMES_RUNTIME_SOCKET", dir.path().join("runtime.sock"))
        .env("KRUNTIMES_WORK_ROOT", dir.path().join("workspace"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
        .spawn()
        .expect("start python3 server.py");
    let mut server = Server { child, dir };
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::UnixStream::connect(server.socket())
        .await
        .is_err()
    {
        if let Some(status) = server.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(server.dir.path().join("server.log"));
            panic!(
                "the example server exited ({status}):\n{}",
                log.unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "no socket within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server
}

/// Clients over the server's Unix socket, as runtimed connects.
pub fn client(server: &Server) -> Clients {
    Clients::connect_lazy(server.socket())
}

/// A `runtimed` whose Runtime Server is the example, killed on drop.
pub struct Runtimed {
    child: Child,
    dir: tempfile::TempDir,
    /// mTLS as the control plane.
    channel: Channel,
}

/// Starts `runtimed` against `server` with freshly generated certificates,
/// and connects to it as the control plane.
pub async fn runtimed(server: &Server) -> Runtimed {
    let dir = tempfile::Builder::new()
        .prefix("custom-runtime-server-runtimed-")
        .tempdir()
        .unwrap();
    let pki = InstallPki::generate(&dir.path().join("pki"), "custom runtime server test", 1)
        .expect("generate certificates");
    let address = format!("127.0.0.1:{}", kruntimes_testkit::free_port());
    let s = |p: &Path| p.display().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_runtimed"))
        .args(["--name", "runtimed-example", "--listen", &address])
        .args(["--tls-cert", &s(&pki.runtimed_cert)])
        .args(["--tls-key", &s(&pki.runtimed_key)])
        .args(["--client-ca", &s(&pki.internal_ca)])
        .args(["--runtime-server", &s(&server.socket())])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("runtimed.log")).unwrap())
        .spawn()
        .expect("start runtimed");
    let read = |p: &Path| std::fs::read(p).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(&pki.internal_ca)))
        .identity(Identity::from_pem(
            read(&pki.control_cert),
            read(&pki.control_key),
        ))
        .domain_name(RUNTIMED_SERVER_NAME);
    let channel = Endpoint::from_shared(format!("https://{address}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_lazy();
    let mut rd = Runtimed {
        child,
        dir,
        channel,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(&address).await.is_err() {
        if let Some(status) = rd.child.try_wait().unwrap() {
            panic!("runtimed exited ({status}):\n{}", rd.log());
        }
        assert!(
            Instant::now() < deadline,
            "runtimed not listening within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rd
}

impl Drop for Runtimed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Runtimed {
    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("runtimed.log")).unwrap_or_default()
    }

    /// `Agent/Assign`: the registration id.
    pub async fn assign(&self, req: agent::AssignRequest) -> Result<String, tonic::Status> {
        AgentClient::new(self.channel.clone())
            .assign(req)
            .await
            .map(|r| r.into_inner().registration_id)
    }

    /// `Agent/Release`: whether runtimed held the Run.
    pub async fn release(&self, req: agent::ReleaseRequest) -> bool {
        AgentClient::new(self.channel.clone())
            .release(req)
            .await
            .unwrap()
            .into_inner()
            .existed
    }

    /// Waits for runtimed's ownership table to hold an entry of `uid` that
    /// satisfies `done`.
    pub async fn entry(
        &self,
        uid: &str,
        done: impl Fn(&own::OwnershipEntry) -> bool,
    ) -> own::OwnershipEntry {
        let mut events = self.watch().await;
        let found = tokio::time::timeout(WITHIN, async {
            while let Some(ev) = events.message().await.unwrap() {
                if let Some(own::watch_event::Event::Upsert(e)) = ev.event
                    && e.run_uid == uid
                    && done(&e)
                {
                    return e;
                }
            }
            panic!("runtimed ended its ownership watch")
        })
        .await;
        found.unwrap_or_else(|_| panic!("no such entry of {uid} in 60 s:\n{}", self.log()))
    }

    /// Waits until runtimed's ownership table holds nothing of `uid`.
    pub async fn withdrawn(&self, uid: &str) {
        let mut events = self.watch().await;
        let (mut held, mut synced) = (false, false);
        let gone = tokio::time::timeout(WITHIN, async {
            while let Some(ev) = events.message().await.unwrap() {
                use own::watch_event::Event;
                match ev.event {
                    Some(Event::SnapshotBegin(_)) => (held, synced) = (false, false),
                    Some(Event::Upsert(e)) if e.run_uid == uid => held = true,
                    Some(Event::Delete(d)) if d.run_uid == uid => held = false,
                    Some(Event::SnapshotEnd(_)) => synced = true,
                    _ => {}
                }
                if synced && !held {
                    return;
                }
            }
            panic!("runtimed ended its ownership watch")
        })
        .await;
        assert!(gone.is_ok(), "{uid} still in the table after 60 s");
    }

    async fn watch(&self) -> tonic::Streaming<own::WatchEvent> {
        OwnershipTableClient::new(self.channel.clone())
            .watch(own::WatchRequest {
                client: "custom-runtime-server-test".into(),
            })
            .await
            .unwrap()
            .into_inner()
    }
}
