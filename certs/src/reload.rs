//! A certificate and key reloaded in process when their files change (a
//! rotated Secret mount, the operator's or cert-manager's renewals): new
//! handshakes get the new certificate, established connections are not
//! dropped. A broken pair on disk is refused and the previous one stays in
//! service. Used as a server's certificate resolver (the gateway's HTTPS
//! listener, runtimed's port) and as a client's (mTLS clients).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, mpsc};
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

/// How long a change to the watched directories is left to settle before
/// the files are read.
pub const SETTLE: Duration = Duration::from_millis(50);

/// The directory a file's changes show up in (`.` for a bare file name).
fn parent_dir(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
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

    /// Re-reads the files when their directories change, and at least every
    /// `backstop`, on a thread of its own (`cert-watch`) that ends once the
    /// pair is dropped.
    ///
    /// Changes are noticed through inotify (`notify`), so a rotation is in
    /// service within [`SETTLE`] of its last write and the thread sleeps
    /// while nothing changes. The directories are watched, not the files: a
    /// Kubernetes Secret mount swaps a `..data` symlink, and an editor or
    /// `cp` may replace a file. `backstop` covers file systems that send no
    /// notifications; where no watcher can be set up (the per-user inotify
    /// limit, a kernel without inotify) the files are polled every `backstop`.
    pub fn watch(self: &Arc<Self>, backstop: Duration) {
        let (tx, changes) = mpsc::channel();
        let watcher = self.dir_watcher(tx);
        self.spawn_watch(backstop, watcher, changes);
    }

    /// The `cert-watch` thread: a reload after each change on `changes`
    /// (settled), or after `backstop` without one; polling only once the
    /// sender is gone.
    fn spawn_watch(
        self: &Arc<Self>,
        backstop: Duration,
        watcher: Option<notify::RecommendedWatcher>,
        changes: mpsc::Receiver<()>,
    ) {
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("cert-watch".into())
            .spawn(move || {
                // Dropped with the thread: its own thread and inotify descriptor go too.
                let _watcher = watcher;
                loop {
                    match changes.recv_timeout(backstop) {
                        Ok(()) => {
                            // A rotation writes more than one file: let it finish.
                            std::thread::sleep(SETTLE);
                            while changes.try_recv().is_ok() {}
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(backstop),
                    }
                    let Some(this) = weak.upgrade() else { return };
                    this.reload_and_log();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(cert = %self.cert_path.display(), error = %e, "certificate files are not watched");
        }
    }

    /// A watcher sending on `tx` when anything in the files' directories
    /// changes; `None` (logged) when none can be set up.
    fn dir_watcher(&self, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
        use notify::Watcher;
        let mut dirs = vec![parent_dir(&self.cert_path), parent_dir(&self.key_path)];
        dirs.dedup();
        let made = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            // Reads (the reload's own among them) change nothing; an error
            // (a lost event queue) may hide a change.
            if !matches!(&event, Ok(e) if e.kind.is_access()) {
                let _ = tx.send(());
            }
        })
        .and_then(|mut w| {
            for dir in &dirs {
                w.watch(dir, notify::RecursiveMode::NonRecursive)?;
            }
            Ok(w)
        });
        match made {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(cert = %self.cert_path.display(), error = %e, "certificate files cannot be watched; polling them instead");
                None
            }
        }
    }

    fn reload_and_log(&self) {
        match self.reload() {
            Ok(true) => tracing::info!(cert = %self.cert_path.display(), "certificate reloaded"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(cert = %self.cert_path.display(), error = %e, "keeping the previous certificate")
            }
        }
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

    /// A directory holding a pair for "first", and that pair loaded.
    fn first_pair() -> (tempfile::TempDir, Arc<ReloadingCert>) {
        let dir = tempfile::tempdir().unwrap();
        write_leaf(dir.path(), "first");
        let r =
            ReloadingCert::new(&dir.path().join("tls.crt"), &dir.path().join("tls.key")).unwrap();
        (dir, r)
    }

    fn wait_for_cn(r: &ReloadingCert, want: &str) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if cn(r) == want {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// The backstop is an hour: only a change notification can reload.
    const NO_BACKSTOP: Duration = Duration::from_secs(3600);

    #[test]
    fn a_watched_pair_is_reloaded_when_its_files_change() {
        let (dir, r) = first_pair();
        r.watch(NO_BACKSTOP);
        write_leaf(dir.path(), "second");
        assert!(wait_for_cn(&r, "second"), "rewritten in place");
        // Replaced by a rename, as `install` and editors do.
        let other = tempfile::tempdir_in(dir.path()).unwrap();
        write_leaf(other.path(), "third");
        std::fs::rename(other.path().join("tls.key"), dir.path().join("tls.key")).unwrap();
        std::fs::rename(other.path().join("tls.crt"), dir.path().join("tls.crt")).unwrap();
        assert!(wait_for_cn(&r, "third"), "replaced by rename");
    }

    #[test]
    fn a_kubernetes_secret_mount_swapping_its_data_link_is_followed() {
        // The kubelet's layout: tls.crt -> ..data/tls.crt, ..data -> a
        // timestamped directory, swapped by renaming a new link over it.
        use std::os::unix::fs::symlink;
        let mount = tempfile::tempdir().unwrap();
        let m = mount.path();
        std::fs::create_dir(m.join("..v1")).unwrap();
        write_leaf(&m.join("..v1"), "first");
        symlink("..v1", m.join("..data")).unwrap();
        symlink("..data/tls.crt", m.join("tls.crt")).unwrap();
        symlink("..data/tls.key", m.join("tls.key")).unwrap();
        let r = ReloadingCert::new(&m.join("tls.crt"), &m.join("tls.key")).unwrap();
        assert_eq!(cn(&r), "first");
        r.watch(NO_BACKSTOP);

        std::fs::create_dir(m.join("..v2")).unwrap();
        write_leaf(&m.join("..v2"), "second");
        symlink("..v2", m.join("..data_tmp")).unwrap();
        std::fs::rename(m.join("..data_tmp"), m.join("..data")).unwrap();
        std::fs::remove_dir_all(m.join("..v1")).unwrap();
        assert!(wait_for_cn(&r, "second"));
    }

    #[test]
    fn a_broken_rotation_on_a_watched_pair_keeps_the_old_one_until_a_good_one_comes() {
        let (dir, r) = first_pair();
        r.watch(NO_BACKSTOP);
        std::fs::write(dir.path().join("tls.key"), "garbage").unwrap();
        // Read back by the watch: the broken key is what is on disk, and
        // the first pair is still in service.
        std::thread::sleep(SETTLE * 4);
        assert_eq!(cn(&r), "first");
        write_leaf(dir.path(), "second");
        assert!(wait_for_cn(&r, "second"));
    }

    #[test]
    fn without_notifications_the_backstop_still_reloads() {
        let (dir, r) = first_pair();
        // No watcher, as where none can be set up: the sender is gone.
        let (tx, changes) = mpsc::channel();
        drop(tx);
        r.spawn_watch(Duration::from_millis(50), None, changes);
        write_leaf(dir.path(), "second");
        assert!(wait_for_cn(&r, "second"));
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
