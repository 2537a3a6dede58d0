//! Live capture from a network interface into the store.
//!
//! ```text
//! NIC -> kernel -> TPACKET_V3 ring (ring.rs) -> block of packets
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

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capsule_pcap::{Interface, LINKTYPE_ETHERNET};
use capsule_store::writer::MAX_PACKET;
use capsule_store::{StoreError, StoreWriter};

use crate::ring::{PacketRing, RingConfig, RingStats};

/// How to capture.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub iface: String,
    /// Bytes kept of each packet (0: all).
    pub snaplen: u32,
    pub ring: RingConfig,
}

/// What a capture did.
#[derive(Debug, Clone, Default)]
pub struct LiveReport {
    pub packets: u64,
    /// Sum of the packets' lengths on the wire.
    pub wire_bytes: u64,
    /// Packets whose VLAN tag was put back from the kernel's metadata.
    pub vlan_restored: u64,
    /// Packets longer than the store keeps (256 KiB, e.g. from GRO or a TSO loopback),
    /// stored cut to that length with their original length kept.
    pub truncated: u64,
    /// Kernel counters summed over the capture (AF_PACKET).
    pub kernel: RingStats,
    /// XDP program, socket and pipeline counters (AF_XDP).
    pub xdp: Option<crate::xdp::XdpCounters>,
}

impl LiveReport {
    /// Packets the interface delivered to capture (stored or dropped).
    pub fn seen(&self) -> u64 {
        match &self.xdp {
            Some(x) => x.program.seen,
            None => self.kernel.packets,
        }
    }

    /// Packets lost, whatever the cause.
    pub fn drops(&self) -> u64 {
        match &self.xdp {
            Some(x) => x.drops(),
            None => self.kernel.drops,
        }
    }
}

/// Why a capture stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("cannot capture on {iface}: {error}")]
    Open {
        iface: String,
        error: std::io::Error,
    },
    #[error("reading the packet ring of {iface}: {error}")]
    Ring {
        iface: String,
        error: std::io::Error,
    },
    #[error("storing packets from {iface}: {error}")]
    Store {
        iface: String,
        error: Box<StoreError>,
    },
}

/// An open capture on one interface.
#[derive(Debug)]
pub struct Live {
    cfg: LiveConfig,
    ring: PacketRing,
}

impl Live {
    /// Opens the interface (needs root or CAP_NET_RAW).
    pub fn open(cfg: LiveConfig) -> Result<Self, LiveError> {
        let ring = PacketRing::open(&cfg.iface, &cfg.ring).map_err(|error| LiveError::Open {
            iface: cfg.iface.clone(),
            error,
        })?;
        Ok(Live { cfg, ring })
    }

    /// Captures into `writer` until `stop` is set. `on_stats` sees the running totals about
    /// once a second (for live status and logs).
    pub fn run(
        &mut self,
        writer: &mut StoreWriter,
        stop: &AtomicBool,
        mut on_stats: impl FnMut(&LiveReport),
    ) -> Result<LiveReport, LiveError> {
        let iface = writer.add_interface(Interface {
            linktype: LINKTYPE_ETHERNET,
            snaplen: self.cfg.snaplen,
            name: Some(self.cfg.iface.clone()),
        });
        let mut rep = LiveReport::default();
        let mut scratch: Vec<u8> = Vec::with_capacity(65_536);
        let mut last_stats = Instant::now();
        // Kernel counters are stored with the data (as pcapng ISBs) when drops change, and
        // at least once a minute, so an export can say what was lost in its window.
        let mut recorded: Option<(Instant, u64)> = None;
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
            if last_stats.elapsed() >= Duration::from_secs(1) {
                self.add_stats(&mut rep)?;
                let due = recorded.is_none_or(|(at, drops)| {
                    drops != rep.kernel.drops || at.elapsed() >= Duration::from_secs(60)
                });
                if due {
                    self.record_stats(writer, iface, &rep)?;
                    recorded = Some((Instant::now(), rep.kernel.drops));
                }
                on_stats(&rep);
                last_stats = Instant::now();
            }
        }
        // Stopping: the kernel hands over the block it is filling within the retire timeout;
        // store it and every block already handed over, then the final counters.
        let retire = Duration::from_millis(u64::from(self.cfg.ring.retire_ms) + 20);
        self.take_block(writer, iface, retire, &mut scratch, &mut rep)?;
        while self.take_block(writer, iface, Duration::ZERO, &mut scratch, &mut rep)? > 0 {}
        self.add_stats(&mut rep)?;
        self.record_stats(writer, iface, &rep)?;
        on_stats(&rep);
        Ok(rep)
    }

    /// Stores the kernel counters so far as an interface statistics record.
    fn record_stats(
        &self,
        writer: &mut StoreWriter,
        iface: u32,
        rep: &LiveReport,
    ) -> Result<(), LiveError> {
        writer
            .record_stats(
                iface,
                capsule_store::now_ns(),
                Some(rep.kernel.packets),
                Some(rep.kernel.drops),
            )
            .map_err(|e| self.store_error(e))
    }

    /// Stores the packets of the next block the kernel hands over (waiting up to `timeout`).
    fn take_block(
        &mut self,
        writer: &mut StoreWriter,
        iface: u32,
        timeout: Duration,
        scratch: &mut Vec<u8>,
        rep: &mut LiveReport,
    ) -> Result<usize, LiveError> {
        let snap = if self.cfg.snaplen == 0 {
            usize::MAX
        } else {
            self.cfg.snaplen as usize
        };
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
                if data.len() > MAX_PACKET && snap > MAX_PACKET {
                    rep.truncated += 1;
                }
                let data = &data[..data.len().min(snap).min(MAX_PACKET)];
                if let Err(e) = writer.append(iface, p.ts_ns, len, data) {
                    failed = Some(e);
                    return;
                }
                rep.packets += 1;
                rep.wire_bytes += u64::from(len.max(data.len() as u32));
            })
            .map_err(|error| LiveError::Ring {
                iface: self.cfg.iface.clone(),
                error,
            })?;
        match failed {
            Some(e) => Err(self.store_error(e)),
            None => Ok(n),
        }
    }

    fn store_error(&self, error: StoreError) -> LiveError {
        LiveError::Store {
            iface: self.cfg.iface.clone(),
            error: Box::new(error),
        }
    }

    fn add_stats(&self, rep: &mut LiveReport) -> Result<(), LiveError> {
        let s = self.ring.stats().map_err(|error| LiveError::Ring {
            iface: self.cfg.iface.clone(),
            error,
        })?;
        rep.kernel.packets += s.packets;
        rep.kernel.drops += s.drops;
        rep.kernel.freezes += s.freezes;
        Ok(())
    }
}

/// Tells the store writer when a capture reader falls behind its kernel ring.
///
/// A reader is behind once more than 1/8 of its ring waits to be read, and caught up again
/// below 1/64: the gap keeps it from flapping. While any reader is behind, the writer
/// compresses at its fastest level (see [`StoreWriter::urgency`]), which hands CPU back to
/// the readers on a machine whose cores are shared by reader, compressors and writer.
pub(crate) struct Behind {
    urgent: Arc<AtomicU32>,
    on: bool,
}

impl Behind {
    pub(crate) fn new(urgent: Arc<AtomicU32>) -> Self {
        Behind { urgent, on: false }
    }

    /// Updates the state from the reader's `backlog` out of `size` ring entries.
    pub(crate) fn update(&mut self, backlog: usize, size: usize) {
        if !self.on && backlog > size / 8 {
            self.on = true;
            self.urgent.fetch_add(1, Ordering::Relaxed);
        } else if self.on && backlog < size / 64 {
            self.on = false;
            self.urgent.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Behind {
    fn drop(&mut self) {
        if self.on {
            self.urgent.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The frame with an 802.1Q/802.1ad tag (TPID, TCI) put back after its MAC addresses, built in
/// `scratch`. The frame must be at least 12 bytes long.
pub(crate) fn with_vlan_tag<'a>(
    frame: &[u8],
    tpid: u16,
    tci: u16,
    scratch: &'a mut Vec<u8>,
) -> &'a [u8] {
    scratch.clear();
    scratch.extend_from_slice(&frame[..12]);
    scratch.extend_from_slice(&tpid.to_be_bytes());
    scratch.extend_from_slice(&tci.to_be_bytes());
    scratch.extend_from_slice(&frame[12..]);
    scratch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_turns_on_above_an_eighth_and_off_below_a_sixty_fourth() {
        let urgent = Arc::new(AtomicU32::new(0));
        let mut a = Behind::new(urgent.clone());
        let mut b = Behind::new(urgent.clone());
        a.update(100, 1024);
        assert_eq!(urgent.load(Ordering::Relaxed), 0);
        a.update(200, 1024);
        b.update(300, 1024);
        assert_eq!(urgent.load(Ordering::Relaxed), 2);
        a.update(20, 1024); // between 1/64 and 1/8: still behind
        assert_eq!(urgent.load(Ordering::Relaxed), 2);
        a.update(10, 1024);
        assert_eq!(urgent.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(urgent.load(Ordering::Relaxed), 0);
    }
}
