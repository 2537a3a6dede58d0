//! Byte layout of segment files, format version 1 (specified in docs/format.md).
//!
//! A segment is a run of regular zstd frames whose decompressed content is one pcapng
//! section. capsule's own metadata (segment header, block headers, footer) are pcapng blocks
//! of a local-use block type ([`CAPSULE_BLOCK_TYPE`]), which pcapng readers skip, each in a
//! *raw* (stored, uncompressed) zstd frame so its bytes can be read straight off the disk.
//! Wireshark opens a segment as is, and `zstd -dc SEGMENT` prints a valid pcapng.
//!
//! Why not zstd skippable frames: Wireshark re-detects the compression after every zstd
//! frame and reads anything that does not start with the zstd magic as uncompressed bytes,
//! so a skippable frame in the middle of a file breaks it (seen with tshark 4.0).
//!
//! This module encodes and decodes the metadata records as checked views
//! ([`capsule_wire::view`]): each record's fixed part is a `View` whose length is checked once,
//! variable parts are read with a `Reader`. Decoding never panics, and every failure says what
//! was expected and what was found.

use capsule_pcap::Interface;
use capsule_wire::view::{Reader, Short, View};

/// Format version written by this build, and the only one it reads.
pub const FORMAT_VERSION: u16 = 1;
/// pcapng block type of capsule's metadata blocks (local use: most significant bit set).
pub const CAPSULE_BLOCK_TYPE: u32 = 0x8000_0CA5;
/// A block header's padding is less than this (a page: all a direct-I/O writer needs).
pub const MAX_HEADER_PAD: usize = 4096;
/// Magic of a zstd frame.
pub const ZSTD_MAGIC: u32 = 0xFD2F_B528;
/// Frame header descriptor of a metadata frame: 4-byte content size, single segment, no
/// checksum, no dictionary.
pub const META_FHD: u8 = 0xA0;
/// Bytes before the first raw block of a metadata frame: magic, descriptor, content size.
pub const META_PREFIX_LEN: usize = 9;
/// The largest raw block zstd allows.
pub const RAW_BLOCK_MAX: usize = 128 * 1024;

pub const SEGMENT_HEADER_MAGIC: [u8; 8] = *b"CPSLSEG\0";
pub const BLOCK_HEADER_MAGIC: [u8; 8] = *b"CPSLBLK\0";
pub const FOOTER_MAGIC: [u8; 8] = *b"CPSLFTR\0";
pub const TRAILER_MAGIC: [u8; 8] = *b"CPSLEND\0";

/// Length of the segment header payload.
pub const SEGMENT_HEADER_LEN: usize = 40;
/// Length of the fixed part of a block header payload (before interface records and CRC).
pub const BLOCK_HEADER_FIXED_LEN: usize = 60;
/// The largest uncompressed block a reader accepts: the writer's largest block size (64 MiB)
/// plus the packet that may overflow it (at most 256 KiB) and its record, rounded up. A
/// header or footer claiming more is damaged.
pub const MAX_BLOCK_UNCOMPRESSED: usize = 65 << 20;
/// Length of the fixed part of the footer payload.
pub const FOOTER_FIXED_LEN: usize = 56;
/// Length of one block entry in the footer of the first layout (footer flags 0).
pub const FOOTER_ENTRY_LEN_V1: usize = 48;
/// Length of one block entry in the footer written by this build: the first layout's 48
/// bytes, then the block's compression (u16, see [`Compression`]) and 2 reserved bytes.
pub const FOOTER_ENTRY_LEN: usize = 52;
/// Footer flag (footer bytes 10..12): block entries are [`FOOTER_ENTRY_LEN`] bytes and carry
/// each block's compression. Without it they are [`FOOTER_ENTRY_LEN_V1`] bytes.
pub const FOOTER_FLAG_COMPRESSION: u16 = 1;
/// Length of the trailer at the very end of a sealed segment: footer frame length, magic,
/// and the pcapng block's closing length.
pub const TRAILER_LEN: usize = 16;
/// The longest interface name a segment records.
pub const MAX_IFACE_NAME: usize = 256;

/// Why a metadata record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{what}: expected at least {expected} bytes, found {found}")]
    Short {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("{what}: expected magic {expected:?}, found {found:?}")]
    Magic {
        what: &'static str,
        expected: String,
        found: String,
    },
    #[error(
        "{what}: format version {found} is not supported (this build reads version {expected}); \
         upgrade capsule to read this store"
    )]
    Version {
        what: &'static str,
        expected: u16,
        found: u16,
    },
    #[error("{what}: checksum mismatch: stored crc32c {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        what: &'static str,
        stored: u32,
        computed: u32,
    },
    #[error("{what}: {detail}")]
    Invalid { what: &'static str, detail: String },
}

/// The segment header, in a metadata frame right after the head frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub seq: u64,
    pub created_ns: u64,
}

/// Metadata of one block, as written in its header and repeated in the footer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockMeta {
    /// Index of the block within its segment.
    pub index: u32,
    /// Smallest and largest packet timestamp in the block (ns).
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: u32,
    /// Sum of the packets' original (wire) lengths.
    pub wire_bytes: u64,
    pub compressed_len: u32,
    pub uncompressed_len: u32,
    /// crc32c of the compressed zstd frame.
    pub frame_crc: u32,
    /// File offset of the zstd frame (filled in by the writer or reader; not in the header).
    pub frame_offset: u64,
    /// How the frame was compressed, as recorded (block header bytes 58..60).
    pub compression: Compression,
    /// Interfaces this block adds to the segment's list, in order.
    pub new_interfaces: Vec<Interface>,
    /// Zero bytes after the block header's checksum, inside its pcapng block (a multiple of
    /// 4, below [`MAX_HEADER_PAD`]): room a writer put there so that the frame lands at the
    /// file offset its buffer needs for direct I/O (a stored block written from the buffer
    /// its packets were written into: the segment writer's `append_framed`). Counted in
    /// [`BlockMeta::header_frame_len`]; not in the footer.
    pub header_pad: u32,
}

/// How a block's frame was compressed, as its block header (bytes 58..60) and footer entry
/// record it: a u16 where 0 means *not recorded* (segments written before this was added),
/// 1 means *stored* (a raw frame), and `0x8000 + level` a zstd level (-1000..=22, so the
/// values 0x7C18..=0x8016). Any other value decodes as [`Compression::Unknown`] (a newer
/// build's code), which readers treat like "not recorded".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Compression {
    /// Written before blocks recorded their compression.
    #[default]
    NotRecorded,
    /// A raw (stored) zstd frame.
    Stored,
    /// A zstd frame at this level.
    Zstd(i32),
    /// A code this build does not know.
    Unknown(u16),
}

/// Code of a zstd level: `0x8000 + level`.
const ZSTD_CODE_BASE: i32 = 0x8000;

impl Compression {
    /// The u16 written for it.
    pub fn code(self) -> u16 {
        match self {
            Compression::NotRecorded => 0,
            Compression::Stored => 1,
            Compression::Zstd(l) => (ZSTD_CODE_BASE + l.clamp(-1000, 22)) as u16,
            Compression::Unknown(c) => c,
        }
    }

    /// What a recorded u16 means.
    pub fn from_code(c: u16) -> Self {
        let level = i32::from(c) - ZSTD_CODE_BASE;
        match c {
            0 => Compression::NotRecorded,
            1 => Compression::Stored,
            _ if (-1000..=22).contains(&level) => Compression::Zstd(level),
            _ => Compression::Unknown(c),
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compression::NotRecorded => f.write_str("not recorded"),
            Compression::Stored => f.write_str("stored"),
            Compression::Zstd(l) => write!(f, "zstd {l}"),
            Compression::Unknown(c) => write!(f, "unknown code {c:#06x}"),
        }
    }
}

/// The footer of a sealed segment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Footer {
    pub packets: u64,
    pub wire_bytes: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub blocks: Vec<BlockMeta>,
    pub interfaces: Vec<Interface>,
}

// ---- checked reads -----------------------------------------------------------------------

/// What a short read of `found` bytes of `what` is reported as: how many bytes the read
/// needed the record to have, and how many it has.
fn short(what: &'static str, found: usize) -> impl Fn(Short) -> DecodeError + Copy {
    move |e| DecodeError::Short {
        what,
        expected: e.end(),
        found,
    }
}

/// The view of the fixed part of `b` (its first `N` bytes), or `Short` naming `what`.
fn fixed<'a, const N: usize>(what: &'static str, b: &'a [u8]) -> Result<View<'a, N>, DecodeError> {
    View::split(b).map(|(v, _)| v).map_err(short(what, b.len()))
}

fn check_len(what: &'static str, b: &[u8], expected: usize) -> Result<(), DecodeError> {
    if b.len() < expected {
        return Err(DecodeError::Short {
            what,
            expected,
            found: b.len(),
        });
    }
    Ok(())
}

fn check_magic(what: &'static str, found: [u8; 8], magic: &[u8; 8]) -> Result<(), DecodeError> {
    if &found != magic {
        return Err(DecodeError::Magic {
            what,
            expected: String::from_utf8_lossy(magic)
                .trim_end_matches('\0')
                .to_string(),
            found: format!("{found:02x?}"),
        });
    }
    Ok(())
}

fn check_version(what: &'static str, found: u16) -> Result<(), DecodeError> {
    if found != FORMAT_VERSION {
        return Err(DecodeError::Version {
            what,
            expected: FORMAT_VERSION,
            found,
        });
    }
    Ok(())
}

fn check_crc(what: &'static str, covered: &[u8], stored: u32) -> Result<(), DecodeError> {
    let computed = crate::crc::crc32c(covered);
    if computed != stored {
        return Err(DecodeError::Checksum {
            what,
            stored,
            computed,
        });
    }
    Ok(())
}

/// Total length of a metadata frame whose pcapng block carries `payload_len` bytes.
pub fn meta_frame_len(payload_len: usize) -> usize {
    let content = payload_len + 12;
    META_PREFIX_LEN + content + 3 * content.div_ceil(RAW_BLOCK_MAX)
}

/// Appends a metadata frame: a raw zstd frame whose content is a pcapng block of type
/// [`CAPSULE_BLOCK_TYPE`] with `payload` as its body. `payload.len()` must be a multiple of 4.
pub fn put_meta_frame(out: &mut Vec<u8>, payload: &[u8]) {
    debug_assert_eq!(payload.len() % 4, 0);
    let block_len = (payload.len() + 12) as u32;
    let mut content = Vec::with_capacity(payload.len() + 12);
    content.extend_from_slice(&CAPSULE_BLOCK_TYPE.to_le_bytes());
    content.extend_from_slice(&block_len.to_le_bytes());
    content.extend_from_slice(payload);
    content.extend_from_slice(&block_len.to_le_bytes());
    put_raw_frame(out, &content);
}

/// Length of the raw zstd frame [`put_raw_frame`] makes of `content_len` bytes.
pub fn raw_frame_len(content_len: usize) -> usize {
    META_PREFIX_LEN + content_len + 3 * content_len.div_ceil(RAW_BLOCK_MAX).max(1)
}

/// Appends a raw (stored) zstd frame holding `content` (at most 4 GiB - 1): magic,
/// descriptor [`META_FHD`] (single segment, 4-byte content size, no checksum), the content
/// size, then raw blocks of at most 128 KiB.
pub fn put_raw_frame(out: &mut Vec<u8>, content: &[u8]) {
    out.reserve(raw_frame_len(content.len()));
    out.extend_from_slice(&ZSTD_MAGIC.to_le_bytes());
    out.push(META_FHD);
    out.extend_from_slice(&(content.len() as u32).to_le_bytes());
    if content.is_empty() {
        out.extend_from_slice(&1u32.to_le_bytes()[..3]); // one empty last raw block
        return;
    }
    let n = content.len().div_ceil(RAW_BLOCK_MAX);
    for (i, chunk) in content.chunks(RAW_BLOCK_MAX).enumerate() {
        let last = u32::from(i + 1 == n);
        let bh = ((chunk.len() as u32) << 3) | last; // block type 0 = raw
        out.extend_from_slice(&bh.to_le_bytes()[..3]);
        out.extend_from_slice(chunk);
    }
}

/// The 3-byte header of a raw zstd block of `size` bytes (at most [`RAW_BLOCK_MAX`]),
/// `last` when it ends its frame.
pub fn raw_block_header(size: usize, last: bool) -> [u8; 3] {
    debug_assert!(size <= RAW_BLOCK_MAX);
    let bh = ((size as u32) << 3) | u32::from(last); // block type 0 = raw
    let b = bh.to_le_bytes();
    [b[0], b[1], b[2]]
}

/// The head of a raw frame of `content_len` bytes whose raw blocks follow it, preceded by
/// `empty` empty raw blocks (3 bytes each; what a writer adds to move the blocks after them
/// by 3 bytes at a time, see the segment writer's `append_framed`):
/// magic, descriptor [`META_FHD`], content size, then the empty blocks. Appended to `out`.
pub fn put_raw_frame_head(out: &mut Vec<u8>, content_len: usize, empty: usize) {
    out.extend_from_slice(&ZSTD_MAGIC.to_le_bytes());
    out.push(META_FHD);
    out.extend_from_slice(&(content_len as u32).to_le_bytes());
    for _ in 0..empty {
        out.extend_from_slice(&raw_block_header(0, false));
    }
}

/// The contents of the raw blocks that make up `body` (the raw blocks of a frame, after its
/// head), in order; empty blocks are skipped, and a header that claims more than `body`
/// holds ends the walk. A stored block built in its frame (live
/// capture at the store level) holds whole pcapng blocks in each raw block, so these are
/// the runs of records the side index reads.
pub fn raw_blocks(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0usize;
    std::iter::from_fn(move || loop {
        let h = body.get(at..at + 3)?;
        let bh = u32::from_le_bytes([h[0], h[1], h[2], 0]);
        let size = (bh >> 3) as usize;
        let chunk = body.get(at + 3..at + 3 + size)?;
        at += 3 + size;
        if bh & 6 != 0 {
            return None; // not a raw block
        }
        if size > 0 {
            return Some(chunk);
        }
    })
}

/// The bytes of the raw zstd frame [`put_raw_frame`] makes of `content_len` bytes that are
/// not the content itself: the frame head (magic, descriptor, content size) followed by each
/// raw block's 3-byte header, into `heads` (cleared first). With [`raw_frame_parts`] the
/// frame can be written around content that stays where it is (the store rung of live
/// capture, which so never copies a block into a frame).
pub fn raw_frame_heads(content_len: usize, heads: &mut Vec<u8>) {
    heads.clear();
    heads.extend_from_slice(&ZSTD_MAGIC.to_le_bytes());
    heads.push(META_FHD);
    heads.extend_from_slice(&(content_len as u32).to_le_bytes());
    let n = content_len.div_ceil(RAW_BLOCK_MAX).max(1);
    for i in 0..n {
        let chunk = (content_len - (i * RAW_BLOCK_MAX).min(content_len)).min(RAW_BLOCK_MAX);
        let last = u32::from(i + 1 == n);
        let bh = ((chunk as u32) << 3) | last; // block type 0 = raw
        heads.extend_from_slice(&bh.to_le_bytes()[..3]);
    }
}

/// The raw zstd frame of `content` as the slices to write one after the other: `heads`
/// (from [`raw_frame_heads`] of `content.len()`) cut around the content's 128 KiB chunks.
/// Their concatenation is what [`put_raw_frame`] writes.
pub fn raw_frame_parts<'a>(content: &'a [u8], heads: &'a [u8]) -> Vec<&'a [u8]> {
    const HEAD: usize = META_PREFIX_LEN; // magic, descriptor, content size
    let mut parts = Vec::with_capacity(2 + 2 * content.len().div_ceil(RAW_BLOCK_MAX));
    parts.push(&heads[..HEAD]);
    if content.is_empty() {
        parts.push(&heads[HEAD..]);
        return parts;
    }
    for (i, chunk) in content.chunks(RAW_BLOCK_MAX).enumerate() {
        let at = HEAD + 3 * i;
        parts.push(&heads[at..at + 3]);
        parts.push(chunk);
    }
    parts
}

/// Reads the prefix of a metadata frame and returns the frame's total length.
pub fn meta_frame_len_from_prefix(what: &'static str, b: &[u8]) -> Result<usize, DecodeError> {
    let prefix = fixed::<META_PREFIX_LEN>(what, b)?;
    let magic = prefix.u32_le::<0>();
    let descriptor = prefix.u8::<4>();
    if magic != ZSTD_MAGIC || descriptor != META_FHD {
        return Err(DecodeError::Magic {
            what,
            expected: format!("raw zstd frame {ZSTD_MAGIC:#010x} with descriptor {META_FHD:#04x}"),
            found: format!("{magic:#010x} with descriptor {descriptor:#04x}"),
        });
    }
    let content = prefix.u32_le::<5>() as usize;
    if content < 12 || !content.is_multiple_of(4) {
        return Err(DecodeError::Invalid {
            what,
            detail: format!(
                "metadata block length {content} is not a multiple of 4 of at least 12"
            ),
        });
    }
    Ok(META_PREFIX_LEN + content + 3 * content.div_ceil(RAW_BLOCK_MAX))
}

/// Decodes a whole metadata frame and returns the payload of its pcapng block.
pub fn decode_meta_frame(what: &'static str, frame: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let total = meta_frame_len_from_prefix(what, frame)?;
    check_len(what, frame, total)?;
    let short_frame = short(what, frame.len());
    let mut r = Reader::new(frame);
    let prefix = r.view::<META_PREFIX_LEN>().map_err(short_frame)?;
    let content_len = prefix.u32_le::<5>() as usize;
    let mut content = Vec::with_capacity(content_len);
    loop {
        let [b0, b1, b2] = r.array::<3>().map_err(short_frame)?;
        let bh = u32::from_le_bytes([b0, b1, b2, 0]);
        let (last, kind, size) = (bh & 1, (bh >> 1) & 3, (bh >> 3) as usize);
        if kind != 0 || size > RAW_BLOCK_MAX || content.len() + size > content_len {
            return Err(DecodeError::Invalid {
                what,
                detail: format!(
                    "expected raw zstd blocks, found block type {kind} of {size} bytes"
                ),
            });
        }
        content.extend_from_slice(r.take(size).map_err(short_frame)?);
        if last == 1 {
            break;
        }
    }
    let block_type = View::<4>::split(&content).map(|(t, _)| t.u32_le::<0>());
    if content.len() != content_len || block_type != Ok(CAPSULE_BLOCK_TYPE) {
        let found = match block_type {
            Ok(t) => format!("type {t:#010x} of {} bytes", content.len()),
            Err(_) => format!("{} bytes, too few for a block type", content.len()),
        };
        return Err(DecodeError::Invalid {
            what,
            detail: format!(
                "expected a pcapng block of type {CAPSULE_BLOCK_TYPE:#010x} of {content_len} bytes, \
                 found {found}"
            ),
        });
    }
    // The content is `content_len` (at least 12) bytes: type and length, body, length.
    let short_content = short(what, content.len());
    let mut c = Reader::new(&content);
    let head = c.view::<8>().map_err(short_content)?;
    let body = c.take(content_len - 12).map_err(short_content)?;
    let end = c.u32_le().map_err(short_content)? as usize;
    let len = head.u32_le::<4>() as usize;
    if len != content_len || end != len {
        return Err(DecodeError::Invalid {
            what,
            detail: format!("pcapng block lengths disagree with the frame's {content_len} bytes"),
        });
    }
    Ok(body.to_vec())
}

// ---- interfaces ------------------------------------------------------------------------

/// The bytes of an interface's name as written: at most [`MAX_IFACE_NAME`], cut at a char
/// boundary so that what is written is still UTF-8 and decodes to the same name.
fn stored_name(iface: &Interface) -> &[u8] {
    let name = iface.name.as_deref().unwrap_or("");
    let mut end = name.len().min(MAX_IFACE_NAME);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name.as_bytes()[..end]
}

/// Set in an interface record's name length when the record carries options (format.md,
/// "Interface record"): the name's length is the low 15 bits.
const IFACE_HAS_OPTIONS: u16 = 0x8000;

/// A run of options as a record holds it: whole, well-formed options only (what follows a
/// malformed one is dropped), cut (at whole options) to [`capsule_pcap::options::MAX_KEPT`]
/// bytes so that a record always fits in a block header. Idempotent: what a record decodes to
/// encodes to the same bytes.
fn canonical_options(opts: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(opts.len().min(capsule_pcap::options::MAX_KEPT));
    for (code, value) in capsule_pcap::options::iter(opts) {
        if out.len() + 4 + value.len().div_ceil(4) * 4 > capsule_pcap::options::MAX_KEPT {
            break;
        }
        capsule_pcap::options::put(&mut out, code, value);
    }
    out
}

/// The options of an interface as written ([`canonical_options`]).
fn stored_options(iface: &Interface) -> (Vec<u8>, Vec<u8>) {
    (
        canonical_options(&iface.options.idb),
        canonical_options(&iface.options.section),
    )
}

fn iface_record_len(iface: &Interface) -> usize {
    let (idb, section) = stored_options(iface);
    let opts = if idb.is_empty() && section.is_empty() {
        0
    } else {
        4 + idb.len() + section.len()
    };
    8 + stored_name(iface).len().div_ceil(4) * 4 + opts
}

fn put_iface(out: &mut Vec<u8>, iface: &Interface) {
    let name = stored_name(iface);
    let (idb, section) = stored_options(iface);
    let has = !(idb.is_empty() && section.is_empty());
    let flag = if has { IFACE_HAS_OPTIONS } else { 0 };
    out.extend_from_slice(&iface.linktype.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16 | flag).to_le_bytes());
    out.extend_from_slice(&iface.snaplen.to_le_bytes());
    out.extend_from_slice(name);
    out.resize(out.len() + (name.len().div_ceil(4) * 4 - name.len()), 0);
    if has {
        out.extend_from_slice(&(idb.len() as u16).to_le_bytes());
        out.extend_from_slice(&(section.len() as u16).to_le_bytes());
        out.extend_from_slice(&idb);
        out.extend_from_slice(&section);
    }
}

fn get_ifaces(
    what: &'static str,
    b: &[u8],
    at: usize,
    count: usize,
) -> Result<(Vec<Interface>, usize), DecodeError> {
    let short = short(what, b.len());
    let mut r = Reader::new(b).at(at);
    let mut v = Vec::with_capacity(count.min(1024));
    for i in 0..count {
        let h = r.view::<8>().map_err(short)?;
        let linktype = h.u16_le::<0>();
        let name_field = h.u16_le::<2>();
        let name_len = usize::from(name_field & !IFACE_HAS_OPTIONS);
        let snaplen = h.u32_le::<4>();
        if name_len > MAX_IFACE_NAME {
            return Err(DecodeError::Invalid {
                what,
                detail: format!("interface {i}: name length {name_len} exceeds {MAX_IFACE_NAME}"),
            });
        }
        let padded = r.take(name_len.div_ceil(4) * 4).map_err(short)?;
        let name = if name_len == 0 {
            None
        } else {
            // `padded` holds the name and at most 3 bytes of padding.
            Some(String::from_utf8_lossy(&padded[..name_len]).into_owned())
        };
        let mut iface = Interface::new(linktype, snaplen, name);
        if name_field & IFACE_HAS_OPTIONS != 0 {
            let lens = r.view::<4>().map_err(short)?;
            let (idb_len, section_len) = (lens.u16_le::<0>(), lens.u16_le::<2>());
            let max = capsule_pcap::options::MAX_KEPT;
            if usize::from(idb_len) > max || usize::from(section_len) > max {
                return Err(DecodeError::Invalid {
                    what,
                    detail: format!(
                        "interface {i}: options of {idb_len} and {section_len} bytes: \
                         expected at most {max} each"
                    ),
                });
            }
            // Damage inside a run costs only the options after it (the lengths above keep
            // the record's own framing).
            iface.options.idb = canonical_options(r.take(usize::from(idb_len)).map_err(short)?);
            iface.options.section =
                canonical_options(r.take(usize::from(section_len)).map_err(short)?);
        }
        v.push(iface);
    }
    Ok((v, r.position()))
}

// ---- segment header --------------------------------------------------------------------

impl SegmentHeader {
    /// Appends the header as a metadata frame.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut p = Vec::with_capacity(SEGMENT_HEADER_LEN);
        p.extend_from_slice(&SEGMENT_HEADER_MAGIC);
        p.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        p.extend_from_slice(&(SEGMENT_HEADER_LEN as u16).to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&self.seq.to_le_bytes());
        p.extend_from_slice(&self.created_ns.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        let crc = crate::crc::crc32c(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        put_meta_frame(out, &p);
    }

    /// Decodes a segment header payload.
    pub fn decode(p: &[u8]) -> Result<Self, DecodeError> {
        const W: &str = "segment header";
        let h = fixed::<SEGMENT_HEADER_LEN>(W, p)?;
        check_magic(W, h.array::<0, 8>(), &SEGMENT_HEADER_MAGIC)?;
        check_version(W, h.u16_le::<8>())?;
        check_crc(W, &h.bytes()[..36], h.u32_le::<36>())?;
        Ok(SegmentHeader {
            seq: h.u64_le::<16>(),
            created_ns: h.u64_le::<24>(),
        })
    }
}

// ---- block header ----------------------------------------------------------------------

impl BlockMeta {
    /// Length of the encoded header payload.
    pub fn header_payload_len(&self) -> usize {
        BLOCK_HEADER_FIXED_LEN
            + self
                .new_interfaces
                .iter()
                .map(iface_record_len)
                .sum::<usize>()
            + 4
    }

    /// Length of the metadata frame holding the header.
    pub fn header_frame_len(&self) -> usize {
        meta_frame_len(self.header_payload_len() + self.header_pad as usize)
    }

    /// Appends the block header as a metadata frame, followed inside its pcapng block by
    /// [`BlockMeta::header_pad`] zero bytes.
    pub fn encode_header(&self, out: &mut Vec<u8>) {
        debug_assert_eq!(self.header_pad % 4, 0, "header padding is whole words");
        let len = self.header_payload_len();
        let mut p = Vec::with_capacity(len + self.header_pad as usize);
        p.extend_from_slice(&BLOCK_HEADER_MAGIC);
        p.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        p.extend_from_slice(&(len as u16).to_le_bytes());
        p.extend_from_slice(&self.index.to_le_bytes());
        p.extend_from_slice(&self.first_ns.to_le_bytes());
        p.extend_from_slice(&self.last_ns.to_le_bytes());
        p.extend_from_slice(&self.packets.to_le_bytes());
        p.extend_from_slice(&self.compressed_len.to_le_bytes());
        p.extend_from_slice(&self.uncompressed_len.to_le_bytes());
        p.extend_from_slice(&self.frame_crc.to_le_bytes());
        p.extend_from_slice(&self.wire_bytes.to_le_bytes());
        p.extend_from_slice(&(self.new_interfaces.len() as u16).to_le_bytes());
        p.extend_from_slice(&self.compression.code().to_le_bytes());
        for iface in &self.new_interfaces {
            put_iface(&mut p, iface);
        }
        let crc = crate::crc::crc32c(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p.resize(len + self.header_pad as usize, 0);
        put_meta_frame(out, &p);
    }

    /// Decodes a block header payload.
    /// `frame_offset` is left at 0 for the caller to fill in.
    pub fn decode_header(p: &[u8]) -> Result<Self, DecodeError> {
        const W: &str = "block header";
        check_len(W, p, BLOCK_HEADER_FIXED_LEN + 4)?;
        let h = fixed::<BLOCK_HEADER_FIXED_LEN>(W, p)?;
        check_magic(W, h.array::<0, 8>(), &BLOCK_HEADER_MAGIC)?;
        check_version(W, h.u16_le::<8>())?;
        let len = usize::from(h.u16_le::<10>());
        // What follows the header in its block is padding ([`BlockMeta::header_pad`]):
        // whole words of zeros, less than a page.
        let pad = p
            .len()
            .checked_sub(len)
            .filter(|&n| n < MAX_HEADER_PAD && n % 4 == 0 && p[len..].iter().all(|&b| b == 0));
        let (Some(pad), true) = (pad, len >= BLOCK_HEADER_FIXED_LEN + 4) else {
            return Err(DecodeError::Invalid {
                what: W,
                detail: format!(
                    "header says {len} bytes, its block holds {} (what follows a header is \
                     zero padding, whole words, less than {} bytes)",
                    p.len(),
                    MAX_HEADER_PAD
                ),
            });
        };
        let p = &p[..len];
        let crc = Reader::new(p)
            .at(len - 4)
            .u32_le()
            .map_err(short(W, p.len()))?;
        check_crc(W, &p[..len - 4], crc)?;
        let n_ifaces = usize::from(h.u16_le::<56>());
        let (new_interfaces, end) = get_ifaces(W, &p[..len - 4], BLOCK_HEADER_FIXED_LEN, n_ifaces)?;
        if end != len - 4 {
            return Err(DecodeError::Invalid {
                what: W,
                detail: format!(
                    "{} bytes left over after the interface records",
                    len - 4 - end
                ),
            });
        }
        let meta = BlockMeta {
            index: h.u32_le::<12>(),
            first_ns: h.u64_le::<16>(),
            last_ns: h.u64_le::<24>(),
            packets: h.u32_le::<32>(),
            compressed_len: h.u32_le::<36>(),
            uncompressed_len: h.u32_le::<40>(),
            frame_crc: h.u32_le::<44>(),
            wire_bytes: h.u64_le::<48>(),
            frame_offset: 0,
            compression: Compression::from_code(h.u16_le::<58>()),
            new_interfaces,
            header_pad: pad as u32,
        };
        meta.validate(W)?;
        Ok(meta)
    }

    fn validate(&self, what: &'static str) -> Result<(), DecodeError> {
        if self.first_ns > self.last_ns {
            return Err(DecodeError::Invalid {
                what,
                detail: format!(
                    "block {}: first timestamp {} is after last {}",
                    self.index, self.first_ns, self.last_ns
                ),
            });
        }
        Ok(())
    }
}

// ---- footer ----------------------------------------------------------------------------

impl Footer {
    /// Appends the footer (a metadata frame ending in the trailer) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut p = Vec::with_capacity(
            FOOTER_FIXED_LEN + self.blocks.len() * FOOTER_ENTRY_LEN + 64 * self.interfaces.len(),
        );
        p.extend_from_slice(&FOOTER_MAGIC);
        p.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        p.extend_from_slice(&FOOTER_FLAG_COMPRESSION.to_le_bytes());
        p.extend_from_slice(&(self.blocks.len() as u32).to_le_bytes());
        p.extend_from_slice(&(self.interfaces.len() as u32).to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&self.packets.to_le_bytes());
        p.extend_from_slice(&self.wire_bytes.to_le_bytes());
        p.extend_from_slice(&self.first_ns.to_le_bytes());
        p.extend_from_slice(&self.last_ns.to_le_bytes());
        for b in &self.blocks {
            p.extend_from_slice(&b.frame_offset.to_le_bytes());
            p.extend_from_slice(&b.first_ns.to_le_bytes());
            p.extend_from_slice(&b.last_ns.to_le_bytes());
            p.extend_from_slice(&b.packets.to_le_bytes());
            p.extend_from_slice(&b.compressed_len.to_le_bytes());
            p.extend_from_slice(&b.uncompressed_len.to_le_bytes());
            p.extend_from_slice(&b.frame_crc.to_le_bytes());
            p.extend_from_slice(&b.wire_bytes.to_le_bytes());
            p.extend_from_slice(&b.compression.code().to_le_bytes());
            p.extend_from_slice(&0u16.to_le_bytes());
        }
        for i in &self.interfaces {
            put_iface(&mut p, i);
        }
        let crc = crate::crc::crc32c(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        // The payload ends with: crc (above), frame length, magic; the pcapng block's closing
        // length follows, so the file's last 16 bytes are frame length, magic, block length.
        let frame_len = meta_frame_len(p.len() + 12);
        p.extend_from_slice(&(frame_len as u32).to_le_bytes());
        p.extend_from_slice(&TRAILER_MAGIC);
        put_meta_frame(out, &p);
    }

    /// Reads the trailer (the last [`TRAILER_LEN`] bytes of a file): returns the length of the
    /// footer frame that ends with it.
    pub fn frame_len_from_trailer(t: &[u8]) -> Result<usize, DecodeError> {
        const W: &str = "segment trailer";
        let t = fixed::<TRAILER_LEN>(W, t)?;
        check_magic(W, t.array::<4, 8>(), &TRAILER_MAGIC)?;
        let len = t.u32_le::<0>() as usize;
        if len < meta_frame_len(FOOTER_FIXED_LEN + 16) {
            return Err(DecodeError::Invalid {
                what: W,
                detail: format!("footer frame length {len} is shorter than the fixed part"),
            });
        }
        Ok(len)
    }

    /// Decodes a footer payload (from its magic to the trailer magic).
    pub fn decode(p: &[u8]) -> Result<Self, DecodeError> {
        const W: &str = "segment footer";
        check_len(W, p, FOOTER_FIXED_LEN + 16)?;
        // The payload is the body (fixed part, block entries, interfaces), then the CRC of the
        // body, the frame length and the trailer magic.
        let mut tail = Reader::new(p).at(p.len() - 16);
        let body = &p[..p.len() - 16];
        let h = fixed::<FOOTER_FIXED_LEN>(W, body)?;
        check_magic(W, h.array::<0, 8>(), &FOOTER_MAGIC)?;
        check_version(W, h.u16_le::<8>())?;
        check_crc(W, body, tail.u32_le().map_err(short(W, p.len()))?)?;
        let flags = h.u16_le::<10>();
        if flags & !FOOTER_FLAG_COMPRESSION != 0 {
            return Err(DecodeError::Invalid {
                what: W,
                detail: format!("unknown footer flags {flags:#06x}"),
            });
        }
        let entry_len = if flags & FOOTER_FLAG_COMPRESSION != 0 {
            FOOTER_ENTRY_LEN
        } else {
            FOOTER_ENTRY_LEN_V1
        };
        let n_blocks = h.u32_le::<12>() as usize;
        let n_ifaces = h.u32_le::<16>() as usize;
        let entries_end = n_blocks
            .checked_mul(entry_len)
            .and_then(|n| n.checked_add(FOOTER_FIXED_LEN))
            .ok_or(DecodeError::Invalid {
                what: W,
                detail: "block count overflows".into(),
            })?;
        check_len(W, body, entries_end)?;
        let mut entries = Reader::new(body).at(FOOTER_FIXED_LEN);
        let mut blocks = Vec::with_capacity(n_blocks);
        for i in 0..n_blocks {
            let e = entries
                .view::<FOOTER_ENTRY_LEN_V1>()
                .map_err(short(W, body.len()))?;
            let compression = if entry_len == FOOTER_ENTRY_LEN {
                let c = entries.view::<4>().map_err(short(W, body.len()))?;
                Compression::from_code(c.u16_le::<0>())
            } else {
                Compression::NotRecorded
            };
            let meta = BlockMeta {
                index: i as u32,
                frame_offset: e.u64_le::<0>(),
                first_ns: e.u64_le::<8>(),
                last_ns: e.u64_le::<16>(),
                packets: e.u32_le::<24>(),
                compressed_len: e.u32_le::<28>(),
                uncompressed_len: e.u32_le::<32>(),
                frame_crc: e.u32_le::<36>(),
                wire_bytes: e.u64_le::<40>(),
                compression,
                new_interfaces: Vec::new(),
                header_pad: 0,
            };
            meta.validate(W)?;
            blocks.push(meta);
        }
        let (interfaces, end) = get_ifaces(W, body, entries_end, n_ifaces)?;
        if end != body.len() {
            return Err(DecodeError::Invalid {
                what: W,
                detail: format!(
                    "{} bytes left over after the interface records",
                    body.len() - end
                ),
            });
        }
        Ok(Footer {
            packets: h.u64_le::<24>(),
            wire_bytes: h.u64_le::<32>(),
            first_ns: h.u64_le::<40>(),
            last_ns: h.u64_le::<48>(),
            blocks,
            interfaces,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> BlockMeta {
        BlockMeta {
            index: 3,
            first_ns: 10,
            last_ns: 20,
            packets: 2,
            wire_bytes: 3000,
            compressed_len: 100,
            uncompressed_len: 400,
            frame_crc: 0xdead_beef,
            frame_offset: 0,
            compression: Compression::Zstd(1),
            new_interfaces: vec![Interface {
                linktype: 1,
                snaplen: 65535,
                name: Some("eth0".into()),
                options: Default::default(),
            }],
            header_pad: 0,
        }
    }

    #[test]
    fn a_padded_block_header_round_trips_and_only_zero_words_pad() {
        for pad in [4u32, 8, 1000, 4092] {
            let m = BlockMeta {
                header_pad: pad,
                ..meta()
            };
            let mut out = Vec::new();
            m.encode_header(&mut out);
            assert_eq!(out.len(), m.header_frame_len());
            assert_eq!(out.len(), meta().header_frame_len() + pad as usize);
            assert_eq!(meta_frame_len_from_prefix("t", &out).unwrap(), out.len());
            let payload = decode_meta_frame("h", &out).unwrap();
            assert_eq!(BlockMeta::decode_header(&payload).unwrap(), m);
            // A non-zero byte in the padding, or a page of it, is damage.
            let mut bad = payload.clone();
            *bad.last_mut().unwrap() = 1;
            assert!(BlockMeta::decode_header(&bad).is_err());
        }
        let mut p = {
            let mut out = Vec::new();
            meta().encode_header(&mut out);
            decode_meta_frame("h", &out).unwrap()
        };
        p.resize(p.len() + MAX_HEADER_PAD, 0);
        assert!(BlockMeta::decode_header(&p).is_err());
    }

    /// Found by the `segment_meta` fuzz target: a footer whose interface name was longer
    /// than [`MAX_IFACE_NAME`] was cut inside a UTF-8 sequence, so the footer read back held
    /// a U+FFFD and encoded to different bytes. The name is now cut at a char boundary.
    #[test]
    fn interface_options_round_trip_and_a_record_without_them_keeps_its_bytes() {
        let plain = Interface::new(1, 65535, Some("eth0".into()));
        let mut rich = plain.clone();
        rich.set_description("capsule capture on eth0: AF_XDP, XDP native");
        capsule_pcap::options::put(&mut rich.options.section, 1, b"evidence for INC-42");
        // A record without options is the first layout's, byte for byte.
        let mut old = Vec::new();
        put_iface(&mut old, &plain);
        assert_eq!(old, [1, 0, 4, 0, 0xff, 0xff, 0, 0, b'e', b't', b'h', b'0']);
        assert_eq!(iface_record_len(&plain), old.len());
        let footer = Footer {
            interfaces: vec![rich.clone(), plain.clone()],
            ..Footer::default()
        };
        let mut frame = Vec::new();
        footer.encode(&mut frame);
        let back = Footer::decode(&decode_meta_frame("footer", &frame).unwrap()).unwrap();
        assert_eq!(back.interfaces, vec![rich.clone(), plain]);
        let m = BlockMeta {
            new_interfaces: vec![rich.clone()],
            ..meta()
        };
        let mut frame = Vec::new();
        m.encode_header(&mut frame);
        assert_eq!(frame.len(), m.header_frame_len());
        let back = BlockMeta::decode_header(&decode_meta_frame("h", &frame).unwrap()).unwrap();
        assert_eq!(back.new_interfaces, vec![rich.clone()]);
        // Options past the cap are cut at whole options: the record still fits a header.
        let mut huge = rich;
        for _ in 0..40 {
            capsule_pcap::options::put(&mut huge.options.idb, 1, &[b'x'; 1000]);
        }
        let mut rec = Vec::new();
        put_iface(&mut rec, &huge);
        assert!(rec.len() <= 12 + 4 + 2 * capsule_pcap::options::MAX_KEPT);
        let (got, used) = get_ifaces("t", &rec, 0, 1).unwrap();
        assert_eq!(used, rec.len());
        assert_eq!(got[0].description(), huge.description());
        // A run that is not whole options (one option running past the run's end, as the
        // fuzzer found) decodes to what encodes back to the same bytes: the malformed
        // option is dropped, so decode . encode is a fixed point.
        let mut odd = old.clone();
        odd[3] |= 0x80;
        odd.extend_from_slice(&[4, 0, 0, 0, 1, 0, 0, 0x45]);
        let (got, used) = get_ifaces("t", &odd, 0, 1).unwrap();
        assert_eq!(used, odd.len());
        assert!(got[0].options.idb.is_empty(), "{:?}", got[0].options);
        let mut again = Vec::new();
        put_iface(&mut again, &got[0]);
        assert_eq!(get_ifaces("t", &again, 0, 1).unwrap().0, got);
        // Damage: an options length past the cap is refused, not allocated.
        let mut bad = old.clone();
        bad[3] |= 0x80;
        bad.extend_from_slice(&[0xff, 0xff, 0, 0]);
        assert!(get_ifaces("t", &bad, 0, 1).is_err());
    }

    #[test]
    fn long_interface_name_is_cut_at_a_char_boundary() {
        // 255 ASCII bytes then a 2-byte char: byte 256 is inside it.
        let name = format!("{}\u{e9}tail", "a".repeat(255));
        let footer = Footer {
            interfaces: vec![Interface {
                linktype: 1,
                snaplen: 65535,
                name: Some(name),
                options: Default::default(),
            }],
            ..Footer::default()
        };
        let mut frame = Vec::new();
        footer.encode(&mut frame);
        let back = Footer::decode(&decode_meta_frame("footer", &frame).unwrap()).unwrap();
        assert_eq!(back.interfaces[0].name.as_deref(), Some(&*"a".repeat(255)));
        let mut again = Vec::new();
        back.encode(&mut again);
        assert_eq!(again, frame);
        // The same for a block header's new interfaces.
        let m = BlockMeta {
            new_interfaces: footer.interfaces.clone(),
            ..meta()
        };
        let mut frame = Vec::new();
        m.encode_header(&mut frame);
        assert_eq!(frame.len(), m.header_frame_len());
        let back = BlockMeta::decode_header(&decode_meta_frame("h", &frame).unwrap()).unwrap();
        assert_eq!(
            back.new_interfaces[0].name.as_deref(),
            Some(&*"a".repeat(255))
        );
    }

    #[test]
    fn block_header_round_trip_and_layout() {
        let m = meta();
        let mut out = Vec::new();
        m.encode_header(&mut out);
        assert_eq!(&out[..5], &[0x28, 0xb5, 0x2f, 0xfd, 0xa0]);
        assert_eq!(meta_frame_len_from_prefix("t", &out).unwrap(), out.len());
        assert_eq!(out.len(), m.header_frame_len());
        // raw block header, then the pcapng block: type, length, payload
        assert_eq!(&out[12..16], &CAPSULE_BLOCK_TYPE.to_le_bytes());
        assert_eq!(&out[20..28], b"CPSLBLK\0");
        // zstd itself decodes the frame to the pcapng block
        let plain = zstd::stream::decode_all(&out[..]).unwrap();
        assert_eq!(plain.len(), m.header_payload_len() + 12);
        let p = decode_meta_frame("t", &out).unwrap();
        assert_eq!(BlockMeta::decode_header(&p).unwrap(), m);
    }

    #[test]
    fn block_header_detects_corruption_and_versions() {
        let mut out = Vec::new();
        meta().encode_header(&mut out);
        let p = decode_meta_frame("t", &out).unwrap();
        let mut bad = p.clone();
        bad[20] ^= 1;
        assert!(matches!(
            BlockMeta::decode_header(&bad),
            Err(DecodeError::Checksum { .. })
        ));
        let mut v2 = p.clone();
        v2[8] = 2;
        let err = BlockMeta::decode_header(&v2).unwrap_err();
        assert!(
            err.to_string()
                .contains("format version 2 is not supported"),
            "{err}"
        );
        for cut in 0..p.len() {
            assert!(BlockMeta::decode_header(&p[..cut]).is_err());
        }
        for cut in 0..out.len() {
            assert!(decode_meta_frame("t", &out[..cut]).is_err());
        }
    }

    #[test]
    fn footer_round_trip() {
        let mut a = meta();
        a.new_interfaces.clear();
        a.frame_offset = 77;
        a.index = 0; // footer entries are indexed by their position
        let f = Footer {
            packets: 2,
            wire_bytes: 3000,
            first_ns: 10,
            last_ns: 20,
            blocks: vec![a],
            interfaces: vec![
                Interface {
                    linktype: 1,
                    snaplen: 0,
                    name: None,
                    options: Default::default(),
                },
                Interface {
                    linktype: 101,
                    snaplen: 9000,
                    name: Some("vlan.100".into()),
                    options: Default::default(),
                },
            ],
        };
        let mut out = vec![1, 2, 3];
        f.encode(&mut out);
        let n = Footer::frame_len_from_trailer(&out[out.len() - TRAILER_LEN..]).unwrap();
        assert_eq!(n, out.len() - 3);
        let p = decode_meta_frame("t", &out[out.len() - n..]).unwrap();
        assert_eq!(Footer::decode(&p).unwrap(), f);
    }

    #[test]
    fn compression_is_recorded_in_header_and_footer_and_read_back() {
        for c in [
            Compression::Stored,
            Compression::Zstd(-1000),
            Compression::Zstd(-10),
            Compression::Zstd(0),
            Compression::Zstd(1),
            Compression::Zstd(19),
            Compression::Zstd(22),
        ] {
            assert_eq!(Compression::from_code(c.code()), c);
            assert_ne!(c.code(), 0, "{c} encodes as not recorded");
            let m = BlockMeta {
                compression: c,
                ..meta()
            };
            let mut out = Vec::new();
            m.encode_header(&mut out);
            let p = decode_meta_frame("t", &out).unwrap();
            assert_eq!(u16::from_le_bytes([p[58], p[59]]), c.code());
            assert_eq!(BlockMeta::decode_header(&p).unwrap().compression, c);
            let mut entry = m.clone();
            entry.new_interfaces.clear();
            entry.index = 0;
            let f = Footer {
                blocks: vec![entry],
                ..Footer::default()
            };
            let mut out = Vec::new();
            f.encode(&mut out);
            let n = Footer::frame_len_from_trailer(&out[out.len() - TRAILER_LEN..]).unwrap();
            let back = Footer::decode(&decode_meta_frame("t", &out[out.len() - n..]).unwrap());
            assert_eq!(back.unwrap().blocks[0].compression, c);
        }
        assert!(matches!(
            Compression::from_code(0x7000),
            Compression::Unknown(0x7000)
        ));
    }

    /// A block header and footer as the first layout wrote them: bytes 58..60 of the header
    /// zero, footer flags zero and 48-byte block entries.
    #[test]
    fn headers_and_footers_of_the_first_layout_read_as_not_recorded() {
        let mut m = meta();
        m.compression = Compression::Zstd(3);
        let mut out = Vec::new();
        m.encode_header(&mut out);
        let mut p = decode_meta_frame("t", &out).unwrap();
        p[58..60].copy_from_slice(&[0, 0]);
        let n = p.len();
        let crc = crate::crc::crc32c(&p[..n - 4]);
        p[n - 4..].copy_from_slice(&crc.to_le_bytes());
        let old = BlockMeta::decode_header(&p).unwrap();
        assert_eq!(old.compression, Compression::NotRecorded);
        assert_eq!(
            old,
            BlockMeta {
                compression: Compression::NotRecorded,
                ..m.clone()
            }
        );
        // Footer, first layout, built byte by byte as docs/format.md describes it.
        let mut body = Vec::new();
        body.extend_from_slice(&FOOTER_MAGIC);
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes()); // flags: none
        body.extend_from_slice(&1u32.to_le_bytes()); // blocks
        body.extend_from_slice(&0u32.to_le_bytes()); // interfaces
        body.extend_from_slice(&0u32.to_le_bytes());
        for v in [2u64, 3000, 10, 20] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(&77u64.to_le_bytes());
        body.extend_from_slice(&10u64.to_le_bytes());
        body.extend_from_slice(&20u64.to_le_bytes());
        for v in [2u32, 100, 400, 0xdead_beef] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(&3000u64.to_le_bytes());
        assert_eq!(body.len(), FOOTER_FIXED_LEN + FOOTER_ENTRY_LEN_V1);
        let crc = crate::crc::crc32c(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&TRAILER_MAGIC);
        let f = Footer::decode(&body).unwrap();
        assert_eq!(f.blocks.len(), 1);
        let b = &f.blocks[0];
        assert_eq!(
            (b.frame_offset, b.compressed_len, b.wire_bytes),
            (77, 100, 3000)
        );
        assert_eq!(b.compression, Compression::NotRecorded);
        // An unknown flag is refused, not misread.
        let mut bad = body.clone();
        bad[10] = 2;
        let n = bad.len() - 16;
        let crc = crate::crc::crc32c(&bad[..n]);
        bad[n..n + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(Footer::decode(&bad).is_err());
    }

    #[test]
    fn segment_header_round_trip() {
        let h = SegmentHeader {
            seq: 42,
            created_ns: 1_700_000_000_000_000_000,
        };
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out.len(), meta_frame_len(SEGMENT_HEADER_LEN));
        assert_eq!(
            SegmentHeader::decode(&decode_meta_frame("t", &out).unwrap()).unwrap(),
            h
        );
    }

    #[test]
    fn raw_frames_are_zstd_frames_of_their_content() {
        for n in [0, 1, 131_071, 131_072, 131_073, 1 << 20, 1_300_001] {
            let content: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            let mut frame = vec![0xEE]; // appends, keeping what was there
            put_raw_frame(&mut frame, &content);
            assert_eq!(frame[0], 0xEE);
            assert_eq!(frame.len() - 1, raw_frame_len(n), "{n} bytes");
            assert_eq!(
                zstd::zstd_safe::find_frame_compressed_size(&frame[1..]),
                Ok(frame.len() - 1)
            );
            assert_eq!(zstd::bulk::decompress(&frame[1..], n).unwrap(), content);
        }
    }

    #[test]
    fn a_frame_of_uneven_raw_blocks_after_empty_ones_is_a_zstd_frame_of_its_content() {
        let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let cuts = [0, 1000, 131_072 + 1000, 200_000, 300_000];
        for empty in 0..4 {
            let mut frame = Vec::new();
            put_raw_frame_head(&mut frame, content.len(), empty);
            let body_at = frame.len();
            for w in cuts.windows(2) {
                let last = w[1] == content.len();
                frame.extend_from_slice(&raw_block_header(w[1] - w[0], last));
                frame.extend_from_slice(&content[w[0]..w[1]]);
            }
            assert_eq!(frame.len(), 9 + 3 * empty + 3 * 4 + content.len());
            let plain = zstd::bulk::decompress(&frame, content.len()).unwrap();
            assert_eq!(plain, content, "{empty} empty blocks");
            assert_eq!(zstd::stream::decode_all(&frame[..]).unwrap(), content);
            let pieces: Vec<&[u8]> = raw_blocks(&frame[body_at..]).collect();
            assert_eq!(pieces.len(), 4);
            assert_eq!(pieces.concat(), content);
            // The empty blocks are walked over, too.
            let all: Vec<&[u8]> = raw_blocks(&frame[9..]).collect();
            assert_eq!(all.concat(), content);
        }
    }

    #[test]
    fn raw_frame_parts_around_the_content_are_the_raw_frame() {
        let mut heads = vec![0xEE]; // cleared first
        for n in [0, 1, 131_071, 131_072, 131_073, 1 << 20, 1_300_001] {
            let content: Vec<u8> = (0..n).map(|i| (i * 13 % 251) as u8).collect();
            raw_frame_heads(n, &mut heads);
            let parts = raw_frame_parts(&content, &heads);
            let joined: Vec<u8> = parts.concat();
            let mut frame = Vec::new();
            put_raw_frame(&mut frame, &content);
            assert_eq!(joined, frame, "{n} bytes");
            // The content is borrowed, not copied.
            let range = content.as_ptr_range();
            let borrowed: usize = parts
                .iter()
                .filter(|p| range.contains(&p.as_ptr()))
                .map(|p| p.len())
                .sum();
            assert_eq!(borrowed, n);
        }
    }

    #[test]
    fn big_metadata_spans_several_raw_blocks() {
        let payload: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        put_meta_frame(&mut out, &payload);
        assert_eq!(out.len(), meta_frame_len(payload.len()));
        assert_eq!(decode_meta_frame("t", &out).unwrap(), payload);
        let plain = zstd::stream::decode_all(&out[..]).unwrap();
        assert_eq!(&plain[8..plain.len() - 4], &payload[..]);
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = BlockMeta::decode_header(&bytes);
            let _ = Footer::decode(&bytes);
            let _ = SegmentHeader::decode(&bytes);
            let _ = Footer::frame_len_from_trailer(&bytes);
            let _ = decode_meta_frame("t", &bytes);
        }
    }
}
