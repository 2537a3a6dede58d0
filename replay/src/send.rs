//! Replay of a window onto an interface: the export's read and merge (the same plan,
//! read-ahead and k-way merge, so the packets and their order are exactly those `capsule
//! query` writes), then each packet checked and handed to a [`Wire`] when the
//! [`Pacing`] says it is due.
//!
//! ```text
//! Window::open (plan) -> Window::merge (prefetch, k-way merge)
//!   -> checks: captured whole (caplen = len)? Ethernet? fits the MTU?   (else counted)
//!   -> Schedule::due (offset from one start instant) -> wait_until (sleep, then yield)
//!   -> Wire::send (capsule-capture's Transmitter in the binary)
//! ```

use std::time::{Duration, Instant};

use capsule_pcap::LINKTYPE_ETHERNET;
use capsule_query::Query;
use capsule_store::Store;

use crate::error::ExportError;
use crate::export::Window;
use crate::pace::{wait_until, Pacing, Schedule};
use crate::report::ExportReport;

/// Where replayed frames go: an interface's sending socket.
pub trait Wire {
    /// Sends one whole Ethernet frame.
    fn send(&mut self, frame: &[u8]) -> Result<(), WireError>;
}

/// Why a frame was not sent.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The interface refused its length.
    #[error("frame too long for the interface")]
    TooLong,
    /// The interface's transmit queue stayed full.
    #[error("transmit queue full")]
    QueueFull,
    /// Another failure of this frame; later frames may still go.
    #[error("send failed")]
    Failed(#[source] std::io::Error),
    /// The interface is down or gone: the replay stops.
    #[error("the interface is down or gone")]
    Down(#[source] std::io::Error),
}

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Filter and time window.
    pub query: Query,
    pub pacing: Pacing,
    /// The interface's MTU: a frame longer than it plus its Ethernet header (and one
    /// 802.1Q tag, when it carries one) is not sent.
    pub mtu: u32,
    /// Decompression threads.
    pub threads: usize,
}

/// Packets of the window that were not sent, by cause.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NotSent {
    /// Stored truncated (captured length below the original length).
    pub truncated: u64,
    /// Longer than the interface's MTU plus the link-layer header (or refused by the
    /// kernel as too long).
    pub over_mtu: u64,
    /// Captured on an interface that is not Ethernet (the link type cannot be sent).
    pub not_ethernet: u64,
    /// Shorter than an Ethernet header.
    pub too_short: u64,
    /// The transmit queue stayed full.
    pub queue_full: u64,
    /// Any other send failure.
    pub send_failed: u64,
}

impl NotSent {
    pub fn total(&self) -> u64 {
        self.truncated
            + self.over_mtu
            + self.not_ethernet
            + self.too_short
            + self.queue_full
            + self.send_failed
    }

    /// (cause, count) for each cause, in a fixed order (for reports).
    pub fn causes(&self) -> [(&'static str, u64); 6] {
        [
            ("truncated", self.truncated),
            ("over_mtu", self.over_mtu),
            ("not_ethernet", self.not_ethernet),
            ("too_short", self.too_short),
            ("queue_full", self.queue_full),
            ("send_failed", self.send_failed),
        ]
    }
}

/// What a replay did.
#[derive(Debug, Default, Clone)]
pub struct ReplayReport {
    /// The read: packets of the window (sent or not), blocks read, damage skipped.
    pub read: ExportReport,
    pub sent: u64,
    /// Bytes of the frames sent.
    pub bytes_sent: u64,
    pub not_sent: NotSent,
    /// The first failure of `send_failed`, as text.
    pub first_failure: Option<String>,
    /// From the first packet's due instant to the end of the last send.
    pub elapsed: Duration,
    /// How late sends were against the schedule (paced replays only): the worst, and the
    /// mean over the packets sent.
    pub lateness_max: Option<Duration>,
    pub lateness_mean: Option<Duration>,
    /// Timestamps of the first and last packet of the window.
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    /// Why the replay stopped before the end of the window (the interface went away).
    pub stopped: Option<String>,
}

impl ReplayReport {
    /// Packets sent per second, over [`ReplayReport::elapsed`].
    pub fn packets_per_s(&self) -> f64 {
        rate(self.sent, self.elapsed)
    }

    /// Bits sent per second, frames only (no preamble or inter-frame gap).
    pub fn bits_per_s(&self) -> f64 {
        rate(self.bytes_sent * 8, self.elapsed)
    }
}

fn rate(n: u64, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

/// Why a replay could not start or failed midway.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("{0}")]
    BadPacing(String),
}

/// What stops the merge early: an error of the read, or the interface gone.
enum Halt {
    Export(ExportError),
    Down,
}

impl From<ExportError> for Halt {
    fn from(e: ExportError) -> Halt {
        Halt::Export(e)
    }
}

/// The longest frame the interface takes: MTU plus the Ethernet header, plus 4 bytes when the
/// frame carries an 802.1Q tag (as the kernel's packet socket allows).
fn max_frame(mtu: u32, frame: &[u8]) -> usize {
    const ETH_HLEN: usize = 14;
    let tagged = frame.len() >= ETH_HLEN && frame[12..14] == [0x81, 0x00];
    mtu as usize + ETH_HLEN + if tagged { 4 } else { 0 }
}

/// Replays `opts`' window from `store` onto `wire`, paced as `opts.pacing` says.
pub fn replay(
    store: &Store,
    opts: &ReplayOptions,
    wire: &mut dyn Wire,
) -> Result<ReplayReport, ReplayError> {
    opts.pacing.check().map_err(ReplayError::BadPacing)?;
    let mut window = Window::open(store, &opts.query, None, false, None)?;
    let ethernet: Vec<bool> = window
        .out_ifaces
        .iter()
        .map(|i| i.linktype == LINKTYPE_ETHERNET)
        .collect();
    let mut rep = ReplayReport::default();
    let mut schedule = Schedule::new(opts.pacing);
    let mut t0: Option<Instant> = None;
    let mut late_sum = Duration::ZERO;
    let mut late_max = Duration::ZERO;
    let mut paced = 0u64;
    let walked = window.merge(opts.threads, |iface, ts_ns, orig_len, data, _options| {
        rep.first_ns.get_or_insert(ts_ns);
        rep.last_ns = Some(ts_ns);
        let n = &mut rep.not_sent;
        if (data.len() as u64) < u64::from(orig_len) {
            n.truncated += 1;
            return Ok(());
        }
        if !ethernet.get(iface as usize).copied().unwrap_or(false) {
            n.not_ethernet += 1;
            return Ok(());
        }
        if data.len() < 14 {
            n.too_short += 1;
            return Ok(());
        }
        if data.len() > max_frame(opts.mtu, data) {
            n.over_mtu += 1;
            return Ok(());
        }
        // Only packets that can be sent take a place in the schedule: `--pps` sends at its
        // rate, and the recording's offsets count from the first packet sent.
        let due = schedule.due(ts_ns, || *t0.get_or_insert_with(Instant::now));
        let start = *t0.get_or_insert_with(Instant::now);
        if let Some(due) = due {
            let woke = wait_until(due);
            let late = woke - due;
            late_sum += late;
            late_max = late_max.max(late);
            paced += 1;
        }
        match wire.send(data) {
            Ok(()) => {
                rep.sent += 1;
                rep.bytes_sent += data.len() as u64;
            }
            Err(WireError::TooLong) => n.over_mtu += 1,
            Err(WireError::QueueFull) => n.queue_full += 1,
            Err(WireError::Failed(e)) => {
                n.send_failed += 1;
                if rep.first_failure.is_none() {
                    rep.first_failure = Some(capsule_store::error::chain(&e));
                }
            }
            Err(WireError::Down(e)) => {
                rep.stopped = Some(capsule_store::error::chain(&WireError::Down(e)));
                return Err(Halt::Down);
            }
        }
        rep.elapsed = start.elapsed();
        Ok(())
    });
    match walked {
        Ok(()) | Err(Halt::Down) => {}
        Err(Halt::Export(e)) => return Err(e.into()),
    }
    if paced > 0 {
        rep.lateness_max = Some(late_max);
        rep.lateness_mean = Some(late_sum / paced.min(u64::from(u32::MAX)) as u32);
    }
    rep.read = window.report;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_pcap::Interface;
    use capsule_store::WriterConfig;

    /// Records what was sent and when.
    #[derive(Default)]
    struct Recorder {
        frames: Vec<(Instant, Vec<u8>)>,
        refuse_len: Option<usize>,
        down_after: Option<usize>,
    }

    impl Wire for Recorder {
        fn send(&mut self, frame: &[u8]) -> Result<(), WireError> {
            if Some(self.frames.len()) == self.down_after {
                return Err(WireError::Down(std::io::Error::other("gone")));
            }
            if Some(frame.len()) == self.refuse_len {
                return Err(WireError::TooLong);
            }
            self.frames.push((Instant::now(), frame.to_vec()));
            Ok(())
        }
    }

    fn eth_frame(n: u8, len: usize) -> Vec<u8> {
        let mut f = vec![n; len];
        f[12] = 0x08;
        f[13] = 0x00;
        f
    }

    /// A store of `packets` (ts, linktype index, orig_len, bytes).
    fn store_of(packets: &[(u64, u32, u32, Vec<u8>)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let cfg = WriterConfig {
            block_bytes: 4096,
            segment_bytes: 16 * 1024,
            threads: 1,
            ..WriterConfig::default()
        };
        let (mut w, _) = capsule_index::open_writer(dir.path(), cfg).unwrap();
        let eth = w.add_interface(Interface {
            linktype: 1,
            snaplen: 65535,
            name: Some("eth0".into()),
            options: Default::default(),
        });
        let raw = w.add_interface(Interface {
            linktype: 101,
            snaplen: 65535,
            name: None,
            options: Default::default(),
        });
        for (ts, kind, orig, data) in packets {
            let id = if *kind == 0 { eth } else { raw };
            w.append(id, *ts, *orig, data).unwrap();
        }
        w.finish().unwrap();
        dir
    }

    fn opts(pacing: Pacing) -> ReplayOptions {
        ReplayOptions {
            query: Query::all(),
            pacing,
            mtu: 1500,
            threads: 2,
        }
    }

    #[test]
    fn sends_the_window_in_order_and_counts_what_it_cannot_send_by_cause() {
        let base = 1_000_000_000u64;
        let mut pk = Vec::new();
        for i in 0..50u64 {
            let f = eth_frame(i as u8, 60 + i as usize);
            pk.push((base + i * 1000, 0, f.len() as u32, f));
        }
        pk.push((base + 60_000, 0, 2000, eth_frame(1, 100))); // truncated
        pk.push((base + 61_000, 0, 1515, eth_frame(2, 1515))); // over the MTU
        let mut tagged = eth_frame(3, 1518);
        tagged[12..14].copy_from_slice(&[0x81, 0x00]);
        pk.push((base + 62_000, 0, 1518, tagged.clone())); // fits: 802.1Q
        pk.push((base + 63_000, 1, 40, vec![0x45; 40])); // raw IP
        pk.push((base + 64_000, 0, 10, vec![0; 10])); // too short
        pk.push((base + 65_000, 0, 200, eth_frame(4, 200))); // the wire refuses it
        let dir = store_of(&pk);
        let store = Store::open(dir.path()).unwrap();
        let mut wire = Recorder {
            refuse_len: Some(200),
            ..Recorder::default()
        };
        let rep = replay(&store, &opts(Pacing::Top), &mut wire).unwrap();
        let mut want: Vec<Vec<u8>> = pk[..50].iter().map(|p| p.3.clone()).collect();
        want.push(tagged);
        let got: Vec<Vec<u8>> = wire.frames.iter().map(|f| f.1.clone()).collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the frames sent differ from the window's");
        assert_eq!(rep.sent, 51);
        assert_eq!(rep.read.packets, pk.len() as u64);
        assert_eq!(
            rep.not_sent,
            NotSent {
                truncated: 1,
                over_mtu: 2,
                not_ethernet: 1,
                too_short: 1,
                ..NotSent::default()
            }
        );
        assert_eq!(rep.not_sent.total() + rep.sent, rep.read.packets);
        assert_eq!(rep.lateness_max, None, "an unpaced replay has no schedule");
    }

    #[test]
    fn paced_replay_keeps_the_recorded_spacing_against_one_start_instant() {
        // 40 packets 2 ms apart, replayed at speed 2: 1 ms apart, 39 ms in all.
        let pk: Vec<_> = (0..40u64)
            .map(|i| (5_000_000_000 + i * 2_000_000, 0, 64, eth_frame(i as u8, 64)))
            .collect();
        let dir = store_of(&pk);
        let store = Store::open(dir.path()).unwrap();
        let mut wire = Recorder::default();
        let rep = replay(&store, &opts(Pacing::Original { speed: 2.0 }), &mut wire).unwrap();
        assert_eq!(rep.sent, 40);
        let t0 = wire.frames[0].0;
        for (i, (at, _)) in wire.frames.iter().enumerate() {
            let due = Duration::from_millis(i as u64);
            let off = *at - t0;
            assert!(
                off + Duration::from_micros(500) >= due,
                "packet {i} early: {off:?}"
            );
        }
        let total = wire.frames.last().unwrap().0 - t0;
        // The first send may itself be late by its wake-up: 1 ms of slack for that.
        assert!(
            total + Duration::from_millis(1) >= Duration::from_millis(39),
            "{total:?}"
        );
        // Generous (a shared machine), but no drift: the end is not 40 late wake-ups late.
        assert!(total < Duration::from_millis(39 + 30), "{total:?}");
        assert!(rep.lateness_max.is_some() && rep.lateness_mean <= rep.lateness_max);
    }

    #[test]
    fn an_interface_that_goes_away_stops_the_replay_with_what_was_sent() {
        let pk: Vec<_> = (0..20u64)
            .map(|i| (i * 10, 0, 64, eth_frame(i as u8, 64)))
            .collect();
        let dir = store_of(&pk);
        let store = Store::open(dir.path()).unwrap();
        let mut wire = Recorder {
            down_after: Some(5),
            ..Recorder::default()
        };
        let rep = replay(&store, &opts(Pacing::Pps(100_000.0)), &mut wire).unwrap();
        assert_eq!(rep.sent, 5);
        assert!(rep.stopped.as_deref().unwrap().contains("gone"), "{rep:?}");
    }
}
