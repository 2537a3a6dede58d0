//! One flipped byte at a time, 120 times, across the segments (head frame, segment header,
//! block headers, block frames, footers, trailers) and side indexes of a sealed store. Each
//! time: no panic, no wrong answer (the export is the undamaged store's, or a subset of it
//! in the same order with the missing packets accounted for and the answer marked partial),
//! every intact block still returned, and `capsule verify` names the damaged file.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::*;

/// A small xorshift generator: the test is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// A sealed store of 1 s of synth traffic (`seed`) in small segments under `dir/clean`, its
/// export (the reference answer) and its segment files.
fn clean_store(dir: &Path, seed: u64) -> (PathBuf, Capture, Vec<PathBuf>) {
    let input = dir.join("in.pcap");
    synth(&input, &dir.join("truth.json"), seed, "1s", "20M", None);
    let clean = dir.join("clean");
    import_ok(
        &clean,
        &["--block-size", "16K", "--segment-size", "512K"],
        &[p(&input)],
    );
    let reference = decode(&query_ok(&clean, &dir.join("ref.pcap"), &[])).whole("reference");
    let segs = files(&clean.join("segments"))
        .into_iter()
        .filter(|f| f.to_string_lossy().ends_with(".pcapng.zst"))
        .collect();
    (clean, reference, segs)
}

#[test]
fn a_hundred_flipped_bytes_are_each_named_and_never_give_a_wrong_answer() {
    let d = tempfile::tempdir().unwrap();
    let (clean, reference, segs) = clean_store(d.path(), 11);
    let all: Vec<(u64, Vec<u8>)> = reference
        .packets
        .iter()
        .map(|p| (p.ts_ns, p.data.clone()))
        .collect();
    // The segments' side indexes (the store-wide catalog beside them is checked apart).
    let idxs: Vec<_> = files(&clean.join("index"))
        .into_iter()
        .filter(|f| f.to_string_lossy().ends_with(".idx"))
        .collect();
    assert!(segs.len() >= 3 && idxs.len() == segs.len());

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut tried, mut named, mut whole, mut partial, mut wrong) = (0, 0, 0, 0, 0);
    let mut by_place: HashMap<&str, u32> = HashMap::new();
    for round in 0..120 {
        let store = d.path().join(format!("s{round}"));
        copy_dir(&clean, &store);
        // Where: a third in index files, the rest in segments, with the ends of segment
        // files (head, header, footer, trailer) as likely as their middles.
        let (file, place) = if rng.below(3) == 0 {
            (idxs[rng.below(idxs.len() as u64) as usize].clone(), "index")
        } else {
            let f = segs[rng.below(segs.len() as u64) as usize].clone();
            let place = ["head", "tail", "middle"][rng.below(3) as usize];
            (f, place)
        };
        let file = store.join(file.strip_prefix(&clean).unwrap());
        let len = std::fs::metadata(&file).unwrap().len();
        let at = match place {
            "head" => rng.below(len.min(300)),
            "tail" => len - 1 - rng.below(len.min(600)),
            _ => rng.below(len),
        };
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[at as usize] ^= 1 << rng.below(8);
        std::fs::write(&file, &bytes).unwrap();
        tried += 1;
        *by_place.entry(place).or_default() += 1;
        let what = format!("round {round}: {} byte {at} ({place})", file.display());

        // verify names the damaged file.
        let v = run(capsule().args(["verify", "--store", p(&store)]));
        assert!(
            matches!(v.status.code(), Some(0) | Some(1)),
            "{what}: verify must not crash: {v:?}"
        );
        if v.status.code() == Some(1) && stdout_str(&v).contains(p(&file)) {
            named += 1;
        } else {
            eprintln!("{what}: verify did not name it: {}", stdout_str(&v));
        }

        // The export: the whole answer, or a partial one that says so.
        let out = store.join("export.pcap");
        let q = run(capsule().args(["query", "--store", p(&store), "-w", p(&out)]));
        let code = q.status.code();
        assert!(
            matches!(code, Some(0) | Some(3)),
            "{what}: exit {code:?}: {}",
            stderr_str(&q)
        );
        let got = decode_file(&out).whole(&what);
        let got: Vec<(u64, Vec<u8>)> = got
            .packets
            .iter()
            .map(|p| (p.ts_ns, p.data.clone()))
            .collect();
        if code == Some(0) {
            if got == all {
                whole += 1;
            } else {
                wrong += 1;
                eprintln!("{what}: exit 0 with a different answer");
            }
            continue;
        }
        // Partial: a subsequence of the reference, the rest accounted for.
        let mut it = all.iter();
        let subsequence = got.iter().all(|g| it.any(|a| a == g));
        let missing: u64 = stderr_str(&q)
            .lines()
            .filter(|l| l.contains("skipped damaged block"))
            .filter_map(|l| {
                l.split("): ")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        let unreadable = stderr_str(&q).contains("cannot be read");
        if subsequence && (unreadable || got.len() as u64 + missing == all.len() as u64) {
            partial += 1;
        } else {
            wrong += 1;
            eprintln!(
                "{what}: partial answer of {} packets, {missing} reported missing, of {}: {}",
                got.len(),
                all.len(),
                stderr_str(&q)
            );
        }
        std::fs::remove_dir_all(&store).unwrap();
    }
    eprintln!(
        "corruption: tried {tried} ({by_place:?}), named by verify {named}, whole answers \
         {whole}, partial answers with the rest returned {partial}, wrong answers {wrong}"
    );
    assert_eq!(wrong, 0, "no wrong answer");
    assert_eq!(named, tried, "verify names every damaged file");
    assert!(tried >= 100);
}

/// The store-level damage of issue 26, as one run over copies of one clean store: a sealed
/// segment cut short, a segment under another's name, a segment deleted from the middle, a
/// missing and a stale side index, damaged metadata files, and a segment rebuilt by
/// `verify --repair`. For each, `query` and `flows` either give the clean store's answer
/// with exit 0, or say the answer is partial (exit 3) and name the segment or file; never
/// fewer packets or flows with exit 0. (A damaged journal needs an open segment: flows, top
/// and query over one are checked in tests/index_journal.rs,
/// `kill_9_with_a_fold_checkpoint_present_recovers_to_a_correct_index`.)
#[test]
fn store_damage_cases_never_answer_short_with_exit_0() {
    let d = tempfile::tempdir().unwrap();
    let (clean, reference, segs) = clean_store(d.path(), 13);
    let flows_of = |store: &Path| {
        let o = run(capsule().args(["flows", "--store", p(store), "--json", "--limit", "100000"]));
        (o.status.code(), stdout_str(&o), stderr_str(&o))
    };
    let (code, ref_flows, err) = flows_of(&clean);
    assert_eq!(code, Some(0), "{err}");
    assert!(segs.len() >= 3, "the test needs several segments");
    let name = |f: &Path| f.file_name().unwrap().to_string_lossy().into_owned();
    let idx_of = |seg: &Path| {
        let n = name(seg);
        clean
            .join("index")
            .join(format!("{}.idx", n.trim_end_matches(".pcapng.zst")))
    };
    assert!(idx_of(&segs[1]).exists(), "{}", idx_of(&segs[1]).display());

    let cases = [
        "cut-short",
        "renamed",
        "deleted",
        "index-missing",
        "index-stale",
        "metadata",
        "repaired",
    ];
    let mut summary = Vec::new();
    for case in cases {
        let store = d.path().join(case);
        copy_dir(&clean, &store);
        let in_store = |f: &Path| store.join(f.strip_prefix(&clean).unwrap());
        let (seg1, seg2) = (in_store(&segs[1]), in_store(&segs[2]));
        // What the answer must name when it is partial.
        let named = match case {
            "cut-short" => {
                let len = std::fs::metadata(&seg1).unwrap().len();
                let f = std::fs::OpenOptions::new().write(true).open(&seg1).unwrap();
                f.set_len(len / 2).unwrap();
                name(&seg1)
            }
            "renamed" => {
                std::fs::copy(&seg1, &seg2).unwrap();
                name(&seg2)
            }
            "deleted" => {
                std::fs::remove_file(&seg1).unwrap();
                name(&seg1)
            }
            "index-missing" => {
                std::fs::remove_file(in_store(&idx_of(&segs[1]))).unwrap();
                name(&seg1)
            }
            "index-stale" => {
                std::fs::copy(in_store(&idx_of(&segs[2])), in_store(&idx_of(&segs[1]))).unwrap();
                name(&seg1)
            }
            "metadata" => {
                for f in ["capsule-store.json", "retention.json", "last-seq"] {
                    let path = store.join(f);
                    if path.exists() {
                        std::fs::write(&path, b"\x00garbage{").unwrap();
                    }
                }
                String::new()
            }
            _ => {
                let len = std::fs::metadata(&seg1).unwrap().len();
                let mut b = std::fs::read(&seg1).unwrap();
                b[(len / 2) as usize] ^= 0x5A;
                std::fs::write(&seg1, b).unwrap();
                run_ok(capsule().args(["verify", "--store", p(&store), "--repair"]));
                name(&seg1)
            }
        };
        let out = store.join("export.pcap");
        let q = run(capsule().args(["query", "--store", p(&store), "-w", p(&out)]));
        let got = decode_file(&out).whole(case);
        let seq_named = |err: &str| {
            named.is_empty()
                || err.contains(&named)
                || named
                    .trim_start_matches("seg-")
                    .split('.')
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| {
                        // "segment 2 (...)", or a list: "segment(s) [1, 2]".
                        [format!("segment {n}"), format!("[{n}]"), format!("[{n},")]
                            .iter()
                            .chain(&[format!(" {n}]"), format!(" {n},")])
                            .any(|s| err.contains(s.as_str()))
                    })
        };
        match q.status.code() {
            Some(0) => assert!(
                got.packets == reference.packets,
                "{case}: query exit 0 with {} of {} packets: {}",
                got.packets.len(),
                reference.packets.len(),
                stderr_str(&q)
            ),
            Some(3) => assert!(
                seq_named(&stderr_str(&q)),
                "{case}: a partial query does not name {named}: {}",
                stderr_str(&q)
            ),
            other => panic!("{case}: query exit {other:?}: {}", stderr_str(&q)),
        }
        let (code, flows, err) = flows_of(&store);
        match code {
            Some(0) => assert_eq!(flows, ref_flows, "{case}: flows exit 0 with another answer"),
            Some(3) => assert!(seq_named(&err), "{case}: partial flows name nothing: {err}"),
            other => panic!("{case}: flows exit {other:?}: {err}"),
        }
        summary.push(format!(
            "{case}: query {:?}, flows {code:?}",
            q.status.code()
        ));
    }
    eprintln!("store damage: {}", summary.join("; "));
}
