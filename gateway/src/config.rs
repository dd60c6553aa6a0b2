//! Gateway flags (each also readable from a `KRUNTIMES_GATEWAY_*` variable).

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// How callers are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// Embedded mode: ES256 JWTs verified locally + static policy.
    Jwt,
    /// Kubernetes: TokenReview + SubjectAccessReview against the cluster.
    Kubernetes,
    /// No authentication (benchmarking the proxy path only).
    None,
}

/// Gateway configuration.
#[derive(Debug, Clone, Parser)]
#[command(name = "kruntimes-gateway", about = "kruntimes gateway")]
pub struct Args {
    /// HTTPS listen address (protocol set: https).
    #[arg(long, env = "KRUNTIMES_GATEWAY_HTTPS_LISTEN")]
    pub https_listen: Option<String>,
    /// Plain HTTP listen address (protocol set: http).
    #[arg(long, env = "KRUNTIMES_GATEWAY_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    /// Listen address of `GET /metrics` (plain HTTP; keep it off the public
    /// network). The public listeners never serve metrics.
    #[arg(long, env = "KRUNTIMES_GATEWAY_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// HTTPS serving certificate chain (PEM).
    #[arg(long, env = "KRUNTIMES_GATEWAY_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// HTTPS serving key (PEM).
    #[arg(long, env = "KRUNTIMES_GATEWAY_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// The certificate files are re-read when their directories change
    /// (inotify) and at least this often, seconds: the backstop for file
    /// systems without change notifications.
    #[arg(long, default_value_t = 60)]
    pub tls_reload_secs: u64,
    /// Control plane ownership watch address (host:port).
    #[arg(long, env = "KRUNTIMES_GATEWAY_CONTROL_PLANE")]
    pub control_plane: String,
    /// TLS server name of the control plane's certificate.
    #[arg(long, default_value = "kruntimes-control-plane")]
    pub control_plane_server_name: String,
    /// TLS server name of runtimed certificates.
    #[arg(long, default_value = "runtimed.kruntimes.internal")]
    pub runtimed_server_name: String,
    /// Internal CA (PEM) of the control plane and runtimed.
    #[arg(long, env = "KRUNTIMES_GATEWAY_INTERNAL_CA")]
    pub internal_ca: PathBuf,
    /// Gateway client certificate for mTLS to runtimed (PEM).
    #[arg(long, env = "KRUNTIMES_GATEWAY_CLIENT_CERT")]
    pub client_cert: PathBuf,
    /// Gateway client key (PEM).
    #[arg(long, env = "KRUNTIMES_GATEWAY_CLIENT_KEY")]
    pub client_key: PathBuf,
    /// Authentication mode.
    #[arg(long, value_enum, default_value = "jwt")]
    pub auth: AuthMode,
    /// ES256 public key verifying embedded-mode tokens (PEM).
    #[arg(long, env = "KRUNTIMES_GATEWAY_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<PathBuf>,
    /// Expected `iss` of tokens.
    #[arg(long, default_value = "kruntimes-embedded")]
    pub jwt_issuer: String,
    /// Expected `aud` of tokens.
    #[arg(long, default_value = "kruntimes-gateway")]
    pub jwt_audience: String,
    /// Static authorization policy (YAML).
    #[arg(long, env = "KRUNTIMES_GATEWAY_POLICY")]
    pub policy: Option<PathBuf>,
    /// Longest a verified token is reused (never beyond its exp).
    #[arg(long, default_value_t = 120)]
    pub authn_cache_ttl_secs: u64,
    /// Longest an allow decision is reused (never beyond the token's exp).
    #[arg(long, default_value_t = 30)]
    pub authz_allowed_ttl_secs: u64,
    /// Longest a deny decision (or a rejected token) is reused.
    #[arg(long, default_value_t = 5)]
    pub authz_denied_ttl_secs: u64,
    /// Entries per decision-cache layer.
    #[arg(long, default_value_t = 100_000)]
    pub auth_cache_entries: u64,
    /// Authentication/authorization API calls in flight at once.
    #[arg(long, default_value_t = 64)]
    pub auth_max_api_calls: usize,
    /// Longest a request waits for a free API call, milliseconds; then 503
    /// `AuthUnavailable` with `Retry-After`.
    #[arg(long, default_value_t = 1000)]
    pub auth_max_call_wait_ms: u64,
    /// While the API server is unreachable, keep allowing keys that were
    /// allowed within their TTL plus this many seconds (0: fail closed).
    #[arg(long, default_value_t = 0)]
    pub auth_stale_if_error_secs: u64,
    /// Kubeconfig of the gateway's own identity (`--auth kubernetes`); when
    /// omitted, `KUBECONFIG` / `~/.kube/config`, then the in-cluster
    /// configuration.
    #[arg(long, env = "KRUNTIMES_GATEWAY_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Audiences TokenReview checks tokens against (comma-separated; the
    /// API server's own audiences when empty).
    #[arg(long, value_delimiter = ',')]
    pub token_audiences: Vec<String>,
    /// Verify service-account JWTs locally against the cluster's OIDC keys
    /// instead of a TokenReview. Faster, but blind to revocation before exp.
    #[arg(long)]
    pub sa_jwt_local: bool,
    /// Bound on one TokenReview / SubjectAccessReview call, milliseconds.
    #[arg(long, default_value_t = 5000)]
    pub kube_api_timeout_ms: u64,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_body_bytes: u64,
    /// Largest session operation body in bytes (a base64-encoded 32 MiB file).
    #[arg(long, default_value_t = 45 * 1024 * 1024)]
    pub max_session_body_bytes: u64,
    /// Largest total request header size in bytes (431 beyond).
    #[arg(long, default_value_t = 16 * 1024)]
    pub max_header_bytes: usize,
    /// Open connections per listener (HTTPS, HTTP, metrics) at most; one
    /// past the bound is closed at once and counted.
    #[arg(long, default_value_t = 16384)]
    pub max_connections: usize,
    /// Deadline for a new connection's TLS handshake, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub handshake_timeout_ms: u64,
    /// Deadline for a connection's first request headers after its
    /// handshake, in milliseconds; a later request (HTTP/1.1, or a new
    /// HTTP/2 stream) must arrive within the idle timeout plus this of the
    /// previous one's end, whatever other bytes (HTTP/2 PINGs) come.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,
    /// A connection with no request in flight (no HTTP/2 stream, no
    /// HTTP/1.1 request or WebSocket) and nothing received or sent for this
    /// long is closed, on every listener; seconds, at least 1.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,
    /// After SIGTERM, keep accepting and serving this long before the
    /// listeners close (then requests in flight get 2 s more): the time
    /// kube-proxy or a load balancer needs to stop sending new connections
    /// to a Pod being deleted. Connections accepted meanwhile close after one
    /// request. SIGINT stops at once.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=300))]
    pub shutdown_grace_secs: u64,
    /// Requests in flight at once (503 beyond).
    #[arg(long, default_value_t = 4096)]
    pub max_in_flight: usize,
    /// How long a request for a Run that is on its way to Ready, or Ready
    /// with its owner's readiness not yet here, waits for the table to
    /// converge before 503 `NotReady`, and one for a UID the table does not
    /// know yet before 404 `NotFound`, milliseconds (0: answer at once; at
    /// most 10,000, and a settling request holds its in-flight slot).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub route_settle_ms: u64,
    /// How long entries of a lost watch stream stay routable, seconds.
    #[arg(long, default_value_t = 10)]
    pub staleness_secs: u64,
    /// Bound on connecting to an owner, milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub connect_timeout_ms: u64,
    /// Invocation timeout assumed when the table has none, seconds.
    #[arg(long, default_value_t = 30)]
    pub default_timeout_secs: u64,
    /// Log one structured line per invoke (run UID, invocation id, subject,
    /// owner, status, duration; never tokens or payloads).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub access_log: bool,
    /// Worker threads. Each accepts on every public listener and serves the
    /// connections it accepted, with its own pool of upstream connections,
    /// so no request hands work to another thread.
    #[arg(long, default_value_t = 2,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: usize,
    /// Serve every listener from one runtime of `--threads` threads that
    /// steal tasks from each other, sharing one upstream pool, instead of
    /// one worker per thread. Off by default: a connection's readiness and
    /// its pooled upstream connections then cross threads, a wake-up of
    /// another thread on many requests.
    #[arg(long)]
    pub work_stealing: bool,
}
