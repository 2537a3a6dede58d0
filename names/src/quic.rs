//! The QUIC Initial's TLS ClientHello. A client's Initial packets are protected with keys
//! derived from public values only (RFC 9001 §5.2: a version's salt and the Destination
//! Connection ID of the client's first Initial), so any observer can remove the protection
//! and read their CRYPTO frames: the ClientHello, with its server name and ALPN.
//!
//! ```text
//! a client datagram -> each long-header Initial packet in it (v1, RFC 9000; v2, RFC 9369)
//!   keys: HKDF-Extract(salt, first DCID) -> "client in" -> "quic key" / "quic iv" / "quic hp"
//!   header protection off (AES-128-ECB mask of a 16-byte sample), packet number read
//!   payload opened (AES-128-GCM, nonce = iv ^ packet number, the header as AAD)
//!   frames: PADDING, PING, ACK, CRYPTO (offset, data) kept; anything else ends the packet
//! -> CRYPTO data joined by offset (at most crate::STREAM_CAP bytes) -> its contiguous start
//!    -> tls::handshake_message: the ClientHello (a JA4-style fingerprint starting `q`)
//! ```
//!
//! ring does the cryptography (HKDF-SHA256, AES-128-GCM, the QUIC header protection mask);
//! every length and offset is read through capsule-wire's checked [`Reader`]: no panic on
//! any input (cargo-fuzz target `names_quic`).

use capsule_wire::view::Reader;
use ring::{aead, hkdf};

use crate::tls::{self, Hello};

/// QUIC version 1's Initial salt (RFC 9001 §5.2).
const SALT_V1: [u8; 20] = [
    0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad,
    0xcc, 0xbb, 0x7f, 0x0a,
];
/// QUIC version 2's Initial salt (RFC 9369 §3.3.1).
const SALT_V2: [u8; 20] = [
    0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb,
    0xf9, 0xbd, 0x2e, 0xd9,
];
const V1: u32 = 1;
const V2: u32 = 0x6b33_43cf;

/// Long-header packets read from one datagram (they may be coalesced).
const MAX_PACKETS_PER_DATAGRAM: usize = 4;
/// CRYPTO frames kept per flow.
const MAX_CHUNKS: usize = 64;

/// One version's constants: the Initial salt, its labels and its Initial packet type.
struct Version {
    salt: &'static [u8; 20],
    key: &'static [u8],
    iv: &'static [u8],
    hp: &'static [u8],
    initial_type: u8,
}

fn version(v: u32) -> Option<Version> {
    match v {
        V1 => Some(Version {
            salt: &SALT_V1,
            key: b"quic key",
            iv: b"quic iv",
            hp: b"quic hp",
            initial_type: 0,
        }),
        V2 => Some(Version {
            salt: &SALT_V2,
            key: b"quicv2 key",
            iv: b"quicv2 iv",
            hp: b"quicv2 hp",
            initial_type: 1,
        }),
        _ => None,
    }
}

/// An output length for ring's HKDF.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context, `N` bytes.
fn expand_label<const N: usize>(prk: &hkdf::Prk, label: &[u8]) -> Option<[u8; N]> {
    let len = (N as u16).to_be_bytes();
    let label_len = [(6 + label.len()) as u8];
    let info: [&[u8]; 5] = [&len, &label_len, b"tls13 ", label, &[0]];
    let mut out = [0u8; N];
    prk.expand(&info, Len(N)).ok()?.fill(&mut out).ok()?;
    Some(out)
}

/// The client's Initial keys for a first Destination Connection ID.
struct Keys {
    aead: aead::LessSafeKey,
    iv: [u8; 12],
    hp: aead::quic::HeaderProtectionKey,
}

impl Keys {
    fn derive(v: &Version, dcid: &[u8]) -> Option<Keys> {
        let initial = hkdf::Salt::new(hkdf::HKDF_SHA256, v.salt).extract(dcid);
        let client: [u8; 32] = expand_label(&initial, b"client in")?;
        let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &client);
        let key: [u8; 16] = expand_label(&prk, v.key)?;
        let iv: [u8; 12] = expand_label(&prk, v.iv)?;
        let hp: [u8; 16] = expand_label(&prk, v.hp)?;
        Some(Keys {
            aead: aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &key).ok()?),
            iv,
            hp: aead::quic::HeaderProtectionKey::new(&aead::quic::AES_128, &hp).ok()?,
        })
    }
}

/// A QUIC variable-length integer (RFC 9000 §16).
fn varint(r: &mut Reader<'_>) -> Option<u64> {
    let first = r.u8().ok()?;
    let mut v = u64::from(first & 0x3f);
    for _ in 1..(1usize << (first >> 6)) {
        v = (v << 8) | u64::from(r.u8().ok()?);
    }
    Some(v)
}

/// The client's Initial packets of one flow, as they come: their CRYPTO data so far.
#[derive(Default)]
pub struct Initials {
    /// The version and Destination Connection ID of the client's first Initial (its keys'
    /// input), once one was seen.
    first: Option<(u32, Vec<u8>)>,
    keys: Option<Keys>,
    /// CRYPTO frames: (offset, data), at most [`MAX_CHUNKS`], bytes below `STREAM_CAP`,
    /// at most twice `STREAM_CAP` bytes in all (repeats included).
    chunks: Vec<(u64, Vec<u8>)>,
    kept: usize,
}

impl std::fmt::Debug for Initials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Initials")
            .field("first", &self.first)
            .field("chunks", &self.chunks.len())
            .finish_non_exhaustive()
    }
}

impl Clone for Initials {
    /// A copy without the derived keys (derived again from the first DCID when needed).
    fn clone(&self) -> Self {
        Initials {
            first: self.first.clone(),
            keys: None,
            chunks: self.chunks.clone(),
            kept: self.kept,
        }
    }
}

impl Initials {
    /// Reads the Initial packets of one client datagram, then what the CRYPTO data so far
    /// holds: the ClientHello ([`Hello::Client`]), not yet all of it ([`Hello::Incomplete`]),
    /// or not one ([`Hello::Not`]: no Initial could be read, or its data is no ClientHello).
    pub fn datagram(&mut self, d: &[u8]) -> Hello {
        let mut rest = d;
        let mut any = false;
        for _ in 0..MAX_PACKETS_PER_DATAGRAM {
            match self.packet(rest) {
                Some((read, len)) => {
                    any |= read;
                    rest = rest.get(len..).unwrap_or_default();
                }
                None => break,
            }
            if rest.is_empty() {
                break;
            }
        }
        if !any && self.chunks.is_empty() {
            return Hello::Not;
        }
        tls::handshake_message(&self.contiguous(), true)
    }

    /// Reads the frames of an Initial packet's plaintext, as [`Initials::datagram`] does
    /// once the protection is off, then what the CRYPTO data so far holds (so the frame
    /// parser can be fuzzed without forging AES-GCM tags).
    pub fn plaintext(&mut self, plain: &[u8]) -> Hello {
        self.frames(plain);
        tls::handshake_message(&self.contiguous(), true)
    }

    /// One long-header packet at the start of `d`: whether it was an Initial whose
    /// protection came off, and its length; `None` when `d` holds no long-header packet.
    fn packet(&mut self, d: &[u8]) -> Option<(bool, usize)> {
        let mut r = Reader::new(d);
        let first = r.u8().ok()?;
        if first & 0xc0 != 0xc0 {
            return None; // a short header, or not QUIC
        }
        let ver = r.u32_be().ok()?;
        let dcid_len = usize::from(r.u8().ok()?);
        if dcid_len > 20 {
            return None;
        }
        let dcid = r.take(dcid_len).ok()?;
        let scid_len = usize::from(r.u8().ok()?);
        if scid_len > 20 {
            return None;
        }
        r.skip(scid_len).ok()?;
        let v = version(ver)?;
        let initial = (first >> 4) & 3 == v.initial_type;
        if initial {
            let token = varint(&mut r)?;
            r.skip(usize::try_from(token).ok()?).ok()?;
        }
        let length = usize::try_from(varint(&mut r)?).ok()?;
        let pn_at = r.position();
        let end = pn_at.checked_add(length).filter(|&e| e <= d.len())?;
        if !initial {
            return Some((false, end));
        }
        // The keys come from the first Initial's DCID (later ones may carry the server's).
        if self.first.is_none() {
            self.first = Some((ver, dcid.to_vec()));
        }
        let (first_ver, first_dcid) = self.first.as_ref()?;
        if *first_ver != ver {
            return Some((false, end));
        }
        if self.keys.is_none() {
            self.keys = Keys::derive(&v, first_dcid);
        }
        let keys = self.keys.as_ref()?;
        let Some(plain) = unprotect(keys, &d[..end], first, pn_at) else {
            return Some((false, end));
        };
        self.frames(&plain);
        Some((true, end))
    }

    /// Keeps the CRYPTO frames of a packet's plaintext.
    fn frames(&mut self, plain: &[u8]) {
        let mut r = Reader::new(plain);
        while let Some(ty) = varint(&mut r) {
            match ty {
                0x00 | 0x01 => {} // PADDING, PING
                0x02 | 0x03 => {
                    // ACK: largest, delay, range count, first range, ranges, ECN counts.
                    let (Some(_), Some(_), Some(n), Some(_)) = (
                        varint(&mut r),
                        varint(&mut r),
                        varint(&mut r),
                        varint(&mut r),
                    ) else {
                        return;
                    };
                    for _ in 0..n.min(plain.len() as u64) * 2 {
                        if varint(&mut r).is_none() {
                            return;
                        }
                    }
                    if ty == 0x03 {
                        for _ in 0..3 {
                            if varint(&mut r).is_none() {
                                return;
                            }
                        }
                    }
                }
                0x06 => {
                    let (Some(offset), Some(len)) = (varint(&mut r), varint(&mut r)) else {
                        return;
                    };
                    let Ok(data) = r.take(usize::try_from(len).unwrap_or(usize::MAX)) else {
                        return;
                    };
                    self.keep(offset, data);
                }
                _ => return, // nothing else a client's Initial carries that matters here
            }
        }
    }

    /// Keeps a CRYPTO frame's data, within the caps.
    fn keep(&mut self, offset: u64, data: &[u8]) {
        let cap = crate::STREAM_CAP as u64;
        if offset >= cap || data.is_empty() || self.chunks.len() >= MAX_CHUNKS {
            return;
        }
        let take = data.len().min((cap - offset) as usize);
        if self.kept + take > 2 * crate::STREAM_CAP {
            return;
        }
        self.kept += take;
        self.chunks.push((offset, data[..take].to_vec()));
    }

    /// The CRYPTO stream's bytes from offset 0 as far as they are contiguous.
    fn contiguous(&self) -> Vec<u8> {
        let mut order: Vec<&(u64, Vec<u8>)> = self.chunks.iter().collect();
        order.sort_by_key(|c| c.0);
        let mut out: Vec<u8> = Vec::new();
        for (offset, data) in order {
            let at = *offset as usize;
            if at > out.len() {
                break;
            }
            let end = at + data.len();
            if end > out.len() {
                out.extend_from_slice(&data[out.len() - at..]);
            }
        }
        out
    }
}

/// Removes the header protection of the packet `p` (whose first byte is `first` and whose
/// packet number starts at `pn_at`) and opens its payload: the plaintext frames.
fn unprotect(keys: &Keys, p: &[u8], first: u8, pn_at: usize) -> Option<Vec<u8>> {
    let sample = p.get(pn_at + 4..pn_at + 20)?;
    let mask = keys.hp.new_mask(sample).ok()?;
    let first = first ^ (mask[0] & 0x0f);
    let pn_len = usize::from(first & 3) + 1;
    let mut header = p.get(..pn_at + pn_len)?.to_vec();
    header[0] = first;
    let mut pn: u64 = 0;
    for i in 0..pn_len {
        header[pn_at + i] ^= mask[1 + i];
        pn = (pn << 8) | u64::from(header[pn_at + i]);
    }
    let mut nonce = keys.iv;
    for (n, b) in nonce[4..].iter_mut().zip(pn.to_be_bytes()) {
        *n ^= b;
    }
    let mut payload = p.get(pn_at + pn_len..)?.to_vec();
    let plain = keys
        .aead
        .open_in_place(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(&header),
            &mut payload,
        )
        .ok()?;
    Some(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client Initial of QUIC v1 to `dcid`, packet number `pn`, carrying `frames` (padded
    /// to 1200 bytes as a client pads its Initials), protected as a client protects it.
    fn initial(dcid: &[u8], pn: u32, frames: &[u8]) -> Vec<u8> {
        let keys = Keys::derive(&version(V1).unwrap(), dcid).unwrap();
        let mut payload = frames.to_vec();
        let padded = (1200 - 30 - dcid.len()).max(payload.len());
        payload.resize(padded, 0); // PADDING frames
        let length = 4 + payload.len() + 16;
        let mut h = vec![0xc3];
        h.extend_from_slice(&V1.to_be_bytes());
        h.push(dcid.len() as u8);
        h.extend_from_slice(dcid);
        h.extend_from_slice(&[0, 0]); // no SCID, no token
        h.extend_from_slice(&(0x4000 | length as u16).to_be_bytes());
        let pn_at = h.len();
        h.extend_from_slice(&pn.to_be_bytes());
        let mut nonce = keys.iv;
        for (n, b) in nonce[4..].iter_mut().zip(u64::from(pn).to_be_bytes()) {
            *n ^= b;
        }
        let tag = keys
            .aead
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(&h),
                &mut payload,
            )
            .unwrap();
        payload.extend_from_slice(tag.as_ref());
        let mask = keys.hp.new_mask(&payload[..16]).unwrap();
        h[0] ^= mask[0] & 0x0f;
        for i in 0..4 {
            h[pn_at + i] ^= mask[1 + i];
        }
        h.extend_from_slice(&payload);
        h
    }

    /// A CRYPTO frame of `data` at `offset`.
    fn crypto(offset: u16, data: &[u8]) -> Vec<u8> {
        let mut f = vec![0x06];
        f.extend_from_slice(&(0x4000 | offset).to_be_bytes());
        f.extend_from_slice(&(0x4000 | data.len() as u16).to_be_bytes());
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn a_client_hello_over_two_initials_in_either_order_gives_its_names() {
        let msg = crate::tests::client_hello("models.example-hub.io")[5..].to_vec();
        let dcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
        let cut = 300;
        // The second half first (as Chrome may send it), with a PING and an ACK before it.
        let mut f1 = vec![0x01, 0x02, 0, 0, 0, 0];
        f1.extend_from_slice(&crypto(cut as u16, &msg[cut..]));
        let p1 = initial(&dcid, 0, &f1);
        let p2 = initial(&dcid, 1, &crypto(0, &msg[..cut]));
        assert_eq!(crate::detect::app(&p1, false, 443), crate::App::Quic);
        let mut q = Initials::default();
        assert_eq!(q.datagram(&p1), Hello::Incomplete);
        match q.datagram(&p2) {
            Hello::Client(h) => {
                assert_eq!(h.sni.as_deref(), Some("models.example-hub.io"));
                assert_eq!(h.alpn, ["h2", "http/1.1"]);
                assert!(h.ja4.starts_with("q13d0204h2_"), "{}", h.ja4);
            }
            other => panic!("{other:?}"),
        }
        // Through a flow's tracker: the server's datagrams teach nothing, the client's do.
        let mut t = crate::Tracker::default();
        t.observe(0, None, 443, &p1);
        t.observe(1, None, 50000, &[0xc0; 1200]);
        assert!(!t.done());
        t.observe(0, None, 443, &p2);
        assert!(t.done());
        assert_eq!(t.names().app, crate::App::Quic);
        assert_eq!(t.names().sni.as_deref(), Some("models.example-hub.io"));
        // Another DCID's keys open nothing: the flow's first DCID is the one.
        let other = initial(&[1, 2, 3, 4, 5, 6, 7, 8], 2, &crypto(0, &msg[..cut]));
        let mut q = Initials::default();
        assert_eq!(q.datagram(&p1), Hello::Incomplete);
        assert_eq!(q.datagram(&other), Hello::Incomplete);
        // A flipped bit in the ciphertext fails its tag: nothing read.
        let mut bad = p2.clone();
        bad[600] ^= 1;
        assert_eq!(Initials::default().datagram(&bad), Hello::Not);
        // Every cut of a packet: no panic.
        for n in 0..p2.len() {
            let _ = Initials::default().datagram(&p2[..n]);
        }
    }

    /// RFC 9001 Appendix A.2: the header protection mask of the client's Initial.
    #[test]
    fn the_header_protection_mask_is_the_rfc_9001_one() {
        let dcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
        let keys = Keys::derive(&version(V1).unwrap(), &dcid).unwrap();
        let sample = [
            0xd1, 0xb1, 0xc9, 0x8d, 0xd7, 0x68, 0x9f, 0xb8, 0xec, 0x11, 0xd2, 0x42, 0xb1, 0x23,
            0xdc, 0x9b,
        ];
        assert_eq!(
            keys.hp.new_mask(&sample).unwrap(),
            [0x43, 0x7b, 0x9a, 0xec, 0x36]
        );
    }

    /// RFC 9001 Appendix A.1: the keys of the client's Initial for DCID 0x8394c8f03e515708.
    #[test]
    fn initial_keys_are_the_rfc_9001_ones() {
        let dcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
        let v = version(V1).unwrap();
        let initial = hkdf::Salt::new(hkdf::HKDF_SHA256, v.salt).extract(&dcid);
        let client: [u8; 32] = expand_label(&initial, b"client in").unwrap();
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            hex(&client),
            "c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea"
        );
        let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &client);
        let key: [u8; 16] = expand_label(&prk, v.key).unwrap();
        let iv: [u8; 12] = expand_label(&prk, v.iv).unwrap();
        let hp: [u8; 16] = expand_label(&prk, v.hp).unwrap();
        assert_eq!(hex(&key), "1f369613dd76d5467730efcbe3b1a22d");
        assert_eq!(hex(&iv), "fa044b2f42a3fd3b46fb255c");
        assert_eq!(hex(&hp), "9f50449e04a0e810283a1e9933adedd2");
    }
}
