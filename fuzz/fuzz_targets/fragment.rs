//! The store's walkers over its own pcapng fragments, over arbitrary bytes.
//!
//! Properties: the packet iterator ends after its first error (fused) and every packet's
//! data lies within the input; `fragment_stats` never panics and finds no more statistics
//! blocks than fit in the input.
#![no_main]

use capsule_pcap::{fragment_packets, fragment_stats};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let mut it = fragment_packets(input);
    let mut total = 0usize;
    for item in it.by_ref() {
        match item {
            Ok(p) => {
                total += p.data.len();
                assert!(
                    total <= input.len(),
                    "packets hold more bytes than the input"
                );
                let start = p.data.as_ptr() as usize - input.as_ptr() as usize;
                assert!(start + p.data.len() <= input.len());
            }
            Err(e) => {
                let _ = format!("{e:?}");
                break;
            }
        }
    }
    assert!(it.next().is_none(), "the iterator yielded after it ended");
    assert!(it.offset() <= input.len());

    let stats = fragment_stats(input);
    // The smallest ISB is 24 bytes: type, length, interface, timestamp, length.
    assert!(
        stats.len() * 24 <= input.len(),
        "{} stats from {} bytes",
        stats.len(),
        input.len()
    );
});
