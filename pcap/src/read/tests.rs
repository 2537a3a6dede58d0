//! Tests of the checked readers: literal fixtures, every prefix and mutation of valid files,
//! and arbitrary bytes.

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
    Odd(Oddity),
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
        Record::Odd(o) => Rec::Odd(o),
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
    Interface::new(linktype, snaplen, name.map(String::from))
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
            Rec::Odd(Oddity::OrigBelowCaptured {
                offset: 24,
                orig: 2,
                caplen: 3
            }),
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
        Rec::Odd(Oddity::BlockNotKept {
            offset: 248,
            block_type: 2989,
        }),
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
    // The custom block is named (an oddity) and the second SHB is skipped along with the
    // record after it.
    assert_eq!(
        offsets,
        [28, 68, 100, 136, 172, 196, 248, 264, 312, 348, 384]
    );
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
    // Each interface keeps its section's options (here the SHB's shb_userappl).
    let mut section = Vec::new();
    crate::options::put(
        &mut section,
        crate::options::OPT_SHB_USERAPPL,
        b"capsule test",
    );
    let with_section = |mut i: Interface| {
        i.options.section = section.clone();
        i
    };
    assert_eq!(
        reader.interfaces(),
        &[
            with_section(iface(1, 65535, Some("eth0"))),
            with_section(iface(113, 0, None))
        ]
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
fn check_magic_says_what_the_reader_says() {
    for good in [
        &PCAP_US_BE[..4],
        &[0xd4, 0xc3, 0xb2, 0xa1],
        &[0x0a, 0x0d, 0x0d, 0x0a],
    ] {
        check_magic("g", good).unwrap();
    }
    for bad in [
        &[][..],
        &[0x0a, 0x0d][..],
        &[0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0][..],
    ] {
        let want = CaptureReader::new("b", bad).unwrap_err().to_string();
        assert_eq!(check_magic("b", bad).unwrap_err().to_string(), want);
    }
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
    assert_eq!(n, 8, "7 records and the custom block's oddity");
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
    let conv = |resol: u8, offset_s: i64, raw: u64| TsConv { resol, offset_s }.to_ns(raw).ok();
    assert_eq!(conv(9, 0, 123), Some(123));
    assert_eq!(conv(6, 0, 123), Some(123_000));
    assert_eq!(conv(0, 0, 2), Some(2_000_000_000));
    assert_eq!(conv(3, 0, 2), Some(2_000_000));
    assert_eq!(conv(12, 0, 123_456), Some(123)); // picoseconds
    assert_eq!(conv(19, 0, u64::MAX), Some(1_844_674_407));
    assert_eq!(conv(0x80, 0, 3), Some(3_000_000_000)); // 2^0 = seconds
    assert_eq!(conv(0x80 | 10, 0, 1024), Some(1_000_000_000)); // 2^-10
    assert_eq!(conv(0x80 | 30, 0, 1 << 30), Some(1_000_000_000));
    assert_eq!(conv(0x80 | 63, 0, u64::MAX), Some(1_999_999_999));
    assert_eq!(conv(6, 10, 5), Some(10_000_005_000));
    assert_eq!(conv(9, 0, MAX_TS_NS), Some(MAX_TS_NS));
    assert_eq!(conv(6, 0, MAX_TS_NS / 1000), Some(MAX_TS_NS));
    // Past 2200, before 1970, or beyond what u64 nanoseconds hold: refused.
    assert_eq!(conv(9, 0, MAX_TS_NS + 1), None);
    assert_eq!(conv(6, 0, u64::MAX), None);
    assert_eq!(conv(0, 0, u64::MAX), None);
    assert_eq!(conv(9, -1, 5), None);
    assert_eq!(conv(9, i64::MIN, u64::MAX), None);
    assert_eq!(conv(9, i64::MAX, 0), None);
    assert_eq!(conv(6, 7_258_118_401, 0), None);
    let err = TsConv {
        resol: 6,
        offset_s: i64::MAX,
    }
    .to_ns(1)
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "timestamp 1 at 10^-6 s with if_tsoffset 9223372036854775807 s is 9223372036854775807 s \
         after the epoch: expected 1970-01-01 to 2200-01-01 UTC (0 to 7258118400 s)"
    );
    for resol in 0..=255u8 {
        for offset in [i64::MIN, -1, 0, 1, i64::MAX] {
            for raw in [0, 1, u64::MAX / 2, u64::MAX] {
                let _ = conv(resol, offset, raw);
            }
        }
    }
    // Resolutions a capture can have: 10^-0..10^-19 and 2^-0..2^-63.
    let ok: Vec<u8> = (0..=255u8).filter(|&r| TsConv::resol_ok(r)).collect();
    let expected: Vec<u8> = (0..=19).chain(0x80..=0x80 + 63).collect();
    assert_eq!(ok, expected);
}

/// A section with one IDB (link type 1) carrying `opts` (whole options, padded, without the
/// end-of-options), then an EPB of timestamp `raw` at byte offset 28 + 20 + `opts.len()`.
fn file_with_idb_options(opts: &[u8], raw: u64) -> Vec<u8> {
    let mut file = Vec::new();
    pcapng_shb(&mut file, None);
    let len = (20 + opts.len()) as u32;
    file.extend_from_slice(&1u32.to_le_bytes());
    file.extend_from_slice(&len.to_le_bytes());
    file.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    file.extend_from_slice(opts);
    file.extend_from_slice(&len.to_le_bytes());
    pcapng_epb(&mut file, 0, raw, 1, &[1]);
    file
}

#[test]
fn impossible_resolutions_are_refused_at_the_idb() {
    for (resol, words) in [
        (0x7f, "10^-127 s"),
        (0xff, "2^-127 s"),
        (20, "10^-20 s"),
        (0xc0, "2^-64 s"),
    ] {
        let file = file_with_idb_options(&[9, 0, 1, 0, resol, 0, 0, 0], 5);
        assert_eq!(file[28 + 16 + 4], resol);
        let (recs, err) = read_bytes(&file);
        assert!(recs.is_empty(), "{recs:?}");
        let err = err.expect("refused");
        assert_eq!(err.offset, 28, "the IDB's offset");
        assert!(matches!(err.kind, ReadErrorKind::BadTsResol { resol: r } if r == resol));
        let msg = err.to_string();
        assert!(msg.contains(words) && msg.contains("at byte 28"), "{msg}");
    }
    // Picoseconds and 2^-63 are fine.
    for resol in [12, 19, 0x80 | 63] {
        let (recs, err) = read_bytes(&file_with_idb_options(&[9, 0, 1, 0, resol, 0, 0, 0], 5));
        assert!(err.is_none(), "{resol:#x}: {err:?}");
        assert_eq!(recs.len(), 2);
    }
}

#[test]
fn timestamps_out_of_range_are_skipped_named_and_the_rest_is_read() {
    // if_tsoffset 2^63 - 1: every packet is past 2262; the file still reads to its end.
    #[rustfmt::skip]
    let max_offset = [14, 0, 8, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    let file = file_with_idb_options(&max_offset, 1);
    let (recs, err) = read_bytes(&file);
    assert!(err.is_none(), "{err:?}");
    let odd = Oddity::TimeOutOfRange {
        offset: 28 + 32,
        block: "packet",
        seconds: i64::MAX,
    };
    assert_eq!(recs, vec![Rec::Iface(0), Rec::Odd(odd)]);
    assert!(odd.loses_packet());
    // A good packet, one in 2200 + 1 s, another good one: both good ones are kept.
    let mut file = file_with_idb_options(&[9, 0, 1, 0, 9, 0, 0, 0], 1_000);
    let second = file.len() as u64;
    pcapng_epb(&mut file, 0, MAX_TS_NS + 1_000_000_000, 1, &[2]);
    pcapng_epb(&mut file, 0, 2_000, 1, &[3]);
    let (recs, err) = read_bytes(&file);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(recs.len(), 4);
    assert_eq!(recs[1], pkt(1_000, 1, 0, &[1]));
    let Rec::Odd(o) = recs[2] else {
        panic!("{:?}", recs[2]);
    };
    assert_eq!(
        o.to_string(),
        format!(
            "at byte {second}: packet at 7258118401 s from the epoch is outside 1970-01-01 .. \
             2200-01-01 UTC: not stored"
        )
    );
    assert_eq!(recs[3], pkt(2_000, 1, 0, &[3]));
    // A negative offset before 1970 (Wireshark shows such files): packets and an ISB.
    #[rustfmt::skip]
    let minus = [14, 0, 8, 0, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]; // -10 s
    let mut file = file_with_idb_options(&minus, 11_000_000);
    let isb = file.len() as u64;
    pcapng_isb(&mut file, 0, 1, Some(1), None);
    pcapng_epb(&mut file, 0, 12_000_000, 1, &[4]);
    let (recs, err) = read_bytes(&file);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(recs.len(), 4);
    assert_eq!(
        recs[2],
        Rec::Odd(Oddity::TimeOutOfRange {
            offset: isb,
            block: "interface statistics",
            seconds: -10,
        })
    );
    assert_eq!(recs[3], pkt(2_000_000_000, 1, 0, &[4]));
}

#[test]
fn odd_pcap_records_are_mended_and_named() {
    let mut file = Vec::new();
    crate::write::pcap_header(&mut file, 1, 65535);
    // A µs file written by hand: 1 s + 1,500,000 µs; then caplen 4 > len 2.
    let rec = |f: &mut Vec<u8>, secs: u32, frac: u32, caplen: u32, len: u32| {
        for v in [secs, frac, caplen, len] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend(std::iter::repeat_n(7u8, caplen as usize));
    };
    let mut us = Vec::new();
    us.extend_from_slice(&PCAP_MAGIC_US.to_le_bytes());
    us.extend_from_slice(&file[4..24]);
    rec(&mut us, 1, 1_500_000, 1, 1);
    rec(&mut us, 3, 0, 4, 2);
    let (recs, err) = read_bytes(&us);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        recs,
        vec![
            Rec::Iface(0),
            pkt(2_500_000_000, 1, 0, &[7]),
            Rec::Odd(Oddity::SubsecondOverflow {
                offset: 24,
                frac: 1_500_000,
                unit: "µs"
            }),
            pkt(3_000_000_000, 2, 0, &[7; 4]),
            Rec::Odd(Oddity::OrigBelowCaptured {
                offset: 24 + 17,
                orig: 2,
                caplen: 4
            }),
        ]
    );
}

#[test]
fn pcapng_options_are_kept_and_blocks_not_kept_are_named() {
    use crate::options::{self, OPT_COMMENT, OPT_EPB_FLAGS, OPT_IF_FILTER};
    // SHB with a comment and shb_os, by hand.
    let mut shb_opts = Vec::new();
    options::put(&mut shb_opts, OPT_COMMENT, b"evidence for INC-42");
    options::put(&mut shb_opts, 3, b"Linux 6.18");
    let mut file = Vec::new();
    let len = (28 + shb_opts.len() + 4) as u32;
    file.extend_from_slice(&0x0a0d_0d0au32.to_le_bytes());
    file.extend_from_slice(&len.to_le_bytes());
    file.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    file.extend_from_slice(&[1, 0, 0, 0]);
    file.extend_from_slice(&(-1i64).to_le_bytes());
    file.extend_from_slice(&shb_opts);
    file.extend_from_slice(&[0, 0, 0, 0]);
    file.extend_from_slice(&len.to_le_bytes());
    let mut idb = Interface::new(1, 0, Some("eth0".into()));
    options::put(&mut idb.options.idb, OPT_IF_FILTER, b"\0tcp port 443");
    idb.set_description("core uplink");
    pcapng_idb(&mut file, &idb);
    // A name-resolution block (type 4), then an EPB with a comment and flags (inbound).
    let nrb = file.len() as u64;
    file.extend_from_slice(&[4, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0]);
    let mut epb_opts = Vec::new();
    options::put(&mut epb_opts, OPT_COMMENT, b"the first retransmission");
    options::put(&mut epb_opts, OPT_EPB_FLAGS, &1u32.to_le_bytes());
    crate::write::pcapng_epb_with(&mut file, 0, 5_000, 60, &[9; 3], &epb_opts);
    pcapng_epb(&mut file, 0, 6_000, 3, &[8; 3]);

    let mut reader = CaptureReader::new("t", &file[..]).expect("header");
    let mut seen = Vec::new();
    while let Some(r) = reader.next_record().expect("reads") {
        match r {
            Record::Packet(p) => seen.push(format!("packet {:?}", p.options == &epb_opts[..])),
            Record::Odd(o) => seen.push(o.to_string()),
            Record::Interface { .. } | Record::Stats { .. } => {}
        }
    }
    assert_eq!(
        seen,
        vec![
            format!("at byte {nrb}: name resolution block (type 0x00000004) not kept"),
            "packet true".to_string(),
            "packet false".to_string(),
        ]
    );
    let got = &reader.interfaces()[0];
    assert_eq!(got.name.as_deref(), Some("eth0"));
    assert_eq!(got.description().as_deref(), Some("core uplink"));
    assert_eq!(got.options.idb, idb.options.idb);
    assert_eq!(got.options.section, shb_opts);
    // Written back by the store's own encoder, the IDB reads the same.
    let mut again = Vec::new();
    pcapng_shb(&mut again, None);
    pcapng_idb(&mut again, got);
    let mut r2 = CaptureReader::new("t2", &again[..]).expect("header");
    while r2.next_record().expect("reads").is_some() {}
    assert_eq!(r2.interfaces()[0].options.idb, idb.options.idb);
    // The fragment walker hands the options back without their opt_endofopt.
    let mut frag = Vec::new();
    crate::write::pcapng_epb_with(&mut frag, 0, 1, 3, &[1, 2, 3], &epb_opts);
    pcapng_epb(&mut frag, 0, 2, 1, &[4]);
    let opts: Vec<Vec<u8>> = fragment_packets(&frag)
        .map(|p| p.expect("packet").options.to_vec())
        .collect();
    assert_eq!(opts, vec![epb_opts.clone(), Vec::new()]);
    assert_eq!(
        frag.len(),
        crate::write::pcapng_epb_len_with(3, epb_opts.len()) + crate::write::pcapng_epb_len(1)
    );
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

#[test]
fn cut_packet_blocks_are_skipped_by_readers_and_yielded_by_fragment_records() {
    use crate::write::pcapng_cut;
    let mut frag = Vec::new();
    pcapng_epb(&mut frag, 0, 10, 60, &[1u8; 60]);
    pcapng_cut(&mut frag, 0, 11, 1500, &[2u8; 54]);
    pcapng_epb(&mut frag, 0, 12, 61, &[3u8; 61]);
    let stored: Vec<_> = fragment_packets(&frag).map(|p| p.unwrap().ts_ns).collect();
    assert_eq!(stored, [10, 12]);
    let all: Vec<_> = fragment_records(&frag)
        .map(|r| {
            let (p, cut) = r.unwrap();
            (p.ts_ns, p.orig_len, p.data.len(), cut)
        })
        .collect();
    assert_eq!(
        all,
        [
            (10, 60, 60, false),
            (11, 1500, 54, true),
            (12, 61, 61, false)
        ]
    );
    // A pcapng file holding one is read by the checked reader, which skips it too.
    let mut file = Vec::new();
    pcapng_shb(&mut file, None);
    pcapng_idb(
        &mut file,
        &crate::Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        },
    );
    file.extend_from_slice(&frag);
    let mut r = CaptureReader::new("t.pcapng", &file[..]).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        if let Record::Packet(_) = rec {
            n += 1;
        }
    }
    assert_eq!(n, 2);
}
