//! The store touches nothing outside itself (issue [hardening] item 4).
//!
//! The root capture writes into a directory others may be able to write into. A symlink
//! planted at any name the store writes (or in place of `segments/` or `index/`) must never
//! be followed: the canary file it points at stays untouched, and the command fails with an
//! error naming the symlink. Temporary names are unpredictable, so nothing can be planted
//! there. Several writers creating one store at once: one wins, the others get the lock
//! error.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;

const CANARY: &[u8] = b"canary: must never change\n";

/// A temp dir with a small capture file and a canary outside every store.
struct Setup {
    dir: tempfile::TempDir,
    pcap: PathBuf,
    canary: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let pcap = dir.path().join("in.pcap");
        synth(&pcap, &dir.path().join("in.json"), 7, "1s", "8M", None);
        let canary = dir.path().join("canary");
        std::fs::write(&canary, CANARY).unwrap();
        Setup { dir, pcap, canary }
    }

    /// A store with one sealed, indexed segment.
    fn store(&self, name: &str) -> PathBuf {
        let store = self.dir.path().join(name);
        import_ok(&store, &[], &[p(&self.pcap)]);
        store
    }

    fn canary_untouched(&self, what: &str) {
        let m = std::fs::symlink_metadata(&self.canary).unwrap();
        assert!(m.is_file(), "{what}: the canary is no longer a file");
        assert_eq!(
            std::fs::read(&self.canary).unwrap(),
            CANARY,
            "{what}: the canary was written through a symlink"
        );
    }
}

/// Replaces `path` (if it exists) with a symlink to `target`.
fn plant(path: &Path, target: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::rename(path, path.with_extension("moved")).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
    std::os::unix::fs::symlink(target, path).unwrap();
}

/// `out` succeeded and warned, naming `link` as a symlink (derived data: the writer goes on
/// without its index, which the next writer or `capsule reindex` rebuilds).
fn warned_naming(out: &std::process::Output, link: &Path, what: &str) {
    let err = stderr_str(out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: the writer goes on\n{err}"
    );
    assert!(
        err.contains(p(link)) && err.contains("is a symlink"),
        "{what}: the warning must name the symlink {}\n{err}",
        link.display()
    );
}

/// `out` failed, naming `link` as a symlink.
fn refused_naming(out: &std::process::Output, link: &Path, what: &str) {
    let err = stderr_str(out);
    assert_eq!(out.status.code(), Some(1), "{what}: must fail\n{err}");
    assert!(
        err.contains(p(link)) && err.contains("is a symlink"),
        "{what}: the error must name the symlink {}\n{err}",
        link.display()
    );
}

#[test]
fn s01_symlinks_at_every_name_the_store_writes_are_refused() {
    let s = Setup::new();
    let seg1 = "segments/seg-000000000001.pcapng.zst";
    for (i, name) in [
        "capsule-store.json",
        "writer.lock",
        seg1,
        "segments/.seg-000000000002.pcapng.zst.open",
        "segments/last-seq",
        "index/seg-000000000001.idx",
    ]
    .into_iter()
    .enumerate()
    {
        let store = s.store(&format!("store{i}"));
        let link = store.join(name);
        plant(&link, &s.canary);
        let out = import(&store, &[], &[p(&s.pcap)]);
        if name.starts_with("index/") {
            // The index is derived data: a writer names the symlink and goes on without it.
            warned_naming(&out, &link, &format!("import with {name} planted"));
        } else {
            refused_naming(&out, &link, &format!("import with {name} planted"));
        }
        s.canary_untouched(name);
        if name.starts_with("index/") || name == seg1 {
            let out = run(capsule().args(["reindex", "--store", p(&store)]));
            refused_naming(&out, &link, &format!("reindex with {name} planted"));
            s.canary_untouched(name);
        }
    }
    // Readers refuse them too.
    let store = s.store("reader");
    let link = store.join(seg1);
    plant(&link, &s.canary);
    let out = run(capsule().args(["segments", "--store", p(&store)]));
    refused_naming(&out, &link, "segments with a planted segment");
    // On a store of its own: status lists the segments before it reads the status file.
    let store = s.store("reader-status");
    let link = store.join("capture-status.json");
    plant(&link, &s.canary);
    let out = run(capsule().args(["status", "--store", p(&store)]));
    assert!(
        stderr_str(&out).contains("is a symlink") && stderr_str(&out).contains(p(&link)),
        "status with a planted status file: {}",
        stderr_str(&out)
    );
    s.canary_untouched("readers");
}

#[test]
fn s02_symlinked_segments_or_index_directory_is_refused() {
    let s = Setup::new();
    for (i, sub) in ["segments", "index"].into_iter().enumerate() {
        let store = s.store(&format!("store{i}"));
        let outside = s.dir.path().join(format!("outside{i}"));
        std::fs::create_dir(&outside).unwrap();
        std::fs::copy(&s.canary, outside.join("canary")).unwrap();
        let link = store.join(sub);
        plant(&link, &outside);
        let out = import(&store, &[], &[p(&s.pcap)]);
        if sub == "index" {
            warned_naming(&out, &link, &format!("import with {sub}/ planted"));
        } else {
            refused_naming(&out, &link, &format!("import with {sub}/ planted"));
        }
        let out = run(capsule().args(["reindex", "--store", p(&store)]));
        refused_naming(&out, &link, &format!("reindex with {sub}/ planted"));
        let names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["canary"], "{sub}/: files written outside the store");
        assert_eq!(std::fs::read(outside.join("canary")).unwrap(), CANARY);
    }
}

#[test]
fn s03_old_fixed_temporary_names_planted_change_nothing() {
    let s = Setup::new();
    // A new store: its identity file was once written through `.capsule-store.json.tmp`.
    let store = s.dir.path().join("new");
    std::fs::create_dir(&store).unwrap();
    plant(&store.join(".capsule-store.json.tmp"), &s.canary);
    plant(&store.join(".capture-status.json.tmp"), &s.canary);
    import_ok(&store, &[], &[p(&s.pcap)]);
    s.canary_untouched("new store");
    // The side index was once written through `index/.seg-N.idx.tmp`.
    std::fs::remove_file(store.join("index/seg-000000000001.idx")).unwrap();
    plant(&store.join("index/.seg-000000000001.idx.tmp"), &s.canary);
    run_ok(capsule().args(["reindex", "--store", p(&store)]));
    assert!(store.join("index/seg-000000000001.idx").is_file());
    s.canary_untouched("reindex");
    // No temporary file is left behind, and the old fixed names were not used.
    for sub in ["", "index", "segments"] {
        for e in std::fs::read_dir(store.join(sub)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let planted = name.starts_with(".capsule-store.json.tmp")
                || name.starts_with(".capture-status.json.tmp")
                || name.starts_with(".seg-000000000001.idx.tmp");
            assert!(
                planted || !name.ends_with(".tmp"),
                "temporary file {name} left in {sub}/"
            );
        }
    }
}

#[test]
fn s04_a_symlinked_store_root_is_the_operators_choice() {
    let s = Setup::new();
    let real = s.dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = s.dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    import_ok(&link, &[], &[p(&s.pcap)]);
    run_ok(capsule().args(["reindex", "--store", p(&link)]));
    assert!(real.join("capsule-store.json").is_file());
    assert_eq!(segments(&link).len(), 1);
}

#[test]
fn s05_writers_creating_one_store_at_once_one_wins_the_rest_get_the_lock_error() {
    let s = Setup::new();
    let input = std::fs::read(&s.pcap).unwrap();
    for round in 0..5 {
        let store = s.dir.path().join(format!("new{round}"));
        // From a pipe kept open, so the winner holds the lock until every loser has
        // given up: exactly one can succeed.
        let mut kids: Vec<Child> = (0..8)
            .map(|_| {
                capsule()
                    .args(["import", "--store", p(&store), "-"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut stdins: Vec<_> = kids.iter_mut().map(|k| k.stdin.take()).collect();
        for w in stdins.iter_mut().flatten() {
            // A loser may have exited already: a closed pipe is fine.
            let _ = w.write_all(&input);
        }
        let t0 = Instant::now();
        let mut exited = vec![false; kids.len()];
        while exited.iter().filter(|e| !**e).count() > 1 && t0.elapsed() < Duration::from_secs(30) {
            for (k, e) in kids.iter_mut().zip(exited.iter_mut()) {
                *e = *e || k.try_wait().unwrap().is_some();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            exited.iter().filter(|e| !**e).count(),
            1,
            "round {round}: exactly one writer keeps running"
        );
        drop(stdins);
        let mut wins = 0;
        for k in kids {
            let out = k.wait_with_output().unwrap();
            let err = stderr_str(&out);
            if out.status.success() {
                wins += 1;
                continue;
            }
            assert!(
                err.contains("being written by another process"),
                "round {round}: a loser must get the lock error, not: {err}"
            );
            for bad in [
                "rename",
                "fsync",
                "EOF",
                "end of file",
                "not a capsule store",
            ] {
                assert!(!err.contains(bad), "round {round}: {err}");
            }
        }
        assert_eq!(wins, 1, "round {round}");
        assert_eq!(segments(&store).len(), 1, "round {round}");
    }
}

/// Packet data is not for every user of the machine ([ops] least privilege): whatever the
/// umask, the store creates its files 0640 and its directories 0750, and an export is 0640.
#[test]
fn s06_store_files_are_0640_and_directories_0750_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let s = Setup::new();
    let store = s.dir.path().join("store");
    let out = s.dir.path().join("out.pcap");
    for umask in ["000", "077"] {
        let _ = std::fs::remove_dir_all(&store);
        let _ = std::fs::remove_file(&out);
        let script = format!(
            "umask {umask} && {bin} import --store {st} {pcap} && {bin} query --store {st} \
             -w {out} --count >/dev/null && {bin} query --store {st} -w {out} && {bin} flows \
             --store {st} >/dev/null",
            bin = bin(),
            st = p(&store),
            pcap = p(&s.pcap),
            out = p(&out),
        );
        sh_ok(&script);
        let mut seen = 0;
        let mut stack = vec![store.clone()];
        while let Some(dir) = stack.pop() {
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o750, "umask {umask}: {} is {mode:o}", dir.display());
            for e in std::fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                let md = e.metadata().unwrap();
                if md.is_dir() {
                    stack.push(e.path());
                } else {
                    let mode = md.permissions().mode() & 0o7777;
                    assert_eq!(
                        mode,
                        0o640,
                        "umask {umask}: {} is {mode:o}",
                        e.path().display()
                    );
                    seen += 1;
                }
            }
        }
        assert!(
            seen >= 4,
            "segment, index, identity, budgets, lock: {seen} files"
        );
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640, "umask {umask}: the export is {mode:o}");
    }
}
