//! `capsule verify`: check every byte of a store that can be checked, name each problem,
//! and with `--repair` rebuild what can be rebuilt without deleting data.

use std::process::ExitCode;

use anyhow::Result;
use capsule_store::verify::{verify_segment, Problem};
use capsule_store::{SegmentReader, SegmentState, Store};

use crate::cli::VerifyArgs;

pub fn run(a: &VerifyArgs) -> Result<ExitCode> {
    let store = Store::open(&a.store)?;
    let mut problems: Vec<Problem> = Vec::new();
    let mut repaired = Vec::new();
    let entries = store.list()?;
    // Segment files are only rewritten by the one writer.
    let lock = if a.repair {
        Some(store.lock_writer().map_err(|e| {
            anyhow::anyhow!(
                "{e:#}; --repair rewrites segment files, which only the writer may do (a \
                 running capture rebuilds damaged indexes itself when it next opens the store)"
            )
        })?)
    } else {
        None
    };
    // The segments' bytes read, on a terminal (not with --json).
    let progress = if a.json {
        crate::progress::Progress::hidden()
    } else {
        let total = entries
            .iter()
            .map(|e| std::fs::metadata(&e.path).map_or(0, |m| m.len()))
            .sum();
        crate::progress::Progress::bytes("verify", Some(total))
    };
    for (n, e) in entries.iter().enumerate() {
        progress.message(format!("segment {} of {}", n + 1, entries.len()));
        let len_before = std::fs::metadata(&e.path).map_or(0, |m| m.len());
        progress.add(len_before);
        let mut found = verify_segment(&e.path);
        // An open segment a live writer is appending to can be read mid-write: its last
        // block's header or frame, or (just created) its head frame, cut short. While the
        // file keeps growing it is read again (at most 5 times), and what the last reading
        // finds stands: damage stays where it is, a write in progress does not.
        let mut len = len_before;
        for _ in 0..5 {
            if e.state != SegmentState::Open || found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            match std::fs::metadata(&e.path) {
                Ok(m) if m.len() > len => len = m.len(),
                _ => break,
            }
            found = verify_segment(&e.path);
        }
        // A live writer may seal the open segment (renaming it) or retention delete a
        // sealed one while it is read: what the reading then found is no problem of the
        // store. A sealed one is verified under its new name.
        if !found.is_empty() && !e.path.exists() {
            let sealed = store
                .segments_dir()
                .join(capsule_store::segment::sealed_name(e.seq));
            found = if e.state == SegmentState::Open && sealed.exists() {
                verify_segment(&sealed)
            } else {
                Vec::new()
            };
        }
        let segment_damaged = !found.is_empty();
        let mut sealed = e.state == SegmentState::Sealed;
        if a.repair && segment_damaged {
            // A damaged segment is rebuilt the way recovery rebuilds a torn one: every
            // verified block kept, the damaged bytes moved aside, a new head and footer. An
            // open one has no writer (--repair holds the lock): recovery seals it, as the
            // next writer would.
            let open = store
                .segments_dir()
                .join(capsule_store::segment::open_name(e.seq));
            if sealed {
                capsule_store::fsx::rename(&e.path, &open, "reopen damaged segment for repair")?;
                capsule_store::segment::sync_dir(&store.segments_dir())?;
            }
            let r = capsule_store::segment::recover(&store.segments_dir(), &open)?;
            repaired.push(format!("segment {}: {r}", e.seq));
            sealed = r.sealed().is_some();
            if sealed {
                // The ledger keeps what a sealed segment was sealed with; this records what
                // it holds now, so that answers from the index alone name the loss too.
                store.record_repair(e.seq, r.kept_packets())?;
            }
            found = r
                .sealed()
                .map(|s| verify_segment(&s.path))
                .unwrap_or_default();
        }
        problems.extend(found);
        if !sealed || segment_damaged && !a.repair {
            continue;
        }
        let Ok(seg) = SegmentReader::open(
            &store
                .segments_dir()
                .join(capsule_store::segment::sealed_name(e.seq)),
        ) else {
            continue;
        };
        if let Some(why) = index_problem(&store, &seg, !a.repair) {
            let path = store
                .index_dir()
                .join(capsule_index::sideindex::index_name(e.seq));
            if a.repair {
                capsule_index::reindex(&store, &seg)?;
                repaired.push(format!("index of segment {}: rebuilt ({why})", e.seq));
            } else {
                problems.push(Problem {
                    path,
                    what: "index",
                    offset: None,
                    len: None,
                    detail: why,
                });
            }
        }
    }
    progress.finish();
    // The store's small metadata files: a damaged one is named, and --repair rebuilds it.
    if let Some(why) = store.identity_problem() {
        if a.repair {
            store.rewrite_identity()?;
            repaired.push(format!(
                "{}: rewritten ({why})",
                store.identity_path().display()
            ));
        } else {
            problems.push(Problem {
                path: store.identity_path(),
                what: "store identity",
                offset: None,
                len: None,
                detail: format!("{why}; `capsule verify --repair` rewrites it"),
            });
        }
    }
    // The store's catalog (derived from the side indexes): damaged or disagreeing with
    // them, it is named, and --repair rebuilds it.
    let segments = store.open_segments()?;
    if let Some(why) = capsule_index::catalog::verify(&store, &segments) {
        let path = capsule_index::catalog::path(&store.index_dir());
        if a.repair {
            capsule_index::catalog::rebuild(&store)?;
            repaired.push(format!("{}: rebuilt ({why})", path.display()));
        } else {
            problems.push(Problem {
                path,
                what: "catalog",
                offset: None,
                len: None,
                detail: format!(
                    "{why}; `capsule reindex` or `capsule verify --repair` rebuilds it"
                ),
            });
        }
    }
    // The rollups (derived from the side indexes): one that does not decode, or that
    // stands for its segments with flows their indexes do not merge to, is named, and
    // --repair makes them again.
    if let Some(why) = capsule_index::rollup::verify(&store) {
        let path = store.index_dir();
        if a.repair {
            capsule_index::rollup::rebuild(&store, true)?;
            repaired.push(format!("{}: rollups rebuilt ({why})", path.display()));
        } else {
            problems.push(Problem {
                path,
                what: "rollups",
                offset: None,
                len: None,
                detail: format!(
                    "{why}; `capsule reindex` or `capsule verify --repair` rebuilds them"
                ),
            });
        }
    }
    let budgets = store.root().join(capsule_store::budget::BUDGET_FILE);
    if let Err(e @ capsule_store::StoreError::BadBudgets { .. }) =
        capsule_store::budget::load(store.root())
    {
        if a.repair {
            capsule_store::fsx::remove(&budgets, "remove damaged retention budgets")?;
            repaired.push(format!(
                "{}: removed ({e}); the default floor of free space applies until budgets \
                 are given again",
                budgets.display()
            ));
        } else {
            problems.push(Problem {
                path: budgets,
                what: "retention budgets",
                offset: None,
                len: None,
                detail: format!(
                    "{e}; writers ignore it and save the budgets they are given; `capsule \
                     verify --repair` removes it"
                ),
            });
        }
    }
    // Segments the ledger records as sealed whose files are gone: nothing can rebuild
    // them, so --repair leaves them named (the store's retention forgets them once it
    // has deleted every segment before them).
    for m in store.missing_segments(&entries)? {
        problems.push(Problem {
            detail: m.problem(),
            path: m.path,
            what: "segment",
            offset: None,
            len: None,
        });
    }
    drop(lock);
    // The segments in the object store: checked there with the config's [tier], or named
    // as not checked (the verification is partial).
    let mut tier_checked = None;
    let mut unchecked_tiered = 0usize;
    let tier = match &a.config {
        Some(path) => {
            let config = crate::request::load_config(path)?;
            let client = crate::tier::client_of(Some(&config))?.ok_or_else(|| {
                crate::output::Usage(format!(
                    "{}: no [tier] section; --config names the object store of the tiered \
                     segments (docs/tier.md)",
                    path.display()
                ))
            })?;
            Some(client)
        }
        None => None,
    };
    match &tier {
        Some(client) => {
            let progress = if a.json || !a.deep {
                crate::progress::Progress::hidden()
            } else {
                crate::progress::Progress::bytes("verify tiered", None)
            };
            let (checked, found) =
                capsule_tier::verify_tiered(client, &store, a.deep, |n| progress.add(n)).map_err(
                    |e| {
                        anyhow::anyhow!(
                            "{}; the tiered segments could not be checked",
                            capsule_tier::chain(&e)
                        )
                    },
                )?;
            progress.finish();
            problems.extend(found);
            tier_checked = Some(checked);
        }
        None => {
            if let Some(l) = capsule_store::ledger::read(&store.segments_dir())? {
                unchecked_tiered = l.trimmed.iter().filter(|s| l.live.contains_key(s)).count();
            }
        }
    }
    if a.json {
        let v = serde_json::json!({
            "segments": entries.len(),
            "tiered_checked": tier_checked.map(|c| c.segments),
            "tiered_only_checked": tier_checked.map(|c| c.tiered_only),
            "tier_read_bytes": tier_checked.map(|c| c.bytes_read),
            "tiered_not_checked": unchecked_tiered,
            "problems": problems,
            "repaired": repaired,
        });
        crate::output::print_json(v);
    } else {
        for r in &repaired {
            println!("repaired {r}");
        }
        for p in &problems {
            println!("{p}");
        }
        if let Some(c) = tier_checked {
            println!(
                "checked {} tiered segment(s) in the object store ({} only there){}",
                c.segments,
                c.tiered_only,
                if a.deep {
                    format!(", {} read", crate::units::format_bytes(c.bytes_read))
                } else {
                    String::new()
                }
            );
        }
        println!(
            "verified {} segment(s): {} problem(s){}",
            entries.len(),
            problems.len(),
            if repaired.is_empty() {
                String::new()
            } else {
                format!(", {} repaired", repaired.len())
            }
        );
    }
    if unchecked_tiered > 0 {
        eprintln!(
            "capsule: {unchecked_tiered} segment(s) live only in the object store and were not \
             checked: give --config with the store's [tier] section (the verification is partial)"
        );
    }
    Ok(if !problems.is_empty() {
        ExitCode::FAILURE
    } else if unchecked_tiered > 0 {
        ExitCode::from(crate::output::PARTIAL)
    } else {
        ExitCode::SUCCESS
    })
}

/// What is wrong with the side index of sealed segment `seg`, if anything. A live writer
/// indexes a segment just after sealing it: while one holds the store, an index missing or
/// stale at first is looked at again for up to 2 s before it is called a problem (not
/// when `may_wait` is false: `--repair` holds the lock itself).
fn index_problem(
    store: &capsule_store::Store,
    seg: &capsule_store::SegmentReader,
    may_wait: bool,
) -> Option<String> {
    let mut why = capsule_index::verify_index(store, seg)?;
    let live = may_wait
        && matches!(
            store.lock_writer(),
            Err(capsule_store::StoreError::Locked { .. })
        );
    if live {
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            why = capsule_index::verify_index(store, seg)?;
        }
    }
    Some(why)
}
