//! pcapng options kept as capsule carries them: a run of little-endian options (code, length,
//! value, padding to 4) without the closing `opt_endofopt`, as read from an Enhanced Packet
//! Block (packet comments, `epb_flags`, `epb_dropcount`, ...), an Interface Description Block
//! (`if_description`, `if_filter`, `if_os`, ...) or a Section Header Block (section comments,
//! `shb_hardware`, `shb_os`).
//!
//! The reader turns the options of any section, little- or big-endian, into this form
//! ([`keep`]); the store writes them back verbatim, and export copies them into the blocks
//! it writes. Options whose value the reader cannot put into little-endian order (an unknown
//! code in a big-endian section) are left out and counted.

use capsule_wire::view::{Endian, Reader};

/// `opt_comment`, in every block type.
pub const OPT_COMMENT: u16 = 1;
/// `if_description`.
pub const OPT_IF_DESCRIPTION: u16 = 3;
/// `if_filter`.
pub const OPT_IF_FILTER: u16 = 11;
/// `if_os`.
pub const OPT_IF_OS: u16 = 12;
/// `if_hardware`.
pub const OPT_IF_HARDWARE: u16 = 15;
/// `epb_flags`.
pub const OPT_EPB_FLAGS: u16 = 2;
/// `epb_dropcount`.
pub const OPT_EPB_DROPCOUNT: u16 = 4;
/// `shb_userappl`.
pub const OPT_SHB_USERAPPL: u16 = 4;

/// The custom option codes (copyable and not, UTF-8 and binary): a 4-byte Private Enterprise
/// Number in the block's byte order, then data.
const CUSTOM: [u16; 4] = [2988, 2989, 19372, 19373];

/// Most bytes of kept options per interface description or section; beyond it, whole options
/// are left out (and counted), so an interface always fits in a block header.
pub const MAX_KEPT: usize = 16 << 10;

/// Which block the options belong to: it decides which codes hold numbers (to be put in
/// little-endian order) and which the reader uses itself (and so does not keep).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionsOf {
    /// Enhanced Packet Block (and the obsolete Packet Block).
    Packet,
    /// Interface Description Block: `if_name`, `if_tsresol` and `if_tsoffset` are not kept
    /// (capsule writes its own name option and nanosecond timestamps).
    Interface,
    /// Section Header Block.
    Section,
}

/// How a value of option `code` in block `of` is laid out: `Some(n)` for an n-byte number,
/// `Some(0)` for bytes or text, `None` when the code is unknown (or not kept).
fn layout(of: OptionsOf, code: u16) -> Option<usize> {
    if code == OPT_COMMENT {
        return Some(0);
    }
    match of {
        OptionsOf::Packet => match code {
            2 | 6 => Some(4), // epb_flags, epb_queue
            4 | 5 => Some(8), // epb_dropcount, epb_packetid
            3 | 7 => Some(0), // epb_hash, epb_verdict
            _ => None,
        },
        OptionsOf::Interface => match code {
            // if_name, if_tsresol, if_tsoffset (2, 9, 14) never get here: `keep` drops them.
            3 | 11 | 12 | 15 => Some(0), // description, filter, os, hardware
            4..=7 | 13 => Some(0),       // addresses (network order), if_fcslen
            8 | 16 | 17 => Some(8),      // if_speed, if_txspeed, if_rxspeed
            10 => Some(4),               // if_tzone
            _ => None,
        },
        OptionsOf::Section => match code {
            2..=4 => Some(0), // shb_hardware, shb_os, shb_userappl
            _ => None,
        },
    }
}

/// What [`keep`] made of a block's options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// The options kept, little-endian, without `opt_endofopt`.
    pub bytes: Vec<u8>,
    /// Codes of the options left out: unknown codes in a big-endian section, options past
    /// [`MAX_KEPT`], or a value of the wrong length for its code.
    pub left_out: Vec<u16>,
}

/// Puts the options `opts` of a block of kind `of`, in byte order `order`, into capsule's
/// form (see the module docs). Stops at `opt_endofopt` or at an option that runs past the
/// end (whose bytes are not kept). Appends to `out` so that callers can reuse a buffer.
pub fn keep(opts: &[u8], order: Endian, of: OptionsOf, out: &mut Kept) {
    let mut r = Reader::new(opts);
    while let Ok(head) = r.view::<4>() {
        let code = head.u16_in::<0>(order);
        let len = usize::from(head.u16_in::<2>(order));
        if code == 0 {
            break;
        }
        let (Ok(value), Ok(())) = (r.take(len), r.skip(len.wrapping_neg() & 3)) else {
            out.left_out.push(code);
            break;
        };
        if of == OptionsOf::Interface && matches!(code, 2 | 9 | 14) {
            continue;
        }
        let fits = out.bytes.len() + 4 + len + (len.wrapping_neg() & 3) <= MAX_KEPT;
        let custom = CUSTOM.contains(&code) && len >= 4;
        let shape = if custom { Some(0) } else { layout(of, code) };
        let ok = match shape {
            _ if !fits => false,
            Some(0) => true,
            Some(n) => n == len,
            None => order == Endian::Little,
        };
        if !ok {
            out.left_out.push(code);
            continue;
        }
        let start = out.bytes.len();
        put(&mut out.bytes, code, value);
        let v = start + 4;
        if order == Endian::Big {
            match shape {
                Some(n @ (4 | 8)) => out.bytes[v..v + n].reverse(),
                _ if custom => out.bytes[v..v + 4].reverse(),
                _ => {}
            }
        }
    }
}

/// Appends one little-endian option; a value past 65,535 bytes is cut.
pub fn put(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    let value = value.get(..usize::from(u16::MAX)).unwrap_or(value);
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(value.len() as u16).to_le_bytes());
    out.extend_from_slice(value);
    out.extend_from_slice(&[0u8; 3][..value.len().wrapping_neg() & 3]);
}

/// The options of a run in capsule's form, in order: `(code, value)`. Stops at the end, at
/// `opt_endofopt` or at an option that runs past the end. Never panics.
pub fn iter(opts: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut r = Reader::new(opts);
    std::iter::from_fn(move || {
        let head = r.view::<4>().ok()?;
        let code = head.u16_le::<0>();
        let len = usize::from(head.u16_le::<2>());
        if code == 0 {
            return None;
        }
        let value = r.take(len).ok()?;
        let _ = r.skip(len.wrapping_neg() & 3);
        Some((code, value))
    })
}

/// The text of every option `code` of a run (comments, say), NULs and all after the first
/// NUL dropped, invalid UTF-8 replaced.
pub fn texts(opts: &[u8], code: u16) -> Vec<String> {
    iter(opts)
        .filter(|(c, _)| *c == code)
        .map(|(_, v)| {
            let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
            String::from_utf8_lossy(&v[..end]).into_owned()
        })
        .collect()
}

/// The run without its options of code `code`.
pub fn without(opts: &[u8], code: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(opts.len());
    for (c, v) in iter(opts).filter(|(c, _)| *c != code) {
        put(&mut out, c, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be_opt(out: &mut Vec<u8>, code: u16, value: &[u8]) {
        out.extend_from_slice(&code.to_be_bytes());
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
        out.extend_from_slice(value);
        out.extend_from_slice(&[0u8; 3][..value.len().wrapping_neg() & 3]);
    }

    #[test]
    fn big_endian_packet_options_come_out_little_endian_and_unknown_ones_are_named() {
        let mut opts = Vec::new();
        be_opt(&mut opts, OPT_COMMENT, b"retransmitted?");
        be_opt(&mut opts, OPT_EPB_FLAGS, &1u32.to_be_bytes());
        be_opt(&mut opts, OPT_EPB_DROPCOUNT, &7u64.to_be_bytes());
        be_opt(&mut opts, 2989, &[0, 0, 0x7e, 0x57, 1, 2]);
        be_opt(&mut opts, 99, &[1, 2, 3, 4]);
        be_opt(&mut opts, 0, &[]);
        let mut kept = Kept::default();
        keep(&opts, Endian::Big, OptionsOf::Packet, &mut kept);
        let got: Vec<(u16, Vec<u8>)> = iter(&kept.bytes).map(|(c, v)| (c, v.to_vec())).collect();
        assert_eq!(
            got,
            vec![
                (OPT_COMMENT, b"retransmitted?".to_vec()),
                (OPT_EPB_FLAGS, 1u32.to_le_bytes().to_vec()),
                (OPT_EPB_DROPCOUNT, 7u64.to_le_bytes().to_vec()),
                (2989, vec![0x57, 0x7e, 0, 0, 1, 2]),
            ]
        );
        assert_eq!(kept.left_out, vec![99]);
        assert_eq!(texts(&kept.bytes, OPT_COMMENT), vec!["retransmitted?"]);
    }

    #[test]
    fn interface_options_drop_what_capsule_rewrites_and_respect_the_cap() {
        let mut opts = Vec::new();
        put(&mut opts, 2, b"eth0");
        put(&mut opts, OPT_IF_DESCRIPTION, b"uplink");
        put(&mut opts, 9, &[6]);
        put(&mut opts, OPT_IF_FILTER, b"\0tcp");
        put(&mut opts, OPT_COMMENT, &vec![b'x'; MAX_KEPT]);
        let mut kept = Kept::default();
        keep(&opts, Endian::Little, OptionsOf::Interface, &mut kept);
        assert_eq!(texts(&kept.bytes, OPT_IF_DESCRIPTION), vec!["uplink"]);
        assert_eq!(iter(&kept.bytes).count(), 2);
        assert_eq!(kept.left_out, vec![OPT_COMMENT]);
        assert_eq!(iter(&without(&kept.bytes, OPT_IF_FILTER)).count(), 1);
    }

    #[test]
    fn a_cut_option_run_never_panics() {
        let mut opts = Vec::new();
        put(&mut opts, OPT_COMMENT, b"hello");
        for end in 0..opts.len() {
            let mut kept = Kept::default();
            keep(&opts[..end], Endian::Little, OptionsOf::Packet, &mut kept);
            let _ = iter(&opts[..end]).count();
        }
    }
}
