//! `capsule status`: how the store's capture runs and what the store holds.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use capsule_store::Store;

use crate::cli::StatusArgs;

pub fn run(a: &StatusArgs) -> Result<ExitCode> {
    let (store_dir, json, watch) = (a.store.as_path(), a.json, a.watch);
    loop {
        let st = capsule_capture::status::read_status(store_dir)?;
        let store = Store::open(store_dir)?;
        let (segs, unreadable) = store.open_segments_checked()?;
        super::warn_unreadable(&unreadable, "");
        let packets: u64 = segs
            .iter()
            .flat_map(|s| s.blocks())
            .map(|b| u64::from(b.packets))
            .sum();
        let bytes: u64 = segs.iter().map(|s| s.bytes()).sum();
        let first = segs
            .iter()
            .flat_map(|s| s.blocks())
            .map(|b| b.first_ns)
            .min();
        let last = segs
            .iter()
            .flat_map(|s| s.blocks())
            .map(|b| b.last_ns)
            .max();
        let now = capsule_store::now_ns();
        // Live: the capture says it runs, its process exists, and it wrote within 5 s.
        let live = st.as_ref().is_some_and(|s| {
            s.running
                && Path::new(&format!("/proc/{}", s.pid)).exists()
                && now.saturating_sub(s.updated_ns) < 5_000_000_000
        });
        if json {
            let v = serde_json::json!({
                "capture": st, "live": live,
                "store": {"segments": segs.len(), "packets": packets, "bytes": bytes,
                          "first_ns": first, "last_ns": last},
            });
            println!("{v}");
        } else {
            match &st {
                None => println!("capture: none has run on this store"),
                Some(s) => {
                    let state = if live {
                        "running"
                    } else if s.running {
                        "not running (stopped without a clean exit)"
                    } else {
                        "stopped"
                    };
                    println!(
                        "capture: {state}, pid {}, on {} since {}",
                        s.pid,
                        s.iface,
                        capsule_query::format_instant(s.started_ns)
                    );
                    println!("  mode: {}", s.mode);
                    println!(
                        "  stored {} packets ({} bytes) of {} seen; dropped {}",
                        s.packets, s.wire_bytes, s.seen, s.drops
                    );
                    let c = &s.drop_causes;
                    println!(
                        "  drops by cause: packet ring full {}, AF_XDP RX ring full {}, AF_XDP \
                         dropped {}, queue without socket {}, store behind {}, invalid {}, \
                         disk full {}",
                        c.packet_ring_full,
                        c.xsk_ring_full,
                        c.xsk_dropped,
                        c.no_socket,
                        c.pipeline,
                        c.invalid,
                        c.disk_full
                    );
                    if live {
                        println!(
                            "  rate: {:.0} packets/s, {:.1} Mbit/s, {:.0} drops/s",
                            s.packets_per_s,
                            s.bits_per_s / 1e6,
                            s.drops_per_s
                        );
                    }
                    let p = &s.store;
                    let [level, fast, fastest, stored] = p.blocks_by_rung;
                    println!(
                        "  blocks written: {level} at the configured level, {fast} at -10, \
                         {fastest} at -1000, {stored} stored uncompressed; {}{}",
                        if p.disk_bound {
                            "the disk is the limit (compression kept at the configured level)"
                        } else {
                            "the disk keeps up"
                        },
                        match p.readers_behind {
                            0 => String::new(),
                            n => format!("; {n} capture reader(s) behind their ring"),
                        }
                    );
                    if p.segments_deleted_for_space > 0 {
                        println!(
                            "  disk full: deleted {} oldest segment(s) ({} bytes) to make room",
                            p.segments_deleted_for_space, p.bytes_deleted_for_space
                        );
                    }
                    println!(
                        "  VLAN tags restored {}, packets cut at 256 KiB {}, NIC timestamps {}; \
                         updated {}",
                        s.vlan_restored,
                        s.truncated,
                        s.hw_timestamps,
                        capsule_query::format_instant(s.updated_ns)
                    );
                }
            }
            println!(
                "store: {} segment(s), {} packets, {} bytes, {} .. {}",
                segs.len(),
                packets,
                bytes,
                first.map(capsule_query::format_instant).unwrap_or_default(),
                last.map(capsule_query::format_instant).unwrap_or_default()
            );
        }
        if !watch {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
