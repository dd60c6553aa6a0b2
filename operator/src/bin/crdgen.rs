//! Writes the CRD manifests into `charts/kruntimes/crds/` (or the directory
//! given as the only argument). A test fails when the committed files are
//! stale.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // `cargo run` says where this checkout is (a shared target
            // directory may hold a build from another checkout).
            std::env::var_os("CARGO_MANIFEST_DIR")
                .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
                .join("../charts/kruntimes/crds")
        });
    std::fs::create_dir_all(&dir)?;
    for (file, crd) in kruntimes_api::crds::crds() {
        let path = dir.join(file);
        std::fs::write(&path, kruntimes_api::crds::crd_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
