//! Checked readers for classic pcap and pcapng over untrusted bytes.
//!
//! [`CaptureReader`] streams a capture file from any [`Read`] (a file, a pipe, stdin: it never
//! seeks) and yields [`Record`]s: packets, interfaces as they are described, and interface
//! statistics. Packets borrow from the reader's buffer, so reading costs no allocation or copy
//! per packet. The buffer is read in 1 MiB chunks and grows only for a record that does not fit,
//! up to [`MAX_RECORD_LEN`].
//!
//! What is checked, each failure being a [`ReadError`] that names the source, the byte offset
//! where the bad record starts, what was expected and what was found:
//!
//! * the file starts with a known magic number: classic pcap with microsecond (`0xa1b2c3d4`) or
//!   nanosecond (`0xa1b23c4d`) timestamps in either byte order, or a pcapng Section Header
//!   Block; the pcap version is 2.x and the pcapng version 1.x;
//! * every pcapng section has a valid byte-order magic (each section may use its own byte
//!   order);
//! * every pcapng block length is a multiple of 4, at least the minimum for its block type, at
//!   most [`MAX_RECORD_LEN`], and equal to the copy at the end of the block;
//! * every captured length is at most [`MAX_RECORD_LEN`] and fits in its record or block;
//! * every packet or statistics block names an interface that its section has described;
//! * the options that the reader uses (`if_name`, `if_tsresol`, `if_tsoffset`, `isb_ifrecv`,
//!   `isb_ifdrop`) have the right length, and no option of an IDB or ISB runs past its block;
//! * the file ends at a record boundary: a file cut inside a record is an error at that
//!   record's offset, while every record before it has been returned.
//!
//! What is deliberately accepted: a captured length larger than the original length or the
//! interface's snaplen (kept as given; writers fix it), timestamps of any value (converted to
//! nanoseconds with saturation), and unknown pcapng block types (skipped by their length).
//!
//! [`fragment_packets`] is the fast path for the segment store: it walks a run of
//! little-endian pcapng blocks without a section header, as written by [`crate::write`].
//!
//! Every field is read through the checked views of [`capsule_wire::view`]: a [`View`] of
//! each fixed-size header (its length checked once, its fields in the section's byte order)
//! and a [`Reader`] over options. Nothing here panics, whatever the input, and after an error
//! every later call returns an error too.

use std::fmt;
use std::io::{self, Read};
use std::iter::FusedIterator;

use capsule_wire::view::{Endian, Reader, View};

use crate::write::{
    BLOCK_EPB, BLOCK_IDB, BLOCK_ISB, BLOCK_PB, BLOCK_SHB, BLOCK_SPB, BYTE_ORDER_MAGIC, OPT_IF_NAME,
    OPT_IF_TSOFFSET, OPT_IF_TSRESOL, OPT_ISB_IFDROP, OPT_ISB_IFRECV, PCAP_MAGIC_NS, PCAP_MAGIC_US,
};
use crate::{Interface, LinkType, PacketRef};

/// Largest packet (classic pcap captured length) or pcapng block, in bytes, that a reader
/// accepts: 16 MiB. Anything bigger is reported as an error rather than allocated.
pub const MAX_RECORD_LEN: usize = 16 << 20;

/// Most interfaces a [`CaptureReader`] keeps for one file, over all its sections.
pub const MAX_INTERFACES: usize = 1 << 16;

/// Size of one read from the underlying reader, and of the reader's initial buffer.
const CHUNK: usize = 1 << 20;

/// Smallest free space worth a read: below it, the buffer is compacted first.
const MIN_READ: usize = 64 << 10;

/// `MAX_RECORD_LEN` as a `u32`, for comparisons with length fields.
const MAX_RECORD_LEN_U32: u32 = MAX_RECORD_LEN as u32;

/// The kind of capture file a [`CaptureReader`] is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileFormat {
    /// Classic pcap (libpcap) format.
    Pcap {
        /// Timestamps have nanosecond (magic `0xa1b23c4d`) rather than microsecond resolution.
        nanos: bool,
        /// The file is big-endian.
        big_endian: bool,
    },
    /// pcapng; the byte order may differ from section to section.
    PcapNg,
}

/// One item of a capture file, as returned by [`CaptureReader::next_record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// A new interface; `id` is its index in [`CaptureReader::interfaces`] (file-wide,
    /// sequential across pcapng sections).
    ///
    /// A classic pcap file has exactly one interface, id 0, described by its file header; it is
    /// already in `interfaces()` when the reader is created, and this record is still returned
    /// first so that callers handle both formats the same way.
    Interface {
        /// File-wide index of the interface.
        id: u32,
    },
    /// A packet. `ts_ns` is in nanoseconds since the epoch and `iface` is the file-wide
    /// interface index. The data borrows the reader's buffer until the next call.
    ///
    /// A pcapng Simple Packet Block carries no timestamp; its packet gets the timestamp of the
    /// packet before it in the file (0 if there is none).
    Packet(PacketRef<'a>),
    /// Interface statistics, from a pcapng Interface Statistics Block.
    Stats {
        /// File-wide interface index.
        iface: u32,
        /// Time of the statistics, nanoseconds since the epoch.
        ts_ns: u64,
        /// Packets received by the interface (`isb_ifrecv`), when given.
        received: Option<u64>,
        /// Packets dropped by the interface (`isb_ifdrop`), when given.
        dropped: Option<u64>,
    },
}

/// An error while reading a capture file: where it happened and what was wrong.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: at byte {offset}: {kind}")]
pub struct ReadError {
    /// Name of the input (a path, or `-` for stdin), as given to [`CaptureReader::new`].
    pub source_name: String,
    /// Byte offset in the input of the start of the record or header that is wrong.
    pub offset: u64,
    /// What was wrong.
    pub kind: ReadErrorKind,
}

/// What was wrong with a capture file. Each message says what was expected and what was found.
#[derive(Debug, thiserror::Error)]
pub enum ReadErrorKind {
    /// The underlying reader failed.
    #[error("I/O error: {0}")]
    Io(#[source] io::Error),
    /// The input is empty.
    #[error("empty input: expected a pcap or pcapng file header")]
    EmptyInput,
    /// The input starts with neither pcap nor pcapng magic. `magic` is the first four bytes,
    /// read big-endian (as they appear in a hex dump).
    #[error("unknown magic number {magic:#010x}: not a pcap or pcapng file")]
    UnknownMagic {
        /// The first four bytes of the input.
        magic: u32,
    },
    /// The input ends inside a fixed-size header.
    #[error("truncated {what}: need {needed} bytes, file ends after {found}")]
    TruncatedHeader {
        /// Which header (`"pcap file header"`, `"pcap record header"`, `"pcapng block header"`, ...).
        what: &'static str,
        /// Size of the header.
        needed: usize,
        /// Bytes left in the input.
        found: usize,
    },
    /// A classic pcap file header with a version other than 2.x.
    #[error("unsupported pcap version {major}.{minor}: expected 2.x")]
    UnsupportedPcapVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
    /// A classic pcap record whose data is cut short by the end of the input.
    #[error(
        "truncated packet record: header says {caplen} captured bytes, file ends after {found}"
    )]
    TruncatedRecord {
        /// Captured length in the record header.
        caplen: u32,
        /// Bytes of data left in the input after the record header.
        found: usize,
    },
    /// A captured length larger than [`MAX_RECORD_LEN`].
    #[error("captured length {caplen} exceeds the {limit}-byte limit")]
    CaptureTooLong {
        /// Captured length in the record header.
        caplen: u32,
        /// The limit, [`MAX_RECORD_LEN`].
        limit: usize,
    },
    /// A pcapng Section Header Block whose byte-order magic is neither `0x1a2b3c4d` nor its
    /// byte swap.
    #[error("section header byte-order magic is {magic:#010x}, expected 0x1a2b3c4d in either byte order")]
    BadByteOrderMagic {
        /// The byte-order field, read big-endian.
        magic: u32,
    },
    /// A pcapng section with a major version other than 1.
    #[error("unsupported pcapng version {major}.{minor}: expected 1.x")]
    UnsupportedPcapngVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
    /// A pcapng block length that is not a multiple of 4.
    #[error("pcapng block length {len} is not a multiple of 4")]
    BlockLengthNotAligned {
        /// Block total length found.
        len: u32,
    },
    /// A pcapng block shorter than its type requires.
    #[error("{block} length {len} is shorter than the {min}-byte minimum")]
    BlockTooShort {
        /// Block name (`"EPB"`, `"IDB"`, `"pcapng block"`, ...).
        block: &'static str,
        /// Block total length found.
        len: u32,
        /// Minimum total length for that block type.
        min: u32,
    },
    /// A pcapng block longer than [`MAX_RECORD_LEN`].
    #[error("pcapng block length {len} exceeds the {limit}-byte limit")]
    BlockTooLong {
        /// Block total length found.
        len: u32,
        /// The limit, [`MAX_RECORD_LEN`].
        limit: usize,
    },
    /// A pcapng block cut short by the end of the input.
    #[error("truncated pcapng block: header says {len} bytes, file ends after {found}")]
    TruncatedBlock {
        /// Block total length in the block header.
        len: u32,
        /// Bytes left in the input from the start of the block.
        found: usize,
    },
    /// A pcapng block whose two total-length fields differ.
    #[error("block total length fields differ: {start} at start, {end} at end")]
    BlockLengthMismatch {
        /// Length at the start of the block.
        start: u32,
        /// Length at the end of the block (read at `start - 4`).
        end: u32,
    },
    /// A packet block whose captured length does not fit in the block.
    #[error(
        "{block} captured length {caplen} does not fit in the {room} bytes of data its block holds"
    )]
    CaptureOverrun {
        /// Block name.
        block: &'static str,
        /// Captured length found.
        caplen: u32,
        /// Bytes available for packet data in the block.
        room: usize,
    },
    /// A packet or statistics block that names an interface its section has not described.
    #[error("{block} names interface {id} but the section defines {count}")]
    UnknownInterface {
        /// Block name.
        block: &'static str,
        /// Interface id in the block (section-relative).
        id: u32,
        /// Number of interfaces described so far in the section.
        count: u32,
    },
    /// An option that runs past the end of its block.
    #[error(
        "{block} option {code} of length {len} runs past the end of the block ({room} bytes left)"
    )]
    OptionOverrun {
        /// Block name.
        block: &'static str,
        /// Option code.
        code: u16,
        /// Option length found.
        len: u16,
        /// Bytes left in the block after the option header.
        room: usize,
    },
    /// An option the reader uses, with the wrong length.
    #[error("{block} option {option} has length {len}, expected {expected}")]
    BadOptionLength {
        /// Block name.
        block: &'static str,
        /// Option name.
        option: &'static str,
        /// Option length found.
        len: usize,
        /// Length expected.
        expected: usize,
    },
    /// More interfaces than [`MAX_INTERFACES`].
    #[error("interface description would be interface number {count}, over the limit of {limit} per file")]
    TooManyInterfaces {
        /// Interfaces already described.
        count: usize,
        /// The limit, [`MAX_INTERFACES`].
        limit: usize,
    },
    /// A call after an earlier error: the reader does not resynchronise.
    #[error("reading stopped after an earlier error at byte {at}")]
    AfterError {
        /// Offset of the earlier error.
        at: u64,
    },
}

/// How to turn an interface's raw timestamps into nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TsConv {
    /// `if_tsresol`: MSB 0 means 10^-n seconds, MSB 1 means 2^-n seconds.
    resol: u8,
    /// `if_tsoffset`, seconds added to every timestamp.
    offset_s: i64,
}

impl TsConv {
    /// pcapng's default: microseconds, no offset.
    const DEFAULT: TsConv = TsConv {
        resol: 6,
        offset_s: 0,
    };

    /// Converts a raw timestamp to nanoseconds since the epoch, saturating at 0 and `u64::MAX`.
    #[inline]
    fn to_ns(self, raw: u64) -> u64 {
        if self.offset_s == 0 {
            match self.resol {
                9 => return raw,
                6 => return raw.saturating_mul(1000),
                _ => {}
            }
        }
        self.to_ns_slow(raw)
    }

    /// The general case of [`TsConv::to_ns`].
    fn to_ns_slow(self, raw: u64) -> u64 {
        let raw = u128::from(raw);
        // Every intermediate stays below 2^94 (raw < 2^64, times at most 10^9 < 2^30), so
        // nothing here can overflow.
        let base: u128 = if self.resol & 0x80 == 0 {
            let n = u32::from(self.resol);
            if n <= 9 {
                raw * 10u128.pow(9 - n)
            } else if n - 9 <= 38 {
                raw / 10u128.pow(n - 9)
            } else {
                0
            }
        } else {
            (raw * 1_000_000_000) >> u32::from(self.resol & 0x7f)
        };
        let total = base as i128 + i128::from(self.offset_s) * 1_000_000_000;
        total.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// What one step of parsing produced; data is given as a range of the buffer so that the
/// borrow of the buffer is taken only at the end of [`CaptureReader::next_record`].
enum Step {
    Interface(u32),
    Packet {
        ts_ns: u64,
        orig_len: u32,
        iface: u32,
        start: usize,
        len: usize,
    },
    Stats {
        iface: u32,
        ts_ns: u64,
        received: Option<u64>,
        dropped: Option<u64>,
    },
}

/// An error found while parsing, before it is given the source name.
type Fail = (u64, ReadErrorKind);

/// A checked, streaming reader of classic pcap and pcapng files.
///
/// ```
/// # fn main() -> Result<(), capsule_pcap::ReadError> {
/// use capsule_pcap::{CaptureReader, Record};
/// let mut file = Vec::new();
/// capsule_pcap::write::pcap_header(&mut file, 1, 65535);
/// capsule_pcap::write::pcap_record(&mut file, 1_000, 60, &[0u8; 60]);
/// let mut reader = CaptureReader::new("example.pcap", &file[..])?;
/// let mut packets = 0;
/// while let Some(record) = reader.next_record()? {
///     if let Record::Packet(p) = record {
///         assert_eq!(p.ts_ns, 1_000);
///         packets += 1;
///     }
/// }
/// assert_eq!(packets, 1);
/// # Ok(())
/// # }
/// ```
pub struct CaptureReader<R: Read> {
    /// Name of the input, for errors.
    source: String,
    /// The input.
    reader: R,
    /// Buffered input: `buf[start..end]` is read but not yet consumed.
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    /// End of the valid bytes in `buf`.
    end: usize,
    /// The input has reported its end.
    eof: bool,
    /// Offset in the input of `buf[start]`.
    offset: u64,
    /// The file's format.
    format: FileFormat,
    /// Interfaces, file-wide.
    interfaces: Vec<Interface>,
    /// Timestamp conversion of each interface (pcapng), parallel to `interfaces`.
    ts_conv: Vec<TsConv>,
    /// Byte order of the current pcapng section, or of the classic pcap file.
    order: Endian,
    /// File-wide index of the first interface of the current pcapng section.
    section_first: usize,
    /// Classic pcap: interface 0 has not been announced yet.
    announce_pcap_iface: bool,
    /// Timestamp of the last packet, given to Simple Packet Blocks.
    last_ts: u64,
    /// Offset of the error that stopped the reader.
    failed: Option<u64>,
}

impl<R: Read> fmt::Debug for CaptureReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader")
            .field("source", &self.source)
            .field("format", &self.format)
            .field("offset", &self.offset)
            .field("interfaces", &self.interfaces)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// Number of zero bytes that pad `len` up to a multiple of 4.
#[inline(always)]
const fn pad4(len: usize) -> usize {
    len.wrapping_neg() & 3
}

/// Walks the options of a pcapng block, calling `f(code, value)` for each until
/// `opt_endofopt` or the end of `opts` (fewer than 4 bytes left).
fn for_each_option(
    opts: &[u8],
    order: Endian,
    block: &'static str,
    mut f: impl FnMut(u16, &[u8]) -> Result<(), ReadErrorKind>,
) -> Result<(), ReadErrorKind> {
    let mut r = Reader::new(opts);
    while let Ok(head) = r.view::<4>() {
        let code = head.u16_in::<0>(order);
        let len = head.u16_in::<2>(order);
        if code == 0 {
            break;
        }
        let room = r.remaining();
        let (Ok(value), Ok(())) = (r.take(usize::from(len)), r.skip(pad4(usize::from(len)))) else {
            return Err(ReadErrorKind::OptionOverrun {
                block,
                code,
                len,
                room,
            });
        };
        f(code, value)?;
    }
    Ok(())
}

/// Checks that an option value has the expected length and returns its view.
fn option_value<'a, const N: usize>(
    value: &'a [u8],
    block: &'static str,
    option: &'static str,
) -> Result<View<'a, N>, ReadErrorKind> {
    let mut r = Reader::new(value);
    match r.view::<N>() {
        Ok(v) if r.is_empty() => Ok(v),
        _ => Err(ReadErrorKind::BadOptionLength {
            block,
            option,
            len: value.len(),
            expected: N,
        }),
    }
}

/// Checks a pcapng block total length that has been read from a block header: alignment,
/// minimum for the block type, and [`MAX_RECORD_LEN`].
fn check_block_len(len: u32, block: &'static str, min: u32) -> Result<(), ReadErrorKind> {
    if !len.is_multiple_of(4) {
        Err(ReadErrorKind::BlockLengthNotAligned { len })
    } else if len < min {
        Err(ReadErrorKind::BlockTooShort { block, len, min })
    } else if len > MAX_RECORD_LEN_U32 {
        Err(ReadErrorKind::BlockTooLong {
            len,
            limit: MAX_RECORD_LEN,
        })
    } else {
        Ok(())
    }
}

/// Name and minimum total length of each pcapng block type that the reader parses.
fn block_kind(block_type: u32) -> (&'static str, u32) {
    match block_type {
        BLOCK_SHB => ("SHB", 28),
        BLOCK_IDB => ("IDB", 20),
        BLOCK_PB => ("packet block", 32),
        BLOCK_SPB => ("SPB", 16),
        BLOCK_ISB => ("ISB", 24),
        BLOCK_EPB => ("EPB", 32),
        _ => ("pcapng block", 12),
    }
}

impl<R: Read> CaptureReader<R> {
    /// Creates a reader over `reader`, whose errors will name `source` (a path, or `-` for
    /// stdin). Reads and checks the classic pcap file header or the first pcapng Section
    /// Header Block.
    pub fn new(source: impl Into<String>, reader: R) -> Result<Self, ReadError> {
        let mut this = CaptureReader {
            source: source.into(),
            reader,
            buf: vec![0; CHUNK],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            format: FileFormat::PcapNg,
            interfaces: Vec::new(),
            ts_conv: Vec::new(),
            order: Endian::Little,
            section_first: 0,
            announce_pcap_iface: false,
            last_ts: 0,
            failed: None,
        };
        match this.read_file_header() {
            Ok(()) => Ok(this),
            Err((offset, kind)) => Err(ReadError {
                source_name: this.source,
                offset,
                kind,
            }),
        }
    }

    /// The format of the file, as told by its magic number.
    pub fn format(&self) -> FileFormat {
        self.format
    }

    /// The interfaces described so far, file-wide, indexed by [`PacketRef::iface`].
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Byte offset in the input of the next unread record (after an error: of the bad record).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the next record. Returns `Ok(None)` when the input ends cleanly at a record
    /// boundary. After an error, every later call returns an error.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, ReadError> {
        if let Some(at) = self.failed {
            return Err(self.error(at, ReadErrorKind::AfterError { at }));
        }
        let step = match self.format {
            FileFormat::Pcap { nanos, .. } => self.step_pcap(nanos),
            FileFormat::PcapNg => self.step_pcapng(),
        };
        match step {
            Ok(None) => Ok(None),
            Ok(Some(Step::Interface(id))) => Ok(Some(Record::Interface { id })),
            Ok(Some(Step::Packet {
                ts_ns,
                orig_len,
                iface,
                start,
                len,
            })) => {
                let data = start
                    .checked_add(len)
                    .and_then(|end| self.buf.get(start..end))
                    .unwrap_or_default();
                Ok(Some(Record::Packet(PacketRef {
                    ts_ns,
                    orig_len,
                    iface,
                    data,
                })))
            }
            Ok(Some(Step::Stats {
                iface,
                ts_ns,
                received,
                dropped,
            })) => Ok(Some(Record::Stats {
                iface,
                ts_ns,
                received,
                dropped,
            })),
            Err((at, kind)) => {
                self.failed = Some(at);
                Err(self.error(at, kind))
            }
        }
    }

    /// A [`ReadError`] for this reader.
    fn error(&self, offset: u64, kind: ReadErrorKind) -> ReadError {
        ReadError {
            source_name: self.source.clone(),
            offset,
            kind,
        }
    }

    /// Bytes buffered and not yet consumed.
    #[inline(always)]
    fn avail(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// The unconsumed bytes.
    #[inline(always)]
    fn pending(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or_default()
    }

    /// Marks `len` bytes as consumed.
    #[inline(always)]
    fn consume(&mut self, len: usize) {
        let len = len.min(self.avail());
        self.start += len;
        self.offset = self.offset.saturating_add(len as u64);
    }

    /// Reads until at least `need` bytes are buffered or the input ends, and returns the number
    /// of bytes buffered. `need` is at most `MAX_RECORD_LEN` plus a small header.
    #[inline]
    fn fill(&mut self, need: usize) -> Result<usize, Fail> {
        if self.avail() >= need || self.eof {
            return Ok(self.avail());
        }
        self.fill_slow(need)
            .map_err(|e| (self.offset, ReadErrorKind::Io(e)))?;
        Ok(self.avail())
    }

    /// The part of [`CaptureReader::fill`] that moves, grows and reads the buffer.
    #[cold]
    fn fill_slow(&mut self, need: usize) -> io::Result<()> {
        if self.buf.len().saturating_sub(self.start) < need
            || self.buf.len().saturating_sub(self.end) < MIN_READ
        {
            // Move the unconsumed bytes (fewer than `need`) to the front.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() < need {
                self.buf.resize(need.saturating_add(CHUNK), 0);
            }
        }
        while self.avail() < need {
            let Some(space) = self.buf.get_mut(self.end..) else {
                break;
            };
            match self.reader.read(space) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end = self.end.saturating_add(n).min(self.buf.len()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads the classic pcap file header or the first SHB.
    fn read_file_header(&mut self) -> Result<(), Fail> {
        let avail = self.fill(24)?;
        let Ok((magic, _)) = View::<4>::split(self.pending()) else {
            return Err(if avail == 0 {
                (0, ReadErrorKind::EmptyInput)
            } else {
                (
                    0,
                    ReadErrorKind::TruncatedHeader {
                        what: "file magic number",
                        needed: 4,
                        found: avail,
                    },
                )
            });
        };
        let (nanos, big_endian) = match (magic.u32_le::<0>(), magic.u32_be::<0>()) {
            (BLOCK_SHB, _) => return self.read_shb(),
            (PCAP_MAGIC_US, _) => (false, false),
            (PCAP_MAGIC_NS, _) => (true, false),
            (_, PCAP_MAGIC_US) => (false, true),
            (_, PCAP_MAGIC_NS) => (true, true),
            (_, magic) => return Err((0, ReadErrorKind::UnknownMagic { magic })),
        };
        let Ok((h, _)) = View::<24>::split(self.pending()) else {
            return Err((
                0,
                ReadErrorKind::TruncatedHeader {
                    what: "pcap file header",
                    needed: 24,
                    found: avail,
                },
            ));
        };
        let order = if big_endian {
            Endian::Big
        } else {
            Endian::Little
        };
        let major = h.u16_in::<4>(order);
        let minor = h.u16_in::<6>(order);
        if major != 2 {
            return Err((0, ReadErrorKind::UnsupportedPcapVersion { major, minor }));
        }
        let snaplen = h.u32_in::<16>(order);
        let linktype = h.u32_in::<20>(order) as LinkType;
        self.format = FileFormat::Pcap { nanos, big_endian };
        self.order = order;
        self.interfaces.push(Interface {
            linktype,
            snaplen,
            name: None,
        });
        self.announce_pcap_iface = true;
        self.consume(24);
        Ok(())
    }

    /// Reads one classic pcap record.
    #[inline]
    fn step_pcap(&mut self, nanos: bool) -> Result<Option<Step>, Fail> {
        if self.announce_pcap_iface {
            self.announce_pcap_iface = false;
            return Ok(Some(Step::Interface(0)));
        }
        let at = self.offset;
        let mut avail = self.avail();
        if avail < 16 {
            avail = self.fill(16)?;
        }
        let Ok((h, _)) = View::<16>::split(self.pending()) else {
            if avail == 0 {
                return Ok(None);
            }
            return Err((
                at,
                ReadErrorKind::TruncatedHeader {
                    what: "pcap record header",
                    needed: 16,
                    found: avail,
                },
            ));
        };
        let order = self.order;
        let secs = h.u32_in::<0>(order);
        let frac = h.u32_in::<4>(order);
        let caplen = h.u32_in::<8>(order);
        let orig_len = h.u32_in::<12>(order);
        if caplen > MAX_RECORD_LEN_U32 {
            return Err((
                at,
                ReadErrorKind::CaptureTooLong {
                    caplen,
                    limit: MAX_RECORD_LEN,
                },
            ));
        }
        let total = 16 + caplen as usize;
        if avail < total {
            avail = self.fill(total)?;
            if avail < total {
                return Err((
                    at,
                    ReadErrorKind::TruncatedRecord {
                        caplen,
                        found: avail.saturating_sub(16),
                    },
                ));
            }
        }
        // At most (2^32 - 1) * 10^9 + (2^32 - 1) * 1000 < 2^64: no overflow.
        let frac_ns = if nanos {
            u64::from(frac)
        } else {
            u64::from(frac) * 1000
        };
        let ts_ns = u64::from(secs) * 1_000_000_000 + frac_ns;
        let start = self.start + 16;
        self.consume(total);
        self.last_ts = ts_ns;
        Ok(Some(Step::Packet {
            ts_ns,
            orig_len,
            iface: 0,
            start,
            len: caplen as usize,
        }))
    }

    /// Reads a Section Header Block at the current offset and starts its section.
    fn read_shb(&mut self) -> Result<(), Fail> {
        let at = self.offset;
        let avail = self.fill(12)?;
        let Ok((h, _)) = View::<12>::split(self.pending()) else {
            return Err((
                at,
                ReadErrorKind::TruncatedHeader {
                    what: "section header block",
                    needed: 12,
                    found: avail,
                },
            ));
        };
        let order = match h.u32_be::<8>() {
            BYTE_ORDER_MAGIC => Endian::Big,
            m if m == BYTE_ORDER_MAGIC.swap_bytes() => Endian::Little,
            magic => return Err((at, ReadErrorKind::BadByteOrderMagic { magic })),
        };
        let len = h.u32_in::<4>(order);
        let head = self.load_block(len, "SHB", 28, order)?;
        let head = View::new(&head);
        let major = head.u16_in::<12>(order);
        let minor = head.u16_in::<14>(order);
        if major != 1 {
            return Err((at, ReadErrorKind::UnsupportedPcapngVersion { major, minor }));
        }
        self.order = order;
        self.section_first = self.interfaces.len();
        self.consume(len as usize);
        Ok(())
    }

    /// Checks a block's length, buffers the whole block, checks its trailing length and returns
    /// its first 28 bytes (zero past the block's end: callers read only what the minimum length
    /// of their block type covers). The block is `pending()[..len]`.
    #[inline]
    fn load_block(
        &mut self,
        len: u32,
        name: &'static str,
        min: u32,
        order: Endian,
    ) -> Result<[u8; 28], Fail> {
        let at = self.offset;
        check_block_len(len, name, min).map_err(|k| (at, k))?;
        let len_us = len as usize;
        let mut avail = self.avail();
        if avail < len_us {
            avail = self.fill(len_us)?;
            if avail < len_us {
                return Err((at, ReadErrorKind::TruncatedBlock { len, found: avail }));
            }
        }
        let block = self.pending();
        // `len_us` bytes are buffered and at least 12, so the trailing length is there.
        let Ok(end) = View::<4>::at(block, len_us - 4) else {
            return Err((at, ReadErrorKind::TruncatedBlock { len, found: avail }));
        };
        let end = end.u32_in::<0>(order);
        if end != len {
            return Err((at, ReadErrorKind::BlockLengthMismatch { start: len, end }));
        }
        let mut head = [0u8; 28];
        let n = len_us.min(28);
        if let (Some(dst), Some(src)) = (head.get_mut(..n), block.get(..n)) {
            dst.copy_from_slice(src);
        }
        Ok(head)
    }

    /// Maps a section-relative interface id to a file-wide one, checking that it exists.
    #[inline]
    fn file_iface(&self, id: u32, block: &'static str) -> Result<u32, ReadErrorKind> {
        let count = self.interfaces.len().saturating_sub(self.section_first);
        if (id as usize) < count {
            // Below MAX_INTERFACES, so it fits in u32.
            Ok((self.section_first + id as usize) as u32)
        } else {
            Err(ReadErrorKind::UnknownInterface {
                block,
                id,
                count: count as u32,
            })
        }
    }

    /// Bytes `from..to` of the block of `len` bytes that [`CaptureReader::load_block`] has
    /// buffered (`from <= to <= len`, so they are always there).
    #[inline]
    fn block_part(&self, from: usize, to: usize, len: u32) -> Result<&[u8], ReadErrorKind> {
        Reader::new(self.pending())
            .at(from)
            .take(to.saturating_sub(from))
            .map_err(|_| ReadErrorKind::TruncatedBlock {
                len,
                found: self.avail(),
            })
    }

    /// Reads pcapng blocks until one yields a record or the input ends.
    fn step_pcapng(&mut self) -> Result<Option<Step>, Fail> {
        loop {
            let at = self.offset;
            let mut avail = self.avail();
            if avail < 8 {
                avail = self.fill(8)?;
            }
            let Ok((h, _)) = View::<8>::split(self.pending()) else {
                if avail == 0 {
                    return Ok(None);
                }
                return Err((
                    at,
                    ReadErrorKind::TruncatedHeader {
                        what: "pcapng block header",
                        needed: 8,
                        found: avail,
                    },
                ));
            };
            let order = self.order;
            let block_type = h.u32_in::<0>(order);
            if block_type == BLOCK_SHB {
                self.read_shb()?;
                continue;
            }
            let len = h.u32_in::<4>(order);
            let (name, min) = block_kind(block_type);
            let head = self.load_block(len, name, min, order)?;
            let head = View::new(&head);
            let len_us = len as usize;
            let step = match block_type {
                BLOCK_EPB | BLOCK_PB => {
                    let id = if block_type == BLOCK_EPB {
                        head.u32_in::<8>(order)
                    } else {
                        u32::from(head.u16_in::<8>(order))
                    };
                    let iface = self.file_iface(id, name).map_err(|k| (at, k))?;
                    let caplen = head.u32_in::<20>(order);
                    let room = len_us - 32;
                    if caplen as usize > room {
                        return Err((
                            at,
                            ReadErrorKind::CaptureOverrun {
                                block: name,
                                caplen,
                                room,
                            },
                        ));
                    }
                    let raw = (u64::from(head.u32_in::<12>(order)) << 32)
                        | u64::from(head.u32_in::<16>(order));
                    let conv = self
                        .ts_conv
                        .get(iface as usize)
                        .copied()
                        .unwrap_or(TsConv::DEFAULT);
                    let ts_ns = conv.to_ns(raw);
                    self.last_ts = ts_ns;
                    Step::Packet {
                        ts_ns,
                        orig_len: head.u32_in::<24>(order),
                        iface,
                        start: self.start + 28,
                        len: caplen as usize,
                    }
                }
                BLOCK_SPB => {
                    let iface = self.file_iface(0, name).map_err(|k| (at, k))?;
                    let orig_len = head.u32_in::<8>(order);
                    let snaplen = self.interfaces.get(iface as usize).map_or(0, |i| i.snaplen);
                    let mut caplen = (orig_len as usize).min(len_us - 16);
                    if snaplen != 0 {
                        caplen = caplen.min(snaplen as usize);
                    }
                    Step::Packet {
                        ts_ns: self.last_ts,
                        orig_len,
                        iface,
                        start: self.start + 12,
                        len: caplen,
                    }
                }
                BLOCK_IDB => {
                    let linktype = head.u16_in::<8>(order);
                    let snaplen = head.u32_in::<12>(order);
                    let opts = self.block_part(16, len_us - 4, len).map_err(|k| (at, k))?;
                    let (name_opt, conv) = parse_idb_options(opts, order).map_err(|k| (at, k))?;
                    let count = self.interfaces.len();
                    if count >= MAX_INTERFACES {
                        return Err((
                            at,
                            ReadErrorKind::TooManyInterfaces {
                                count,
                                limit: MAX_INTERFACES,
                            },
                        ));
                    }
                    self.interfaces.push(Interface {
                        linktype,
                        snaplen,
                        name: name_opt,
                    });
                    // Keep `ts_conv` parallel to `interfaces`.
                    self.ts_conv.resize(count, TsConv::DEFAULT);
                    self.ts_conv.push(conv);
                    Step::Interface(count as u32)
                }
                BLOCK_ISB => {
                    let iface = self
                        .file_iface(head.u32_in::<8>(order), name)
                        .map_err(|k| (at, k))?;
                    let raw = (u64::from(head.u32_in::<12>(order)) << 32)
                        | u64::from(head.u32_in::<16>(order));
                    let conv = self
                        .ts_conv
                        .get(iface as usize)
                        .copied()
                        .unwrap_or(TsConv::DEFAULT);
                    let opts = self.block_part(20, len_us - 4, len).map_err(|k| (at, k))?;
                    let (received, dropped) =
                        parse_isb_options(opts, order).map_err(|k| (at, k))?;
                    Step::Stats {
                        iface,
                        ts_ns: conv.to_ns(raw),
                        received,
                        dropped,
                    }
                }
                _ => {
                    self.consume(len_us);
                    continue;
                }
            };
            self.consume(len_us);
            return Ok(Some(step));
        }
    }
}

/// Parses the options of an IDB: `if_name`, `if_tsresol` and `if_tsoffset`.
fn parse_idb_options(
    opts: &[u8],
    order: Endian,
) -> Result<(Option<String>, TsConv), ReadErrorKind> {
    let mut name = None;
    let mut conv = TsConv::DEFAULT;
    for_each_option(opts, order, "IDB", |code, value| {
        match code {
            OPT_IF_NAME => {
                let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
                let text = value.get(..end).unwrap_or_default();
                name = Some(String::from_utf8_lossy(text).into_owned());
            }
            OPT_IF_TSRESOL => {
                conv.resol = option_value::<1>(value, "IDB", "if_tsresol")?.u8::<0>();
            }
            OPT_IF_TSOFFSET => {
                let v = option_value::<8>(value, "IDB", "if_tsoffset")?;
                conv.offset_s = v.u64_in::<0>(order) as i64;
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok((name, conv))
}

/// Parses the options of an ISB: `isb_ifrecv` and `isb_ifdrop`.
fn parse_isb_options(
    opts: &[u8],
    order: Endian,
) -> Result<(Option<u64>, Option<u64>), ReadErrorKind> {
    let mut received = None;
    let mut dropped = None;
    for_each_option(opts, order, "ISB", |code, value| {
        match code {
            OPT_ISB_IFRECV => {
                let v = option_value::<8>(value, "ISB", "isb_ifrecv")?;
                received = Some(v.u64_in::<0>(order));
            }
            OPT_ISB_IFDROP => {
                let v = option_value::<8>(value, "ISB", "isb_ifdrop")?;
                dropped = Some(v.u64_in::<0>(order));
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok((received, dropped))
}

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
    FragmentPackets { buf, pos: 0 }
}

/// Iterator returned by [`fragment_packets`].
#[derive(Debug, Clone)]
pub struct FragmentPackets<'a> {
    /// The fragment; emptied after an error.
    buf: &'a [u8],
    /// Offset of the next block in `buf`.
    pos: usize,
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
            let min = if block_type == BLOCK_EPB { 32 } else { 12 };
            if len % 4 != 0 {
                return self.fail(FragmentErrorKind::LengthNotAligned { len });
            }
            if len < min {
                let block = if block_type == BLOCK_EPB {
                    "EPB"
                } else {
                    "pcapng block"
                };
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
            if block_type != BLOCK_EPB {
                self.pos += len_us;
                continue;
            }
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
            return Some(Ok(PacketRef {
                ts_ns: (u64::from(e.u32_le::<12>()) << 32) | u64::from(e.u32_le::<16>()),
                orig_len: e.u32_le::<24>(),
                iface: e.u32_le::<8>(),
                data,
            }));
        }
    }
}

impl FusedIterator for FragmentPackets<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{pcap_header, pcap_record, pcapng_epb, pcapng_idb, pcapng_isb, pcapng_shb};

    #[test]
    fn fragment_stats_finds_isbs_and_survives_garbage() {
        let mut f = Vec::new();
        pcapng_epb(&mut f, 0, 5, 60, &[0; 60]);
        pcapng_isb(&mut f, 1, 1_000_000_007, Some(10), Some(2));
        pcapng_isb(&mut f, 0, 2_000_000_000, None, Some(0));
        let got = fragment_stats(&f);
        assert_eq!(
            got,
            vec![
                FragmentStat {
                    iface: 1,
                    ts_ns: 1_000_000_007,
                    received: Some(10),
                    dropped: Some(2)
                },
                FragmentStat {
                    iface: 0,
                    ts_ns: 2_000_000_000,
                    received: None,
                    dropped: Some(0)
                },
            ]
        );
        for cut in 0..f.len() {
            assert!(fragment_stats(&f[..cut]).len() <= 2);
        }
        assert!(fragment_stats(&[0xff; 64]).is_empty());
    }

    /// An owned copy of a record, to compare whole files.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Rec {
        Iface(u32),
        Pkt {
            ts_ns: u64,
            orig_len: u32,
            iface: u32,
            data: Vec<u8>,
        },
        Stats(u32, u64, Option<u64>, Option<u64>),
    }

    fn own(r: Record<'_>) -> Rec {
        match r {
            Record::Interface { id } => Rec::Iface(id),
            Record::Packet(p) => pkt(p.ts_ns, p.orig_len, p.iface, p.data),
            Record::Stats {
                iface,
                ts_ns,
                received,
                dropped,
            } => Rec::Stats(iface, ts_ns, received, dropped),
        }
    }

    fn pkt(ts_ns: u64, orig_len: u32, iface: u32, data: &[u8]) -> Rec {
        Rec::Pkt {
            ts_ns,
            orig_len,
            iface,
            data: data.to_vec(),
        }
    }

    /// Reads every record of `reader`, returning them and the error that stopped it, if any.
    fn read_all<R: Read>(reader: &mut CaptureReader<R>) -> (Vec<Rec>, Option<ReadError>) {
        let mut out = Vec::new();
        loop {
            match reader.next_record() {
                Ok(Some(r)) => out.push(own(r)),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    fn read_bytes(bytes: &[u8]) -> (Vec<Rec>, Option<ReadError>) {
        let mut reader = CaptureReader::new("test", bytes).expect("header");
        read_all(&mut reader)
    }

    fn iface(linktype: LinkType, snaplen: u32, name: Option<&str>) -> Interface {
        Interface {
            linktype,
            snaplen,
            name: name.map(String::from),
        }
    }

    /// A reader that returns at most `step` bytes per call, to exercise buffering.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        calls: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(3) {
                return Err(io::ErrorKind::Interrupted.into());
            }
            // Vary the size: 1, 2, ..., step.
            let n = (self.calls % self.step + 1)
                .min(out.len())
                .min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[rustfmt::skip]
    const PCAP_US_BE: &[u8] = &[
        0xa1, 0xb2, 0xc3, 0xd4, // magic, µs, big-endian
        0x00, 0x02, 0x00, 0x04, // version 2.4
        0x00, 0x00, 0x00, 0x00, // thiszone
        0x00, 0x00, 0x00, 0x00, // sigfigs
        0x00, 0x00, 0xff, 0xff, // snaplen 65535
        0x00, 0x00, 0x00, 0x01, // linktype 1
        // record 1: 1 s + 500000 µs, caplen 4, len 60
        0x00, 0x00, 0x00, 0x01, 0x00, 0x07, 0xa1, 0x20,
        0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x3c,
        0xde, 0xad, 0xbe, 0xef,
        // record 2: 2 s + 1 µs, caplen 0, len 0
        0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn pcap_microseconds_big_endian() {
        let mut reader = CaptureReader::new("be.pcap", PCAP_US_BE).unwrap();
        assert_eq!(
            reader.format(),
            FileFormat::Pcap {
                nanos: false,
                big_endian: true
            }
        );
        assert_eq!(reader.interfaces(), &[iface(1, 65535, None)]);
        assert_eq!(reader.offset(), 24);
        let (recs, err) = read_all(&mut reader);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            recs,
            [
                Rec::Iface(0),
                pkt(1_500_000_000, 60, 0, &[0xde, 0xad, 0xbe, 0xef]),
                pkt(2_000_001_000, 0, 0, &[]),
            ]
        );
        assert_eq!(reader.offset(), PCAP_US_BE.len() as u64);
        // The end stays the end.
        assert!(reader.next_record().unwrap().is_none());
        assert!(reader.next_record().unwrap().is_none());
    }

    #[rustfmt::skip]
    const PCAP_NS_LE: &[u8] = &[
        0x4d, 0x3c, 0xb2, 0xa1, // magic, ns, little-endian
        0x02, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x04, 0x00, // snaplen 262144
        0x65, 0x00, 0x00, 0x04, // linktype 101 with FCS bits in the top 16 bits
        // 10 s + 123 ns, caplen 3 > len 2 (kept as given)
        0x0a, 0x00, 0x00, 0x00, 0x7b, 0x00, 0x00, 0x00,
        0x03, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x01, 0x02, 0x03,
        // u32::MAX s + 999999999 ns: the largest timestamp, no overflow
        0xff, 0xff, 0xff, 0xff, 0xff, 0xc9, 0x9a, 0x3b,
        0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x04,
    ];

    #[test]
    fn pcap_nanoseconds_little_endian() {
        let mut reader = CaptureReader::new("le.pcap", PCAP_NS_LE).unwrap();
        assert_eq!(
            reader.format(),
            FileFormat::Pcap {
                nanos: true,
                big_endian: false
            }
        );
        assert_eq!(reader.interfaces(), &[iface(101, 262_144, None)]);
        let (recs, err) = read_all(&mut reader);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            recs,
            [
                Rec::Iface(0),
                pkt(10_000_000_123, 2, 0, &[1, 2, 3]),
                pkt(
                    u64::from(u32::MAX) * 1_000_000_000 + 999_999_999,
                    1,
                    0,
                    &[4]
                ),
            ]
        );
    }

    #[rustfmt::skip]
    const PCAPNG: &[u8] = &[
        // ---- section 1, little-endian ----
        // 0: SHB, 28 bytes
        0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0,
        0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        28, 0, 0, 0,
        // 28: IDB 0, Ethernet, snaplen 4, if_name "a", if_tsresol 6; 40 bytes
        1, 0, 0, 0, 40, 0, 0, 0,
        1, 0, 0, 0, 4, 0, 0, 0,
        2, 0, 1, 0, b'a', 0, 0, 0,
        9, 0, 1, 0, 6, 0, 0, 0,
        0, 0, 0, 0,
        40, 0, 0, 0,
        // 68: IDB 1, LINUX_SLL (113), snaplen 0, if_tsresol 9; 32 bytes
        1, 0, 0, 0, 32, 0, 0, 0,
        113, 0, 0, 0, 0, 0, 0, 0,
        9, 0, 1, 0, 9, 0, 0, 0,
        0, 0, 0, 0,
        32, 0, 0, 0,
        // 100: EPB on interface 1, ts 1000 (ns), caplen 2, len 2; 36 bytes
        6, 0, 0, 0, 36, 0, 0, 0,
        1, 0, 0, 0, 0, 0, 0, 0, 0xe8, 0x03, 0, 0,
        2, 0, 0, 0, 2, 0, 0, 0,
        0xaa, 0xbb, 0, 0,
        36, 0, 0, 0,
        // 136: EPB on interface 0, ts 5 (µs), caplen 1, len 1; 36 bytes
        6, 0, 0, 0, 36, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0,
        1, 0, 0, 0, 1, 0, 0, 0,
        0xcc, 0, 0, 0,
        36, 0, 0, 0,
        // 172: SPB, len 6, cut to interface 0's snaplen 4; 24 bytes
        3, 0, 0, 0, 24, 0, 0, 0,
        6, 0, 0, 0,
        1, 2, 3, 4, 5, 6, 0, 0,
        24, 0, 0, 0,
        // 196: ISB for interface 1, ts 2000 (ns), ifrecv 10, ifdrop 1; 52 bytes
        5, 0, 0, 0, 52, 0, 0, 0,
        1, 0, 0, 0, 0, 0, 0, 0, 0xd0, 0x07, 0, 0,
        4, 0, 8, 0, 10, 0, 0, 0, 0, 0, 0, 0,
        5, 0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0,
        52, 0, 0, 0,
        // 248: custom block (0x00000bad), skipped; 16 bytes
        0xad, 0x0b, 0, 0, 16, 0, 0, 0, 1, 2, 3, 4, 16, 0, 0, 0,
        // ---- section 2, big-endian ----
        // 264: SHB
        0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 28,
        0x1a, 0x2b, 0x3c, 0x4d, 0, 1, 0, 0,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0, 0, 0, 28,
        // 292: IDB 0 of section 2 (file-wide 2), linktype 105, snaplen 65535, no options
        0, 0, 0, 1, 0, 0, 0, 20,
        0, 105, 0, 0, 0, 0, 0xff, 0xff,
        0, 0, 0, 20,
        // 312: EPB on interface 0 (file-wide 2), ts 7 (µs by default), caplen 1, len 9
        0, 0, 0, 6, 0, 0, 0, 36,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7,
        0, 0, 0, 1, 0, 0, 0, 9,
        0x42, 0, 0, 0,
        0, 0, 0, 36,
        // 348: obsolete Packet Block, interface 0, drops 0, ts 8 µs, caplen 1, len 1
        0, 0, 0, 2, 0, 0, 0, 36,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8,
        0, 0, 0, 1, 0, 0, 0, 1,
        0x43, 0, 0, 0,
        0, 0, 0, 36,
        // 384: end
    ];

    fn pcapng_expected() -> Vec<Rec> {
        vec![
            Rec::Iface(0),
            Rec::Iface(1),
            pkt(1000, 2, 1, &[0xaa, 0xbb]),
            pkt(5000, 1, 0, &[0xcc]),
            pkt(5000, 6, 0, &[1, 2, 3, 4]),
            Rec::Stats(1, 2000, Some(10), Some(1)),
            Rec::Iface(2),
            pkt(7000, 9, 2, &[0x42]),
            pkt(8000, 1, 2, &[0x43]),
        ]
    }

    #[test]
    fn pcapng_sections_interfaces_and_blocks() {
        assert_eq!(PCAPNG.len(), 384);
        let mut reader = CaptureReader::new("f.pcapng", PCAPNG).unwrap();
        assert_eq!(reader.format(), FileFormat::PcapNg);
        assert_eq!(reader.offset(), 28);
        assert!(reader.interfaces().is_empty());
        let (recs, err) = read_all(&mut reader);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(recs, pcapng_expected());
        assert_eq!(
            reader.interfaces(),
            &[
                iface(1, 4, Some("a")),
                iface(113, 0, None),
                iface(105, 65535, None),
            ]
        );
        assert_eq!(reader.offset(), 384);
    }

    #[test]
    fn offsets_advance_record_by_record() {
        let mut reader = CaptureReader::new("f.pcapng", PCAPNG).unwrap();
        let mut offsets = vec![reader.offset()];
        while reader.next_record().unwrap().is_some() {
            offsets.push(reader.offset());
        }
        // The custom block and the second SHB are skipped along with the record after them.
        assert_eq!(offsets, [28, 68, 100, 136, 172, 196, 248, 312, 348, 384]);
    }

    #[test]
    fn small_reads_give_the_same_records() {
        for (bytes, step) in [(PCAPNG, 1), (PCAPNG, 7), (PCAP_US_BE, 1), (PCAP_NS_LE, 5)] {
            let whole = read_bytes(bytes).0;
            let trickle = Trickle {
                data: bytes,
                step,
                calls: 0,
            };
            let mut reader = CaptureReader::new("t", trickle).unwrap();
            let (recs, err) = read_all(&mut reader);
            assert!(err.is_none(), "{err:?}");
            assert_eq!(recs, whole);
        }
    }

    #[test]
    fn every_prefix_is_a_clean_end_or_an_error_at_the_cut_record() {
        let boundaries = [
            28usize, 68, 100, 136, 172, 196, 248, 264, 292, 312, 348, 384,
        ];
        let full = read_bytes(PCAPNG).0;
        for cut in 28..PCAPNG.len() {
            let mut reader = CaptureReader::new("cut", &PCAPNG[..cut]).unwrap();
            let (recs, err) = read_all(&mut reader);
            // Whatever was read is a prefix of the full file.
            assert_eq!(recs[..], full[..recs.len()], "cut at {cut}");
            match err {
                None => assert!(boundaries.contains(&cut), "cut at {cut} read cleanly"),
                Some(e) => {
                    let start = *boundaries.iter().rev().find(|&&b| b <= cut).unwrap();
                    assert_eq!(e.offset, start as u64, "cut at {cut}: {e}");
                    assert!(
                        matches!(
                            e.kind,
                            ReadErrorKind::TruncatedBlock { .. }
                                | ReadErrorKind::TruncatedHeader { .. }
                        ),
                        "cut at {cut}: {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn round_trip_pcap() {
        let packets: Vec<(u64, u32, Vec<u8>)> = (0..50u32)
            .map(|i| {
                let len = (i * 37 % 200) as usize;
                (
                    u64::from(i) * 1_000_000_007 + 3,
                    len as u32 + i % 3,
                    (0..len).map(|b| (b as u8) ^ (i as u8)).collect(),
                )
            })
            .collect();
        let mut file = Vec::new();
        pcap_header(&mut file, 1, 262_144);
        for (ts, orig, data) in &packets {
            pcap_record(&mut file, *ts, *orig, data);
        }
        let mut reader = CaptureReader::new("rt.pcap", &file[..]).unwrap();
        assert_eq!(
            reader.format(),
            FileFormat::Pcap {
                nanos: true,
                big_endian: false
            }
        );
        assert_eq!(reader.interfaces(), &[iface(1, 262_144, None)]);
        let (recs, err) = read_all(&mut reader);
        assert!(err.is_none());
        let mut expected = vec![Rec::Iface(0)];
        expected.extend(packets.iter().map(|(ts, orig, d)| pkt(*ts, *orig, 0, d)));
        assert_eq!(recs, expected);
    }

    /// A pcapng file written with the encoders, and the records it should read back as.
    fn written_pcapng() -> (Vec<u8>, Vec<Rec>) {
        let mut file = Vec::new();
        let mut expected = Vec::new();
        pcapng_shb(&mut file, Some("capsule test"));
        let ifaces = [iface(1, 65535, Some("eth0")), iface(113, 0, None)];
        for (i, f) in ifaces.iter().enumerate() {
            pcapng_idb(&mut file, f);
            expected.push(Rec::Iface(i as u32));
        }
        for i in 0..100u32 {
            let data: Vec<u8> = (0..i * 13 % 97).map(|b| b as u8).collect();
            let ts = u64::from(i) << 33 | u64::from(i);
            let orig = data.len() as u32 + i % 2;
            pcapng_epb(&mut file, i % 2, ts, orig, &data);
            expected.push(pkt(ts, orig, i % 2, &data));
            if i % 10 == 0 {
                let recv = (i % 20 == 0).then_some(u64::from(i));
                let drop = (i % 30 == 0).then_some(u64::MAX - u64::from(i));
                pcapng_isb(&mut file, 1, ts, recv, drop);
                expected.push(Rec::Stats(1, ts, recv, drop));
            }
        }
        (file, expected)
    }

    #[test]
    fn round_trip_pcapng() {
        let (file, expected) = written_pcapng();
        let mut reader = CaptureReader::new("rt.pcapng", &file[..]).unwrap();
        let (recs, err) = read_all(&mut reader);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(recs, expected);
        assert_eq!(
            reader.interfaces(),
            &[iface(1, 65535, Some("eth0")), iface(113, 0, None)]
        );
        // The same blocks, without the SHB, as a store fragment.
        let shb_len = u32::from_le_bytes(file[4..8].try_into().unwrap()) as usize;
        let from_fragment: Vec<Rec> = fragment_packets(&file[shb_len..])
            .map(|p| {
                let p = p.unwrap();
                pkt(p.ts_ns, p.orig_len, p.iface, p.data)
            })
            .collect();
        let packets: Vec<Rec> = expected
            .into_iter()
            .filter(|r| matches!(r, Rec::Pkt { .. }))
            .collect();
        assert_eq!(from_fragment, packets);
    }

    #[test]
    fn packets_bigger_than_a_chunk_grow_the_buffer() {
        let big: Vec<u8> = (0..3 * CHUNK + 5).map(|i| i as u8).collect();
        let mut file = Vec::new();
        pcap_header(&mut file, 1, 0);
        pcap_record(&mut file, 1, 10, &[7; 10]);
        pcap_record(&mut file, 2, big.len() as u32, &big);
        pcap_record(&mut file, 3, 10, &[8; 10]);
        let (recs, err) = read_bytes(&file);
        assert!(err.is_none());
        assert_eq!(recs.len(), 4);
        assert_eq!(recs[2], pkt(2, big.len() as u32, 0, &big));

        let mut file = Vec::new();
        pcapng_shb(&mut file, None);
        pcapng_idb(&mut file, &iface(1, 0, None));
        pcapng_epb(&mut file, 0, 9, 0, &big);
        let (recs, err) = read_bytes(&file);
        assert!(err.is_none());
        assert_eq!(recs[1], pkt(9, big.len() as u32, 0, &big));
    }

    #[test]
    fn truncated_pcap_record_reports_its_offset() {
        let mut file = Vec::new();
        pcap_header(&mut file, 1, 65535);
        pcap_record(&mut file, 1, 100, &[1; 100]);
        pcap_record(&mut file, 2, 1514, &[2; 1514]);
        let second = 24 + 16 + 100;
        file.truncate(second + 16 + 200);
        let mut reader = CaptureReader::new("cut.pcap", &file[..]).unwrap();
        assert_eq!(own(reader.next_record().unwrap().unwrap()), Rec::Iface(0));
        assert_eq!(
            own(reader.next_record().unwrap().unwrap()),
            pkt(1, 100, 0, &[1; 100])
        );
        let err = reader.next_record().unwrap_err();
        assert_eq!(err.offset, second as u64);
        assert_eq!(reader.offset(), second as u64);
        assert_eq!(
            err.to_string(),
            "cut.pcap: at byte 140: truncated packet record: header says 1514 captured bytes, \
             file ends after 200"
        );
        // Later calls keep failing, at the same place.
        for _ in 0..3 {
            let again = reader.next_record().unwrap_err();
            assert_eq!(again.offset, second as u64);
            assert!(matches!(again.kind, ReadErrorKind::AfterError { at: 140 }));
        }

        // Cut inside the record header.
        let (recs, err) = read_bytes(&file[..second + 5]);
        assert_eq!(recs.len(), 2);
        let err = err.unwrap();
        assert_eq!(err.offset, second as u64);
        assert_eq!(
            err.kind.to_string(),
            "truncated pcap record header: need 16 bytes, file ends after 5"
        );
    }

    #[test]
    fn truncated_and_garbage_file_headers() {
        let err = CaptureReader::new("e", &[][..]).unwrap_err();
        assert!(matches!(err.kind, ReadErrorKind::EmptyInput));
        assert_eq!(err.offset, 0);

        let err = CaptureReader::new("m", &[0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0][..]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "m: at byte 0: unknown magic number 0x12345678: not a pcap or pcapng file"
        );

        let err = CaptureReader::new("s", &PCAP_US_BE[..10]).unwrap_err();
        assert_eq!(
            err.kind.to_string(),
            "truncated pcap file header: need 24 bytes, file ends after 10"
        );
        let err = CaptureReader::new("s", &PCAP_US_BE[..3]).unwrap_err();
        assert!(matches!(
            err.kind,
            ReadErrorKind::TruncatedHeader {
                needed: 4,
                found: 3,
                ..
            }
        ));

        let mut v1 = PCAP_NS_LE.to_vec();
        v1[4] = 1;
        let err = CaptureReader::new("v", &v1[..]).unwrap_err();
        assert_eq!(
            err.kind.to_string(),
            "unsupported pcap version 1.4: expected 2.x"
        );

        let mut bom = PCAPNG.to_vec();
        bom[8] = 0;
        let err = CaptureReader::new("b", &bom[..]).unwrap_err();
        assert!(matches!(
            err.kind,
            ReadErrorKind::BadByteOrderMagic { magic: 0x003c2b1a }
        ));

        let mut ver = PCAPNG.to_vec();
        ver[12] = 2;
        let err = CaptureReader::new("v", &ver[..]).unwrap_err();
        assert_eq!(
            err.kind.to_string(),
            "unsupported pcapng version 2.0: expected 1.x"
        );

        let err = CaptureReader::new("t", &PCAPNG[..20]).unwrap_err();
        assert_eq!(
            err.kind.to_string(),
            "truncated pcapng block: header says 28 bytes, file ends after 20"
        );
    }

    #[test]
    fn oversized_pcap_capture_is_an_error_not_an_allocation() {
        let mut file = Vec::new();
        pcap_header(&mut file, 1, 65535);
        file.extend_from_slice(&[0; 8]);
        file.extend_from_slice(&(MAX_RECORD_LEN as u32 + 1).to_le_bytes());
        file.extend_from_slice(&[0; 4]);
        let (_, err) = read_bytes(&file);
        let err = err.unwrap();
        assert_eq!(err.offset, 24);
        assert_eq!(
            err.kind.to_string(),
            "captured length 16777217 exceeds the 16777216-byte limit"
        );
    }

    /// The fixture with the block at `at` given a new first length field.
    fn with_len(at: usize, len: u32) -> Vec<u8> {
        let mut v = PCAPNG.to_vec();
        v[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
        v
    }

    fn first_error(bytes: &[u8]) -> (usize, ReadError) {
        let (recs, err) = read_bytes(bytes);
        (recs.len(), err.expect("an error"))
    }

    #[test]
    fn bad_block_lengths() {
        // EPB at 100: not aligned.
        let (n, err) = first_error(&with_len(100, 7));
        assert_eq!(n, 2);
        assert_eq!(err.offset, 100);
        assert_eq!(
            err.kind.to_string(),
            "pcapng block length 7 is not a multiple of 4"
        );

        // Too short for an EPB.
        let (_, err) = first_error(&with_len(100, 28));
        assert_eq!(
            err.kind.to_string(),
            "EPB length 28 is shorter than the 32-byte minimum"
        );

        // Too short for any block.
        let (_, err) = first_error(&with_len(248, 8));
        assert_eq!(err.offset, 248);
        assert!(matches!(
            err.kind,
            ReadErrorKind::BlockTooShort { min: 12, .. }
        ));

        // Lengths at start and end differ.
        let (_, err) = first_error(&with_len(100, 40));
        assert_eq!(
            err.kind.to_string(),
            "block total length fields differ: 40 at start, 6 at end"
        );
        let mut v = PCAPNG.to_vec();
        v[132] = 40;
        let (_, err) = first_error(&v);
        assert_eq!(err.offset, 100);
        assert_eq!(
            err.kind.to_string(),
            "block total length fields differ: 36 at start, 40 at end"
        );

        // Longer than the file.
        let (n, err) = first_error(&with_len(312, 400));
        assert_eq!(n, 7);
        assert_eq!(err.offset, 312);
        // (400 little-endian in a big-endian section reads as 0x90010000.)
        assert!(matches!(
            err.kind,
            ReadErrorKind::BlockTooLong {
                len: 0x9001_0000,
                ..
            }
        ));
        let mut v = PCAPNG.to_vec();
        v[312 + 4..312 + 8].copy_from_slice(&400u32.to_be_bytes());
        let (_, err) = first_error(&v);
        assert_eq!(
            err.kind.to_string(),
            "truncated pcapng block: header says 400 bytes, file ends after 72"
        );

        // Over the limit.
        let (_, err) = first_error(&with_len(248, 0xffff_fffc));
        assert_eq!(
            err.kind.to_string(),
            "pcapng block length 4294967292 exceeds the 16777216-byte limit"
        );

        // Captured length past the block.
        let mut v = PCAPNG.to_vec();
        v[120] = 5;
        let (_, err) = first_error(&v);
        assert_eq!(err.offset, 100);
        assert_eq!(
            err.kind.to_string(),
            "EPB captured length 5 does not fit in the 4 bytes of data its block holds"
        );
    }

    #[test]
    fn unknown_interfaces_and_bad_options() {
        let mut v = PCAPNG.to_vec();
        v[108] = 3;
        let (n, err) = first_error(&v);
        assert_eq!(n, 2);
        assert_eq!(err.offset, 100);
        assert_eq!(
            err.to_string(),
            "test: at byte 100: EPB names interface 3 but the section defines 2"
        );

        // ISB for an interface the section does not have.
        let mut v = PCAPNG.to_vec();
        v[204] = 2;
        let (_, err) = first_error(&v);
        assert_eq!(err.offset, 196);
        assert!(matches!(
            err.kind,
            ReadErrorKind::UnknownInterface {
                block: "ISB",
                id: 2,
                count: 2
            }
        ));

        // SPB in a section without interfaces: the second section, before its IDB.
        let mut v = PCAPNG[..292].to_vec();
        v.extend_from_slice(&[0, 0, 0, 3, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 16]);
        let (_, err) = first_error(&v);
        assert_eq!(err.offset, 292);
        assert_eq!(
            err.kind.to_string(),
            "SPB names interface 0 but the section defines 0"
        );

        // if_tsresol with length 2.
        let mut v = PCAPNG.to_vec();
        v[54] = 2;
        let (_, err) = first_error(&v);
        assert_eq!(err.offset, 28);
        assert_eq!(
            err.kind.to_string(),
            "IDB option if_tsresol has length 2, expected 1"
        );

        // if_name running past the block.
        let mut v = PCAPNG.to_vec();
        v[46] = 20;
        let (_, err) = first_error(&v);
        assert_eq!(
            err.kind.to_string(),
            "IDB option 2 of length 20 runs past the end of the block (16 bytes left)"
        );

        // isb_ifdrop with length 4.
        let mut v = PCAPNG.to_vec();
        v[230] = 4;
        let (_, err) = first_error(&v);
        assert_eq!(err.offset, 196);
        assert!(matches!(
            err.kind,
            ReadErrorKind::BadOptionLength {
                option: "isb_ifdrop",
                len: 4,
                expected: 8,
                ..
            }
        ));
    }

    #[test]
    fn io_errors_are_reported_and_stop_the_reader() {
        struct Failing<'a>(&'a [u8]);
        impl Read for Failing<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() {
                    return Err(io::Error::other("disk on fire"));
                }
                let n = self.0.len().min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut reader = CaptureReader::new("f", Failing(&PCAP_US_BE[..50])).unwrap();
        assert!(reader.next_record().unwrap().is_some());
        assert!(reader.next_record().unwrap().is_some());
        let err = reader.next_record().unwrap_err();
        assert_eq!(err.offset, 44);
        assert_eq!(err.to_string(), "f: at byte 44: I/O error: disk on fire");
        assert!(std::error::Error::source(&err.kind).is_some());
        assert!(reader.next_record().is_err());
    }

    #[test]
    fn timestamp_resolutions_and_offsets() {
        let conv = |resol: u8, offset_s: i64, raw: u64| TsConv { resol, offset_s }.to_ns(raw);
        assert_eq!(conv(9, 0, 123), 123);
        assert_eq!(conv(6, 0, 123), 123_000);
        assert_eq!(conv(6, 0, u64::MAX), u64::MAX);
        assert_eq!(conv(0, 0, 2), 2_000_000_000);
        assert_eq!(conv(3, 0, 2), 2_000_000);
        assert_eq!(conv(12, 0, 123_456), 123);
        assert_eq!(conv(19, 0, u64::MAX), 1_844_674_407);
        assert_eq!(conv(47, 0, u64::MAX), 0);
        assert_eq!(conv(48, 0, u64::MAX), 0);
        assert_eq!(conv(127, 0, u64::MAX), 0);
        assert_eq!(conv(0x80, 0, 3), 3_000_000_000); // 2^0 = seconds
        assert_eq!(conv(0x80 | 10, 0, 1024), 1_000_000_000); // 2^-10
        assert_eq!(conv(0x80 | 30, 0, 1 << 30), 1_000_000_000);
        assert_eq!(conv(0xff, 0, u64::MAX), 0);
        assert_eq!(conv(6, 10, 5), 10_000_005_000);
        assert_eq!(conv(9, -1, 5), 0); // before the epoch: saturates at 0
        assert_eq!(conv(9, i64::MIN, u64::MAX), 0);
        assert_eq!(conv(9, i64::MAX, 0), u64::MAX);
        assert_eq!(conv(0, 0, u64::MAX), u64::MAX);
        for resol in 0..=255u8 {
            for offset in [i64::MIN, -1, 0, 1, i64::MAX] {
                for raw in [0, 1, u64::MAX / 2, u64::MAX] {
                    let _ = conv(resol, offset, raw);
                }
            }
        }
    }

    #[test]
    fn if_tsoffset_and_binary_resolution_in_a_file() {
        let mut file = Vec::new();
        pcapng_shb(&mut file, None);
        #[rustfmt::skip]
        file.extend_from_slice(&[
            1, 0, 0, 0, 40, 0, 0, 0,
            1, 0, 0, 0, 0, 0, 0, 0,
            9, 0, 1, 0, 0x84, 0, 0, 0,          // if_tsresol 2^-4
            14, 0, 8, 0, 100, 0, 0, 0, 0, 0, 0, 0, // if_tsoffset 100 s
            40, 0, 0, 0,
        ]);
        pcapng_epb(&mut file, 0, 8, 0, &[1]); // 8/16 s
        let (recs, err) = read_bytes(&file);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(recs[1], pkt(100_500_000_000, 1, 0, &[1]));
    }

    #[test]
    fn fragment_packets_errors() {
        let mut frag = Vec::new();
        pcapng_idb(&mut frag, &iface(1, 0, None));
        pcapng_epb(&mut frag, 0, 1, 1, &[1]);
        pcapng_isb(&mut frag, 0, 1, Some(1), None);
        pcapng_epb(&mut frag, 3, 2, 9, &[2, 3]);
        let ok: Vec<_> = fragment_packets(&frag).collect();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].unwrap().iface, 3);
        assert_eq!(ok[1].unwrap().data, &[2, 3]);
        assert!(fragment_packets(&[]).next().is_none());

        let second_epb = 32 + 36 + 40;
        let errors = |bytes: &[u8]| -> Vec<FragmentError> {
            let mut it = fragment_packets(bytes);
            let errs: Vec<_> = it.by_ref().filter_map(Result::err).collect();
            assert!(it.next().is_none());
            errs
        };
        let cut = errors(&frag[..frag.len() - 3]);
        assert_eq!(
            cut,
            [FragmentError {
                offset: second_epb,
                kind: FragmentErrorKind::TruncatedBlock { len: 36, found: 33 }
            }]
        );
        assert_eq!(
            cut[0].to_string(),
            "at byte 108 of the fragment: truncated pcapng block: header says 36 bytes, \
             fragment ends after 33"
        );
        let mut short = frag.clone();
        short.extend_from_slice(&[6, 0, 0]);
        assert_eq!(
            errors(&short)[0].kind,
            FragmentErrorKind::TruncatedHeader { found: 3 }
        );
        let mut bad = frag.clone();
        bad[second_epb + 4] = 37;
        assert_eq!(
            errors(&bad)[0].kind,
            FragmentErrorKind::LengthNotAligned { len: 37 }
        );
        let mut bad = frag.clone();
        bad[second_epb + 4] = 28;
        assert!(matches!(
            errors(&bad)[0].kind,
            FragmentErrorKind::BlockTooShort {
                len: 28,
                min: 32,
                ..
            }
        ));
        let mut bad = frag.clone();
        bad[second_epb + 20] = 5;
        assert_eq!(
            errors(&bad)[0].kind,
            FragmentErrorKind::CaptureOverrun { caplen: 5, room: 4 }
        );
        let mut bad = frag.clone();
        let last = bad.len() - 4;
        bad[last] = 40;
        assert_eq!(
            errors(&bad)[0].kind,
            FragmentErrorKind::LengthMismatch { start: 36, end: 40 }
        );
    }

    /// Reads `bytes` to the end or the first error, checking that it terminates and that the
    /// reader stays failed.
    fn exercise_reader<R: Read>(reader: R, len: usize) {
        let Ok(mut reader) = CaptureReader::new("fuzz", reader) else {
            return;
        };
        let _ = reader.format();
        // Every record consumes at least 12 bytes, except the pcap interface announcement.
        let mut budget = len / 12 + 2;
        loop {
            match reader.next_record() {
                Ok(Some(Record::Packet(p))) => {
                    assert!(p.data.len() <= MAX_RECORD_LEN);
                    assert!((p.iface as usize) < reader.interfaces.len());
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    let _ = e.to_string();
                    assert!(reader.next_record().is_err());
                    assert!(reader.next_record().is_err());
                    break;
                }
            }
            assert!(reader.offset() <= len as u64);
            budget = budget.checked_sub(1).expect("reader does not terminate");
        }
    }

    fn exercise_fragment(bytes: &[u8]) {
        let mut n = 0;
        for item in fragment_packets(bytes) {
            n += 1;
            assert!(
                n <= bytes.len() / 12 + 1,
                "fragment iterator does not terminate"
            );
            if let Err(e) = item {
                assert!(e.offset < bytes.len());
            }
        }
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        /// Valid files to mutate: the fixtures, and a written pcapng.
        fn seeds() -> Vec<Vec<u8>> {
            vec![
                PCAPNG.to_vec(),
                PCAP_US_BE.to_vec(),
                PCAP_NS_LE.to_vec(),
                written_pcapng().0[..600].to_vec(),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
                exercise_reader(&bytes[..], bytes.len());
                exercise_fragment(&bytes);
            }

            #[test]
            fn arbitrary_bytes_after_a_valid_header(
                which in 0usize..3,
                bytes in proptest::collection::vec(any::<u8>(), 0..1024),
            ) {
                let mut file = match which {
                    0 => PCAPNG[..28].to_vec(),
                    1 => PCAPNG[..100].to_vec(),
                    _ => PCAP_NS_LE[..24].to_vec(),
                };
                file.extend_from_slice(&bytes);
                exercise_reader(&file[..], file.len());
                exercise_fragment(&file);
            }

            #[test]
            fn mutated_valid_files_never_panic(
                seed in 0usize..4,
                edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
                cut in any::<prop::sample::Index>(),
                step in 1usize..40,
            ) {
                let mut file = seeds().swap_remove(seed);
                for (at, byte) in edits {
                    let i = at.index(file.len());
                    file[i] = byte;
                }
                let keep = cut.index(file.len() + 1);
                file.truncate(keep);
                exercise_reader(&file[..], file.len());
                exercise_reader(Trickle { data: &file, step, calls: 0 }, file.len());
                exercise_fragment(&file);
                exercise_fragment(file.get(28..).unwrap_or_default());
            }
        }
    }
}
