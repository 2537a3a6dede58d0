//! The side index's steady state allocates nothing per flow: a block of flows seen before
//! (the writer thread's common case) reuses the previous blocks' records for its delta.
//! Before, every flow of every block allocated its delta record's buckets and DSCP counts
//! and freed them at the next block (malloc and free were about 3% of a store-rung
//! capture's CPU, on the thread that must keep up with the link).

use capsule_index::sideindex::IndexBuilder;
use capsule_store::format::BlockMeta;
use capsule_store::indexer::Record;

#[global_allocator]
static ALLOC: capsule_sys::counting::CountingAlloc = capsule_sys::counting::CountingAlloc;

/// An Ethernet frame of an IPv4 TCP segment from 10.0.0.`host`:`port` to 10.0.1.1:443, or
/// back, without payload (no payload inspection starts).
fn tcp4(host: u8, port: u16, back: bool, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 20];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    let (a, b) = ([10, 0, 0, host], [10, 0, 1, 1]);
    let (src, dst) = if back { (b, a) } else { (a, b) };
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let tcp = &mut f[34..54];
    let (sp, dp) = if back { (443, port) } else { (port, 443) };
    tcp[0..2].copy_from_slice(&sp.to_be_bytes());
    tcp[2..4].copy_from_slice(&dp.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x10; // ACK
    tcp[14..16].copy_from_slice(&1000u16.to_be_bytes());
    f
}

const FLOWS: u8 = 64;

/// Block `b`: every flow sends 4 packets each way, all within one second (so no flow's
/// per-second list grows), as pcapng EPBs, with the records the store's producer takes.
fn block(b: u32) -> (Vec<u8>, Vec<Record>) {
    let (mut data, mut records) = (Vec::new(), Vec::new());
    let base = 1_700_000_000_000_000_000u64 + u64::from(b) * 10_000_000;
    let mut n = 0u64;
    for round in 0..4u32 {
        for h in 0..FLOWS {
            for back in [false, true] {
                let frame = tcp4(h, 40_000 + u16::from(h), back, b * 100 + round);
                let ts = base + n * 1_000;
                n += 1;
                capsule_pcap::write::pcapng_epb(&mut data, 0, ts, frame.len() as u32, &frame);
                let d = capsule_wire::dissect(1, &frame);
                records.push(Record::of(
                    ts,
                    frame.len() as u32,
                    frame.len() as u32,
                    false,
                    &d,
                ));
            }
        }
    }
    (data, records)
}

/// Allocations made while adding blocks 40..50 (after 40 that bring every vector to its
/// size), with their records (the capture's path) or read from their bytes.
fn steady_state_allocations(with_records: bool) -> u64 {
    let blocks: Vec<_> = (0..50).map(block).collect();
    let mut first = BlockMeta::default();
    first.new_interfaces.push(capsule_pcap::Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    let rest = BlockMeta::default();
    let mut ix = IndexBuilder::new(1);
    let mut before = 0;
    for (b, (data, records)) in blocks.iter().enumerate() {
        if b == 40 {
            before = capsule_sys::counting::allocations();
        }
        let meta = if b == 0 { &first } else { &rest };
        let records = with_records.then_some(records.as_slice());
        ix.add_block_pieces(meta, &[data], records);
        assert_eq!(ix.last_delta().flows.len(), usize::from(FLOWS));
    }
    let n = capsule_sys::counting::allocations() - before;
    let (_, flows, _) = ix.so_far();
    assert_eq!(flows.len(), usize::from(FLOWS));
    assert!(flows.iter().all(|f| f.totals.packets == [200, 200]));
    n
}

#[test]
fn blocks_of_known_flows_allocate_less_than_once_per_flow_and_block() {
    for with_records in [true, false] {
        let n = steady_state_allocations(with_records);
        println!("records {with_records}: {n} allocations in 10 blocks of {FLOWS} flows");
        // Before the delta records were reused: 3 per flow and block (its buckets and
        // each direction's DSCP counts), 1,920 here. What is left is per block (the
        // millisecond series, about a dozen).
        assert!(
            n < 10 * u64::from(FLOWS),
            "{n} allocations in 10 blocks of {FLOWS} known flows (records: {with_records})"
        );
    }
}
