//! The gateway's configuration: flags ([`Args`], each also read from a
//! `KRUNTIMES_GATEWAY_*` variable), validated once into a typed [`Config`]
//! ([`Args::into_config`]); nothing past this module reads a flag.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::admission::Limits;
use crate::auth::cache::CacheConfig;

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

/// Gateway flags. Defaults are documented once, here.
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
    #[arg(long, env = "KRUNTIMES_GATEWAY_TLS_RELOAD_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub tls_reload_secs: u64,
    /// Control plane ownership watch address (host:port).
    #[arg(long, env = "KRUNTIMES_GATEWAY_CONTROL_PLANE")]
    pub control_plane: String,
    /// TLS server name of the control plane's certificate.
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_CONTROL_PLANE_SERVER_NAME",
        default_value = "kruntimes-control-plane"
    )]
    pub control_plane_server_name: String,
    /// TLS server name of runtimed certificates.
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_RUNTIMED_SERVER_NAME",
        default_value = "runtimed.kruntimes.internal"
    )]
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
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_AUTH",
        value_enum,
        default_value = "jwt"
    )]
    pub auth: AuthMode,
    /// ES256 public key verifying embedded-mode tokens (PEM); required with
    /// `--auth jwt`.
    #[arg(long, env = "KRUNTIMES_GATEWAY_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<PathBuf>,
    /// Expected `iss` of tokens.
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_JWT_ISSUER",
        default_value = "kruntimes-embedded"
    )]
    pub jwt_issuer: String,
    /// Expected `aud` of tokens.
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_JWT_AUDIENCE",
        default_value = "kruntimes-gateway"
    )]
    pub jwt_audience: String,
    /// Static authorization policy (YAML); required with `--auth jwt`.
    #[arg(long, env = "KRUNTIMES_GATEWAY_POLICY")]
    pub policy: Option<PathBuf>,
    /// Longest a verified token is reused (never beyond its exp).
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_AUTHN_CACHE_TTL_SECS",
        default_value_t = 120
    )]
    pub authn_cache_ttl_secs: u64,
    /// Longest an allow decision is reused (never beyond the token's exp).
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_AUTHZ_ALLOWED_TTL_SECS",
        default_value_t = 30
    )]
    pub authz_allowed_ttl_secs: u64,
    /// Longest a deny decision (or a rejected token) is reused.
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_AUTHZ_DENIED_TTL_SECS",
        default_value_t = 5
    )]
    pub authz_denied_ttl_secs: u64,
    /// Entries per decision-cache layer.
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_AUTH_CACHE_ENTRIES",
        default_value_t = 100_000
    )]
    pub auth_cache_entries: u64,
    /// Authentication/authorization API calls in flight at once.
    #[arg(long, env = "KRUNTIMES_GATEWAY_AUTH_MAX_API_CALLS", default_value_t = 64,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub auth_max_api_calls: usize,
    /// Longest a request waits for a free API call, milliseconds; then 503
    /// `AuthUnavailable` with `Retry-After`.
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_AUTH_MAX_CALL_WAIT_MS",
        default_value_t = 1000
    )]
    pub auth_max_call_wait_ms: u64,
    /// While the API server is unreachable, keep allowing keys that were
    /// allowed within their TTL plus this many seconds (0: fail closed).
    #[arg(
        long,
        env = "KRUNTIMES_GATEWAY_AUTH_STALE_IF_ERROR_SECS",
        default_value_t = 0
    )]
    pub auth_stale_if_error_secs: u64,
    /// Kubeconfig of the gateway's own identity (`--auth kubernetes`); when
    /// omitted, `KUBECONFIG` / `~/.kube/config`, then the in-cluster
    /// configuration.
    #[arg(long, env = "KRUNTIMES_GATEWAY_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Audiences TokenReview checks tokens against (comma-separated; the
    /// API server's own audiences when empty).
    #[arg(long, env = "KRUNTIMES_GATEWAY_TOKEN_AUDIENCES", value_delimiter = ',')]
    pub token_audiences: Vec<String>,
    /// Verify service-account JWTs locally against the cluster's OIDC keys
    /// instead of a TokenReview. Faster, but blind to revocation before exp.
    #[arg(long, env = "KRUNTIMES_GATEWAY_SA_JWT_LOCAL")]
    pub sa_jwt_local: bool,
    /// Bound on one TokenReview / SubjectAccessReview call, milliseconds.
    #[arg(long, env = "KRUNTIMES_GATEWAY_KUBE_API_TIMEOUT_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub kube_api_timeout_ms: u64,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, env = "KRUNTIMES_GATEWAY_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: u64,
    /// Largest session operation body in bytes (a base64-encoded 32 MiB file).
    #[arg(long, env = "KRUNTIMES_GATEWAY_MAX_SESSION_BODY_BYTES", default_value_t = 45 * 1024 * 1024)]
    pub max_session_body_bytes: u64,
    /// Largest total request header size in bytes (431 beyond).
    #[arg(long, env = "KRUNTIMES_GATEWAY_MAX_HEADER_BYTES", default_value_t = 16 * 1024)]
    pub max_header_bytes: usize,
    /// Open connections per listener (HTTPS, HTTP, metrics) at most; one
    /// past the bound is closed at once and counted.
    #[arg(long, env = "KRUNTIMES_GATEWAY_MAX_CONNECTIONS", default_value_t = 16384,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
    /// Deadline for a new connection's TLS handshake, in milliseconds.
    #[arg(long, env = "KRUNTIMES_GATEWAY_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub handshake_timeout_ms: u64,
    /// Deadline for a connection's first request headers after its
    /// handshake, in milliseconds; a later request (HTTP/1.1, or a new
    /// HTTP/2 stream) must arrive within the idle timeout plus this of the
    /// previous one's end, whatever other bytes (HTTP/2 PINGs) come.
    #[arg(long, env = "KRUNTIMES_GATEWAY_HEADER_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,
    /// A connection with no request in flight (no HTTP/2 stream, no
    /// HTTP/1.1 request or WebSocket) and nothing received or sent for this
    /// long is closed, on every listener; seconds, at least 1.
    #[arg(long, env = "KRUNTIMES_GATEWAY_IDLE_TIMEOUT_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,
    /// After SIGTERM, keep accepting and serving this long before the
    /// listeners close (then requests in flight get 2 s more): the time
    /// kube-proxy or a load balancer needs to stop sending new connections
    /// to a Pod being deleted. Connections accepted meanwhile close after one
    /// request. SIGINT stops at once.
    #[arg(long, env = "KRUNTIMES_GATEWAY_SHUTDOWN_GRACE_SECS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=300))]
    pub shutdown_grace_secs: u64,
    /// Requests in flight at once (503 beyond).
    #[arg(long, env = "KRUNTIMES_GATEWAY_MAX_IN_FLIGHT", default_value_t = 4096,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_in_flight: usize,
    /// How long a request for a Run that is on its way to Ready, or Ready
    /// with its owner's readiness not yet here, waits for the table to
    /// converge before 503 `NotReady`, and one for a UID the table does not
    /// know yet before 404 `NotFound`, milliseconds (0: answer at once; at
    /// most 10,000, and a settling request holds its in-flight slot).
    #[arg(long, env = "KRUNTIMES_GATEWAY_ROUTE_SETTLE_MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub route_settle_ms: u64,
    /// How long entries of a lost watch stream stay routable, seconds.
    #[arg(long, env = "KRUNTIMES_GATEWAY_STALENESS_SECS", default_value_t = 10)]
    pub staleness_secs: u64,
    /// Bound on connecting to an owner, milliseconds.
    #[arg(long, env = "KRUNTIMES_GATEWAY_CONNECT_TIMEOUT_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub connect_timeout_ms: u64,
    /// Invocation timeout assumed when the table has none, seconds.
    #[arg(long, env = "KRUNTIMES_GATEWAY_DEFAULT_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub default_timeout_secs: u64,
    /// Log one structured line per invoke (run UID, invocation id, subject,
    /// owner, status, duration; never tokens or payloads).
    #[arg(long, env = "KRUNTIMES_GATEWAY_ACCESS_LOG", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub access_log: bool,
    /// Worker threads. Each accepts on every public listener and serves the
    /// connections it accepted, with its own pool of upstream connections,
    /// so no request hands work to another thread.
    #[arg(long, env = "KRUNTIMES_GATEWAY_THREADS", default_value_t = 2,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: usize,
    /// Serve every listener from one runtime of `--threads` threads that
    /// steal tasks from each other, sharing one upstream pool, instead of
    /// one worker per thread. Off by default: a connection's readiness and
    /// its pooled upstream connections then cross threads, a wake-up of
    /// another thread on many requests.
    #[arg(long, env = "KRUNTIMES_GATEWAY_WORK_STEALING")]
    pub work_stealing: bool,
}

/// Why the flags do not make a gateway.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Neither public listener is set.
    #[error("at least one of --https-listen and --http-listen is required")]
    NoListener,
    /// A flag that another one needs is missing.
    #[error("{missing} is required with {with}")]
    Requires {
        /// The missing flag.
        missing: &'static str,
        /// The flag that needs it.
        with: &'static str,
    },
}

/// The gateway, validated: what [`crate::run`] builds from.
#[derive(Debug, Clone)]
pub struct Config {
    /// The listeners and their connection bounds.
    pub listen: ListenConfig,
    /// The internal side: the ownership watch and mTLS to runtimed.
    pub internal: InternalConfig,
    /// Who may call.
    pub auth: AuthConfig,
    /// The decision cache in front of `auth`.
    pub cache: CacheConfig,
    /// Request limits.
    pub limits: Limits,
    /// How long entries of a lost watch stream stay routable.
    pub staleness: Duration,
    /// Bound on connecting to an owner.
    pub connect_timeout: Duration,
    /// Invocation timeout assumed when the table has none.
    pub default_timeout: Duration,
    /// Whether every invoke is logged.
    pub access_log: bool,
    /// Worker threads.
    pub threads: usize,
    /// One work-stealing runtime instead of one worker per thread.
    pub work_stealing: bool,
}

/// The listeners.
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// HTTPS: the address and the serving certificate files.
    pub https: Option<HttpsListen>,
    /// Plain HTTP.
    pub http: Option<String>,
    /// Metrics (plain HTTP).
    pub metrics: Option<String>,
    /// How often the certificate files are re-read at the latest.
    pub tls_reload: Duration,
    /// Open connections per listener at most.
    pub max_connections: usize,
    /// A new connection's TLS handshake deadline.
    pub handshake_timeout: Duration,
    /// A connection's first request deadline.
    pub header_timeout: Duration,
    /// A connection with nothing in flight this long is closed.
    pub idle_timeout: Duration,
    /// How long listeners accept on after SIGTERM.
    pub shutdown_grace: Duration,
}

/// The HTTPS listener.
#[derive(Debug, Clone)]
pub struct HttpsListen {
    /// Address.
    pub addr: String,
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Key (PEM).
    pub key: PathBuf,
}

/// The internal side.
#[derive(Debug, Clone)]
pub struct InternalConfig {
    /// Control plane ownership watch address.
    pub control_plane: String,
    /// TLS server name of the control plane.
    pub control_plane_server_name: String,
    /// TLS server name of runtimed.
    pub runtimed_server_name: String,
    /// Internal CA (PEM).
    pub ca: PathBuf,
    /// Client certificate (PEM).
    pub client_cert: PathBuf,
    /// Client key (PEM).
    pub client_key: PathBuf,
}

/// Who may call.
#[derive(Debug, Clone)]
pub enum AuthConfig {
    /// Nobody is checked (benchmarks only).
    None,
    /// Embedded-mode tokens and a static policy.
    Jwt {
        /// ES256 public key (PEM).
        public_key: PathBuf,
        /// Expected `iss`.
        issuer: String,
        /// Expected `aud`.
        audience: String,
        /// Policy (YAML).
        policy: PathBuf,
    },
    /// TokenReview and SubjectAccessReview.
    Kubernetes {
        /// Kubeconfig of the gateway's identity (else inferred).
        kubeconfig: Option<PathBuf>,
        /// TokenReview audiences.
        token_audiences: Vec<String>,
        /// Verify service-account JWTs locally.
        sa_jwt_local: bool,
        /// Bound on one API call.
        api_timeout: Duration,
    },
}

impl Args {
    /// Validates the flags once into the gateway's [`Config`].
    pub fn into_config(self) -> Result<Config, ConfigError> {
        let https = match self.https_listen {
            Some(addr) => Some(HttpsListen {
                addr,
                cert: self.tls_cert.ok_or(ConfigError::Requires {
                    missing: "--tls-cert",
                    with: "--https-listen",
                })?,
                key: self.tls_key.ok_or(ConfigError::Requires {
                    missing: "--tls-key",
                    with: "--https-listen",
                })?,
            }),
            None => None,
        };
        if https.is_none() && self.http_listen.is_none() {
            return Err(ConfigError::NoListener);
        }
        let auth = match self.auth {
            AuthMode::None => AuthConfig::None,
            AuthMode::Jwt => AuthConfig::Jwt {
                public_key: self.jwt_public_key.ok_or(ConfigError::Requires {
                    missing: "--jwt-public-key",
                    with: "--auth jwt",
                })?,
                issuer: self.jwt_issuer,
                audience: self.jwt_audience,
                policy: self.policy.ok_or(ConfigError::Requires {
                    missing: "--policy",
                    with: "--auth jwt",
                })?,
            },
            AuthMode::Kubernetes => AuthConfig::Kubernetes {
                kubeconfig: self.kubeconfig,
                token_audiences: self.token_audiences,
                sa_jwt_local: self.sa_jwt_local,
                api_timeout: Duration::from_millis(self.kube_api_timeout_ms),
            },
        };
        Ok(Config {
            listen: ListenConfig {
                https,
                http: self.http_listen,
                metrics: self.metrics_listen,
                tls_reload: Duration::from_secs(self.tls_reload_secs),
                max_connections: self.max_connections,
                handshake_timeout: Duration::from_millis(self.handshake_timeout_ms),
                header_timeout: Duration::from_millis(self.header_timeout_ms),
                idle_timeout: Duration::from_secs(self.idle_timeout_secs),
                shutdown_grace: Duration::from_secs(self.shutdown_grace_secs),
            },
            internal: InternalConfig {
                control_plane: self.control_plane,
                control_plane_server_name: self.control_plane_server_name,
                runtimed_server_name: self.runtimed_server_name,
                ca: self.internal_ca,
                client_cert: self.client_cert,
                client_key: self.client_key,
            },
            auth,
            cache: CacheConfig {
                max_entries: self.auth_cache_entries,
                authn_max_ttl: Duration::from_secs(self.authn_cache_ttl_secs),
                rejected_ttl: Duration::from_secs(self.authz_denied_ttl_secs),
                allowed_ttl: Duration::from_secs(self.authz_allowed_ttl_secs),
                denied_ttl: Duration::from_secs(self.authz_denied_ttl_secs),
                max_concurrent_calls: self.auth_max_api_calls,
                max_call_wait: Duration::from_millis(self.auth_max_call_wait_ms),
                stale_if_error: Duration::from_secs(self.auth_stale_if_error_secs),
            },
            limits: Limits {
                max_body_bytes: self.max_body_bytes,
                max_session_body_bytes: self.max_session_body_bytes,
                max_header_bytes: self.max_header_bytes,
                max_in_flight: self.max_in_flight,
                route_settle: Duration::from_millis(self.route_settle_ms),
            },
            staleness: Duration::from_secs(self.staleness_secs),
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            default_timeout: Duration::from_secs(self.default_timeout_secs),
            access_log: self.access_log,
            threads: self.threads,
            work_stealing: self.work_stealing,
        })
    }
}

#[cfg(test)]
mod tests;
