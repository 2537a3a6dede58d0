//! When each replayed packet is due: its original spacing (scaled by `--speed`), a fixed
//! rate (`--pps`), or as fast as the interface takes them (`--topspeed`). Every due time is
//! an offset from one start instant, never from the previous send, so the lateness of one
//! packet (a slow send, a late wake-up) does not shift the ones after it: the schedule does
//! not drift.

use std::time::{Duration, Instant};

/// How a replay is paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// The recorded gaps between packets, divided by `speed` (2.0: twice as fast).
    Original { speed: f64 },
    /// A fixed rate: packet `n` is due `n / pps` seconds after the first.
    Pps(f64),
    /// No pacing: each packet as soon as the previous one was sent.
    Top,
}

impl Pacing {
    /// Checks the numbers: a speed or rate must be finite and above zero.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            Pacing::Original { speed } if !(speed.is_finite() && speed > 0.0) => {
                Err(format!("--speed must be above 0, not {speed}"))
            }
            Pacing::Pps(pps) if !(pps.is_finite() && pps > 0.0) => {
                Err(format!("--pps must be above 0, not {pps}"))
            }
            _ => Ok(()),
        }
    }
}

/// The due times of a replay, relative to the first packet's.
#[derive(Debug)]
pub(crate) struct Schedule {
    pacing: Pacing,
    /// The first packet's timestamp and the instant it was due (when it came).
    start: Option<(u64, Instant)>,
    /// Packets scheduled so far.
    n: u64,
}

impl Schedule {
    pub(crate) fn new(pacing: Pacing) -> Schedule {
        Schedule {
            pacing,
            start: None,
            n: 0,
        }
    }

    /// The due offset of the next packet (timestamp `ts_ns`) from the first packet's due
    /// instant; `None` when unpaced. Timestamps come in order; one earlier than the first
    /// (not possible from the merge) is due at once.
    pub(crate) fn offset(&mut self, ts_ns: u64, first_ts: u64) -> Option<Duration> {
        let n = self.n;
        self.n += 1;
        match self.pacing {
            Pacing::Top => None,
            Pacing::Original { speed } => {
                let gap = ts_ns.saturating_sub(first_ts) as f64 / speed;
                Some(Duration::from_nanos(gap.min(u64::MAX as f64) as u64))
            }
            Pacing::Pps(pps) => {
                let at = n as f64 * 1e9 / pps;
                Some(Duration::from_nanos(at.min(u64::MAX as f64) as u64))
            }
        }
    }

    /// The instant the packet stamped `ts_ns` is due, the first one's being `now`; `None`
    /// when unpaced.
    pub(crate) fn due(&mut self, ts_ns: u64, now: impl FnOnce() -> Instant) -> Option<Instant> {
        let (first_ts, t0) = *self.start.get_or_insert_with(|| (ts_ns, now()));
        self.offset(ts_ns, first_ts).map(|d| t0 + d)
    }
}

/// Below this much time left, the wait stops sleeping (a sleep wakes up tens of µs late:
/// the timer slack and the scheduler) and yields the CPU in a loop instead.
const SPIN: Duration = Duration::from_micros(100);

/// Waits until `deadline`: sleeps while far from it, yields the CPU for the last
/// [`SPIN`]. Returns the instant it woke (at or after `deadline`).
pub(crate) fn wait_until(deadline: Instant) -> Instant {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return now;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn original_pacing_scales_the_recorded_gaps_from_the_first_packet() {
        let t0 = Instant::now();
        let mut s = Schedule::new(Pacing::Original { speed: 2.0 });
        let ts = [
            1_000_000_000u64,
            1_000_000_000,
            1_001_000_000,
            1_003_000_000,
        ];
        let due: Vec<Duration> = ts.iter().map(|&t| s.due(t, || t0).unwrap() - t0).collect();
        assert_eq!(
            due,
            [0, 0, 500_000, 1_500_000]
                .map(Duration::from_nanos)
                .to_vec()
        );
    }

    #[test]
    fn a_fixed_rate_spaces_packets_evenly_whatever_their_timestamps() {
        let t0 = Instant::now();
        let mut s = Schedule::new(Pacing::Pps(1000.0));
        let due: Vec<Duration> = [5u64, 5, 999_999_999, 6]
            .iter()
            .map(|&t| s.due(t, || t0).unwrap() - t0)
            .collect();
        assert_eq!(due, [0u64, 1, 2, 3].map(Duration::from_millis).to_vec());
        let mut top = Schedule::new(Pacing::Top);
        assert_eq!(top.due(1, || t0), None);
    }

    #[test]
    fn speeds_and_rates_must_be_positive() {
        assert!(Pacing::Original { speed: 0.0 }.check().is_err());
        assert!(Pacing::Original { speed: f64::NAN }.check().is_err());
        assert!(Pacing::Pps(-1.0).check().is_err());
        assert!(Pacing::Pps(f64::INFINITY).check().is_err());
        assert!(Pacing::Original { speed: 0.5 }.check().is_ok());
        assert!(Pacing::Top.check().is_ok());
    }

    #[test]
    fn waits_end_at_or_after_their_deadline_and_not_long_after() {
        let mut worst = Duration::ZERO;
        for i in 0..20u64 {
            let deadline = Instant::now() + Duration::from_micros(300 + i * 50);
            let woke = wait_until(deadline);
            assert!(woke >= deadline);
            worst = worst.max(woke - deadline);
        }
        // Generous: the machine is shared; a wait is typically a few µs late.
        assert!(worst < Duration::from_millis(20), "worst {worst:?}");
    }
}
