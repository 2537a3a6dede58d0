//! The capture-file reader (pcap and pcapng, either byte order) over arbitrary bytes.
//!
//! Properties: every record is consistent with the reader (an interface record's id and a
//! packet's interface index are in `interfaces()`; the offset only grows and stays within
//! the input); once the reader returns an error it returns an error on every later call.
#![no_main]

use capsule_pcap::{CaptureReader, Record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let mut r = match CaptureReader::new("fuzz", input) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = r.format();
    let mut last_offset = r.offset();
    // Each record takes at least a few bytes of the input (at most three records, a packet
    // and its two oddities, share a 16-byte pcap record), so this bound is never reached by
    // a reader that makes progress.
    for _ in 0..=input.len() {
        let n_ifaces = r.interfaces().len();
        // What the record says, copied out so the reader can be asked about it afterwards.
        let seen = match r.next_record() {
            Ok(None) => return,
            Ok(Some(Record::Interface { id })) => Seen::Interface(id),
            Ok(Some(Record::Packet(p))) => {
                assert!(
                    (p.iface as usize) < n_ifaces,
                    "packet on interface {}",
                    p.iface
                );
                Seen::Other
            }
            Ok(Some(Record::Stats { iface, .. })) => {
                assert!((iface as usize) < n_ifaces, "stats of interface {iface}");
                Seen::Other
            }
            Ok(Some(Record::Odd(o))) => {
                let _ = o.to_string();
                Seen::Other
            }
            Err(e) => Seen::Error(e.to_string()),
        };
        match seen {
            Seen::Interface(id) => {
                let n = r.interfaces().len();
                assert!((id as usize) < n, "interface {id} of {n}");
            }
            Seen::Other => {}
            Seen::Error(first) => {
                for _ in 0..3 {
                    if let Ok(rec) = r.next_record() {
                        panic!("after error {first:?} the reader returned {rec:?}");
                    }
                }
                return;
            }
        }
        let offset = r.offset();
        assert!(
            offset >= last_offset,
            "offset went back: {last_offset} -> {offset}"
        );
        assert!(
            offset <= input.len() as u64,
            "offset {offset} past the input"
        );
        last_offset = offset;
    }
    panic!("the reader made no progress");
});

enum Seen {
    Interface(u32),
    Other,
    Error(String),
}
