//! What an export did and what it had to skip.

use crate::error::ExportError;

/// A planned block that could not be read, and what it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedBlock {
    pub path: std::path::PathBuf,
    pub seq: u64,
    pub block: u32,
    /// Where its frame is in the segment file, and how long.
    pub offset: u64,
    pub len: u64,
    /// Packets it held and their time span (from its header or the footer).
    pub packets: u32,
    pub first_ns: u64,
    pub last_ns: u64,
    /// What was wrong.
    pub problem: String,
}

impl SkippedBlock {
    pub(crate) fn of(
        seg: &capsule_store::SegmentReader,
        meta: &capsule_store::format::BlockMeta,
        e: &ExportError,
    ) -> Self {
        SkippedBlock {
            path: seg.path().to_path_buf(),
            seq: seg.seq(),
            block: meta.index,
            offset: meta.frame_offset,
            len: u64::from(meta.compressed_len),
            packets: meta.packets,
            first_ns: meta.first_ns,
            last_ns: meta.last_ns,
            problem: capsule_store::error::chain(e),
        }
    }
}

impl ExportReport {
    /// Whether the answer is partial: damaged data inside the query was skipped.
    pub fn is_partial(&self) -> bool {
        !self.skipped.is_empty()
            || !self.unreadable.is_empty()
            || !self.lost.is_empty()
            || !self.names_unseen.is_empty()
    }

    /// What a partial answer misses, in one line of at most 1 KiB (`None` when
    /// the answer is whole): the note a pcapng export ends with and the server's
    /// `capsule-partial` trailer carries.
    pub fn partial_note(&self) -> Option<String> {
        if !self.is_partial() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.skipped.is_empty() {
            let packets: u64 = self.skipped.iter().map(|s| u64::from(s.packets)).sum();
            let first = self.skipped.iter().map(|s| s.first_ns).min().unwrap_or(0);
            let last = self.skipped.iter().map(|s| s.last_ns).max().unwrap_or(0);
            let which: Vec<String> = self
                .skipped
                .iter()
                .map(|s| format!("{}/{}", s.seq, s.block))
                .collect();
            parts.push(format!(
                "{packets} packets from {} to {} in {} damaged block(s) (segment/block {})",
                capsule_query::format_instant(first),
                capsule_query::format_instant(last),
                self.skipped.len(),
                which.join(", ")
            ));
        }
        for u in &self.unreadable {
            parts.push(format!(
                "segment {} could not be read ({})",
                u.seq, u.problem
            ));
        }
        for l in &self.lost {
            parts.push(format!("segment {} lost a stretch ({})", l.seq, l.problem));
        }
        if !self.names_unseen.is_empty() {
            parts.push(format!(
                "the flows of segment(s) {:?}, whose index keeps no names, that the filter's \
                 name terms would select",
                self.names_unseen
            ));
        }
        let mut note = format!(
            "capsule: this answer is partial, it misses {}",
            parts.join("; ")
        );
        if note.len() > NOTE_MAX {
            let mut end = NOTE_MAX - 3;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
            note.push_str("...");
        }
        Some(note)
    }
}

/// The longest [`ExportReport::partial_note`], in bytes.
pub const NOTE_MAX: usize = 1024;

/// What an export did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExportReport {
    pub packets: u64,
    /// Captured bytes of the exported packets.
    pub captured_bytes: u64,
    /// Packets the query selected that were not written: they came after the first one
    /// that did not fit under [`crate::ExportOptions::max_bytes`] (0 without a cap).
    pub packets_over_cap: u64,
    /// Their captured bytes.
    pub captured_bytes_over_cap: u64,
    pub segments_total: usize,
    pub segments_touched: usize,
    pub blocks_total: usize,
    pub blocks_read: usize,
    /// Segments planned without a side index (every block in the window was read).
    pub unindexed: Vec<u64>,
    /// Of those, the ones whose side index is damaged, with what is wrong.
    pub damaged_index: Vec<(u64, String)>,
    /// With name terms in the filter (`sni`, `dns`, `http.host`, `app`): the segments of the
    /// window whose index keeps no names (written before index version 6, or none at all),
    /// whose flows those terms cannot select: the answer may miss packets.
    pub names_unseen: Vec<u64>,
    /// Blocks in the plan that could not be read (damaged): their packets are missing.
    pub skipped: Vec<SkippedBlock>,
    /// Segments that could not be opened at all: whatever they held is missing.
    pub unreadable: Vec<capsule_store::Unreadable>,
    /// Segments the window reaches whose file lost a stretch the walk over their blocks
    /// could not read past (a sealed segment cut short: the blocks after the cut and its
    /// footer): what was there is missing.
    pub lost: Vec<capsule_store::Unreadable>,
    /// The most decompressed blocks the merge held at once (blocks that overlap in time
    /// must be held together; blocks that only touch, or share one timestamp, are not).
    pub most_blocks_open: usize,
    /// Packets the capture interfaces reported dropped inside the window, from the interface
    /// statistics stored with the data; `None` when the store has none for the window.
    pub drops_in_window: Option<u64>,
    /// What the store holds (first and last packet, lowest segment number), for the notes
    /// beside an answer; counted over the segments the catalog ruled out too.
    pub held: capsule_store::Held,
}
