use std::os::unix::fs::symlink;

use super::*;

fn root() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    (d, root)
}

const UID: &str = "0f0e-01";

fn file(path: &str, size: u64) -> pb::stage_chunk::Part {
    pb::stage_chunk::Part::File(pb::StagedFile {
        path: path.into(),
        size,
    })
}

fn data(d: &[u8]) -> pb::stage_chunk::Part {
    pb::stage_chunk::Part::Data(d.to_vec())
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_staging_dropped_before_its_commit_leaves_nothing() {
    let (_d, root) = root();
    let inputs = Inputs::new(root.clone());
    let mut s = inputs.begin(UID, 1).unwrap();
    s.push(file("a/b/c.txt", 3)).unwrap();
    s.push(data(b"ab")).unwrap();
    assert_eq!(listing(&root.join(PARENT)).len(), 1);
    drop(s);
    assert!(listing(&root.join(PARENT)).is_empty());
    // A short last file fails the commit and leaves nothing either.
    let mut s = inputs.begin(UID, 1).unwrap();
    s.push(file("x", 3)).unwrap();
    let e = inputs.commit(s).unwrap_err();
    assert!(matches!(e, Error::Invalid(m) if m.contains("\"x\"")));
    assert!(listing(&root.join(PARENT)).is_empty());
    assert!(matches!(inputs.take(UID, 1, &root), Err(Error::Inputs(_))));
}

#[test]
fn staging_never_follows_a_link_planted_in_the_work_root() {
    let (_d, root) = root();
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), root.join(PARENT)).unwrap();
    let inputs = Inputs::new(root.clone());
    let mut s = inputs.begin(UID, 1).unwrap();
    s.push(file("f", 1)).unwrap();
    s.push(data(b"1")).unwrap();
    assert_eq!(inputs.commit(s).unwrap(), (1, 1));
    assert!(listing(outside.path()).is_empty());
    let md = std::fs::symlink_metadata(root.join(PARENT)).unwrap();
    assert!(md.is_dir());
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::read(root.join(PARENT).join(UID).join("f")).unwrap(),
        b"1"
    );
}

#[test]
fn taking_moves_every_entry_or_none() {
    let (_d, root) = root();
    let inputs = Inputs::new(root.clone());
    let ws = root.join(UID);
    std::fs::create_dir(&ws).unwrap();
    let stage = |paths: &[&str]| {
        let mut s = inputs.begin(UID, 1).unwrap();
        for p in paths {
            s.push(file(p, 1)).unwrap();
            s.push(data(b"x")).unwrap();
        }
        inputs.commit(s).unwrap();
    };
    stage(&["d/e.txt", "main.sh", "z"]);
    std::fs::write(ws.join("main.sh"), b"source").unwrap();
    let e = inputs.take(UID, 1, &ws).unwrap_err();
    assert!(
        matches!(&e, Error::Inputs(m) if m.contains("main.sh")),
        "{e}"
    );
    assert_eq!(listing(&ws), ["main.sh"]);
    assert_eq!(std::fs::read(ws.join("main.sh")).unwrap(), b"source");
    assert!(listing(&root.join(PARENT)).is_empty());

    stage(&["d/e.txt", "z"]);
    assert!(matches!(inputs.take(UID, 2, &ws), Err(Error::Inputs(_))));
    inputs.take(UID, 1, &ws).unwrap();
    assert_eq!(listing(&ws), ["d", "main.sh", "z"]);
    assert_eq!(std::fs::read(ws.join("d/e.txt")).unwrap(), b"x");
    assert!(listing(&root.join(PARENT)).is_empty());
}
