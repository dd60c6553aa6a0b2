use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

use super::*;

/// Everything a collection sent, as (name, content) per file and the
/// refusal that ended it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Collected {
    files: Vec<(String, Vec<u8>)>,
    refused: Option<(String, String)>,
    chunks: usize,
}

fn bounds() -> Bounds {
    Bounds::from(&pb::CollectArtifactsRequest::default())
}

fn collected(at: &Location, bounds: Bounds) -> Collected {
    let mut c = Collected::default();
    let mut sizes = Vec::new();
    collect(at, bounds, |chunk| {
        match chunk.part.unwrap() {
            pb::artifact_chunk::Part::File(f) => {
                sizes.push(f.size);
                c.files.push((f.name, Vec::new()));
            }
            pb::artifact_chunk::Part::Data(d) => {
                assert!(!d.is_empty() && d.len() <= ARTIFACT_CHUNK_BYTES);
                c.chunks += 1;
                c.files.last_mut().unwrap().1.extend_from_slice(&d);
            }
            pb::artifact_chunk::Part::Refused(r) => {
                assert!(c.refused.is_none(), "nothing after a refusal");
                c.refused = Some((r.name, r.reason));
            }
        }
        true
    })
    .unwrap();
    if c.refused.is_none() {
        for ((name, data), size) in c.files.iter().zip(&sizes) {
            assert_eq!(data.len() as u64, *size, "{name}");
        }
    }
    c
}

/// A work root with a Run's artifacts directory in it.
fn setup() -> (tempfile::TempDir, Location, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let at = Location::new(&root.path().canonicalize().unwrap(), "0a-1");
    let dir = at.create().unwrap();
    (root, at, dir)
}

fn names(c: &Collected) -> Vec<&str> {
    c.files.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn the_directory_is_private_beside_the_working_directory_and_fresh_each_time() {
    let (root, at, dir) = setup();
    assert_eq!(
        dir,
        root.path().canonicalize().unwrap().join(".artifacts/0a-1")
    );
    assert_eq!(dir, at.path());
    for d in [&dir, &dir.parent().unwrap().to_path_buf()] {
        let md = std::fs::symlink_metadata(d).unwrap();
        assert!(md.is_dir());
        assert_eq!(md.permissions().mode() & 0o777, 0o700, "{}", d.display());
    }
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/f"), "x").unwrap();
    assert_eq!(at.create().unwrap(), dir);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "recreated empty"
    );
    at.remove().unwrap();
    assert!(!dir.exists());
    at.remove().unwrap();
    // A parent replaced by a link is replaced by a directory again, and
    // nothing is created or removed through it.
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("0a-1")).unwrap();
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    symlink(outside.path(), dir.parent().unwrap()).unwrap();
    at.remove().unwrap();
    assert!(outside.path().join("0a-1").exists());
    at.create().unwrap();
    assert!(
        !std::fs::symlink_metadata(dir.parent().unwrap())
            .unwrap()
            .is_symlink()
    );
    assert!(outside.path().join("0a-1").exists());
}

#[test]
fn files_come_depth_first_in_byte_order_with_their_bytes_in_bounded_chunks() {
    let (_root, at, dir) = setup();
    std::fs::create_dir_all(dir.join("b/c")).unwrap();
    std::fs::create_dir_all(dir.join("empty/deeper")).unwrap();
    let big: Vec<u8> = (0..(2 * ARTIFACT_CHUNK_BYTES + 5))
        .map(|i| (i % 251) as u8)
        .collect();
    std::fs::write(dir.join("b/c/big.bin"), &big).unwrap();
    std::fs::write(dir.join("b/a.txt"), "a").unwrap();
    std::fs::write(dir.join("B"), "upper").unwrap();
    std::fs::write(dir.join("a"), "").unwrap();
    std::fs::write(dir.join("b.txt"), "after b's").unwrap();
    let c = collected(&at, bounds());
    assert_eq!(c.refused, None);
    assert_eq!(names(&c), ["B", "a", "b/a.txt", "b/c/big.bin", "b.txt"]);
    assert_eq!(c.files[1].1, b"");
    assert_eq!(c.files[3].1, big);
    // Three chunks for the big file, one each for the others but the empty.
    assert_eq!(c.chunks, 3 + 3);
}

#[test]
fn a_missing_or_empty_directory_is_an_empty_stream() {
    let (_root, at, dir) = setup();
    std::fs::create_dir(dir.join("nothing")).unwrap();
    assert_eq!(collected(&at, bounds()), Collected::default());
    at.remove().unwrap();
    assert_eq!(collected(&at, bounds()), Collected::default());
    let root = tempfile::tempdir().unwrap();
    let never = Location::new(root.path(), "0b");
    assert_eq!(collected(&never, bounds()), Collected::default());
}

/// What a case is, how it is made, the name refused and a part of why.
type Case<'a> = (&'a str, &'a dyn Fn(&Path), &'a str, &'a str);

#[test]
fn what_cannot_be_an_artifact_is_refused_by_name_and_ends_the_stream() {
    let cases: [Case; 7] = [
        (
            "symlink",
            &|d| symlink("/etc/passwd", d.join("p")).unwrap(),
            "p",
            "symbolic link (to /etc/passwd)",
        ),
        (
            "symlinked dir",
            &|d| symlink("/etc", d.join("p")).unwrap(),
            "p",
            "symbolic link (to /etc)",
        ),
        (
            "hard link",
            &|d| {
                std::fs::write(d.join("one"), "x").unwrap();
                std::fs::hard_link(d.join("one"), d.join("p")).unwrap();
            },
            "one",
            "2 hard links",
        ),
        (
            "fifo",
            &|d| {
                nix::unistd::mkfifo(&d.join("p"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
            },
            "p",
            "FIFO",
        ),
        (
            "socket",
            &|d| {
                // The socket's file stays when the listener is dropped.
                std::os::unix::net::UnixListener::bind(d.join("p")).unwrap();
            },
            "p",
            "socket",
        ),
        (
            "bad name",
            &|d| std::fs::write(d.join("a b"), "x").unwrap(),
            "a b",
            "character other than",
        ),
        (
            "bad directory name",
            &|d| {
                std::fs::create_dir(d.join("a b")).unwrap();
                std::fs::write(d.join("a b/f"), "x").unwrap();
            },
            "a b",
            "character other than",
        ),
    ];
    for (what, make, name, reason) in cases {
        let (_root, at, dir) = setup();
        std::fs::write(dir.join("0-first"), "kept").unwrap();
        make(&dir);
        std::fs::write(dir.join("z-never"), "x").unwrap();
        let c = collected(&at, bounds());
        assert_eq!(names(&c), ["0-first"], "{what}");
        let (n, r) = c.refused.unwrap();
        assert_eq!(n, name, "{what}");
        assert!(r.contains(reason), "{what}: {r}");
    }
}

#[test]
fn a_name_that_is_not_utf8_is_refused_lossily() {
    let (_root, at, dir) = setup();
    std::fs::write(dir.join(OsStr::from_bytes(b"bad\xff")), "x").unwrap();
    let c = collected(&at, bounds());
    let (n, r) = c.refused.unwrap();
    assert_eq!(n, "bad\u{fffd}");
    assert!(r.contains("UTF-8"), "{r}");
}

#[test]
fn an_empty_directory_is_skipped_whatever_its_name_but_depth_is_bounded() {
    let (_root, at, dir) = setup();
    std::fs::create_dir(dir.join("a b")).unwrap();
    let deep: PathBuf = std::iter::repeat_n("d", 40).collect();
    std::fs::create_dir_all(dir.join(&deep)).unwrap();
    std::fs::write(dir.join(&deep).join("f"), "x").unwrap();
    let c = collected(&at, bounds());
    assert!(c.files.is_empty());
    let (n, r) = c.refused.unwrap();
    assert_eq!(n.split('/').count(), 33, "{n}");
    assert!(r.contains("32 levels"), "{r}");
}

#[test]
fn the_bounds_stop_the_walk_naming_what_crossed_them() {
    let (_root, at, dir) = setup();
    for (name, len) in [("a", 10), ("b", 20), ("c", 30)] {
        std::fs::write(dir.join(name), vec![b'x'; len]).unwrap();
    }
    let with = |max_files, max_file_bytes, max_total_bytes| {
        Bounds::from(&pb::CollectArtifactsRequest {
            run_uid: String::new(),
            max_files,
            max_file_bytes,
            max_total_bytes,
            ..Default::default()
        })
    };
    let c = collected(&at, with(2, 0, 0));
    assert_eq!(names(&c), ["a", "b"]);
    assert_eq!(c.refused, Some(("".into(), "more than 2 files".into())));
    let c = collected(&at, with(0, 25, 0));
    assert_eq!(names(&c), ["a", "b"]);
    let (n, r) = c.refused.unwrap();
    assert_eq!(n, "c");
    assert!(r.contains("30 bytes") && r.contains("25 bytes"), "{r}");
    let c = collected(&at, with(0, 0, 35));
    assert_eq!(names(&c), ["a", "b"]);
    let (n, r) = c.refused.unwrap();
    assert_eq!(n, "c");
    assert!(r.contains("60 bytes") && r.contains("35 bytes"), "{r}");
    assert_eq!(collected(&at, with(3, 30, 60)).refused, None);
    // 0 is the default: 1000 files.
    assert_eq!(bounds().max_files, 1000);
}

#[test]
fn an_artifacts_directory_replaced_by_a_link_is_not_followed() {
    let (_root, at, dir) = setup();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    std::fs::remove_dir(&dir).unwrap();
    symlink(outside.path(), &dir).unwrap();
    let c = collected(&at, bounds());
    assert!(c.files.is_empty());
    let (n, r) = c.refused.unwrap();
    assert_eq!(n, "");
    assert!(r.contains("not a directory"), "{r}");
}

#[test]
fn a_receiver_that_goes_away_stops_the_reading() {
    let (_root, at, dir) = setup();
    std::fs::write(dir.join("big"), vec![0u8; 4 * ARTIFACT_CHUNK_BYTES]).unwrap();
    let mut calls = 0;
    let s = collect(&at, bounds(), |_| {
        calls += 1;
        calls < 2
    })
    .unwrap();
    assert_eq!(calls, 2, "the header, one chunk, nothing after");
    assert!(s.abandoned && !s.refused);
    assert_eq!(s.bytes, ARTIFACT_CHUNK_BYTES as u64);
}

#[test]
fn a_single_link_file_has_one_link() {
    // The hard-link rule does not refuse ordinary files.
    let (_root, at, dir) = setup();
    std::fs::write(dir.join("f"), "x").unwrap();
    assert_eq!(std::fs::metadata(dir.join("f")).unwrap().nlink(), 1);
    assert_eq!(names(&collected(&at, bounds())), ["f"]);
}
