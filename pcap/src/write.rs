//! Encoders that append pcap and pcapng records to a `Vec<u8>`.
//!
//! All output is little-endian (the byte order of every machine capsule runs on; readers of
//! both formats detect it from the magic number). pcapng interfaces are written with
//! `if_tsresol = 9` so timestamps keep their nanoseconds.
//!
//! None of the encoders allocate beyond growing the caller's buffer, and none of them panic.
//! Lengths are the caller's responsibility: a packet must be shorter than `u32::MAX - 35`
//! bytes (capsule never handles packets anywhere near that), and strings that do not fit in a
//! pcapng option (65,535 bytes) are cut at the last character boundary that fits.

use crate::{Interface, LinkType};

/// Magic number of a nanosecond-resolution classic pcap file.
pub const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Magic number of a microsecond-resolution classic pcap file.
pub const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;

/// pcapng Section Header Block type (a byte palindrome, the same in both byte orders).
pub(crate) const BLOCK_SHB: u32 = 0x0a0d_0d0a;
/// pcapng Interface Description Block type.
pub(crate) const BLOCK_IDB: u32 = 1;
/// Obsolete pcapng Packet Block type.
pub(crate) const BLOCK_PB: u32 = 2;
/// pcapng Simple Packet Block type.
pub(crate) const BLOCK_SPB: u32 = 3;
/// pcapng Interface Statistics Block type.
pub(crate) const BLOCK_ISB: u32 = 5;
/// pcapng Enhanced Packet Block type.
pub(crate) const BLOCK_EPB: u32 = 6;
/// capsule's *cut packet* block (local use: most significant bit set, so pcapng readers
/// skip it): the headers of a packet the per-class cut-off did not store, laid out like an
/// EPB, so the side index counts what was seen (docs/format.md, "Block frame").
pub const BLOCK_CUT: u32 = 0x8000_0CA6;
/// pcapng byte-order magic, as written in the Section Header Block.
pub(crate) const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// `opt_endofopt`.
const OPT_ENDOFOPT: u16 = 0;
/// `opt_comment`.
const OPT_COMMENT: u16 = 1;
/// `shb_userappl`.
const OPT_SHB_USERAPPL: u16 = 4;
/// `if_name`.
pub(crate) const OPT_IF_NAME: u16 = 2;
/// `if_tsresol`.
pub(crate) const OPT_IF_TSRESOL: u16 = 9;
/// `if_tsoffset`.
pub(crate) const OPT_IF_TSOFFSET: u16 = 14;
/// `isb_ifrecv`.
pub(crate) const OPT_ISB_IFRECV: u16 = 4;
/// `isb_ifdrop`.
pub(crate) const OPT_ISB_IFDROP: u16 = 5;

/// Appends a 24-byte classic pcap file header with nanosecond timestamps.
pub fn pcap_header(buf: &mut Vec<u8>, linktype: LinkType, snaplen: u32) {
    buf.extend_from_slice(&PCAP_MAGIC_NS.to_le_bytes());
    buf.extend_from_slice(&2u16.to_le_bytes());
    buf.extend_from_slice(&4u16.to_le_bytes());
    buf.extend_from_slice(&0i32.to_le_bytes()); // thiszone
    buf.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    buf.extend_from_slice(&snaplen.to_le_bytes());
    buf.extend_from_slice(&u32::from(linktype).to_le_bytes());
}

/// Appends one classic pcap record (16-byte header + data) with a nanosecond timestamp.
///
/// The caller guarantees `data.len() <= u32::MAX`; `orig_len` is raised to the captured
/// length if it is smaller, since Wireshark rejects records whose `len < caplen`.
pub fn pcap_record(buf: &mut Vec<u8>, ts_ns: u64, orig_len: u32, data: &[u8]) {
    let caplen = data.len() as u32;
    let secs = (ts_ns / 1_000_000_000) as u32;
    let nanos = (ts_ns % 1_000_000_000) as u32;
    buf.reserve(16 + data.len());
    buf.extend_from_slice(&secs.to_le_bytes());
    buf.extend_from_slice(&nanos.to_le_bytes());
    buf.extend_from_slice(&caplen.to_le_bytes());
    buf.extend_from_slice(&orig_len.max(caplen).to_le_bytes());
    buf.extend_from_slice(data);
}

/// Number of zero bytes that pad `len` bytes up to a multiple of 4.
const fn pad4(len: usize) -> usize {
    len.wrapping_neg() & 3
}

/// Four zero bytes, the source of all padding.
const ZEROS: [u8; 4] = [0; 4];

/// Total encoded size, in bytes, of an Enhanced Packet Block without options that carries
/// `caplen` captured bytes: 28 bytes of header, the data padded to 4 bytes, 4 bytes of
/// trailing length. Saturates at `usize::MAX` instead of overflowing.
pub const fn pcapng_epb_len(caplen: usize) -> usize {
    caplen.saturating_add(pad4(caplen)).saturating_add(32)
}

/// Cuts `s` to at most 65,535 bytes (the most a pcapng option holds) at a character boundary.
fn option_str(s: &str) -> &[u8] {
    let mut end = s.len().min(usize::from(u16::MAX));
    while !s.is_char_boundary(end) {
        end -= 1; // `is_char_boundary(0)` is true, so this stops before 0
    }
    s.as_bytes().get(..end).unwrap_or_default()
}

/// Encoded size of one option whose value is `len` bytes long (`len <= 65535`).
const fn option_len(len: usize) -> usize {
    4 + len + pad4(len)
}

/// Appends one pcapng option. `value` is at most 65,535 bytes long (callers cut it).
fn put_option(buf: &mut Vec<u8>, code: u16, value: &[u8]) {
    let len = value.len().min(usize::from(u16::MAX)) as u16;
    buf.extend_from_slice(&code.to_le_bytes());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(value);
    buf.extend_from_slice(&ZEROS[..pad4(value.len())]);
}

/// Appends `opt_endofopt`.
fn put_endofopt(buf: &mut Vec<u8>) {
    buf.extend_from_slice(&OPT_ENDOFOPT.to_le_bytes());
    buf.extend_from_slice(&0u16.to_le_bytes());
}

/// Appends a pcapng Section Header Block: byte-order magic, version 1.0, section length -1
/// (unknown), and `shb_userappl` when given.
///
/// The options list (and its `opt_endofopt`) is written only when there is an option, as the
/// pcapng specification allows.
pub fn pcapng_shb(buf: &mut Vec<u8>, shb_userappl: Option<&str>) {
    shb_with(buf, shb_userappl.map(|a| (OPT_SHB_USERAPPL, option_str(a))));
}

/// Appends a pcapng Section Header Block that opens an empty section whose `opt_comment` is
/// `note`: how a finished file says something about itself at its end (an export that
/// learned only while writing that it is partial). Readers see a second section with no
/// interfaces and no packets; `capinfos` and Wireshark's capture-file properties show the
/// comment. Exactly [`pcapng_section_note_len`]`(note.len())` bytes are appended (a note
/// past 65,535 bytes is cut at a character boundary).
pub fn pcapng_section_note(buf: &mut Vec<u8>, note: &str) {
    shb_with(buf, Some((OPT_COMMENT, option_str(note))));
}

/// Encoded size of [`pcapng_section_note`] for a note of `len` bytes.
pub const fn pcapng_section_note_len(len: usize) -> usize {
    let len = if len > u16::MAX as usize {
        u16::MAX as usize
    } else {
        len
    };
    28 + option_len(len) + 4
}

/// Appends a Section Header Block like [`pcapng_shb`] that also carries `kept`: options of
/// the sections the file's interfaces came from (in the form of [`crate::options`]: section
/// comments, `shb_hardware`, `shb_os`), copied as they are after `shb_userappl`.
pub fn pcapng_shb_with(buf: &mut Vec<u8>, shb_userappl: &str, kept: &[u8]) {
    if kept.is_empty() {
        return pcapng_shb(buf, Some(shb_userappl));
    }
    let start = buf.len();
    shb_with(buf, Some((OPT_SHB_USERAPPL, option_str(shb_userappl))));
    buf.truncate(buf.len() - 8); // opt_endofopt and the trailing length, written again
    buf.extend_from_slice(kept);
    put_endofopt(buf);
    let total = (buf.len() + 4 - start) as u32;
    buf.extend_from_slice(&total.to_le_bytes());
    if let Some(len) = buf.get_mut(start + 4..start + 8) {
        len.copy_from_slice(&total.to_le_bytes());
    }
}

/// An SHB with at most one option (and then its `opt_endofopt`).
fn shb_with(buf: &mut Vec<u8>, opt: Option<(u16, &[u8])>) {
    let opts = match opt {
        Some((_, v)) => option_len(v.len()) + 4,
        None => 0,
    };
    let total = (28 + opts) as u32;
    buf.reserve(28 + opts);
    buf.extend_from_slice(&BLOCK_SHB.to_le_bytes());
    buf.extend_from_slice(&total.to_le_bytes());
    buf.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
    buf.extend_from_slice(&1u16.to_le_bytes()); // major version
    buf.extend_from_slice(&0u16.to_le_bytes()); // minor version
    buf.extend_from_slice(&(-1i64).to_le_bytes()); // section length: unknown
    if let Some((code, v)) = opt {
        put_option(buf, code, v);
        put_endofopt(buf);
    }
    buf.extend_from_slice(&total.to_le_bytes());
}

/// Appends a pcapng Interface Description Block for `iface`: link type, snaplen, `if_name`
/// when the interface has a name, the options it keeps ([`crate::InterfaceOptions::idb`],
/// copied as they are), and always `if_tsresol = 9` (nanoseconds), which is what
/// [`pcapng_epb`] and [`pcapng_isb`] timestamps are in.
pub fn pcapng_idb(buf: &mut Vec<u8>, iface: &Interface) {
    let name = iface.name.as_deref().map(option_str);
    let name_len = name.map_or(0, |n| option_len(n.len()));
    let kept = &iface.options.idb;
    // header 16 + if_name + kept options + if_tsresol (8) + opt_endofopt (4) + trailing length 4
    let size = 16 + name_len + kept.len() + 8 + 4 + 4;
    let total = size as u32;
    buf.reserve(size);
    buf.extend_from_slice(&BLOCK_IDB.to_le_bytes());
    buf.extend_from_slice(&total.to_le_bytes());
    buf.extend_from_slice(&iface.linktype.to_le_bytes());
    buf.extend_from_slice(&0u16.to_le_bytes()); // reserved
    buf.extend_from_slice(&iface.snaplen.to_le_bytes());
    if let Some(n) = name {
        put_option(buf, OPT_IF_NAME, n);
    }
    buf.extend_from_slice(kept);
    put_option(buf, OPT_IF_TSRESOL, &[9]);
    put_endofopt(buf);
    buf.extend_from_slice(&total.to_le_bytes());
}

/// Appends a pcapng Enhanced Packet Block without options.
///
/// `ts_ns` is written in nanosecond units (the interface must have been described with
/// [`pcapng_idb`], which declares `if_tsresol = 9`). The captured length is `data.len()`;
/// `orig_len` is raised to it when smaller, since Wireshark rejects `len < caplen`. The caller
/// guarantees `data.len() < u32::MAX - 35`. Exactly [`pcapng_epb_len`]`(data.len())` bytes are
/// appended, with a single `reserve`.
#[inline]
pub fn pcapng_epb(buf: &mut Vec<u8>, iface_id: u32, ts_ns: u64, orig_len: u32, data: &[u8]) {
    epb_shaped(buf, BLOCK_EPB, iface_id, ts_ns, orig_len, data);
}

/// Total encoded size of an Enhanced Packet Block carrying `caplen` captured bytes and
/// `options` bytes of options (in the form of [`crate::options`]; their `opt_endofopt` is
/// added when there are any).
pub const fn pcapng_epb_len_with(caplen: usize, options: usize) -> usize {
    let opts = if options == 0 { 0 } else { options + 4 };
    pcapng_epb_len(caplen).saturating_add(opts)
}

/// Appends an Enhanced Packet Block like [`pcapng_epb`], with the packet's `options` (in the
/// form of [`crate::options`]: comments, `epb_flags`, ...) copied after its data and closed
/// by `opt_endofopt`. Without options it is [`pcapng_epb`]. Exactly
/// [`pcapng_epb_len_with`]`(data.len(), options.len())` bytes are appended.
pub fn pcapng_epb_with(
    buf: &mut Vec<u8>,
    iface_id: u32,
    ts_ns: u64,
    orig_len: u32,
    data: &[u8],
    options: &[u8],
) {
    if options.is_empty() {
        return pcapng_epb(buf, iface_id, ts_ns, orig_len, data);
    }
    let start = buf.len();
    let total = pcapng_epb_len_with(data.len(), options.len()) as u32;
    epb_shaped(buf, BLOCK_EPB, iface_id, ts_ns, orig_len, data);
    buf.truncate(buf.len() - 4); // the trailing length, written again after the options
    buf.extend_from_slice(options);
    put_endofopt(buf);
    buf.extend_from_slice(&total.to_le_bytes());
    if let Some(len) = buf.get_mut(start + 4..start + 8) {
        len.copy_from_slice(&total.to_le_bytes());
    }
}

/// Appends a capsule cut-packet block ([`BLOCK_CUT`]): an EPB's layout under a local-use
/// block type, holding `data` (the headers kept of a packet the cut-off did not store) and
/// the packet's `orig_len`. pcapng readers and the store's packet walker skip it; its
/// record walker (`fragment_records`) yields it. Exactly [`pcapng_epb_len`]`(data.len())`
/// bytes are appended.
#[inline]
pub fn pcapng_cut(buf: &mut Vec<u8>, iface_id: u32, ts_ns: u64, orig_len: u32, data: &[u8]) {
    epb_shaped(buf, BLOCK_CUT, iface_id, ts_ns, orig_len, data);
}

#[inline]
fn epb_shaped(
    buf: &mut Vec<u8>,
    block_type: u32,
    iface_id: u32,
    ts_ns: u64,
    orig_len: u32,
    data: &[u8],
) {
    let caplen = data.len();
    debug_assert!(
        caplen < (u32::MAX - 35) as usize,
        "packet too long for pcapng"
    );
    let size = pcapng_epb_len(caplen);
    let total = size as u32;
    let cap32 = caplen as u32;
    let header: [[u8; 4]; 7] = [
        block_type.to_le_bytes(),
        total.to_le_bytes(),
        iface_id.to_le_bytes(),
        ((ts_ns >> 32) as u32).to_le_bytes(),
        (ts_ns as u32).to_le_bytes(),
        cap32.to_le_bytes(),
        orig_len.max(cap32).to_le_bytes(),
    ];
    buf.reserve(size);
    buf.extend_from_slice(header.as_flattened());
    buf.extend_from_slice(data);
    buf.extend_from_slice(&ZEROS[..pad4(caplen)]);
    buf.extend_from_slice(&total.to_le_bytes());
}

/// Appends a pcapng Interface Statistics Block for interface `iface_id` at `ts_ns`
/// (nanosecond units, as declared by [`pcapng_idb`]), with `isb_ifrecv` and `isb_ifdrop`
/// options for the counters that are given.
pub fn pcapng_isb(
    buf: &mut Vec<u8>,
    iface_id: u32,
    ts_ns: u64,
    received: Option<u64>,
    dropped: Option<u64>,
) {
    let count = usize::from(received.is_some()) + usize::from(dropped.is_some());
    let opts = if count == 0 { 0 } else { count * 12 + 4 };
    let size = 24 + opts;
    let total = size as u32;
    buf.reserve(size);
    buf.extend_from_slice(&BLOCK_ISB.to_le_bytes());
    buf.extend_from_slice(&total.to_le_bytes());
    buf.extend_from_slice(&iface_id.to_le_bytes());
    buf.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
    buf.extend_from_slice(&(ts_ns as u32).to_le_bytes());
    if let Some(r) = received {
        put_option(buf, OPT_ISB_IFRECV, &r.to_le_bytes());
    }
    if let Some(d) = dropped {
        put_option(buf, OPT_ISB_IFDROP, &d.to_le_bytes());
    }
    if count != 0 {
        put_endofopt(buf);
    }
    buf.extend_from_slice(&total.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_header_bytes() {
        let mut buf = Vec::new();
        pcap_header(&mut buf, 1, 65535);
        assert_eq!(
            buf,
            [
                0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0,
                0, 0
            ]
        );
    }

    #[test]
    fn a_section_note_is_an_empty_section_with_a_comment_that_readers_step_over() {
        let mut buf = Vec::new();
        pcapng_shb(&mut buf, None);
        let eth = Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        };
        pcapng_idb(&mut buf, &eth);
        pcapng_epb(&mut buf, 0, 5, 3, &[1, 2, 3]);
        let before = buf.len();
        pcapng_section_note(&mut buf, "partial: é");
        assert_eq!(
            buf.len() - before,
            pcapng_section_note_len("partial: é".len())
        );
        #[rustfmt::skip]
        let note: [u8; 48] = [
            0x0a, 0x0d, 0x0d, 0x0a, 48, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            1, 0, 11, 0, b'p', b'a', b'r', b't', b'i', b'a', b'l', b':', b' ', 0xc3, 0xa9, 0,
            0, 0, 0, 0, // opt_endofopt
            48, 0, 0, 0,
        ];
        assert_eq!(&buf[before..], &note);
        // The reader yields the one packet and ends cleanly after the empty section.
        let mut r = crate::CaptureReader::new("t", &buf[..]).unwrap();
        let mut packets = 0;
        while let Some(rec) = r.next_record().unwrap() {
            packets += usize::from(matches!(rec, crate::Record::Packet(_)));
        }
        assert_eq!(packets, 1);
    }

    #[test]
    fn pcap_record_bytes() {
        let mut buf = Vec::new();
        // 1.5 s, orig_len 2 raised to caplen 3
        pcap_record(&mut buf, 1_500_000_000, 2, &[0xaa, 0xbb, 0xcc]);
        assert_eq!(
            buf,
            [1, 0, 0, 0, 0x00, 0x65, 0xcd, 0x1d, 3, 0, 0, 0, 3, 0, 0, 0, 0xaa, 0xbb, 0xcc]
        );
    }

    #[test]
    fn epb_five_byte_packet() {
        let mut buf = vec![0xee]; // existing content is kept
        let ts = 0x0000_0001_2345_6789u64;
        pcapng_epb(&mut buf, 2, ts, 60, &[1, 2, 3, 4, 5]);
        #[rustfmt::skip]
        let expected: [u8; 41] = [
            0xee,
            6, 0, 0, 0,             // block type EPB
            40, 0, 0, 0,            // total length
            2, 0, 0, 0,             // interface id
            1, 0, 0, 0,             // timestamp high
            0x89, 0x67, 0x45, 0x23, // timestamp low
            5, 0, 0, 0,             // captured length
            60, 0, 0, 0,            // original length
            1, 2, 3, 4, 5, 0, 0, 0, // data + padding
            40, 0, 0, 0,            // total length
        ];
        assert_eq!(buf, expected);
        assert_eq!(pcapng_epb_len(5), 40);
    }

    #[test]
    fn epb_raises_orig_len_and_handles_aligned_and_empty_data() {
        let mut buf = Vec::new();
        pcapng_epb(&mut buf, 0, 7, 1, &[9, 9, 9, 9]);
        #[rustfmt::skip]
        let expected: [u8; 36] = [
            6, 0, 0, 0, 36, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0,
            4, 0, 0, 0, 4, 0, 0, 0, // orig_len 1 raised to 4
            9, 9, 9, 9,
            36, 0, 0, 0,
        ];
        assert_eq!(buf, expected);

        buf.clear();
        pcapng_epb(&mut buf, 0, 0, 0, &[]);
        assert_eq!(buf.len(), 32);
        assert_eq!(buf.len(), pcapng_epb_len(0));
        assert_eq!(&buf[4..8], &[32, 0, 0, 0]);
        assert_eq!(&buf[28..32], &[32, 0, 0, 0]);
    }

    #[test]
    fn epb_len_matches_encoder() {
        for caplen in 0..40 {
            let mut buf = Vec::new();
            pcapng_epb(&mut buf, 0, 0, 0, &vec![0u8; caplen]);
            assert_eq!(buf.len(), pcapng_epb_len(caplen), "caplen {caplen}");
            assert_eq!(buf.len() % 4, 0);
        }
        assert_eq!(pcapng_epb_len(usize::MAX), usize::MAX);
    }

    #[test]
    fn shb_bytes() {
        let mut buf = Vec::new();
        pcapng_shb(&mut buf, None);
        #[rustfmt::skip]
        let expected: [u8; 28] = [
            0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0,
            0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            28, 0, 0, 0,
        ];
        assert_eq!(buf, expected);

        buf.clear();
        pcapng_shb(&mut buf, Some("cap"));
        #[rustfmt::skip]
        let expected: [u8; 40] = [
            0x0a, 0x0d, 0x0d, 0x0a, 40, 0, 0, 0,
            0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            4, 0, 3, 0, b'c', b'a', b'p', 0, // shb_userappl
            0, 0, 0, 0,                      // opt_endofopt
            40, 0, 0, 0,
        ];
        assert_eq!(buf, expected);
    }

    #[test]
    fn idb_bytes() {
        let mut buf = Vec::new();
        let iface = Interface {
            linktype: 1,
            snaplen: 0x40000,
            name: Some("eth0".into()),
            options: Default::default(),
        };
        pcapng_idb(&mut buf, &iface);
        #[rustfmt::skip]
        let expected: [u8; 40] = [
            1, 0, 0, 0, 40, 0, 0, 0,
            1, 0, 0, 0,                         // linktype, reserved
            0, 0, 4, 0,                         // snaplen
            2, 0, 4, 0, b'e', b't', b'h', b'0', // if_name
            9, 0, 1, 0, 9, 0, 0, 0,             // if_tsresol = 9
            0, 0, 0, 0,                         // opt_endofopt
            40, 0, 0, 0,
        ];
        assert_eq!(buf, expected);

        buf.clear();
        pcapng_idb(
            &mut buf,
            &Interface {
                linktype: 101,
                snaplen: 0,
                name: None,
                options: Default::default(),
            },
        );
        #[rustfmt::skip]
        let expected: [u8; 32] = [
            1, 0, 0, 0, 32, 0, 0, 0,
            101, 0, 0, 0, 0, 0, 0, 0,
            9, 0, 1, 0, 9, 0, 0, 0,
            0, 0, 0, 0,
            32, 0, 0, 0,
        ];
        assert_eq!(buf, expected);
    }

    #[test]
    fn idb_long_name_is_cut_at_char_boundary() {
        let name = "é".repeat(40_000); // 80,000 bytes
        let mut buf = Vec::new();
        pcapng_idb(
            &mut buf,
            &Interface {
                linktype: 1,
                snaplen: 0,
                name: Some(name),
                options: Default::default(),
            },
        );
        assert_eq!(&buf[16..18], &[2, 0]);
        let len = u16::from_le_bytes([buf[18], buf[19]]);
        assert_eq!(len, 65534);
        assert_eq!(buf.len() % 4, 0);
        let total = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
        assert_eq!(total, buf.len());
    }

    #[test]
    fn isb_bytes() {
        let mut buf = Vec::new();
        pcapng_isb(
            &mut buf,
            1,
            0x0000_0002_0000_0003,
            Some(10),
            Some(0x1_0000_0000),
        );
        #[rustfmt::skip]
        let expected: [u8; 52] = [
            5, 0, 0, 0, 52, 0, 0, 0,
            1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0,
            4, 0, 8, 0, 10, 0, 0, 0, 0, 0, 0, 0, // isb_ifrecv
            5, 0, 8, 0, 0, 0, 0, 0, 1, 0, 0, 0,  // isb_ifdrop
            0, 0, 0, 0,
            52, 0, 0, 0,
        ];
        assert_eq!(buf, expected);

        buf.clear();
        pcapng_isb(&mut buf, 0, 0, None, None);
        #[rustfmt::skip]
        let expected: [u8; 24] = [
            5, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0,
        ];
        assert_eq!(buf, expected);

        buf.clear();
        pcapng_isb(&mut buf, 0, 0, None, Some(1));
        assert_eq!(buf.len(), 40);
        assert_eq!(&buf[20..24], &[5, 0, 8, 0]);
    }
}
