//! AF_PACKET capture: one TPACKET_V3 ring on the interface, read by the capture thread.
//!
//! ```text
//! NIC -> kernel -> TPACKET_V3 ring (capsule-sys, tpacket.rs) -> block of packets
//!   -> VLAN tag put back where the kernel stripped it into metadata
//!   -> snap length applied -> StoreWriter::append (lane, block, compression, disk)
//!   every turn: StoreWriter::tick (blocks cut by age: queryable within ~100 ms)
//!   every second: kernel counters (packets, drops) read and summed
//! ```
//!
//! The loop never waits on the disk for long: the writer's channels are bounded, and when
//! they are full `append` waits while the kernel keeps filling the ring; what the ring cannot
//! hold, the kernel drops and counts, and capture reports it. The loop stops when `stop` is
//! set (SIGINT/SIGTERM in the CLI), then the caller finishes the writer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use capsule_store::StoreError;

use super::{
    record, with_vlan_tag, Behind, CaptureConfig, CaptureMethod, LiveError, LiveReport, Sink, Snap,
    StatsTimer,
};
use capsule_sys::tpacket::{PacketRing, RingConfig};

/// Bytes per ring block.
const BLOCK_SIZE: u32 = 1 << 22;

/// The ring for a budget of `ring_bytes`: 4 MiB blocks, as many as fit, 2 to 4096 of them.
fn ring_config(ring_bytes: u64, fanout_group: u16) -> RingConfig {
    RingConfig {
        block_size: BLOCK_SIZE,
        block_nr: (ring_bytes / u64::from(BLOCK_SIZE)).clamp(2, 4096) as u32,
        fanout_group,
        ..RingConfig::default()
    }
}

/// An open AF_PACKET capture on one interface.
#[derive(Debug)]
pub(crate) struct PacketCapture {
    iface: String,
    snaplen: u32,
    snap: Snap,
    ring_cfg: RingConfig,
    ring: PacketRing,
}

impl PacketCapture {
    /// Opens the interface (needs root or CAP_NET_RAW).
    pub(crate) fn open(cfg: &CaptureConfig) -> Result<Self, LiveError> {
        let ring_cfg = ring_config(cfg.ring_bytes, cfg.fanout_group);
        let ring =
            PacketRing::open(&cfg.iface, &ring_cfg).map_err(|e| LiveError::open(&cfg.iface, e))?;
        Ok(PacketCapture {
            iface: cfg.iface.clone(),
            snaplen: cfg.snaplen,
            snap: Snap::new(cfg.snaplen),
            ring_cfg,
            ring,
        })
    }

    /// E.g. `AF_PACKET (TPACKET_V3 ring of 256 MiB)`.
    pub(crate) fn description(&self) -> String {
        format!(
            "AF_PACKET (TPACKET_V3 ring of {} MiB)",
            (u64::from(self.ring_cfg.block_nr) * u64::from(self.ring_cfg.block_size)) >> 20
        )
    }

    /// Captures into `writer` until `stop` is set. `on_stats` sees the running totals about
    /// once a second (for live status and logs).
    pub(crate) fn run(
        mut self,
        writer: &mut impl Sink,
        stop: &AtomicBool,
        mut on_stats: impl FnMut(&LiveReport),
    ) -> Result<LiveReport, LiveError> {
        let iface =
            writer.add_interface(CaptureMethod::afpacket().interface(&self.iface, self.snaplen));
        let mut rep = LiveReport::default();
        let mut scratch: Vec<u8> = Vec::with_capacity(65_536);
        // Kernel counters are stored with the data (as pcapng ISBs) when drops change, and
        // at least once a minute, so an export can say what was lost in its window.
        let mut stats = StatsTimer::default();
        let mut behind = Behind::new(writer.urgency());
        while !stop.load(Ordering::Relaxed) {
            self.take_block(
                writer,
                iface,
                Duration::from_millis(20),
                &mut scratch,
                &mut rep,
            )?;
            behind.update(self.ring.backlog(), self.ring.blocks());
            writer.tick().map_err(|e| self.store_error(e))?;
            let now = Instant::now();
            if stats.due(now) {
                self.add_stats(&mut rep)?;
                stats
                    .record(writer, iface, &rep, now)
                    .map_err(|e| self.store_error(e))?;
                on_stats(&rep);
            }
        }
        // Stopping: the kernel hands over the block it is filling within the retire timeout;
        // store it and every block already handed over, then the final counters.
        let retire = Duration::from_millis(u64::from(self.ring_cfg.retire_ms) + 20);
        self.take_block(writer, iface, retire, &mut scratch, &mut rep)?;
        while self.take_block(writer, iface, Duration::ZERO, &mut scratch, &mut rep)? > 0 {}
        self.add_stats(&mut rep)?;
        record(writer, iface, &rep).map_err(|e| self.store_error(e))?;
        on_stats(&rep);
        Ok(rep)
    }

    /// Stores the packets of the next block the kernel hands over (waiting up to `timeout`).
    fn take_block(
        &mut self,
        writer: &mut impl Sink,
        iface: u32,
        timeout: Duration,
        scratch: &mut Vec<u8>,
        rep: &mut LiveReport,
    ) -> Result<usize, LiveError> {
        let snap = self.snap;
        let mut failed = None;
        let n = self
            .ring
            .next_block(timeout, |p| {
                if failed.is_some() {
                    return;
                }
                let (data, len): (&[u8], u32) = match p.vlan {
                    // The kernel took the 802.1Q tag off; put it back after the MACs.
                    Some((tpid, tci)) if p.data.len() >= 12 => {
                        rep.vlan_restored += 1;
                        (with_vlan_tag(p.data, tpid, tci, scratch), p.len + 4)
                    }
                    _ => (p.data, p.len),
                };
                // Capture never stops for one packet: keep what the store can hold.
                let (data, truncated) = snap.apply(data);
                rep.truncated += u64::from(truncated);
                if let Err(e) = writer.append(iface, p.ts_ns, len, data) {
                    failed = Some(e);
                    return;
                }
                rep.packets += 1;
                rep.wire_bytes += u64::from(len.max(data.len() as u32));
            })
            .map_err(|e| LiveError::ring(&self.iface, e))?;
        match failed {
            Some(e) => Err(self.store_error(e)),
            None => Ok(n),
        }
    }

    fn store_error(&self, error: StoreError) -> LiveError {
        LiveError::store(&self.iface, error)
    }

    fn add_stats(&self, rep: &mut LiveReport) -> Result<(), LiveError> {
        let s = self
            .ring
            .stats()
            .map_err(|e| LiveError::ring(&self.iface, e))?;
        // The kernel resets the counters on every read: sum them.
        rep.kernel.packets += u64::from(s.tp_packets);
        rep.kernel.drops += u64::from(s.tp_drops);
        rep.kernel.freezes += u64::from(s.tp_freeze_q_cnt);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_budget_is_cut_into_4_mib_blocks_from_2_to_4096() {
        assert_eq!(ring_config(256 << 20, 0).block_nr, 64);
        assert_eq!(ring_config((256 << 20) + 1, 0).block_nr, 64);
        assert_eq!(ring_config(0, 0).block_nr, 2);
        assert_eq!(ring_config(u64::MAX, 7).block_nr, 4096);
        assert_eq!(ring_config(u64::MAX, 7).fanout_group, 7);
        assert_eq!(ring_config(1 << 30, 0).block_size, 4 << 20);
    }
}
