//! Managed TLS (`--internal-tls=managed`, `--public-tls=managed`): the operator keeps the
//! installation's CAs and certificates in Secrets of its namespace —
//! created when missing, kept when present, renewed when near expiry
//! ([`kruntimes_certs::managed`] decides) — and publishes the public CA
//! bundle (never a key) in a ConfigMap.
//!
//! | Secret | holds |
//! | --- | --- |
//! | `<public CA>` | the public CA: `tls.crt`, `tls.key` (signing), `next.crt`, `next.key` (a staged successor), `previous.crt` (the CA it replaced) |
//! | `<gateway>` (`kubernetes.io/tls`) | the gateway's serving certificate, `ca.crt` = public bundle |
//! | `<prefix>-ca` | the internal CA, as the public one |
//! | `<prefix>-runtimed` | runtimed's (`runtimed.kruntimes.internal`, server and client) |
//! | `<prefix>-gateway` | the gateway's client certificate (`kruntimes-gateway`) |
//! | `<prefix>-operator` | the ownership watch's serving certificate |
//!
//! Every leaf Secret carries `ca.crt`, the bundle of its CA. runtimed's
//! Secret is also kept in the namespace of every Runtime (its Pods mount
//! it there). Writes are `create` or `replace` with the read
//! `resourceVersion`: two operators racing conflict and re-read on the
//! next pass, never overwrite each other. Nothing is rendered by Helm
//! (`helm template` stays stable; upgrades keep the CAs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kruntimes_api::Runtime;
use kruntimes_certs::install::{CONTROL_PLANE_NAME, GATEWAY_CLIENT_NAME, RUNTIMED_SERVER_NAME};
use kruntimes_certs::managed::{self, CaStep, Decision, Held, Lifetimes};
use kruntimes_certs::{Ca, LeafSpec};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use time::OffsetDateTime;

mod owners;

use crate::error::Doing as _;
pub use owners::Owners;
use owners::adopt;

/// The label on every object this module writes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kruntimes-operator");

/// What the operator manages, and where.
#[derive(Debug, Clone)]
pub struct ManagedTls {
    /// Namespace of the Secrets and the ConfigMap (the operator's).
    pub namespace: String,
    /// Whether the public CA and the gateway's certificate are issued
    /// here, or provided (an existing Secret, cert-manager) and only their
    /// `ca.crt` is published.
    pub public: PublicTls,
    /// Secret of the public CA.
    pub public_ca_secret: String,
    /// Secret of the gateway's serving certificate.
    pub gateway_secret: String,
    /// DNS names (and IPs) of the gateway's serving certificate.
    pub gateway_names: Vec<String>,
    /// Prefix of the internal Secrets (`-ca`, `-runtimed`, `-gateway`,
    /// `-operator`).
    pub internal_prefix: String,
    /// Name of runtimed's Secret (mounted into Runtime Pods).
    pub runtimed_secret: String,
    /// DNS names of the ownership watch's serving certificate.
    pub operator_names: Vec<String>,
    /// ConfigMap whose `ca.crt` is the public bundle.
    pub ca_configmap: String,
    /// Validity of what is issued.
    pub lifetimes: Lifetimes,
    /// A Deployment in `namespace` (the operator's own) that owns what is
    /// written there, so the garbage collector removes it with the
    /// installation (`helm uninstall`); runtimed's Secret elsewhere is owned
    /// by that namespace's Runtimes. `None`: owners are left as they are.
    pub owner_deployment: Option<String>,
    /// With `owner_deployment`: own nothing — remove that Deployment (and
    /// the Runtimes) from the owners, so everything outlives the operator.
    pub keep_after_uninstall: bool,
}

/// Who issues the gateway's serving certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublicTls {
    /// The operator (`tls.mode: chart`).
    Managed,
    /// Someone else; the operator publishes the Secret's `ca.crt`.
    Provided,
    /// No public TLS (a plain-HTTP gateway): nothing issued or published.
    None,
}

/// What one pass did: the Secrets written, and why.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// `namespace/name` → why it was (re)issued.
    pub issued: BTreeMap<String, String>,
    /// The public CA bundle published (empty when there was none).
    pub public_bundle: String,
    /// What could not be done but did not stop the pass.
    pub warnings: Vec<String>,
}

/// A CA and the bundle that verifies what it (and its predecessor) issued.
struct CaState {
    ca: Ca,
    bundle: String,
}

fn spec(common_name: &str, names: &[String], server: bool, client: bool, days: i64) -> LeafSpec {
    let (ips, dns): (Vec<_>, Vec<_>) = names
        .iter()
        .partition(|n| n.parse::<std::net::IpAddr>().is_ok());
    LeafSpec {
        common_name: common_name.into(),
        dns_names: dns.into_iter().cloned().collect(),
        ips: ips.into_iter().filter_map(|n| n.parse().ok()).collect(),
        server,
        client,
        valid_days: days,
    }
}

fn text(s: &Secret, key: &str) -> String {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

fn secret(
    namespace: &str,
    name: &str,
    tls_type: bool,
    data: BTreeMap<&str, &str>,
    held: Option<&Secret>,
    owners: &Owners,
) -> Secret {
    let held_owners = held
        .and_then(|s| s.metadata.owner_references.as_deref())
        .unwrap_or_default();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(MANAGED_BY.0.into(), MANAGED_BY.1.into())])),
            resource_version: held.and_then(|s| s.metadata.resource_version.clone()),
            owner_references: owners.resolved(held_owners),
            ..Default::default()
        },
        type_: Some(
            if tls_type {
                "kubernetes.io/tls"
            } else {
                "Opaque"
            }
            .into(),
        ),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Creates `s`, or replaces the existing one at its `resourceVersion`.
async fn write(api: &Api<Secret>, s: Secret) -> crate::Result<()> {
    let name = s.name_any();
    if s.metadata.resource_version.is_some() {
        api.replace(&name, &PostParams::default(), &s)
            .await
            .doing(|| format!("replace Secret {name}"))?;
    } else {
        api.create(&PostParams::default(), &s)
            .await
            .doing(|| format!("create Secret {name}"))?;
    }
    Ok(())
}

/// Keeps the CA in Secret `name` valid; returns it with its bundle.
async fn ensure_ca(
    api: &Api<Secret>,
    name: &str,
    label: &str,
    cfg: &ManagedTls,
    owners: &Owners,
    now: OffsetDateTime,
    out: &mut Ensured,
) -> crate::Result<CaState> {
    let held = api
        .get_opt(name)
        .await
        .doing(|| format!("read Secret {name}"))?;
    let field = |key: &str| held.as_ref().map(|s| text(s, key)).unwrap_or_default();
    let (cert, key) = (field("tls.crt"), field("tls.key"));
    let (next_cert, next_key, previous) =
        (field("next.crt"), field("next.key"), field("previous.crt"));
    let current = held.as_ref().map(|_| Held {
        cert_pem: &cert,
        key_pem: &key,
    });
    let next = (!next_cert.is_empty()).then_some(Held {
        cert_pem: &next_cert,
        key_pem: &next_key,
    });
    let step = managed::decide_ca(current, next, now);
    // What the Secret holds after this step: the signing CA, a staged
    // successor, the CA the signing one replaced.
    let (signer, staged, replaced, why): (Ca, Option<Ca>, String, Option<String>) = match step {
        CaStep::Keep => {
            let staged = (!next_cert.is_empty()).then(|| Ca {
                cert_pem: next_cert.clone(),
                key_pem: next_key.clone(),
            });
            let signer = Ca {
                cert_pem: cert.clone(),
                key_pem: key.clone(),
            };
            if let Some(held) = &held {
                adopt(api, held, owners).await?;
            }
            return Ok(CaState {
                bundle: ca_bundle(&signer, staged.as_ref(), &previous, now),
                ca: signer,
            });
        }
        CaStep::Issue(why) => (
            Ca::generate(label, cfg.lifetimes.ca_days)?,
            None,
            String::new(),
            Some(why.to_string()),
        ),
        CaStep::Stage => (
            Ca {
                cert_pem: cert.clone(),
                key_pem: key.clone(),
            },
            Some(Ca::generate(label, cfg.lifetimes.ca_days)?),
            previous.clone(),
            Some("successor staged".to_owned()),
        ),
        CaStep::Promote => (
            Ca {
                cert_pem: next_cert.clone(),
                key_pem: next_key.clone(),
            },
            None,
            cert.clone(),
            Some("successor promoted".to_owned()),
        ),
    };
    let mut data = BTreeMap::from([
        ("tls.crt", signer.cert_pem.as_str()),
        ("tls.key", signer.key_pem.as_str()),
    ]);
    if let Some(n) = &staged {
        data.insert("next.crt", n.cert_pem.as_str());
        data.insert("next.key", n.key_pem.as_str());
    }
    if !replaced.is_empty() {
        data.insert("previous.crt", replaced.as_str());
    }
    write(
        api,
        secret(&cfg.namespace, name, false, data, held.as_ref(), owners),
    )
    .await?;
    let why = why.unwrap_or_default();
    tracing::info!(secret = name, step = %why, "CA written");
    out.issued.insert(format!("{}/{name}", cfg.namespace), why);
    Ok(CaState {
        bundle: ca_bundle(&signer, staged.as_ref(), &replaced, now),
        ca: signer,
    })
}

/// The bundle of a CA: it, its staged successor, and the CA it replaced
/// (each while valid).
fn ca_bundle(signer: &Ca, staged: Option<&Ca>, replaced: &str, now: OffsetDateTime) -> String {
    let mut also: Vec<&str> = Vec::new();
    if let Some(n) = staged {
        also.push(&n.cert_pem);
    }
    if !replaced.is_empty() {
        also.push(replaced);
    }
    managed::bundle(&signer.cert_pem, &also, now)
}

/// Keeps the leaf in Secret `namespace/name` valid for `ca` and `spec`.
#[allow(clippy::too_many_arguments)]
async fn ensure_leaf(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    tls_type: bool,
    ca: &CaState,
    spec: &LeafSpec,
    owners: &Owners,
    now: OffsetDateTime,
    out: &mut Ensured,
) -> crate::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let held = api
        .get_opt(name)
        .await
        .doing(|| format!("read Secret {namespace}/{name}"))?;
    let (cert, key, bundle) = held
        .as_ref()
        .map(|s| (text(s, "tls.crt"), text(s, "tls.key"), text(s, "ca.crt")))
        .unwrap_or_default();
    let h = held.as_ref().map(|_| Held {
        cert_pem: &cert,
        key_pem: &key,
    });
    let why = match managed::decide_leaf(h, &ca.ca.cert_pem, spec, now) {
        Decision::Issue(why) => Some(why),
        // The CA bundle changed (a renewed CA, or its predecessor expired):
        // only `ca.crt` is rewritten.
        Decision::Keep if bundle != ca.bundle => None,
        Decision::Keep => {
            if let Some(held) = &held {
                adopt(&api, held, owners).await?;
            }
            return Ok(());
        }
    };
    let leaf;
    let (cert, key) = match &why {
        Some(_) => {
            leaf = ca.ca.issue(spec)?;
            (leaf.cert_pem.as_str(), leaf.key_pem.as_str())
        }
        None => (cert.as_str(), key.as_str()),
    };
    let data = BTreeMap::from([
        ("tls.crt", cert),
        ("tls.key", key),
        ("ca.crt", ca.bundle.as_str()),
    ]);
    write(
        &api,
        secret(namespace, name, tls_type, data, held.as_ref(), owners),
    )
    .await?;
    let reason = why.map_or_else(|| "CA bundle changed".to_owned(), |w| w.to_string());
    tracing::info!(secret = name, namespace, reason = %reason, "certificate issued");
    out.issued.insert(format!("{namespace}/{name}"), reason);
    Ok(())
}

/// One pass: every CA, leaf and the bundle ConfigMap made current.
pub async fn ensure(client: &kube::Client, cfg: &ManagedTls) -> crate::Result<Ensured> {
    ensure_at(client, cfg, OffsetDateTime::now_utc()).await
}

/// [`ensure`] as if it were `now` (what is issued is valid from the real
/// time; tests use a later `now` to reach renewal).
pub async fn ensure_at(
    client: &kube::Client,
    cfg: &ManagedTls,
    now: OffsetDateTime,
) -> crate::Result<Ensured> {
    let mut out = Ensured::default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let days = cfg.lifetimes.leaf_days;
    let owners = owners::release_owners(client, cfg, &mut out).await?;

    let public_bundle = match cfg.public {
        PublicTls::Managed => {
            let public = ensure_ca(
                &api,
                &cfg.public_ca_secret,
                "kruntimes public CA",
                cfg,
                &owners,
                now,
                &mut out,
            )
            .await?;
            let gateway = spec("kruntimes-gateway", &cfg.gateway_names, true, false, days);
            ensure_leaf(
                client,
                &cfg.namespace,
                &cfg.gateway_secret,
                true,
                &public,
                &gateway,
                &owners,
                now,
                &mut out,
            )
            .await?;
            public.bundle
        }
        PublicTls::None => String::new(),
        PublicTls::Provided => provided_bundle(&api, cfg).await.unwrap_or_else(|why| {
            // Not there yet (cert-manager is issuing it) or with no CA to
            // publish (a public CA's certificate): the internal material
            // must not wait for it.
            tracing::warn!(secret = %cfg.gateway_secret, reason = %why, "no public CA bundle to publish");
            out.warnings.push(why);
            String::new()
        }),
    };

    let internal_ca = format!("{}-ca", cfg.internal_prefix);
    let internal = ensure_ca(
        &api,
        &internal_ca,
        "kruntimes internal CA",
        cfg,
        &owners,
        now,
        &mut out,
    )
    .await?;
    let runtimed = spec(
        "runtimed",
        &[RUNTIMED_SERVER_NAME.to_owned()],
        true,
        true,
        days,
    );
    let gateway_client = spec(GATEWAY_CLIENT_NAME, &[], false, true, days);
    // Gateways verify the watch by the control plane's name.
    let mut operator_names = vec![CONTROL_PLANE_NAME.to_owned()];
    operator_names.extend(cfg.operator_names.iter().cloned());
    let operator = spec(CONTROL_PLANE_NAME, &operator_names, true, false, days);
    let prefix = &cfg.internal_prefix;
    ensure_leaf(
        client,
        &cfg.namespace,
        &format!("{prefix}-gateway"),
        false,
        &internal,
        &gateway_client,
        &owners,
        now,
        &mut out,
    )
    .await?;
    ensure_leaf(
        client,
        &cfg.namespace,
        &format!("{prefix}-operator"),
        false,
        &internal,
        &operator,
        &owners,
        now,
        &mut out,
    )
    .await?;
    // runtimed's Secret wherever Runtime Pods run.
    let mut namespaces = BTreeSet::from([cfg.namespace.clone()]);
    let runtimes = Api::<Runtime>::all(client.clone())
        .list(&ListParams::default())
        .await
        .doing(|| "list Runtimes".into())?;
    namespaces.extend(runtimes.items.iter().filter_map(|r| r.namespace()));
    for ns in &namespaces {
        // Elsewhere, the Runtimes that need it own it: it goes with the last.
        let ns_owners = if *ns == cfg.namespace {
            owners.clone()
        } else {
            owners::namespace_owners(cfg, &runtimes.items, ns)
        };
        let done = ensure_leaf(
            client,
            ns,
            &cfg.runtimed_secret,
            false,
            &internal,
            &runtimed,
            &ns_owners,
            now,
            &mut out,
        )
        .await;
        match done {
            Ok(()) => {}
            // Its own namespace is the operator's business; another one
            // (a Runtime where it was not granted Secrets) must not hold up
            // the rest: a warning, retried on the next pass.
            Err(e) if *ns == cfg.namespace => return Err(e),
            Err(e) => {
                let why = format!("{e:#}");
                tracing::warn!(namespace = %ns, error = %why, "runtimed's Secret not kept");
                out.warnings.push(why);
            }
        }
    }

    if !public_bundle.is_empty() {
        publish_bundle(client, cfg, &public_bundle, &owners).await?;
    }
    out.public_bundle = public_bundle;
    Ok(out)
}

/// The `ca.crt` of the provided gateway Secret, or why there is none.
async fn provided_bundle(api: &Api<Secret>, cfg: &ManagedTls) -> Result<String, String> {
    let name = &cfg.gateway_secret;
    let ns = &cfg.namespace;
    let s = api
        .get_opt(name)
        .await
        .map_err(|e| format!("read Secret {ns}/{name}: {e}"))?
        .ok_or_else(|| format!("Secret {ns}/{name} (the gateway's) does not exist yet"))?;
    let bundle = text(&s, "ca.crt");
    if !bundle.contains("BEGIN CERTIFICATE") {
        return Err(format!("Secret {ns}/{name} has no ca.crt to publish"));
    }
    Ok(bundle)
}

/// Writes `bundle` as `ca.crt` of the ConfigMap (created when missing).
async fn publish_bundle(
    client: &kube::Client,
    cfg: &ManagedTls,
    bundle: &str,
    owners: &Owners,
) -> crate::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cfg.namespace);
    let name = &cfg.ca_configmap;
    let held = api
        .get_opt(name)
        .await
        .doing(|| format!("read ConfigMap {name}"))?;
    if let Some(cm) = held.as_ref().filter(|c| {
        c.data
            .as_ref()
            .and_then(|d| d.get("ca.crt"))
            .is_some_and(|b| b == bundle)
    }) {
        return adopt(&api, cm, owners).await;
    }
    let mut cm = held.unwrap_or_else(|| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(BTreeMap::from([(MANAGED_BY.0.into(), MANAGED_BY.1.into())])),
            ..Default::default()
        },
        ..Default::default()
    });
    cm.data
        .get_or_insert_with(BTreeMap::new)
        .insert("ca.crt".into(), bundle.to_owned());
    cm.metadata.owner_references =
        owners.resolved(cm.metadata.owner_references.as_deref().unwrap_or_default());
    if cm.metadata.resource_version.is_some() {
        api.replace(name, &PostParams::default(), &cm)
            .await
            .doing(|| format!("replace ConfigMap {name}"))?;
    } else {
        api.create(&PostParams::default(), &cm)
            .await
            .doing(|| format!("create ConfigMap {name}"))?;
    }
    tracing::info!(configmap = %name, "public CA bundle published");
    Ok(())
}

/// Writes the ownership watch's own material (from `<prefix>-operator`)
/// to `dir` as `tls.crt`, `tls.key` and `ca.crt` (the key 0600).
pub async fn write_own(client: &kube::Client, cfg: &ManagedTls, dir: &Path) -> crate::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let name = format!("{}-operator", cfg.internal_prefix);
    let s = api
        .get(&name)
        .await
        .doing(|| format!("read Secret {name}"))?;
    std::fs::create_dir_all(dir).map_err(|source| crate::Error::File {
        what: "create",
        path: dir.to_owned(),
        source,
    })?;
    for (key, private) in [("tls.crt", false), ("ca.crt", false), ("tls.key", true)] {
        let path = dir.join(key);
        let body = text(&s, key);
        if private {
            kruntimes_certs::write_private(&path, body.as_bytes())?;
        } else {
            std::fs::write(&path, body).map_err(|source| crate::Error::File {
                what: "write",
                path: path.clone(),
                source,
            })?;
        }
    }
    Ok(())
}
