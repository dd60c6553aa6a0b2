//! A certificate and key reloaded in process when their files change (a
//! rotated Secret mount, the operator's or cert-manager's renewals): new
//! handshakes get the new certificate, established connections are not
//! dropped. A broken pair on disk is refused and the previous one stays in
//! service. Used as a server's certificate resolver (the gateway's HTTPS
//! listener, runtimed's port) and as a client's (mTLS clients).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::client::ResolvesClientCert;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A certificate/key file pair loaded into a `T` and loaded again when the
/// files change; what a pair becomes (and whether it is usable) is the
/// `load` function's business.
pub struct Reloading<T> {
    cert_path: PathBuf,
    key_path: PathBuf,
    load: fn(&Path, &Path) -> Result<T, String>,
    current: RwLock<Arc<T>>,
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("cert_path", &self.cert_path)
            .finish_non_exhaustive()
    }
}

/// The rustls pair in service: a server's or a client's certificate.
pub type ReloadingCert = Reloading<CertifiedKey>;

/// `cert_path` and `key_path` as a rustls pair, refused unless the key is
/// the certificate's.
pub fn load_certified_key(cert_path: &Path, key_path: &Path) -> Result<CertifiedKey, String> {
    let certs = crate::load_certs(cert_path).map_err(|e| e.to_string())?;
    let key = crate::load_key(key_path).map_err(|e| e.to_string())?;
    CertifiedKey::from_der(certs, key, &rustls::crypto::aws_lc_rs::default_provider())
        .map_err(|e| format!("certificate and key do not form a usable pair: {e}"))
}

fn read_pair(cert_path: &Path, key_path: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(cert_path).unwrap_or_default(),
        std::fs::read(key_path).unwrap_or_default(),
    )
}

impl ReloadingCert {
    /// Loads the pair once; fails when it is unusable.
    pub fn new(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, String> {
        Self::with_loader(cert_path, key_path, load_certified_key)
    }
}

impl<T: Send + Sync + 'static> Reloading<T> {
    /// Loads the pair once with `load`; fails when it is unusable.
    pub fn with_loader(
        cert_path: &Path,
        key_path: &Path,
        load: fn(&Path, &Path) -> Result<T, String>,
    ) -> Result<Arc<Self>, String> {
        let seen = read_pair(cert_path, key_path);
        let first = load(cert_path, key_path)?;
        Ok(Arc::new(Self {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            load,
            current: RwLock::new(Arc::new(first)),
            seen: Mutex::new(seen),
        }))
    }

    /// Re-reads the files; `Ok(true)` when a new pair is in service,
    /// `Ok(false)` when nothing changed, `Err` when the new files are unusable
    /// (the old pair stays).
    pub fn reload(&self) -> Result<bool, String> {
        let now = read_pair(&self.cert_path, &self.key_path);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == now {
            return Ok(false);
        }
        let pair = (self.load)(&self.cert_path, &self.key_path)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(pair);
        *seen = now;
        Ok(true)
    }

    /// Whether the files on disk are still those the pair in service was
    /// loaded from.
    pub fn on_disk_is_current(&self) -> bool {
        let now = read_pair(&self.cert_path, &self.key_path);
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) == now
    }

    /// Polls the files every `period` on a thread of its own.
    pub fn watch(self: &Arc<Self>, period: Duration) {
        let weak = Arc::downgrade(self);
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(period);
                let Some(this) = weak.upgrade() else { return };
                match this.reload() {
                    Ok(true) => {
                        tracing::info!(cert = %this.cert_path.display(), "certificate reloaded")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(cert = %this.cert_path.display(), error = %e, "keeping the previous certificate")
                    }
                }
            }
        });
    }

    /// The pair in service.
    pub fn current(&self) -> Arc<T> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for ReloadingCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ca, LeafSpec};

    fn write_leaf(dir: &Path, cn: &str) {
        let ca = Ca::generate("test", 1).unwrap();
        let leaf = ca
            .issue(&LeafSpec {
                common_name: cn.into(),
                dns_names: vec!["localhost".into()],
                server: true,
                valid_days: 1,
                ..Default::default()
            })
            .unwrap();
        std::fs::write(dir.join("tls.crt"), leaf.cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), leaf.key_pem).unwrap();
    }

    fn cn(r: &ReloadingCert) -> String {
        crate::peer_common_name(r.current().cert[0].as_ref()).unwrap()
    }

    #[test]
    fn reload_swaps_valid_pairs_and_keeps_the_old_one_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        write_leaf(dir.path(), "first");
        let r =
            ReloadingCert::new(&dir.path().join("tls.crt"), &dir.path().join("tls.key")).unwrap();
        assert_eq!(cn(&r), "first");
        assert_eq!(r.reload(), Ok(false), "unchanged files");
        write_leaf(dir.path(), "second");
        assert_eq!(r.reload(), Ok(true));
        assert_eq!(cn(&r), "second");
        std::fs::write(dir.path().join("tls.key"), "garbage").unwrap();
        assert!(r.reload().is_err());
        assert_eq!(
            cn(&r),
            "second",
            "a broken pair never replaces a working one"
        );
        // A cert with someone else's key is refused too.
        let other = tempfile::tempdir().unwrap();
        write_leaf(other.path(), "third");
        std::fs::copy(other.path().join("tls.crt"), dir.path().join("tls.crt")).unwrap();
        write_leaf(other.path(), "fourth");
        std::fs::copy(other.path().join("tls.key"), dir.path().join("tls.key")).unwrap();
        assert!(r.reload().is_err());
        assert_eq!(cn(&r), "second");
    }

    #[test]
    fn an_unusable_pair_fails_at_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tls.crt"), "x").unwrap();
        std::fs::write(dir.path().join("tls.key"), "y").unwrap();
        assert!(
            ReloadingCert::new(&dir.path().join("tls.crt"), &dir.path().join("tls.key")).is_err()
        );
    }
}
