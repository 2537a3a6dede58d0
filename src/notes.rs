//! What a command says on standard error about the store beside its answer: segments that
//! cannot be read, a window that reaches past what the store holds, what opening a store
//! for writing recovered or deleted, and what a full disk cost.

/// Names, on standard error, each segment that could not be read, and what that costs the
/// answer (`consequence`, e.g. "its flows are missing"; empty for none).
pub(crate) fn warn_unreadable(unreadable: &[capsule_store::Unreadable], consequence: &str) {
    let consequence = if consequence.is_empty() {
        String::new()
    } else {
        format!(", {consequence}")
    };
    for u in unreadable {
        eprintln!(
            "capsule: warning: segment {} ({}) cannot be read{consequence}: {}",
            u.seq,
            u.path.display(),
            u.problem
        );
    }
}

/// Names, on standard error, the segments whose flows the filter's name terms (`sni`,
/// `dns`, `http.host`, `app`) could not see (their index keeps no names, or they have none),
/// and that their `what` (flows, packets) may be missing.
pub(crate) fn warn_names_unseen(segments: &[u64], what: &str) {
    if !segments.is_empty() {
        eprintln!(
            "capsule: warning: segment(s) {segments:?} have no names in their side index \
             (written before index version 6, or no index): the filter's name terms (sni, \
             dns, http.host, app) cannot select their {what}, which may be missing; `capsule \
             reindex` adds the names"
        );
    }
}

/// Says on standard error when the window starts before the retention horizon (the oldest
/// packet still held, where older segments were deleted), so a shorter answer is never
/// mistaken for less traffic; and, when the answer came back empty (`empty`), whether the
/// window lies outside what the store holds, with the store's span, so an empty answer is
/// never mistaken for "nothing happened" (the data may be older than the window, or not yet
/// captured, or already deleted by retention).
pub(crate) fn note_window(
    segments: &[capsule_store::SegmentReader],
    q: &capsule_query::Query,
    empty: bool,
) {
    note_window_held(&capsule_store::Held::of(segments), q, empty)
}

/// [`note_window`] from what the store holds ([`capsule_store::Held`]: an export's report
/// counts it over the segments the catalog kept it from opening too).
pub(crate) fn note_window_held(held: &capsule_store::Held, q: &capsule_query::Query, empty: bool) {
    let (from, to) = q.window();
    let first = held.first_ns;
    // Segment numbers start at 1: a store whose lowest is higher has deleted older data.
    let deleted = held.lowest_seq.is_some_and(|s| s > 1);
    // A window given from a time before it; without --from the question is "all we hold".
    let given = q.from_ns.is_some();
    if let Some(first) = first.filter(|f| given && deleted && from < *f && to > *f) {
        eprintln!(
            "capsule: note: the window starts before the retention horizon: packets older \
             than {} were deleted by retention, so the answer covers {} onwards",
            capsule_query::format_instant(first),
            capsule_query::format_instant(first)
        );
    }
    if empty {
        note_if_window_misses_held(held, q);
    }
}

/// When an answer came back empty, says whether the window lies outside what the store
/// holds (see [`note_window`]).
fn note_if_window_misses_held(held: &capsule_store::Held, q: &capsule_query::Query) {
    let (Some(first), Some(last)) = (held.first_ns, held.last_ns) else {
        eprintln!("capsule: note: the store holds no packets");
        return;
    };
    let (from, to) = q.window();
    let fmt = capsule_query::format_instant;
    if to <= first {
        eprintln!(
            "capsule: note: the window ends before the oldest packet held ({}); the store \
             spans {} to {}",
            fmt(first),
            fmt(first),
            fmt(last)
        );
    } else if from > last {
        eprintln!(
            "capsule: note: the window starts after the newest packet held ({}); the store \
             spans {} to {}",
            fmt(last),
            fmt(first),
            fmt(last)
        );
    }
}

/// Says what opening the store for writing found: recovered torn segments and retention.
/// On standard error with `--json` (standard output holds the one JSON document).
pub(crate) fn print_open_report(opened: &capsule_store::OpenReport, json: bool) {
    macro_rules! println {
        ($($t:tt)*) => {
            if json { crate::logging::note(&format!($($t)*)) } else { std::println!($($t)*) }
        };
    }
    for r in &opened.recovered {
        println!("{r}");
    }
    for t in &opened.stale_temps {
        println!(
            "removed {} (a temporary file a killed process left)",
            t.display()
        );
    }
    if !opened.reindexed.is_empty() {
        println!(
            "rebuilt the side index of segment(s) {:?}",
            opened.reindexed
        );
    }
    for d in &opened.deleted {
        println!(
            "retention: deleted segment {} ({}) to fit the byte budget",
            d.seq,
            crate::units::format_bytes(d.bytes)
        );
    }
    for d in &opened.deleted_for_space {
        println!(
            "disk full: deleted segment {} ({}) to recover a torn segment",
            d.seq,
            crate::units::format_bytes(d.bytes)
        );
    }
    for p in &opened.left_open {
        println!(
            "disk full: torn segment {} left open (nothing left to delete); the next open \
             recovers it",
            p.display()
        );
    }
}

/// Says what a full disk cost a writer, if anything: segments deleted for space, and
/// packets dropped when nothing was left to delete.
pub(crate) fn print_disk_full(w: &capsule_store::WriteReport, json: bool) {
    macro_rules! println {
        ($($t:tt)*) => {
            if json { crate::logging::note(&format!($($t)*)) } else { std::println!($($t)*) }
        };
    }
    if !w.deleted_for_space.is_empty() {
        let bytes: u64 = w.deleted_for_space.iter().map(|d| d.bytes).sum();
        println!(
            "disk full: deleted the {} oldest segment(s) ({}) to make room",
            w.deleted_for_space.len(),
            crate::units::format_bytes(bytes)
        );
    }
    if w.disk_full_blocks > 0 {
        println!(
            "disk full: dropped {} packets ({} blocks) with no segment left to delete",
            w.disk_full_drops, w.disk_full_blocks
        );
    }
}

/// Megabytes per second.
pub(crate) fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs.max(1e-9)
}
