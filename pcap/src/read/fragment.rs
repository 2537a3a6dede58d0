//! The segment store's fast path: walking a run of little-endian pcapng blocks without a
//! section header (a block of the store, as written by [`crate::write`]), for its packets
//! ([`fragment_packets`]) or its interface statistics ([`fragment_stats`]). Never panics.

use std::iter::FusedIterator;

use capsule_wire::view::{Endian, Reader, View};

use super::parse_isb_options;
use crate::write::{BLOCK_CUT, BLOCK_EPB, BLOCK_ISB};
use crate::PacketRef;

/// Interface statistics found in a fragment by [`fragment_stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentStat {
    /// Interface id as written in the ISB.
    pub iface: u32,
    /// Time of the counters, ns (the store writes `if_tsresol = 9`).
    pub ts_ns: u64,
    /// `isb_ifrecv`, when given.
    pub received: Option<u64>,
    /// `isb_ifdrop`, when given.
    pub dropped: Option<u64>,
}

/// The Interface Statistics Blocks of a fragment of the segment store (little-endian pcapng
/// blocks without a section header), in order. Other blocks are skipped; a damaged block or
/// option ends the walk (what came before it is returned). Never panics.
pub fn fragment_stats(buf: &[u8]) -> Vec<FragmentStat> {
    let mut out = Vec::new();
    let mut r = Reader::new(buf);
    while let Ok(h) = r.peek::<8>() {
        let kind = h.u32_le::<0>();
        let len = h.u32_le::<4>() as usize;
        if len < 12 || !len.is_multiple_of(4) {
            break;
        }
        let Ok(block) = r.take(len) else {
            break;
        };
        if kind == BLOCK_ISB && len >= 24 {
            // Type, length, interface, timestamp; the options; the trailing length.
            let mut b = Reader::new(block);
            let (Ok(head), Ok(opts)) = (b.view::<20>(), b.take(len - 24)) else {
                break;
            };
            let Ok((received, dropped)) = parse_isb_options(opts, Endian::Little) else {
                break;
            };
            out.push(FragmentStat {
                iface: head.u32_le::<8>(),
                ts_ns: (u64::from(head.u32_le::<12>()) << 32) | u64::from(head.u32_le::<16>()),
                received,
                dropped,
            });
        }
    }
    out
}

/// Iterates over the packets of a fragment of the segment store: a run of little-endian
/// pcapng blocks with no Section Header Block, as written by [`crate::write::pcapng_epb`],
/// [`crate::write::pcapng_idb`] and [`crate::write::pcapng_isb`].
///
/// Enhanced Packet Blocks are yielded with their timestamp taken as nanoseconds (the store
/// always writes `if_tsresol = 9`) and `iface` set to the interface id as written; all other
/// blocks are skipped by their length. Packets borrow `buf`. After an error the iterator ends.
pub fn fragment_packets(buf: &[u8]) -> FragmentPackets<'_> {
    FragmentPackets {
        buf,
        pos: 0,
        cut: false,
        last_cut: false,
    }
}

/// Like [`fragment_packets`], but also yields capsule's cut-packet blocks
/// ([`crate::write::BLOCK_CUT`]: the headers of packets the per-class cut-off did not
/// store), in file order with the packets; [`FragmentRecords::last_was_cut`] tells which
/// the last item was. For the side index, which counts what was seen.
pub fn fragment_records(buf: &[u8]) -> FragmentRecords<'_> {
    FragmentRecords(FragmentPackets {
        buf,
        pos: 0,
        cut: true,
        last_cut: false,
    })
}

/// Iterator returned by [`fragment_records`]: stored packets and cut-packet records, each
/// with whether it is a cut record.
#[derive(Debug, Clone)]
pub struct FragmentRecords<'a>(FragmentPackets<'a>);

impl FragmentRecords<'_> {
    /// Whether the last item yielded was a cut-packet record (headers only).
    pub fn last_was_cut(&self) -> bool {
        self.0.last_cut
    }
}

impl<'a> Iterator for FragmentRecords<'a> {
    type Item = Result<(PacketRef<'a>, bool), FragmentError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let r = self.0.next()?;
        Some(r.map(|p| (p, self.0.last_cut)))
    }
}

impl FusedIterator for FragmentRecords<'_> {}

/// Iterator returned by [`fragment_packets`].
#[derive(Debug, Clone)]
pub struct FragmentPackets<'a> {
    /// The fragment; emptied after an error.
    buf: &'a [u8],
    /// Offset of the next block in `buf`.
    pos: usize,
    /// Yield cut-packet blocks too (as packets).
    cut: bool,
    /// Whether the last block yielded was a cut-packet block.
    last_cut: bool,
}

/// An error in a fragment passed to [`fragment_packets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("at byte {offset} of the fragment: {kind}")]
pub struct FragmentError {
    /// Offset within the fragment of the start of the bad block.
    pub offset: usize,
    /// What was wrong.
    pub kind: FragmentErrorKind,
}

/// What was wrong with a fragment block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FragmentErrorKind {
    /// Fewer than 8 bytes left where a block header should start.
    #[error("truncated pcapng block header: need 8 bytes, fragment ends after {found}")]
    TruncatedHeader {
        /// Bytes left.
        found: usize,
    },
    /// A block length that is not a multiple of 4.
    #[error("pcapng block length {len} is not a multiple of 4")]
    LengthNotAligned {
        /// Block total length found.
        len: u32,
    },
    /// A block shorter than its type requires.
    #[error("{block} length {len} is shorter than the {min}-byte minimum")]
    BlockTooShort {
        /// Block name.
        block: &'static str,
        /// Block total length found.
        len: u32,
        /// Minimum total length.
        min: u32,
    },
    /// A block that runs past the end of the fragment.
    #[error("truncated pcapng block: header says {len} bytes, fragment ends after {found}")]
    TruncatedBlock {
        /// Block total length found.
        len: u32,
        /// Bytes left from the start of the block.
        found: usize,
    },
    /// A block whose two total-length fields differ.
    #[error("block total length fields differ: {start} at start, {end} at end")]
    LengthMismatch {
        /// Length at the start of the block.
        start: u32,
        /// Length at the end of the block.
        end: u32,
    },
    /// An EPB whose captured length does not fit in the block.
    #[error(
        "EPB captured length {caplen} does not fit in the {room} bytes of data its block holds"
    )]
    CaptureOverrun {
        /// Captured length found.
        caplen: u32,
        /// Bytes available for packet data.
        room: usize,
    },
}

impl<'a> FragmentPackets<'a> {
    /// Ends the iteration with an error at the current block.
    #[cold]
    fn fail(&mut self, kind: FragmentErrorKind) -> Option<Result<PacketRef<'a>, FragmentError>> {
        let offset = self.pos;
        self.buf = &[]; // `buf.get(pos..)` is now `None`: the iteration is over
        Some(Err(FragmentError { offset, kind }))
    }

    /// Offset within the fragment of the next block to read (after an error, of the bad block).
    pub fn offset(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for FragmentPackets<'a> {
    type Item = Result<PacketRef<'a>, FragmentError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rest = self.buf.get(self.pos..)?;
            let Ok((h, _)) = View::<8>::split(rest) else {
                if rest.is_empty() {
                    return None;
                }
                let found = rest.len();
                return self.fail(FragmentErrorKind::TruncatedHeader { found });
            };
            let block_type = h.u32_le::<0>();
            let len = h.u32_le::<4>();
            let len_us = len as usize;
            let is_cut = self.cut && block_type == BLOCK_CUT;
            let epb = block_type == BLOCK_EPB || is_cut;
            let min = if epb { 32 } else { 12 };
            if len % 4 != 0 {
                return self.fail(FragmentErrorKind::LengthNotAligned { len });
            }
            if len < min {
                let block = if epb { "EPB" } else { "pcapng block" };
                return self.fail(FragmentErrorKind::BlockTooShort { block, len, min });
            }
            // The block is its body and its trailing length (`len_us >= 12`).
            let mut r = Reader::new(rest);
            let (Ok(body), Ok(end)) = (r.take(len_us - 4), r.view::<4>()) else {
                let found = rest.len();
                return self.fail(FragmentErrorKind::TruncatedBlock { len, found });
            };
            let end = end.u32_le::<0>();
            if end != len {
                return self.fail(FragmentErrorKind::LengthMismatch { start: len, end });
            }
            if !epb {
                self.pos += len_us;
                continue;
            }
            self.last_cut = is_cut;
            // Type, length, interface, timestamp, captured and original length; the data.
            let mut b = Reader::new(body);
            let Ok(e) = b.view::<28>() else {
                let block = "EPB";
                return self.fail(FragmentErrorKind::BlockTooShort { block, len, min });
            };
            let caplen = e.u32_le::<20>();
            let Ok(data) = b.take(caplen as usize) else {
                let room = b.remaining();
                return self.fail(FragmentErrorKind::CaptureOverrun { caplen, room });
            };
            self.pos += len_us;
            // What follows the data's padding is the packet's options and their closing
            // `opt_endofopt`, which the store writes only after options.
            let _ = b.skip(data.len().wrapping_neg() & 3);
            let rest = b.rest();
            let options = match rest.len().checked_sub(4) {
                Some(n) if rest[n..] == [0u8; 4] => &rest[..n],
                _ => rest,
            };
            return Some(Ok(PacketRef {
                ts_ns: (u64::from(e.u32_le::<12>()) << 32) | u64::from(e.u32_le::<16>()),
                orig_len: e.u32_le::<24>(),
                iface: e.u32_le::<8>(),
                data,
                options,
            }));
        }
    }
}

impl FusedIterator for FragmentPackets<'_> {}
