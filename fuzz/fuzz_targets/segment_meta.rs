//! The decoders of every metadata byte of a segment (`capsule_store::format`) over arbitrary
//! bytes: the first byte picks the decoder (its value mod 5), the rest is its input. When its
//! high bit is set the target first writes the right crc32c into the payload, so the
//! fuzzer reaches the checks behind the checksum.
//!
//! Properties: where there is an encoder, what decodes re-encodes to a canonical frame that
//! `decode_meta_frame` unwraps and the decoder reads back to the same value (unless an
//! interface name was not UTF-8: names are read lossily), and encoding that value again
//! gives the same bytes (encode . decode is a fixed point); the length
//! read from a frame's prefix is the length of the frame `decode_meta_frame` accepts.
#![no_main]

use capsule_store::format::{
    decode_meta_frame, meta_frame_len_from_prefix, BlockMeta, Footer, SegmentHeader, TRAILER_LEN,
};
use libfuzzer_sys::fuzz_target;

/// Unwraps the payload of a frame an encoder just made.
fn payload(frame: &[u8]) -> Vec<u8> {
    let len = meta_frame_len_from_prefix("fuzz", frame).expect("encoder made a bad prefix");
    assert_eq!(len, frame.len(), "prefix length of an encoded frame");
    decode_meta_frame("fuzz", frame).expect("encoder made a frame that does not decode")
}

/// Writes the crc32c of `p[..at]` at `at`, when it fits.
fn fix_crc(p: &mut [u8], at: Option<usize>) {
    if let Some(at) = at.filter(|&at| at + 4 <= p.len()) {
        let crc = capsule_store::crc::crc32c(&p[..at]);
        p[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Whether every interface name read back is the bytes that were stored: names are decoded
/// lossily, so a name that was not UTF-8 comes back with U+FFFD in it and cannot encode to
/// the bytes it came from (it still encodes to canonical bytes, a fixed point).
fn names_exact(ifaces: &[capsule_pcap::Interface]) -> bool {
    ifaces
        .iter()
        .all(|i| !i.name.as_deref().unwrap_or("").contains('\u{fffd}'))
}

fuzz_target!(|input: &[u8]| {
    let Some((&which, data)) = input.split_first() else {
        return;
    };
    let mut data = data.to_vec();
    if which & 0x80 != 0 {
        let at = match which % 5 {
            1 => Some(36),
            2 => data.len().checked_sub(4),
            3 => data.len().checked_sub(16),
            _ => None,
        };
        fix_crc(&mut data, at);
    }
    let data = &data[..];
    match which % 5 {
        0 => {
            if let Ok(p) = decode_meta_frame("fuzz", data) {
                let len = meta_frame_len_from_prefix("fuzz", data).expect("decoded without prefix");
                assert!(len <= data.len());
                assert!(p.len() + 12 <= len);
                // The payload of a frame is a whole pcapng block body: a multiple of 4.
                assert_eq!(p.len() % 4, 0);
            }
        }
        1 => {
            if let Ok(h) = SegmentHeader::decode(data) {
                let mut f = Vec::new();
                h.encode(&mut f);
                let h2 = SegmentHeader::decode(&payload(&f)).expect("re-encoded header");
                assert_eq!(h2, h);
                let mut f2 = Vec::new();
                h2.encode(&mut f2);
                assert_eq!(f2, f);
            }
        }
        2 => {
            if let Ok(m) = BlockMeta::decode_header(data) {
                let exact = names_exact(&m.new_interfaces);
                if exact {
                    // The header, then its zero padding (whole words, under a page).
                    assert_eq!(m.header_payload_len() + m.header_pad as usize, data.len());
                }
                let mut f = Vec::new();
                m.encode_header(&mut f);
                assert_eq!(f.len(), m.header_frame_len());
                let m2 = BlockMeta::decode_header(&payload(&f)).expect("re-encoded block header");
                if exact {
                    assert_eq!(m2, m);
                }
                let mut f2 = Vec::new();
                m2.encode_header(&mut f2);
                assert_eq!(f2, f);
            }
        }
        3 => {
            if let Ok(ft) = Footer::decode(data) {
                let mut f = Vec::new();
                ft.encode(&mut f);
                // The trailer at the end of the encoded footer gives the footer's length.
                let trailer = &f[f.len() - TRAILER_LEN..];
                assert_eq!(Footer::frame_len_from_trailer(trailer).ok(), Some(f.len()));
                let ft2 = Footer::decode(&payload(&f)).expect("re-encoded footer");
                if names_exact(&ft.interfaces) {
                    assert_eq!(ft2, ft);
                }
                let mut f2 = Vec::new();
                ft2.encode(&mut f2);
                assert_eq!(f2, f);
            }
        }
        _ => {
            let _ = Footer::frame_len_from_trailer(data).map_err(|e| e.to_string());
            let _ = meta_frame_len_from_prefix("fuzz", data).map_err(|e| e.to_string());
        }
    }
});
