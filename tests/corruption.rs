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

#[test]
fn a_hundred_flipped_bytes_are_each_named_and_never_give_a_wrong_answer() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.pcap");
    synth(&input, &d.path().join("truth.json"), 11, "1s", "20M", None);
    let clean = d.path().join("clean");
    import_ok(
        &clean,
        &["--block-size", "16K", "--segment-size", "512K"],
        &[p(&input)],
    );
    let reference = decode(&query_ok(&clean, &d.path().join("ref.pcap"), &[])).whole("reference");
    let all: Vec<(u64, Vec<u8>)> = reference
        .packets
        .iter()
        .map(|p| (p.ts_ns, p.data.clone()))
        .collect();
    let segs: Vec<PathBuf> = files(&clean.join("segments"))
        .into_iter()
        .filter(|f| f.to_string_lossy().ends_with(".pcapng.zst"))
        .collect();
    let idxs = files(&clean.join("index"));
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
