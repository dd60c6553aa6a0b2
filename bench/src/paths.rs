//! The request paths under test: through the gateway, straight to the owner
//! runtimed, through the nginx and HAProxy baselines, and the original
//! design's interpreter-per-call model.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use kruntimes_proto::api;

use crate::load::Outcome;

/// Fencing values of one Run on its owner.
#[derive(Debug, Clone)]
pub struct Fence {
    /// Run UID.
    pub uid: String,
    /// Owner Pod UID.
    pub pod_uid: String,
    /// Attempt.
    pub attempt: u64,
    /// Namespace.
    pub namespace: String,
    /// Runtime.
    pub runtime: String,
}

impl Fence {
    /// The Run's API path.
    pub fn path(&self) -> String {
        format!(
            "/v1/namespaces/{}/runtimes/{}/runs/{}:invoke",
            self.namespace, self.runtime, self.uid
        )
    }

    /// The status path of a session Run (a read its owner answers
    /// concurrently, outside the session's operation queue).
    pub fn session_path(&self) -> String {
        format!(
            "/v1/namespaces/{}/runtimes/{}/sessions/{}",
            self.namespace, self.runtime, self.uid
        )
    }
}

/// A prepared HTTPS target: client, URL and the headers to send.
#[derive(Clone)]
pub struct HttpTarget {
    client: reqwest::Client,
    /// How `client` was built, for [`HttpTarget::own_connection`].
    spec: Arc<ClientSpec>,
    url: Arc<str>,
    headers: Arc<reqwest::header::HeaderMap>,
    body: Arc<[u8]>,
    /// POST with `body`, or GET without one.
    get: bool,
}

impl HttpTarget {
    /// Sends one request.
    pub async fn call(&self) -> Outcome {
        let mut headers = (*self.headers).clone();
        if let Ok(v) =
            reqwest::header::HeaderValue::from_str(&uuid::Uuid::new_v4().simple().to_string())
        {
            headers.insert(api::HEADER_INVOCATION_ID, v);
        }
        let request = if self.get {
            self.client.get(&*self.url)
        } else {
            self.client.post(&*self.url).body(self.body.to_vec())
        };
        send(request.headers(headers)).await
    }

    /// The same target with another bearer token.
    pub fn with_token(&self, token: &str) -> Self {
        let mut h = (*self.headers).clone();
        if let Ok(v) = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")) {
            h.insert(reqwest::header::AUTHORIZATION, v);
        }
        Self {
            headers: Arc::new(h),
            ..self.clone()
        }
    }
}

/// Sends `request` and reads the whole response body: its status, or the
/// transport error.
/// What a path's client is built from.
#[derive(Debug)]
struct ClientSpec {
    ca: PathBuf,
    identity: Option<(PathBuf, PathBuf)>,
    resolve: Option<SocketAddr>,
    http1_only: bool,
}

impl ClientSpec {
    fn build(&self) -> anyhow::Result<reqwest::Client> {
        let identity = self
            .identity
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()));
        client(&self.ca, identity, self.resolve, self.http1_only)
    }
}

impl HttpTarget {
    fn new(
        spec: ClientSpec,
        url: String,
        headers: reqwest::header::HeaderMap,
        body: &[u8],
    ) -> anyhow::Result<Self> {
        Ok(Self {
            client: spec.build()?,
            spec: Arc::new(spec),
            url: url.into(),
            headers: Arc::new(headers),
            body: body.into(),
            get: false,
        })
    }

    /// The session status read of `fence`'s Run on the same base (gateway,
    /// proxy or owner): a GET.
    pub fn session_status(&self, fence: &Fence) -> Self {
        let base = self.url.split("/v1/").next().unwrap_or_default();
        Self {
            url: format!("{base}{}", fence.session_path()).into(),
            body: Arc::from(&b""[..]),
            get: true,
            ..self.clone()
        }
    }

    /// The same path over a client of its own: its own connection (clones
    /// share one, multiplexed over HTTP/2).
    pub fn own_connection(&self) -> anyhow::Result<Self> {
        Ok(Self {
            client: self.spec.build()?,
            ..self.clone()
        })
    }
}

pub async fn send(request: reqwest::RequestBuilder) -> Outcome {
    let resp = request.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    resp.bytes().await.map_err(|e| e.to_string())?;
    Ok(status)
}

fn client(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
    resolve: Option<SocketAddr>,
    http1_only: bool,
) -> anyhow::Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?)
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true);
    if http1_only {
        b = b.http1_only();
    }
    if let Some((cert, key)) = identity {
        let mut pem = std::fs::read(cert)?;
        pem.extend(std::fs::read(key)?);
        b = b.identity(reqwest::Identity::from_pem(&pem)?);
    }
    if let Some(addr) = resolve {
        b = b.resolve("runtimed.kruntimes.internal", addr);
    }
    Ok(b.build()?)
}

fn headers(pairs: &[(&str, String)]) -> anyhow::Result<reqwest::header::HeaderMap> {
    let mut h = reqwest::header::HeaderMap::new();
    for (k, v) in pairs {
        h.insert(
            reqwest::header::HeaderName::from_bytes(k.as_bytes())?,
            v.parse()?,
        );
    }
    Ok(h)
}

/// PKI files of an embedded stack, and the protocol the paths' clients
/// speak with them.
#[derive(Debug, Clone)]
pub struct Pki {
    /// Directory.
    pub dir: PathBuf,
    /// Hold the clients to HTTP/1.1 instead of negotiating HTTP/2
    /// (`--client-http1`).
    pub http1_only: bool,
}

impl Pki {
    /// A file in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Through a gateway (or an HTTPS baseline in front of runtimed that adds
/// the fencing headers itself).
pub fn via_proxy(
    pki: &Pki,
    base: &str,
    fence: &Fence,
    token: Option<&str>,
    body: &[u8],
) -> anyhow::Result<HttpTarget> {
    let mut pairs = vec![("content-type", "application/json".to_owned())];
    if let Some(t) = token {
        pairs.push(("authorization", format!("Bearer {t}")));
    }
    let spec = ClientSpec {
        ca: pki.file("public-ca.crt"),
        identity: None,
        resolve: None,
        http1_only: pki.http1_only,
    };
    HttpTarget::new(
        spec,
        format!("{base}{}", fence.path()),
        headers(&pairs)?,
        body,
    )
}

/// Straight to the owner runtimed, presenting the gateway's client
/// certificate and fencing headers: the path without the gateway.
pub fn direct(
    pki: &Pki,
    owner: SocketAddr,
    fence: &Fence,
    body: &[u8],
) -> anyhow::Result<HttpTarget> {
    direct_with(
        &pki.file("internal-ca.crt"),
        (
            &pki.file("gateway-client.crt"),
            &pki.file("gateway-client.key"),
        ),
        owner,
        fence,
        body,
        pki.http1_only,
    )
}

/// Straight to a runtimed with an identity from any files (a cluster's
/// internal Secret): `direct` for a deployment the harness did not start.
pub fn direct_with(
    ca: &Path,
    identity: (&Path, &Path),
    owner: SocketAddr,
    fence: &Fence,
    body: &[u8],
    http1_only: bool,
) -> anyhow::Result<HttpTarget> {
    let spec = ClientSpec {
        ca: ca.to_owned(),
        identity: Some((identity.0.to_owned(), identity.1.to_owned())),
        resolve: Some(owner),
        http1_only,
    };
    let url = format!(
        "https://runtimed.kruntimes.internal:{}{}",
        owner.port(),
        fence.path()
    );
    HttpTarget::new(spec, url, headers(&direct_headers(fence))?, body)
}

/// The fencing headers the gateway would add.
pub fn direct_headers(fence: &Fence) -> Vec<(&'static str, String)> {
    vec![
        ("content-type", "application/json".to_owned()),
        (api::HEADER_RUN_UID, fence.uid.clone()),
        (api::HEADER_OWNER_POD_UID, fence.pod_uid.clone()),
        (api::HEADER_ATTEMPT, fence.attempt.to_string()),
        (api::HEADER_HOP, api::HOP_GATEWAY.to_owned()),
    ]
}

/// The original design's model: a new Python interpreter per call that
/// imports the handler and calls it once.
pub struct Spawn {
    python: String,
    dir: PathBuf,
    input: String,
}

const SPAWN_BOOTSTRAP: &str = "import json, sys\nsys.path.insert(0, sys.argv[1])\nimport main\nprint(json.dumps(main.invoke(json.loads(sys.argv[2]))))\n";

impl Spawn {
    /// Writes the handler into `dir`.
    pub fn new(dir: &Path, source: &str, input: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("main.py"), source).context("write handler")?;
        Ok(Self {
            python: std::env::var("KRUNTIMES_PYTHON").unwrap_or_else(|_| "python3".into()),
            dir: dir.to_path_buf(),
            input: input.to_owned(),
        })
    }

    /// Runs one call.
    pub async fn call(&self) -> Outcome {
        let out = tokio::process::Command::new(&self.python)
            .arg("-c")
            .arg(SPAWN_BOOTSTRAP)
            .arg(&self.dir)
            .arg(&self.input)
            .output()
            .await
            .map_err(|e| e.to_string())?;
        Ok(if out.status.success() { 200 } else { 500 })
    }
}
