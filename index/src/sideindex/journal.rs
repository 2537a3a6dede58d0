//! The index journal of the open segment: `STORE/index/seg-N.journal`, one checksummed
//! record per block, appended by the writer thread as it hands the block to the side index,
//! so that readers plan the open segment (and list its flows) as they do sealed ones.
//!
//! ```text
//! writer thread: IndexBuilder::add_block -> BlockDelta (the block's summary, and each flow's
//!   counters over this block alone) -> record (magic, length, crc32c, payload) -> one
//!   write(2), O_APPEND, no fsync (derived data)
//! seal: seg-N.idx written (tmp, fsync, rename), then the journal removed
//! readers (plan.rs, flows.rs): open segment -> read the journal -> records checked, a torn
//!   tail dropped, a damaged record skipped with a note -> each record matched to the
//!   segment's block of that index (packets, times, frame crc32c) -> folded into a
//!   SegmentIndex with FlowRecord::absorb_block (what the builder does) -> blocks without a
//!   record are planned as a scan; records for blocks not yet in the file are ignored
//! ```
//! Byte layout: docs/format.md, "Index journal".

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use capsule_store::format::{BlockMeta, DecodeError};
use capsule_store::{fsx, Result, SegmentReader, StoreError};
use capsule_wire::view::Reader;

use super::file::{
    bad_varint, get_encap_section, get_flow, get_names_section, invalid, put_encap_section,
    put_flow, put_names_section, put_varint, short,
};
use super::series::{get_series, put_series, BlockSeries};
use super::{BlockDelta, BlockSummary, FlowKey, FlowRecord, SegmentIndex};

pub mod checkpoint;
use checkpoint::{BlockMatch, Checkpoint};

use capsule_store::segment::journal::{self as framing, FIXED_LEN, MAX_PAYLOAD};
pub use capsule_store::segment::journal::{journal_name, FRAME_LEN, RECORD_MAGIC};

/// Journal record format version written by this build: its flow records are the side
/// index's version 4, it carries the block's frame offset and header frame (the open
/// segment's block table, read by the store's SegmentReader), and its body is stored as it
/// is. Versions 2 (index version 3 flow records, without the cut-off's counters), 3 (no
/// block table) and 4 (a zstd-compressed body) are still read.
pub const JOURNAL_VERSION: u16 = 8;
/// The first journal record version whose body ends with the block's millisecond series.
pub const SERIES_JOURNAL_VERSION: u16 = 6;
/// The first journal record version whose body ends, after the series, with the names
/// table of the block's flows (what their payload taught so far, as the index's names
/// table: docs/format.md).
pub const NAMES_JOURNAL_VERSION: u16 = 7;
/// The first journal record version whose body ends, after the names, with the
/// encapsulation table of the block's flows (as the index's, version 7).
pub const TUNNELS_JOURNAL_VERSION: u16 = 8;
/// The first record version whose body is not compressed. Compressing a record's body (a
/// few KiB: 2.6 KiB a 1 MiB block on the capture benchmark's traffic) with zstd level 1 cost
/// 15 µs a block on the writer thread, 3.7% of a store-rung capture's CPU, to save 0.2% of
/// the open segment's size in a file that lives only until the seal.
pub const RAW_BODY_VERSION: u16 = 5;

/// The sequence number of a journal file name, if it is one.
pub fn parse_journal_name(name: &str) -> Option<u64> {
    seq_of(name, ".journal")
}

/// The sequence number of `seg-<12 digits><suffix>`, if `name` is one.
fn seq_of(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(suffix)?;
    (digits.len() == 12 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Removes segment `seq`'s journal from `dir`, if there is one.
pub fn remove(dir: &Path, seq: u64) -> Result<()> {
    remove_if_there(&dir.join(journal_name(seq)), "remove index journal")
}

/// Removes `path`; one already gone is no error.
fn remove_if_there(path: &Path, op: &'static str) -> Result<()> {
    match fsx::remove(path, op) {
        Err(e) if !e.is_not_found() => Err(e),
        _ => Ok(()),
    }
}

/// Appends records to one segment's journal.
pub struct JournalWriter {
    file: File,
    path: PathBuf,
    seq: u64,
    body: Vec<u8>,
    out: Vec<u8>,
}

impl std::fmt::Debug for JournalWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalWriter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl JournalWriter {
    /// Creates segment `seq`'s journal in `dir` (exclusively; one left by an earlier
    /// writer for the same number describes another file and is removed first).
    pub fn create(dir: &Path, seq: u64) -> Result<Self> {
        fsx::create_dir(dir)?;
        remove(dir, seq)?;
        let path = dir.join(journal_name(seq));
        let file = fsx::open(&path, fsx::Open::CreateNew, "create index journal")?;
        Ok(JournalWriter {
            file,
            path,
            seq,
            body: Vec::new(),
            out: Vec::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the record of the block `meta` (as the writer appended it) whose counts are
    /// `delta`, in one write.
    pub fn append(&mut self, meta: &BlockMeta, delta: &BlockDelta) -> Result<()> {
        encode_record(self.seq, meta, delta, &mut self.body, &mut self.out);
        // O_APPEND and one write(2): a reader sees the record whole, or a torn tail.
        self.file
            .write_all(&self.out)
            .map_err(|e| StoreError::io("append to index journal", &self.path, e))
    }
}

/// Encodes one journal record into `out` (cleared first): the block's delta as the body,
/// in the store's record framing ([`framing::encode_record`]); `body` is scratch space.
pub fn encode_record(
    seq: u64,
    meta: &BlockMeta,
    delta: &BlockDelta,
    body: &mut Vec<u8>,
    out: &mut Vec<u8>,
) {
    body.clear();
    let s = &delta.summary;
    body.extend_from_slice(&s.dscp.to_le_bytes());
    body.extend_from_slice(&s.ip_packets.to_le_bytes());
    body.extend_from_slice(&s.non_ip_packets.to_le_bytes());
    body.extend_from_slice(&s.malformed_packets.to_le_bytes());
    put_varint(body, delta.flows.len() as u64);
    for f in &delta.flows {
        put_flow(body, f, false);
    }
    put_series(
        body,
        delta.series.as_ref().unwrap_or(&BlockSeries::default()),
    );
    put_names_section(body, delta.flows.iter().map(|f| f.totals.names.as_deref()));
    put_encap_section(body, delta.flows.iter().map(|f| f.totals.encap.as_deref()));
    framing::encode_record(JOURNAL_VERSION, seq, delta.block, meta, body, out);
}

/// One record of a journal: the block it describes and its counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRecord {
    pub seq: u64,
    /// What the block's header says, to match the record to the block in the file.
    pub packets: u32,
    pub first_ns: u64,
    pub last_ns: u64,
    pub frame_crc: u32,
    pub delta: BlockDelta,
    /// The record's version keeps the names of its flows (7 and later): an open segment
    /// folded from records without them has no names for those blocks' flows.
    pub names: bool,
    /// The record's version keeps the encapsulations of its flows (8 and later).
    pub tunnels: bool,
}

/// What a journal holds: its whole records, and what could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalRead {
    pub records: Vec<JournalRecord>,
    /// Damaged stretches skipped, each naming the file offset and what was wrong.
    pub notes: Vec<String>,
    /// Offset of a cut-short last record (a writer stopped mid-write, or one being written
    /// right now), ignored.
    pub torn_tail: Option<usize>,
    /// Records of blocks below [`parse_from`]'s `from` (a checkpoint covers them): their
    /// fixed part only (segment, block, and what the block is), the body not decompressed.
    pub skipped: Vec<(u64, u32, BlockMatch)>,
}

/// Reads the records of a journal's bytes. Never panics: a record that fails its checks is
/// skipped with a note (reading resumes at the next record magic), and a last record cut
/// short is a torn tail.
pub fn parse(bytes: &[u8]) -> JournalRead {
    parse_from(bytes, 0)
}

/// Reads the records of a journal's bytes as [`parse`] does, but decodes only those of
/// blocks `from` and after: the others' fixed part is read (into `skipped`), their body is
/// not decompressed.
pub fn parse_from(bytes: &[u8], from: u32) -> JournalRead {
    let f = framing::frames(bytes);
    let mut out = JournalRead {
        records: Vec::with_capacity(f.records.len()),
        notes: f.notes,
        torn_tail: f.torn_tail,
        skipped: Vec::new(),
    };
    // Records of version 4 and older have compressed bodies: one decompression context
    // for all of them, made at the first (one per record, what `zstd::bulk::decompress`
    // does, costs an allocation of ~100 KiB and its page faults each time, most of the
    // fold's time on a journal of hundreds of records).
    let mut dctx = None;
    for (at, payload) in f.records {
        match decode_payload(payload, from, &mut dctx) {
            Ok(Decoded::Record(r)) => out.records.push(r),
            Ok(Decoded::Skipped(seq, block, m)) => out.skipped.push((seq, block, m)),
            Err(e) => out
                .notes
                .push(format!("offset {at}: record does not decode: {e}; skipped")),
        }
    }
    // The framing's notes come first in file order; keep the whole list in file order.
    out.notes.sort_by_key(|n| note_offset(n));
    out
}

fn note_offset(n: &str) -> usize {
    n.strip_prefix("offset ")
        .and_then(|r| r.split(':').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or(usize::MAX)
}

enum Decoded {
    Record(JournalRecord),
    /// A record of a block below the first one decoded: segment, block, the block's match.
    Skipped(u64, u32, BlockMatch),
}

fn decode_payload(
    p: &[u8],
    from: u32,
    dctx: &mut Option<zstd::bulk::Decompressor<'static>>,
) -> std::result::Result<Decoded, DecodeError> {
    let mut c = Reader::new(p);
    let version = c.u16_le().map_err(short)?;
    if !(2..=JOURNAL_VERSION).contains(&version) {
        return Err(DecodeError::Version {
            what: "index journal record",
            expected: JOURNAL_VERSION,
            found: version,
        });
    }
    c.u16_le().map_err(short)?;
    let seq = c.u64_le().map_err(short)?;
    let block = c.u32_le().map_err(short)?;
    let packets = c.u32_le().map_err(short)?;
    let first_ns = c.u64_le().map_err(short)?;
    let last_ns = c.u64_le().map_err(short)?;
    let frame_crc = c.u32_le().map_err(short)?;
    let ulen = c.u32_le().map_err(short)?;
    if block < from {
        let m = BlockMatch {
            packets,
            first_ns,
            last_ns,
            frame_crc,
        };
        return Ok(Decoded::Skipped(seq, block, m));
    }
    if ulen > MAX_PAYLOAD {
        return Err(invalid(format!(
            "body of {ulen} bytes is implausibly large"
        )));
    }
    // Version 4 puts the block's place and header between the fixed part and the body.
    let body_at = if version >= framing::BLOCK_TABLE_VERSION {
        match framing::placed(p)? {
            Some(b) if b.meta.index == block && b.seq == seq => b.body_at,
            _ => {
                return Err(invalid(format!(
                    "its block part does not describe block {block} of segment {seq}"
                )))
            }
        }
    } else {
        FIXED_LEN
    };
    let body: std::borrow::Cow<'_, [u8]> = if version >= RAW_BODY_VERSION {
        std::borrow::Cow::Borrowed(&p[body_at..])
    } else {
        if dctx.is_none() {
            *dctx = zstd::bulk::Decompressor::new().ok();
        }
        match dctx {
            Some(d) => d.decompress(&p[body_at..], ulen as usize),
            None => zstd::bulk::decompress(&p[body_at..], ulen as usize),
        }
        .map_err(|e| invalid(format!("body does not decompress: {e}")))?
        .into()
    };
    if body.len() != ulen as usize {
        return Err(invalid(format!(
            "body is {} bytes, the record says {ulen}",
            body.len()
        )));
    }
    let mut c = Reader::new(&body);
    let summary = BlockSummary {
        dscp: c.u64_le().map_err(short)?,
        ip_packets: c.u32_le().map_err(short)?,
        non_ip_packets: c.u32_le().map_err(short)?,
        malformed_packets: c.u32_le().map_err(short)?,
    };
    let n = c.varint().map_err(bad_varint)?;
    if n > body.len() as u64 {
        return Err(invalid(format!("record lists {n} flows")));
    }
    let mut flows = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let flow_version = if version >= 3 { 4 } else { 3 };
        flows.push(get_flow(&mut c, None, body.len(), flow_version)?);
    }
    let series = if version >= SERIES_JOURNAL_VERSION {
        Some(get_series(&mut c)?)
    } else {
        None
    };
    let names = version >= NAMES_JOURNAL_VERSION;
    if names {
        for (i, n) in get_names_section(&mut c, flows.len())? {
            flows[i].totals.names = Some(Box::new(n));
        }
    }
    let tunnels = version >= TUNNELS_JOURNAL_VERSION;
    if tunnels {
        for (i, e) in get_encap_section(&mut c, flows.len())? {
            flows[i].totals.encap = Some(Box::new(e));
        }
    }
    if c.position() != body.len() {
        return Err(invalid(format!(
            "{} bytes left over after the flows",
            body.len() - c.position()
        )));
    }
    Ok(Decoded::Record(JournalRecord {
        seq,
        packets,
        first_ns,
        last_ns,
        frame_crc,
        delta: BlockDelta {
            block,
            summary,
            flows,
            series,
        },
        names,
        tunnels,
    }))
}

/// An open segment's index, folded from its journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveIndex {
    /// As the sealed index would say, for the blocks the journal covers (the others have an
    /// empty summary and no flow names them).
    pub index: SegmentIndex,
    /// Blocks of the segment with no usable record (planned as a scan; their flows are
    /// missing from listings), ascending.
    pub unseen: Vec<usize>,
    /// What was skipped, and why.
    pub notes: Vec<String>,
}

/// Folds journal records into the index of segment `seq` whose blocks (as a reader sees
/// them now) are `blocks`; `segment_len` is the file's length as read. A record is used for
/// the block of its index when the two agree on packets, times and frame crc32c; records
/// for blocks not yet in the file are ignored.
pub fn fold(seq: u64, blocks: &[BlockMeta], segment_len: u64, read: &JournalRead) -> LiveIndex {
    fold_onto(None, seq, blocks, segment_len, read)
}

/// [`fold`], starting from `base`, the index of the first `base.blocks.len()` blocks (a
/// checkpoint's, which the caller has matched to `blocks`): only the records of the blocks
/// after those are folded. Folding goes block by block, so the index of the first k blocks
/// folded on is what folding the records of those k blocks gives: the result is the same.
fn fold_onto(
    base: Option<SegmentIndex>,
    seq: u64,
    blocks: &[BlockMeta],
    segment_len: u64,
    read: &JournalRead,
) -> LiveIndex {
    let mut notes = read.notes.clone();
    let covered = base.as_ref().map_or(0, |b| b.blocks.len());
    let mut used: Vec<Option<&JournalRecord>> = vec![None; blocks.len()];
    for r in &read.records {
        let b = r.delta.block as usize;
        if b < covered {
            continue; // the checkpoint's
        }
        let Some(meta) = blocks.get(b) else {
            continue; // not yet visible in the file
        };
        let matches = r.seq == seq
            && r.packets == meta.packets
            && r.first_ns == meta.first_ns
            && r.last_ns == meta.last_ns
            && r.frame_crc == meta.frame_crc;
        if !matches {
            notes.push(format!(
                "record for block {b} describes another block (segment {}, {} packets, \
                 frame crc32c {:#010x}; the file's block has {} packets, {:#010x})",
                r.seq, r.packets, r.frame_crc, meta.packets, meta.frame_crc
            ));
        } else if used[b].is_some() {
            notes.push(format!("a second record for block {b} was ignored"));
        } else {
            used[b] = Some(r);
        }
    }
    let mut index = base.unwrap_or_else(|| SegmentIndex {
        seq,
        segment_len,
        blocks: Vec::new(),
        flows: Vec::new(),
        series: Some(Vec::new()),
        named: true,
        tunnels: true,
    });
    index.seq = seq;
    index.segment_len = segment_len;
    index.blocks.resize(blocks.len(), BlockSummary::default());
    // A block without a usable record has an empty series (it is named unseen); a record
    // of a version before the series leaves the whole segment without one.
    if let Some(s) = &mut index.series {
        s.resize(blocks.len(), BlockSeries::default());
    }
    let mut by_key: std::collections::HashMap<FlowKey, usize> = Default::default();
    if used[covered..].iter().any(Option::is_some) {
        by_key.reserve(index.flows.len());
        by_key.extend(index.flows.iter().enumerate().map(|(i, f)| (f.key, i)));
    }
    let mut unseen = Vec::new();
    for (b, r) in used.iter().enumerate().skip(covered) {
        let Some(r) = r else {
            unseen.push(b);
            continue;
        };
        index.blocks[b] = r.delta.summary;
        index.named &= r.names;
        index.tunnels &= r.tunnels;
        match (&mut index.series, &r.delta.series) {
            (Some(s), Some(one)) => s[b] = one.clone(),
            (s, _) => *s = None,
        }
        for d in &r.delta.flows {
            let i = *by_key.entry(d.key).or_insert_with(|| {
                let mut f = FlowRecord::new(d.key, d.totals.first_ns, d.totals.last_ns);
                f.tcp_in = d.tcp_in;
                index.flows.push(f);
                index.flows.len() - 1
            });
            index.flows[i].absorb_block(d, b as u32);
        }
    }
    LiveIndex {
        index,
        unseen,
        notes,
    }
}

/// Folds the journal `bytes` of segment `seq` (`segment_len` bytes), onto checkpoint `ck`
/// when it describes the segment's first blocks: the records it covers are not decoded.
/// `blocks`: the segment's blocks as a reader of the file sees them, or `None` to take them
/// from the journal's own records (a listing that does not open the file). A checkpoint
/// that does not describe them is ignored: the journal alone is folded.
pub fn fold_journal(
    seq: u64,
    blocks: Option<&[BlockMeta]>,
    segment_len: u64,
    bytes: &[u8],
    ck: Option<Checkpoint>,
) -> LiveIndex {
    let ck = ck.filter(|c| blocks.is_none_or(|b| c.describes(seq, b)));
    let from = ck.as_ref().map_or(0, |c| c.covered() as u32);
    let read = parse_from(bytes, from);
    let own: Vec<BlockMeta>;
    let blocks = match blocks {
        Some(b) => b,
        None => {
            let metas = metas_of(&read);
            if from > 0 && !ck.as_ref().is_some_and(|c| c.describes(seq, &metas)) {
                // The journal's records are not the blocks it covers: without it.
                let read = parse(bytes);
                return fold(seq, &metas_of(&read), segment_len, &read);
            }
            own = metas;
            &own
        }
    };
    fold_onto(ck.map(|c| c.index), seq, blocks, segment_len, &read)
}

/// The blocks as a journal's records describe them (block numbers no record names get a
/// default meta, which no checkpoint or record matches).
fn metas_of(read: &JournalRead) -> Vec<BlockMeta> {
    let n = read
        .records
        .iter()
        .map(|r| r.delta.block)
        .chain(read.skipped.iter().map(|s| s.1))
        .map(|b| b as usize + 1)
        .max()
        .unwrap_or(0);
    let mut metas = vec![BlockMeta::default(); n];
    let heads = read
        .skipped
        .iter()
        .map(|&(_, b, m)| (b, m))
        .chain(read.records.iter().map(|r| {
            let m = BlockMatch {
                packets: r.packets,
                first_ns: r.first_ns,
                last_ns: r.last_ns,
                frame_crc: r.frame_crc,
            };
            (r.delta.block, m)
        }));
    for (b, m) in heads {
        let meta = &mut metas[b as usize];
        meta.index = b;
        meta.packets = m.packets;
        meta.first_ns = m.first_ns;
        meta.last_ns = m.last_ns;
        meta.frame_crc = m.frame_crc;
    }
    metas
}

/// The index of open segment `seg` from its journal in `dir`. `Ok(None)`: it has none
/// (written by a writer without a side index, or by an older build).
pub fn load_open(dir: &Path, seg: &SegmentReader) -> Result<Option<LiveIndex>> {
    let bytes = match fsx::read(&dir.join(journal_name(seg.seq())), "read index journal") {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(fold_journal(
        seg.seq(),
        Some(seg.blocks()),
        seg.bytes(),
        &bytes,
        checkpoint::load(dir, seg.seq()),
    )))
}

/// The index of `seg` for planning and listings: a sealed segment's index file, or an open
/// segment's journal folded. `Ok(None)`: there is none (or, for a sealed segment, it is
/// stale); a damaged index file is [`StoreError::DerivedDamaged`].
pub fn load_any(dir: &Path, seg: &SegmentReader) -> Result<Option<LiveIndex>> {
    if seg.state() == capsule_store::SegmentState::Open {
        return load_open(dir, seg);
    }
    Ok(SegmentIndex::load(dir, seg)?.map(|index| LiveIndex {
        index,
        unseen: Vec::new(),
        notes: Vec::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{arp, block, records_of, tcp4, vxlan, A, B};
    use super::*;
    use crate::sideindex::IndexBuilder;

    const S: u64 = 1_000_000_000;

    /// Three blocks: a TCP conversation across all of them (with a retransmission in the
    /// third), an ARP packet, a UDP-less second flow, and a block that only declares nothing.
    fn blocks() -> Vec<(BlockMeta, Vec<u8>)> {
        let mut out = vec![
            block(
                &[
                    (S, tcp4(None, A, B, 40000, 443, 100, 0x02, 1000, 0, 0)),
                    (S + 1, tcp4(None, B, A, 443, 40000, 900, 0x12, 1000, 0, 0)),
                    (
                        S + 2,
                        tcp4(None, A, B, 40000, 443, 101, 0x18, 1000, 100, 46),
                    ),
                    (S + 3, arp()),
                ],
                true,
            ),
            block(
                &[
                    (
                        2 * S,
                        tcp4(None, A, B, 40000, 443, 201, 0x18, 1000, 100, 46),
                    ),
                    (2 * S + 5, tcp4(Some(7), A, B, 1, 2, 1, 0x10, 0, 0, 10)),
                ],
                false,
            ),
            block(
                &[
                    (
                        3 * S,
                        tcp4(None, A, B, 40000, 443, 101, 0x18, 1000, 100, 46),
                    ),
                    (4 * S, tcp4(None, B, A, 443, 40000, 901, 0x14, 0, 0, 0)),
                ],
                false,
            ),
        ];
        as_written(&mut out);
        out
    }

    /// Gives `blocks` metas as the writer's: packets, times and a frame crc32c that tell
    /// blocks apart.
    fn as_written(blocks: &mut [(BlockMeta, Vec<u8>)]) {
        for (i, (m, d)) in blocks.iter_mut().enumerate() {
            m.index = i as u32;
            m.packets = capsule_pcap::read::fragment_packets(d).count() as u32;
            m.first_ns = (i as u64 + 1) * S;
            m.last_ns = (i as u64 + 1) * S + 9;
            m.frame_crc = capsule_store::crc::crc32c(d);
        }
    }

    /// The journal of `blocks` and the index built from them.
    fn journal_of(blocks: &[(BlockMeta, Vec<u8>)]) -> (Vec<u8>, Vec<usize>, SegmentIndex) {
        let mut ix = IndexBuilder::new(5);
        let (mut body, mut rec) = (Vec::new(), Vec::new());
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for (m, d) in blocks {
            ix.add_block(m, d);
            encode_record(5, m, ix.last_delta(), &mut body, &mut rec);
            bytes.extend_from_slice(&rec);
            ends.push(bytes.len());
        }
        (bytes, ends, ix.finish(777))
    }

    fn metas(blocks: &[(BlockMeta, Vec<u8>)]) -> Vec<BlockMeta> {
        blocks.iter().map(|(m, _)| m.clone()).collect()
    }

    #[test]
    fn a_journal_round_trips_and_folds_to_the_sealed_index() {
        let b = blocks();
        let (bytes, _, sealed) = journal_of(&b);
        let read = parse(&bytes);
        assert_eq!(read.records.len(), 3);
        assert!(
            read.notes.is_empty() && read.torn_tail.is_none(),
            "{read:?}"
        );
        // Each record is its block's delta, as the builder made it.
        let mut ix = IndexBuilder::new(5);
        for ((m, d), r) in b.iter().zip(&read.records) {
            ix.add_block(m, d);
            assert_eq!(&r.delta, ix.last_delta());
            assert_eq!((r.seq, r.packets, r.frame_crc), (5, m.packets, m.frame_crc));
        }
        let live = fold(5, &metas(&b), 777, &read);
        assert!(live.unseen.is_empty() && live.notes.is_empty());
        assert_eq!(
            live.index, sealed,
            "the fold equals the index built from the blocks"
        );
        let f = &live.index.flows[0];
        assert_eq!(f.totals.retransmissions, [1, 0]);
        assert_eq!(f.blocks, vec![0, 1, 2]);
        assert_eq!(f.buckets.len(), 4);
    }

    #[test]
    fn a_torn_tail_is_ignored_at_every_cut_point() {
        let b = blocks();
        let (bytes, ends, _) = journal_of(&b);
        for cut in 0..=bytes.len() {
            let read = parse(&bytes[..cut]);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(read.records.len(), whole, "cut at {cut}");
            assert!(read.notes.is_empty(), "cut at {cut}: {:?}", read.notes);
            let at_boundary = cut == 0 || ends.contains(&cut);
            assert_eq!(read.torn_tail.is_some(), !at_boundary, "cut at {cut}");
            // Folded against the whole file, the blocks past the cut are planned as scans.
            let live = fold(5, &metas(&b), 777, &read);
            assert_eq!(live.unseen, (whole..3).collect::<Vec<_>>(), "cut at {cut}");
        }
    }

    #[test]
    fn a_flipped_bit_skips_its_record_with_a_note() {
        let b = blocks();
        let (bytes, ends, sealed) = journal_of(&b);
        // Every byte of the middle record, one bit at a time (payload, crc, length, magic).
        for at in ends[0]..ends[1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            let read = parse(&bad);
            assert!(!read.notes.is_empty(), "flip at {at} went unnoticed");
            let blocks: Vec<u32> = read.records.iter().map(|r| r.delta.block).collect();
            assert!(blocks.contains(&0), "flip at {at}: {blocks:?}");
            assert!(!blocks.contains(&1), "flip at {at}: {blocks:?}");
            let live = fold(5, &metas(&b), 777, &read);
            assert!(live.unseen.contains(&1), "flip at {at}");
            assert_eq!(live.index.blocks[0], sealed.blocks[0]);
            if blocks.contains(&2) {
                assert_eq!(live.unseen, vec![1], "flip at {at}");
            }
        }
        // A flip in the payload or crc keeps the framing: the record after it is read.
        let mut bad = bytes.clone();
        bad[ends[0] + FRAME_LEN + 20] ^= 1;
        let read = parse(&bad);
        assert_eq!(read.records.len(), 2);
        assert!(read.notes[0].contains("crc32c"), "{:?}", read.notes);
        assert!(read.notes[0].contains(&format!("offset {}", ends[0])));
    }

    #[test]
    fn records_are_matched_to_the_blocks_in_the_file() {
        let b = blocks();
        let (bytes, _, sealed) = journal_of(&b);
        let read = parse(&bytes);
        // The file shows two blocks so far: the third record is ahead of it, ignored.
        let live = fold(5, &metas(&b[..2]), 10, &read);
        assert_eq!(live.index.blocks.len(), 2);
        assert!(live.unseen.is_empty() && live.notes.is_empty());
        assert!(live
            .index
            .flows
            .iter()
            .all(|f| f.blocks.iter().all(|&x| x < 2)));
        assert_eq!(live.index.flows[0].totals.retransmissions, [0, 0]);
        // The file has a block the journal does not (a record not yet written): a scan.
        let live = fold(5, &metas(&b), 10, &parse(&bytes[..bytes.len() - 1]));
        assert_eq!(live.unseen, vec![2]);
        // A record describing another block of that index is not used.
        let mut other = metas(&b);
        other[1].frame_crc ^= 1;
        let live = fold(5, &other, 777, &read);
        assert_eq!(live.unseen, vec![1]);
        assert!(
            live.notes[0].contains("describes another block"),
            "{:?}",
            live.notes
        );
        // Another segment's journal is not used either.
        let live = fold(6, &metas(&b), 777, &read);
        assert_eq!(live.unseen, vec![0, 1, 2]);
        assert_ne!(live.index, sealed);
    }

    /// `bytes` (records of this build) rewritten as records of `version` 3 (no block part),
    /// 4 (a block part; both with a zstd-compressed body), 5 (a raw body) or 6 (the series
    /// too), as earlier builds wrote them.
    fn as_older(bytes: &[u8], version: u16) -> Vec<u8> {
        let mut old = Vec::new();
        let records = parse(bytes).records;
        for (i, (_, p)) in framing::frames(bytes).records.into_iter().enumerate() {
            // Records before version 7 have no names, before version 6 no series either:
            // they end with the series, or with the flows.
            // Records before version 8 have no encapsulations either.
            let mut tail = Vec::new();
            if version < SERIES_JOURNAL_VERSION {
                put_series(&mut tail, records[i].delta.series.as_ref().unwrap());
            }
            let flows = &records[i].delta.flows;
            if version < NAMES_JOURNAL_VERSION {
                put_names_section(&mut tail, flows.iter().map(|f| f.totals.names.as_deref()));
            }
            put_encap_section(&mut tail, flows.iter().map(|f| f.totals.encap.as_deref()));
            let p = &p[..p.len() - tail.len()];
            let placed = framing::placed(p).unwrap().unwrap();
            let end = if version >= framing::BLOCK_TABLE_VERSION {
                placed.body_at
            } else {
                FIXED_LEN
            };
            let mut q = p[..end].to_vec();
            q[..2].copy_from_slice(&version.to_le_bytes());
            let body = &p[placed.body_at..];
            if version >= RAW_BODY_VERSION {
                q[40..44].copy_from_slice(&(body.len() as u32).to_le_bytes());
                q.extend_from_slice(body);
            } else {
                q[40..44].copy_from_slice(&(body.len() as u32).to_le_bytes());
                q.extend_from_slice(&zstd::bulk::compress(body, 1).unwrap());
            }
            old.extend_from_slice(&RECORD_MAGIC);
            old.extend_from_slice(&(q.len() as u32).to_le_bytes());
            old.extend_from_slice(&capsule_store::crc::crc32c(&q).to_le_bytes());
            old.extend_from_slice(&q);
        }
        old
    }

    /// The encapsulation each flow direction arrived in is in each block's record, and the
    /// fold of every prefix of the journal equals the index built from those blocks; the
    /// capture path (the producer's records, the block read again only for a direction's
    /// first encapsulated packet) builds the same index as dissecting every packet. A
    /// direction whose packets arrived in two VNIs is mixed; one with a bare packet is not
    /// whole.
    #[test]
    fn encapsulations_fold_to_the_sealed_index_on_both_paths() {
        let (v1, v2) = ([192, 0, 2, 1], [192, 0, 2, 2]);
        let ab = |seq: u32, n: usize| tcp4(None, A, B, 40000, 443, seq, 0x18, 1000, n, 0);
        let ba = |seq: u32| tcp4(None, B, A, 443, 40000, seq, 0x10, 1000, 0, 0);
        let mut b = vec![
            block(
                &[
                    (S, vxlan(&ab(100, 10), v1, v2, 42, 10)),
                    (S + 1, vxlan(&ba(900), v2, v1, 42, 0)),
                    (S + 2, vxlan(&ab(110, 10), v1, v2, 42, 12)),
                ],
                true,
            ),
            block(
                &[
                    (2 * S, vxlan(&ab(120, 10), v1, v2, 42, 10)),
                    (2 * S + 1, vxlan(&ba(901), v2, v1, 43, 0)),
                    (
                        2 * S + 2,
                        tcp4(None, [10, 9, 9, 9], B, 5, 6, 1, 0x10, 9, 0, 0),
                    ),
                ],
                false,
            ),
            block(&[(3 * S, ab(130, 10))], false),
        ];
        as_written(&mut b);
        let (bytes, ends, sealed) = journal_of(&b);
        assert!(sealed.tunnels);
        for k in 1..=b.len() {
            let live = fold(5, &metas(&b)[..k], 777, &parse(&bytes[..ends[k - 1]]));
            let mut ix = IndexBuilder::new(5);
            for (m, d) in &b[..k] {
                ix.add_block(m, d);
            }
            assert_eq!(live.index, ix.finish(777), "the fold of {k} blocks");
        }
        let f = sealed
            .flows
            .iter()
            .find(|f| f.key.ports == Some((40000, 443)))
            .unwrap();
        let e = f.totals.encap.as_deref().unwrap();
        let d0 = e.dirs[0].unwrap();
        let v = |a: [u8; 4]| std::net::IpAddr::from(a);
        assert_eq!(
            (d0.kind, d0.outer, d0.id, d0.mpls),
            (
                capsule_wire::EncapKind::Vxlan,
                Some((v(v1), v(v2))),
                Some(42),
                None
            )
        );
        assert_eq!((d0.packets, d0.mixed), (3, false));
        assert_eq!(d0.outer_dscp, 1 << 10 | 1 << 12);
        assert_eq!(f.totals.packets, [4, 2]);
        assert!(!d0.is_whole(f.totals.packets[0]), "one packet came bare");
        let d1 = e.dirs[1].unwrap();
        assert_eq!((d1.outer, d1.id), (Some((v(v2), v(v1))), Some(42)));
        assert_eq!((d1.packets, d1.mixed), (2, true), "VNI 42 then 43");
        // The bare flow has none.
        assert!(sealed
            .flows
            .iter()
            .any(|f| f.key.ports == Some((6, 5)) && f.totals.encap.is_none()));
        // The capture path: the same index from the producer's records.
        let mut ix = IndexBuilder::new(5);
        for (m, d) in &b {
            ix.add_block_pieces(m, &[d], Some(&records_of(d)));
        }
        assert_eq!(ix.finish(777), sealed);
        // Each record holds its block's share: the second block's has VNI 43 one way.
        let r1 = &parse(&bytes).records[1].delta;
        let f1 = r1.flows.iter().find(|f| f.key.ports == Some((40000, 443)));
        assert_eq!(
            f1.unwrap().totals.encap.as_deref().unwrap().dirs[1]
                .unwrap()
                .id,
            Some(43)
        );
    }

    /// What a flow's payload taught by a block is in that block's record: the fold of an
    /// open segment's first record has the names learned so far (one side's SSH version),
    /// the whole journal's fold the sealed index's (both).
    #[test]
    fn names_learned_so_far_are_in_each_blocks_record() {
        let with = |mut f: Vec<u8>, text: &[u8]| {
            let n = f.len();
            f[n - text.len()..].copy_from_slice(text);
            f
        };
        let (c, sv) = (b"SSH-2.0-client_1\r\n", b"SSH-2.0-server_9\r\n");
        let mut b = vec![
            block(
                &[
                    (S, tcp4(None, A, B, 40000, 22, 100, 0x02, 1000, 0, 0)),
                    (
                        S + 1,
                        with(tcp4(None, A, B, 40000, 22, 101, 0x18, 1000, c.len(), 0), c),
                    ),
                ],
                true,
            ),
            block(
                &[(2 * S, tcp4(None, B, A, 22, 40000, 900, 0x10, 1000, 0, 0))],
                false,
            ),
            block(
                &[(
                    3 * S,
                    with(
                        tcp4(None, B, A, 22, 40000, 901, 0x18, 1000, sv.len(), 0),
                        sv,
                    ),
                )],
                false,
            ),
        ];
        as_written(&mut b);
        let (bytes, ends, sealed) = journal_of(&b);
        let first = fold(5, &metas(&b)[..1], 777, &parse(&bytes[..ends[0]]));
        assert!(first.index.named);
        let n = first.index.flows[0].totals.names.as_deref().unwrap();
        assert_eq!(n.app, capsule_names::App::Ssh);
        assert_eq!(n.ssh, [Some("2.0-client_1".into()), None]);
        // Both sides of SSH send a version line: the bytes do not tell the client.
        assert_eq!(n.client, None);
        let all = fold(5, &metas(&b), 777, &parse(&bytes));
        assert_eq!(all.index, sealed);
        assert_eq!(
            sealed.flows[0].totals.names.as_deref().unwrap().ssh,
            [Some("2.0-client_1".into()), Some("2.0-server_9".into())]
        );
        // The second block taught nothing: its record carries no names.
        assert!(parse(&bytes).records[1].delta.flows[0]
            .totals
            .names
            .is_none());
    }

    /// Version 3 records (written before records carried their block's place and header),
    /// version 4 ones (a compressed body), 5 (no series) and 6 (no names) are read as the
    /// same records: the version 3 blocks' headers are walked by the segment reader; an
    /// open segment folded from records without names says it has none.
    #[test]
    fn records_of_versions_3_to_7_are_still_read() {
        let b = blocks();
        let (bytes, _, sealed) = journal_of(&b);
        let now = parse(&bytes);
        assert!(now.notes.is_empty(), "{:?}", now.notes);
        for version in [3, 4, 5, 6, 7] {
            // Records before version 8 have no encapsulations, before 7 no names, before
            // version 6 no series: the fold has none either.
            let mut want = now.records.clone();
            let mut sealed_old = sealed.clone();
            sealed_old.named = version >= NAMES_JOURNAL_VERSION;
            sealed_old.tunnels = false;
            for r in &mut want {
                r.names = version >= NAMES_JOURNAL_VERSION;
                r.tunnels = false;
                if version < SERIES_JOURNAL_VERSION {
                    r.delta.series = None;
                    sealed_old.series = None;
                }
            }
            let old = as_older(&bytes, version);
            let read = parse(&old);
            assert!(read.notes.is_empty(), "version {version}: {:?}", read.notes);
            assert_eq!(read.records, want, "version {version}");
            assert_eq!(fold(5, &metas(&b), 777, &read).index, sealed_old);
            // The store finds a block table in version 4 records only.
            let table = framing::block_table(&old, 5).len();
            assert_eq!(table, if version >= 4 { 3 } else { 0 });
        }
        assert_eq!(framing::block_table(&bytes, 5).len(), 3);
    }

    /// A version 5 body is the record's bytes as they are: one whose length disagrees with
    /// the record's U is refused with a note naming both.
    #[test]
    fn a_raw_body_of_the_wrong_length_is_refused() {
        let b = blocks();
        let (bytes, ends, _) = journal_of(&b);
        let mut p = bytes[FRAME_LEN..ends[0]].to_vec();
        let ulen = u32::from_le_bytes(p[40..44].try_into().unwrap());
        p[40..44].copy_from_slice(&(ulen + 1).to_le_bytes());
        let mut one = RECORD_MAGIC.to_vec();
        one.extend_from_slice(&(p.len() as u32).to_le_bytes());
        one.extend_from_slice(&capsule_store::crc::crc32c(&p).to_le_bytes());
        one.extend_from_slice(&p);
        let read = parse(&one);
        assert!(read.records.is_empty());
        assert!(
            read.notes[0].contains(&format!("the record says {}", ulen + 1)),
            "{:?}",
            read.notes
        );
    }

    #[test]
    fn journal_files_are_written_and_removed_in_the_index_dir() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("index");
        let b = blocks();
        let mut w = JournalWriter::create(&dir, 9).unwrap();
        let mut ix = IndexBuilder::new(9);
        for (m, data) in &b {
            ix.add_block(m, data);
            w.append(m, ix.last_delta()).unwrap();
        }
        assert_eq!(w.path(), dir.join("seg-000000000009.journal"));
        assert_eq!(parse_journal_name("seg-000000000009.journal"), Some(9));
        assert_eq!(parse_journal_name("seg-9.journal"), None);
        let read = parse(&std::fs::read(w.path()).unwrap());
        assert_eq!(read.records.len(), 3);
        // A new writer for the same number starts over.
        drop(w);
        let _w = JournalWriter::create(&dir, 9).unwrap();
        assert_eq!(std::fs::read(dir.join(journal_name(9))).unwrap().len(), 0);
        remove(&dir, 9).unwrap();
        remove(&dir, 9).unwrap();
        assert!(!dir.join(journal_name(9)).exists());
    }

    /// The checkpoint of the first `k` blocks, as the writer thread writes it.
    fn checkpoint_of(blocks: &[(BlockMeta, Vec<u8>)], k: usize) -> Vec<u8> {
        let mut ix = IndexBuilder::new(5);
        let mut m = Vec::new();
        for (meta, d) in &blocks[..k] {
            ix.add_block(meta, d);
            m.push(BlockMatch::of(meta));
        }
        checkpoint::encode(&ix, &m)
    }

    /// Folding the journal onto a checkpoint of its first k blocks (every k, so the TCP
    /// conversation that spans all three blocks, with its retransmission in the third judged
    /// against the state carried from the first two, crosses each boundary) equals folding
    /// the journal alone, and the sealed index; the same with the blocks taken from the
    /// journal's records (the listing that does not open the segment file).
    #[test]
    fn folding_onto_a_checkpoint_equals_folding_the_journal_alone() {
        let b = blocks();
        let (bytes, _, sealed) = journal_of(&b);
        let alone = fold(5, &metas(&b), 777, &parse(&bytes));
        assert_eq!(alone.index, sealed);
        for k in 0..=b.len() {
            let ck = checkpoint::decode(&checkpoint_of(&b, k)).unwrap();
            assert_eq!(ck.covered(), k);
            assert!(ck.describes(5, &metas(&b)));
            let live = fold_journal(5, Some(&metas(&b)), 777, &bytes, Some(ck.clone()));
            assert_eq!(live, alone, "checkpoint of {k} blocks");
            assert_eq!(
                live.index.flows[0].totals.retransmissions,
                [1, 0],
                "k = {k}"
            );
            let listed = fold_journal(5, None, 777, &bytes, Some(ck));
            assert_eq!(
                listed, alone,
                "checkpoint of {k} blocks, blocks from the records"
            );
            // The covered records are read for their fixed part only.
            let read = parse_from(&bytes, k as u32);
            assert_eq!(read.records.len(), b.len() - k);
            assert_eq!(read.skipped.len(), k);
        }
        // A journal that has not caught up with the file: the blocks after it are unseen
        // either way.
        let ck = checkpoint::decode(&checkpoint_of(&b, 1)).unwrap();
        let cut = &bytes[..bytes.len() - 1];
        assert_eq!(
            fold_journal(5, Some(&metas(&b)), 777, cut, Some(ck)),
            fold(5, &metas(&b), 777, &parse(cut))
        );
    }

    /// A record the checkpoint covers is not decompressed: a body that would not decode
    /// (framed with a good crc32c) is no note once a checkpoint covers its block.
    #[test]
    fn records_a_checkpoint_covers_are_not_decoded() {
        let b = blocks();
        let (bytes, ends, _) = journal_of(&b);
        let mut bad = bytes[..ends[0]].to_vec();
        let body_end = bad.len();
        bad[body_end - 3..].copy_from_slice(&[0xff; 3]);
        let crc = capsule_store::crc::crc32c(&bad[FRAME_LEN..]);
        bad[8..12].copy_from_slice(&crc.to_le_bytes());
        bad.extend_from_slice(&bytes[ends[0]..]);
        let read = parse(&bad);
        assert!(
            read.notes[0].contains("does not decode"),
            "{:?}",
            read.notes
        );
        let alone = fold(5, &metas(&b), 777, &read);
        assert_eq!(alone.unseen, vec![0]);
        let ck = checkpoint::decode(&checkpoint_of(&b, 1)).unwrap();
        let live = fold_journal(5, Some(&metas(&b)), 777, &bad, Some(ck));
        assert!(live.notes.is_empty() && live.unseen.is_empty(), "{live:?}");
        assert_eq!(live, fold(5, &metas(&b), 777, &parse(&bytes)));
    }

    /// A checkpoint that does not describe the file is ignored: the journal alone is
    /// folded. Damaged (every byte flipped in turn), of another segment number, of another
    /// file with that number (a block differs), covering more blocks than the file has.
    #[test]
    fn a_checkpoint_that_does_not_describe_the_file_is_ignored() {
        let b = blocks();
        let (bytes, _, _) = journal_of(&b);
        let alone = fold(5, &metas(&b), 777, &parse(&bytes));
        let good = checkpoint_of(&b, 2);
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x04;
            assert!(
                checkpoint::decode(&bad).is_err(),
                "flip at {at} went unnoticed"
            );
        }
        for cut in 0..good.len() {
            assert!(checkpoint::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let ck = checkpoint::decode(&good).unwrap();
        // Another segment's.
        assert!(!ck.describes(6, &metas(&b)));
        let live = fold_journal(6, Some(&metas(&b)), 777, &bytes, Some(ck.clone()));
        assert_eq!(live, fold(6, &metas(&b), 777, &parse(&bytes)));
        // Another file's: its second block is not this file's.
        let mut other = metas(&b);
        other[1].frame_crc ^= 1;
        assert!(!ck.describes(5, &other));
        let live = fold_journal(5, Some(&other), 777, &bytes, Some(ck.clone()));
        assert_eq!(live, fold(5, &other, 777, &parse(&bytes)));
        assert_eq!(live.unseen, vec![1]);
        // Ahead of the file.
        assert!(!ck.describes(5, &metas(&b[..1])));
        let live = fold_journal(5, Some(&metas(&b[..1])), 10, &bytes, Some(ck.clone()));
        assert_eq!(live, fold(5, &metas(&b[..1]), 10, &parse(&bytes)));
        // From the records alone: a journal whose records are other blocks.
        let (theirs, _, _) = journal_of(&b[1..]);
        let live = fold_journal(5, None, 777, &theirs, Some(ck));
        let read = parse(&theirs);
        assert_eq!(live, fold(5, &metas_of(&read), 777, &read));
        assert_ne!(live.index, alone.index);
    }

    #[test]
    fn checkpoints_are_written_beside_the_journal_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("index");
        let b = blocks();
        let mut w = JournalWriter::create(&dir, 5).unwrap();
        let mut c = checkpoint::Checkpointer::create(&dir, 5).unwrap();
        let mut ix = IndexBuilder::new(5);
        for (m, data) in &b {
            ix.add_block(m, data);
            w.append(m, ix.last_delta()).unwrap();
            c.block(m);
        }
        assert!(c.due_in(std::time::Instant::now()).is_some());
        assert_eq!(checkpoint::load(&dir, 5), None, "none written yet");
        c.write(&ix).unwrap();
        assert_eq!(c.due_in(std::time::Instant::now()), None, "all covered");
        assert_eq!(c.path(), dir.join("seg-000000000005.fold"));
        let ck = checkpoint::load(&dir, 5).unwrap();
        assert_eq!(ck.covered(), 3);
        assert_eq!(ck.index, ix.finish(0));
        assert_eq!(checkpoint::load(&dir, 6), None);
        // A new writer for the number starts without one.
        drop(c);
        let _c = checkpoint::Checkpointer::create(&dir, 5).unwrap();
        assert!(!dir.join(checkpoint::checkpoint_name(5)).exists());
        checkpoint::remove(&dir, 5).unwrap();
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse(&bytes);
            let mut framed = RECORD_MAGIC.to_vec();
            framed.extend_from_slice(&((bytes.len()) as u32).to_le_bytes());
            framed.extend_from_slice(&capsule_store::crc::crc32c(&bytes).to_le_bytes());
            framed.extend_from_slice(&bytes);
            let _ = parse(&framed);
        }
    }
}
