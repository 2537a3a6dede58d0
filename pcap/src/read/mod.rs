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
//! * every pcapng `if_tsresol` is one a capture can have (at most 10^-19 or 2^-63 s: 64-bit
//!   ticks spanning 2 s at least).
//!
//! What is got past and said ([`Record::Odd`], an [`Oddity`] after the record it concerns):
//! a packet or statistics block whose time, after its interface's resolution and
//! `if_tsoffset`, lies outside 1970-01-01 .. 2200-01-01 UTC ([`MAX_TS_NS`]) is skipped (capsule
//! keeps unsigned nanoseconds since 1970) and the rest of the file read; a pcap sub-second
//! field of a second or more (carried into the seconds); an original length below the
//! captured length (kept as given; writers raise it); pcapng blocks capsule does not keep
//! (name resolution, decryption secrets, custom, unknown: skipped by their length); options
//! it cannot keep. Packet, interface and section options are kept in the form of
//! [`crate::options`] ([`PacketRef::options`], [`Interface::options`]).
//!
//! What is deliberately accepted: a captured length larger than the interface's snaplen, and
//! timestamps finer than nanoseconds (truncated to nanoseconds).
//!
//! [`fragment_packets`] (fragment.rs) is the fast path for the segment store: it walks a run of
//! little-endian pcapng blocks without a section header, as written by [`crate::write`].
//!
//! Every field is read through the checked views of [`capsule_wire::view`]: a [`View`] of
//! each fixed-size header (its length checked once, its fields in the section's byte order)
//! and a [`Reader`] over options. Nothing here panics, whatever the input, and after an error
//! every later call returns an error too.

mod fragment;
#[cfg(test)]
mod tests;

pub use fragment::{
    fragment_packets, fragment_records, fragment_stats, FragmentError, FragmentErrorKind,
    FragmentPackets, FragmentRecords, FragmentStat,
};

use std::fmt;
use std::io::{self, Read};

use capsule_wire::view::{Endian, Reader, View};

use crate::options::{self, Kept, OptionsOf};
use crate::write::{
    BLOCK_EPB, BLOCK_IDB, BLOCK_ISB, BLOCK_PB, BLOCK_SHB, BLOCK_SPB, BYTE_ORDER_MAGIC, OPT_IF_NAME,
    OPT_IF_TSOFFSET, OPT_IF_TSRESOL, OPT_ISB_IFDROP, OPT_ISB_IFRECV, PCAP_MAGIC_NS, PCAP_MAGIC_US,
};
use crate::{Interface, InterfaceOptions, LinkType, PacketRef};

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
    /// Something odd the reader got past: a packet it skipped, a field it mended, a block or
    /// option it did not keep. Returned after the record it concerns; callers count and name
    /// them (import prints a summary and exits 3 when packets were skipped).
    Odd(Oddity),
}

/// Something odd in a capture file that the reader got past, with the byte offset of its
/// record or block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Oddity {
    /// A packet or statistics block whose time, after its interface's resolution and
    /// `if_tsoffset`, lies outside 1970-01-01 .. 2200-01-01 UTC, where capsule keeps no time
    /// (its clock is unsigned nanoseconds since 1970): skipped, the rest of the file read.
    #[error(
        "at byte {offset}: {block} at {seconds} s from the epoch is outside 1970-01-01 .. \
         2200-01-01 UTC: not stored"
    )]
    TimeOutOfRange {
        /// Offset of the block.
        offset: u64,
        /// `"packet"` or `"interface statistics"`.
        block: &'static str,
        /// Its time, in whole seconds since the epoch (negative: before 1970).
        seconds: i64,
    },
    /// A classic pcap record whose sub-second field is a second or more: carried into the
    /// seconds (as libpcap's readers add them).
    #[error(
        "at byte {offset}: pcap record's sub-second field is {frac} {unit}, a second or more: \
         carried into the seconds"
    )]
    SubsecondOverflow {
        /// Offset of the record.
        offset: u64,
        /// The field's value.
        frac: u32,
        /// `"µs"` or `"ns"`.
        unit: &'static str,
    },
    /// A packet whose original length is below its captured length: stored with the
    /// captured length as its original length (Wireshark refuses the other way round).
    #[error(
        "at byte {offset}: original length {orig} is below the captured length {caplen}: \
         stored as {caplen}"
    )]
    OrigBelowCaptured {
        /// Offset of the record or block.
        offset: u64,
        /// Original length as written.
        orig: u32,
        /// Captured length.
        caplen: u32,
    },
    /// A pcapng block capsule does not keep (a name-resolution, decryption-secrets, custom
    /// or unknown block): skipped by its length.
    #[error("at byte {offset}: {} (type {block_type:#010x}) not kept", block_name(*block_type))]
    BlockNotKept {
        /// Offset of the block.
        offset: u64,
        /// Its type.
        block_type: u32,
    },
    /// An option that was not kept: an unknown code in a big-endian section (its value's
    /// byte order is unknown), a value of the wrong length, or past the bytes kept per block.
    #[error("at byte {offset}: {block} option {code} not kept")]
    OptionNotKept {
        /// Offset of the block.
        offset: u64,
        /// `"packet"`, `"interface"` or `"section"`.
        block: &'static str,
        /// The option's code.
        code: u16,
    },
}

impl Oddity {
    /// Whether a packet was left out of what is stored (not just mended or annotated).
    pub fn loses_packet(&self) -> bool {
        matches!(
            self,
            Oddity::TimeOutOfRange {
                block: "packet",
                ..
            }
        )
    }

    /// Whether two oddities are of one kind, for counting: the same variant, and for blocks
    /// and options not kept the same block type, or block and option code.
    pub fn same_kind(&self, other: &Oddity) -> bool {
        match (self, other) {
            (
                Oddity::BlockNotKept { block_type: a, .. },
                Oddity::BlockNotKept { block_type: b, .. },
            ) => a == b,
            (
                Oddity::OptionNotKept {
                    block: a, code: x, ..
                },
                Oddity::OptionNotKept {
                    block: b, code: y, ..
                },
            ) => a == b && x == y,
            (Oddity::TimeOutOfRange { block: a, .. }, Oddity::TimeOutOfRange { block: b, .. }) => {
                a == b
            }
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

/// A pcapng block type in words.
fn block_name(block_type: u32) -> &'static str {
    match block_type {
        4 => "name resolution block",
        9 => "systemd journal export block",
        10 => "decryption secrets block",
        0x0000_0BAD | 0x4000_0BAD => "custom block",
        t if t & 0x8000_0000 != 0 => "local-use block",
        _ => "unknown block",
    }
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

/// Checks that `head`, the first bytes of an input (four are enough), start a pcap or pcapng
/// file, with the error [`CaptureReader::new`] gives for the same bytes: a caller can refuse
/// an input before it creates anything for it (`capsule import` before the store).
pub fn check_magic(source_name: &str, head: &[u8]) -> Result<(), ReadError> {
    let kind = match View::<4>::split(head) {
        Err(_) if head.is_empty() => ReadErrorKind::EmptyInput,
        Err(_) => ReadErrorKind::TruncatedHeader {
            what: "file magic number",
            needed: 4,
            found: head.len(),
        },
        Ok((m, _)) => match (m.u32_le::<0>(), m.u32_be::<0>()) {
            (BLOCK_SHB | PCAP_MAGIC_US | PCAP_MAGIC_NS, _) | (_, PCAP_MAGIC_US | PCAP_MAGIC_NS) => {
                return Ok(())
            }
            (_, magic) => ReadErrorKind::UnknownMagic { magic },
        },
    };
    Err(ReadError {
        source_name: source_name.to_string(),
        offset: 0,
        kind,
    })
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
    /// An IDB whose `if_tsresol` is finer than any capture can be: 10^-n with n above
    /// [`MAX_TSRESOL_DECIMAL`], or 2^-n with n above [`MAX_TSRESOL_BINARY`].
    #[error(
        "IDB option if_tsresol is {resol:#04x} ({}): expected at most 10^-{MAX_TSRESOL_DECIMAL} s \
         (0x{MAX_TSRESOL_DECIMAL:02x}) or 2^-{MAX_TSRESOL_BINARY} s (0x{:02x})",
        describe_resol(*resol),
        0x80 | MAX_TSRESOL_BINARY
    )]
    BadTsResol {
        /// The option's byte.
        resol: u8,
    },
    /// A packet or statistics block whose timestamp, after its interface's resolution and
    /// `if_tsoffset`, is before 1970 or after [`MAX_TS_NS`] (2200-01-01).
    #[error(
        "timestamp {raw} at {} with if_tsoffset {offset_s} s is {seconds} s after the epoch: \
         expected 1970-01-01 to 2200-01-01 UTC (0 to {} s)",
        describe_resol(*resol),
        MAX_TS_NS / 1_000_000_000
    )]
    TimestampOutOfRange {
        /// The block's raw timestamp.
        raw: u64,
        /// The interface's `if_tsresol`.
        resol: u8,
        /// The interface's `if_tsoffset`.
        offset_s: i64,
        /// The time it gives, in whole seconds since the epoch (negative: before 1970).
        seconds: i128,
    },
    /// A call after an earlier error: the reader does not resynchronise.
    #[error("reading stopped after an earlier error at byte {at}")]
    AfterError {
        /// Offset of the earlier error.
        at: u64,
    },
}

/// Latest timestamp the reader accepts, in nanoseconds since the epoch: 2200-01-01T00:00:00Z.
///
/// A `u64` of nanoseconds runs out in April 2262; a timestamp past 2200 is damage (a wild
/// `if_tsoffset`, a garbage resolution), not a capture, and stored it could never be
/// exported (a query's window ends before it). Classic pcap (32-bit seconds) cannot exceed it.
pub const MAX_TS_NS: u64 = 7_258_118_400 * 1_000_000_000;

/// Finest decimal `if_tsresol` the reader accepts: 10^-19 s. A 64-bit tick count at that
/// resolution spans 1.8 s, so anything finer cannot describe a capture (10^-12, picoseconds,
/// is the finest any capture hardware writes).
pub const MAX_TSRESOL_DECIMAL: u8 = 19;
/// Finest binary `if_tsresol` the reader accepts: 2^-63 s (64-bit ticks spanning 2 s).
pub const MAX_TSRESOL_BINARY: u8 = 63;

/// How to turn an interface's raw timestamps into nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TsConv {
    /// `if_tsresol`: MSB 0 means 10^-n seconds, MSB 1 means 2^-n seconds; checked against
    /// [`MAX_TSRESOL_DECIMAL`] and [`MAX_TSRESOL_BINARY`] when the IDB is read.
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

    /// Whether an `if_tsresol` value is one a capture can have.
    fn resol_ok(resol: u8) -> bool {
        if resol & 0x80 == 0 {
            resol <= MAX_TSRESOL_DECIMAL
        } else {
            resol & 0x7f <= MAX_TSRESOL_BINARY
        }
    }

    /// Converts a raw timestamp to nanoseconds since the epoch, or the error for a time
    /// before 1970 or after [`MAX_TS_NS`].
    #[inline]
    fn to_ns(self, raw: u64) -> Result<u64, ReadErrorKind> {
        if self.offset_s == 0 {
            let fast = match self.resol {
                9 => Some(raw),
                6 => raw.checked_mul(1000),
                _ => None,
            };
            if let Some(ns) = fast.filter(|&ns| ns <= MAX_TS_NS) {
                return Ok(ns);
            }
        }
        self.to_ns_slow(raw)
    }

    /// The general case of [`TsConv::to_ns`].
    fn to_ns_slow(self, raw: u64) -> Result<u64, ReadErrorKind> {
        let wide = u128::from(raw);
        // Every intermediate stays below 2^94 (raw < 2^64, times at most 10^9 < 2^30), so
        // nothing here can overflow.
        let base: u128 = if self.resol & 0x80 == 0 {
            let n = u32::from(self.resol);
            if n <= 9 {
                wide * 10u128.pow(9 - n)
            } else if n - 9 <= 38 {
                wide / 10u128.pow(n - 9)
            } else {
                0
            }
        } else {
            (wide * 1_000_000_000) >> u32::from(self.resol & 0x7f).min(127)
        };
        let total = base as i128 + i128::from(self.offset_s) * 1_000_000_000;
        if (0..=i128::from(MAX_TS_NS)).contains(&total) {
            Ok(total as u64)
        } else {
            Err(ReadErrorKind::TimestampOutOfRange {
                raw,
                resol: self.resol,
                offset_s: self.offset_s,
                seconds: total.div_euclid(1_000_000_000),
            })
        }
    }
}

/// An `if_tsresol` byte in words: `10^-6 s` or `2^-10 s`.
fn describe_resol(resol: u8) -> String {
    if resol & 0x80 == 0 {
        format!("10^-{resol} s")
    } else {
        format!("2^-{} s", resol & 0x7f)
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
        /// The packet's options are in `kept`.
        options: bool,
    },
    Odd(Oddity),
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
    /// The options of the packet returned last, and of the block being read.
    kept: Kept,
    /// The current section's options, given to each interface it describes.
    section: Vec<u8>,
    /// Oddities to return before reading on (after the record they concern).
    odd: std::collections::VecDeque<Oddity>,
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
            kept: Kept::default(),
            section: Vec::new(),
            odd: std::collections::VecDeque::new(),
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
        if let Some(o) = self.odd.pop_front() {
            return Ok(Some(Record::Odd(o)));
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
                options,
            })) => {
                let data = start
                    .checked_add(len)
                    .and_then(|end| self.buf.get(start..end))
                    .unwrap_or_default();
                let options = if options { &self.kept.bytes[..] } else { &[] };
                Ok(Some(Record::Packet(PacketRef {
                    ts_ns,
                    orig_len,
                    iface,
                    data,
                    options,
                })))
            }
            Ok(Some(Step::Odd(o))) => Ok(Some(Record::Odd(o))),
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
        self.interfaces
            .push(Interface::new(linktype, snaplen, None));
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
        if frac_ns >= 1_000_000_000 {
            let unit = if nanos { "ns" } else { "µs" };
            self.odd.push_back(Oddity::SubsecondOverflow {
                offset: at,
                frac,
                unit,
            });
        }
        if orig_len < caplen {
            self.odd.push_back(Oddity::OrigBelowCaptured {
                offset: at,
                orig: orig_len,
                caplen,
            });
        }
        let start = self.start + 16;
        self.consume(total);
        self.last_ts = ts_ns;
        Ok(Some(Step::Packet {
            ts_ns,
            orig_len,
            iface: 0,
            start,
            len: caplen as usize,
            options: false,
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
        let len_us = len as usize;
        let opts = self.block_part(24, len_us - 4, len).map_err(|k| (at, k))?;
        let mut kept = Kept::default();
        options::keep(opts, order, OptionsOf::Section, &mut kept);
        self.note_left_out(at, "section", &kept.left_out);
        self.section = kept.bytes;
        self.consume(len_us);
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
                    let ts_ns = match conv.to_ns(raw) {
                        Ok(ts) => ts,
                        Err(k) => {
                            self.consume(len_us);
                            return out_of_range(at, "packet", k);
                        }
                    };
                    self.last_ts = ts_ns;
                    let orig_len = head.u32_in::<24>(order);
                    if orig_len < caplen {
                        self.odd.push_back(Oddity::OrigBelowCaptured {
                            offset: at,
                            orig: orig_len,
                            caplen,
                        });
                    }
                    let data_end = 28 + caplen as usize + pad4(caplen as usize);
                    let options = if block_type == BLOCK_EPB && data_end < len_us - 4 {
                        let mut kept = std::mem::take(&mut self.kept);
                        kept.bytes.clear();
                        kept.left_out.clear();
                        let opts = self
                            .block_part(data_end, len_us - 4, len)
                            .map_err(|k| (at, k))?;
                        options::keep(opts, order, OptionsOf::Packet, &mut kept);
                        self.note_left_out(at, "packet", &kept.left_out);
                        self.kept = kept;
                        !self.kept.bytes.is_empty()
                    } else {
                        false
                    };
                    Step::Packet {
                        ts_ns,
                        orig_len,
                        iface,
                        start: self.start + 28,
                        len: caplen as usize,
                        options,
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
                        options: false,
                    }
                }
                BLOCK_IDB => {
                    let linktype = head.u16_in::<8>(order);
                    let snaplen = head.u32_in::<12>(order);
                    let opts = self.block_part(16, len_us - 4, len).map_err(|k| (at, k))?;
                    let (name_opt, conv) = parse_idb_options(opts, order).map_err(|k| (at, k))?;
                    let mut kept = Kept::default();
                    options::keep(opts, order, OptionsOf::Interface, &mut kept);
                    self.note_left_out(at, "interface", &kept.left_out);
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
                        options: InterfaceOptions {
                            idb: kept.bytes,
                            section: self.section.clone(),
                        },
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
                    let ts_ns = match conv.to_ns(raw) {
                        Ok(ts) => ts,
                        Err(k) => {
                            self.consume(len_us);
                            return out_of_range(at, "interface statistics", k);
                        }
                    };
                    Step::Stats {
                        iface,
                        ts_ns,
                        received,
                        dropped,
                    }
                }
                _ => {
                    self.consume(len_us);
                    return Ok(Some(Step::Odd(Oddity::BlockNotKept {
                        offset: at,
                        block_type,
                    })));
                }
            };
            self.consume(len_us);
            return Ok(Some(step));
        }
    }
}

/// The oddity of a block whose time [`TsConv::to_ns`] refused (any other error stops).
fn out_of_range(at: u64, block: &'static str, kind: ReadErrorKind) -> Result<Option<Step>, Fail> {
    match kind {
        ReadErrorKind::TimestampOutOfRange { seconds, .. } => {
            let seconds = seconds.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
            Ok(Some(Step::Odd(Oddity::TimeOutOfRange {
                offset: at,
                block,
                seconds,
            })))
        }
        other => Err((at, other)),
    }
}

impl<R: Read> CaptureReader<R> {
    /// Queues an [`Oddity::OptionNotKept`] for each code left out of a block's options.
    fn note_left_out(&mut self, at: u64, block: &'static str, codes: &[u16]) {
        for &code in codes {
            self.odd.push_back(Oddity::OptionNotKept {
                offset: at,
                block,
                code,
            });
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
                let resol = option_value::<1>(value, "IDB", "if_tsresol")?.u8::<0>();
                if !TsConv::resol_ok(resol) {
                    return Err(ReadErrorKind::BadTsResol { resol });
                }
                conv.resol = resol;
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
pub(super) fn parse_isb_options(
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
