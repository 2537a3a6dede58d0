//! `capsule capture`: one or several network interfaces into a store until SIGINT or
//! SIGTERM.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capsule_capture::live::{self, CaptureConfig, Mode};

use crate::cli::{CaptureArgs, CaptureMode, XdpVariant};
use crate::notes::{print_disk_full, print_open_report};
use crate::output::{print_json, Usage};

impl CaptureArgs {
    /// The capture of each interface these arguments ask for, in order: `--mode`, or the
    /// interface's own `--iface-mode`. An `--iface-mode` for an interface not captured is a
    /// usage error; an interface named twice is refused by `live::open_all`.
    fn configs(&self) -> Result<Vec<CaptureConfig>, Usage> {
        if self.iface.is_empty() {
            return Err(Usage(
                "--iface is needed: the interface to capture on".into(),
            ));
        }
        for (i, iface) in self.iface.iter().enumerate() {
            if self.iface[..i].contains(iface) {
                return Err(Usage(format!(
                    "--iface {iface} is given twice: name each interface once"
                )));
            }
        }
        if let Some((i, _)) = self
            .iface_mode
            .iter()
            .find(|(i, _)| !self.iface.contains(i))
        {
            return Err(Usage(format!(
                "--iface-mode {i}=...: {i} is not one of the interfaces captured (--iface {})",
                self.iface.join(" --iface ")
            )));
        }
        Ok(self
            .iface
            .iter()
            .map(|iface| {
                let mode = self
                    .iface_mode
                    .iter()
                    .rev()
                    .find(|(i, _)| i == iface)
                    .map_or(self.mode, |(_, m)| *m);
                self.config(iface, mode)
            })
            .collect())
    }

    /// The capture of `iface` in `mode`.
    fn config(&self, iface: &str, mode: CaptureMode) -> CaptureConfig {
        CaptureConfig {
            iface: iface.to_string(),
            mode: match mode {
                CaptureMode::Auto => Mode::Auto,
                CaptureMode::Xdp => Mode::Xdp,
                CaptureMode::XdpNative => Mode::XdpNative,
                CaptureMode::XdpGeneric => Mode::XdpGeneric,
                CaptureMode::Afpacket => Mode::Afpacket,
            },
            queues: self.queues.clone(),
            frame_size: self.frame_size,
            snaplen: self.snaplen,
            fanout_group: self.fanout_group,
            ring_bytes: self.ring_size,
            state_dir: Some(self.store.clone()),
            take_interface: self.take_interface,
            xdp_carrier: match self.xdp_variant {
                XdpVariant::Auto => None,
                XdpVariant::Metadata => Some(live::Carrier::Metadata),
                XdpVariant::Headroom => Some(live::Carrier::Headroom),
                XdpVariant::Plain => Some(live::Carrier::None),
            },
        }
    }
}

pub fn run(a: &CaptureArgs) -> Result<ExitCode> {
    let configs = a.configs()?;
    // A misspelt interface fails here, before the store is created or touched.
    live::check_interfaces(&configs)?;
    // One word, so the summary line keeps its shape: `a,b`.
    let iface = &a.iface.join(",");
    // Before anything is set up: the --user account and whether it can use the store.
    let account = crate::live::privs::prepare(a)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install a signal handler")?;
    }
    // SIGHUP: the config file is read again at the next status turn (about a second).
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())
        .context("cannot install a signal handler")?;
    let (writer_cfg, note) = a.writer.config(&a.store)?;
    let cfg = capsule_store::WriterConfig {
        // Live packets cannot wait: compress faster rather than let the ring overflow.
        adaptive: true,
        // What the ladder wrote below `--level` is recompressed in the background, at the
        // lowest priority, pausing while capture is short of CPU.
        compact: true,
        // And, with --age-tier, old segments at the tier's level after that.
        age_tier: a.age_tier,
        ..writer_cfg
    };
    // With [tier]: segments are uploaded beside the capture, and only uploaded ones leave
    // the disk (docs/tier.md).
    let tier =
        crate::tier::upload_client_of(crate::request::config_of(a.config.as_deref())?.as_ref())?;
    let cfg = capsule_store::WriterConfig {
        tier: tier.is_some(),
        ..cfg
    };
    // The store first: a locked or unusable store fails in well under a second, before the
    // interface is touched (XDP attach attempts, rings of hundreds of MiB).
    let (mut writer, opened) = capsule_index::open_writer(&a.store, cfg)?;
    let budgets = capsule_store::budget::Budgets {
        max_bytes: writer.config().max_bytes,
        min_free: writer.config().min_free,
        max_age: writer.config().max_age,
    };
    let upload = match tier {
        Some(c) => Some(crate::tier::Upload::start(
            c,
            &a.store,
            writer.budget_handle(),
            budgets,
        )?),
        None => None,
    };
    let mut reload = crate::live::reload::Reload::new(a, budgets, writer.budget_handle());
    if let Some(n) = note {
        crate::logging::note(&n);
    }
    print_open_report(&opened, a.json);
    // Live alerts when the config names a sink: loaded before the interface is touched, so
    // a bad file fails early.
    // The config's [cutoff] applies to what this capture stores; its sinks start here too:
    // an unreadable secret or CA file fails before capture.
    let alert_config = a
        .config
        .as_deref()
        .map(crate::request::load_config)
        .transpose()
        .and_then(|c| {
            let cut = crate::request::cutoff_from(c.as_ref().zip(a.config.as_deref()), None)?;
            let live = match c {
                Some(c) => crate::live::alerts::Sinks::open(&c)?.map(|s| (c, s)),
                None => None,
            };
            Ok((live, cut))
        });
    let alert_config = match alert_config {
        Ok((live, cut)) => {
            if let Some(cut) = cut {
                writer.set_cut_policy(Box::new(cut));
            }
            live
        }
        Err(e) => {
            let _ = writer.finish();
            return Err(e);
        }
    };
    if let Some(addr) = &a.metrics {
        match crate::metrics::serve(addr, &a.store) {
            Ok(bound) => {
                crate::logging::note(&format!("capsule: metrics at http://{bound}/metrics"))
            }
            Err(e) => {
                let _ = writer.finish();
                return Err(e);
            }
        }
    }
    // A node of a fleet publishes its sealed segments on a thread of its own.
    let publisher = match a
        .config
        .as_deref()
        .map(crate::request::load_config)
        .transpose()
    {
        Ok(c) => c.and_then(|c| crate::publisher::Publisher::start(&a.store, c, None)),
        Err(e) => {
            let _ = writer.finish();
            return Err(e);
        }
    };
    let captures = match live::open_all(&configs) {
        Ok(c) => c,
        Err(e) => {
            // Nothing was captured (every interface opened is put back); seal nothing,
            // release the lock.
            let _ = writer.finish();
            return Err(e.into());
        }
    };
    // Set up: from here on only what the capture still needs.
    if let Err(e) = crate::live::privs::drop(&captures, account.as_ref()) {
        let _ = writer.finish();
        return Err(e);
    }
    let modes: Vec<(String, String)> = captures
        .iter()
        .map(|c| (c.iface().to_string(), c.description().to_string()))
        .collect();
    let desc = match &modes[..] {
        [(_, d)] => d.to_string(),
        _ => modes
            .iter()
            .map(|(i, d)| format!("{i}: {d}"))
            .collect::<Vec<_>>()
            .join("; "),
    };
    // The status file first: whoever sees the line below may read it at once.
    let names: Vec<(&str, &str)> = modes.iter().map(|(i, d)| (&i[..], &d[..])).collect();
    let methods: Vec<live::CaptureMethod> = captures.iter().map(|c| c.method().clone()).collect();
    let mut status = capsule_capture::status::StatusFile::with_methods(&a.store, &names, &methods);
    let alerts = match alert_config
        .map(|(c, sinks)| crate::live::alerts::LiveAlerts::start(&a.store, c, sinks))
        .transpose()
    {
        Ok(al) => al,
        Err(e) => {
            let _ = writer.finish();
            return Err(e);
        }
    };
    crate::logging::note(&format!("capsule: capturing on {iface} with {desc}"));
    if alerts.is_some() {
        crate::logging::note("capsule: live alerts on, see `capsule status`");
    }
    // Under systemd (Type=notify): ready now, and a watchdog ping from the capture loop
    // itself, so a wedged loop is restarted. Without NOTIFY_SOCKET these do nothing.
    let _ = sd_notify::notify(
        false,
        &[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&format!("capturing on {iface} with {desc}")),
        ],
    );
    let mut watchdog_usec = 0u64;
    let mut watchdog = sd_notify::watchdog_enabled(false, &mut watchdog_usec)
        .then(|| Watchdog::new(Duration::from_micros(watchdog_usec), Instant::now()));
    let t0 = Instant::now();
    let mut last_log = Instant::now();
    let gauge = writer.pressure_gauge();
    let on_stats = |states: &[live::IfaceState]| {
        if watchdog.as_mut().is_some_and(|w| w.due(Instant::now())) {
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
        }
        status.update_many(states, gauge.read());
        if hup.swap(false, std::sync::atomic::Ordering::Relaxed) {
            match reload.as_mut() {
                Some(reload) => reload.run(alerts.as_ref()),
                None => crate::logging::note("capsule: SIGHUP: no --config file to reload"),
            }
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            for st in states {
                let r = &st.report;
                tracing::info!(
                    iface = st.iface,
                    packets = r.packets,
                    bytes = r.wire_bytes,
                    drops = r.drops(),
                    "capturing"
                );
            }
            last_log = Instant::now();
        }
    };
    let results = live::run_all(captures, &mut writer, &stop, on_stats);
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    // Seal what was captured whether the capture ended well or not.
    let finished = writer.finish();
    // The backlog left waits in the ledger for the next writer.
    if let Some(u) = upload {
        u.stop();
    }
    status.finish();
    if let Some(p) = publisher {
        p.finish();
    }
    if let Some(al) = alerts {
        al.finish();
    }
    let mut reports = Vec::with_capacity(results.len());
    let mut failed = Vec::new();
    for (r, (name, mode)) in results.into_iter().zip(&modes) {
        match r {
            Ok(rep) => reports.push((&name[..], &mode[..], rep)),
            Err(e) => failed.push(anyhow::Error::new(e)),
        }
    }
    if reports.is_empty() {
        return Err(failed.remove(0));
    }
    let written = finished?;
    // The sums over every interface that ran to the end.
    let mut rep = live::LiveReport::default();
    let (mut seen, mut drops) = (0, 0);
    for (_, _, r) in &reports {
        rep.packets += r.packets;
        rep.wire_bytes += r.wire_bytes;
        rep.vlan_restored += r.vlan_restored;
        rep.truncated += r.truncated;
        seen += r.seen();
        drops += r.drops();
    }
    let secs = t0.elapsed().as_secs_f64();
    // Packets dropped for a full disk reached the writer, so the readers counted them as
    // captured: they were not stored.
    let stored = rep.packets.saturating_sub(written.disk_full_drops);
    if a.json {
        let mut causes = serde_json::to_value(drop_causes_of(&reports))?;
        causes["disk_full"] = written.disk_full_drops.into();
        let interfaces: Vec<_> = reports
            .iter()
            .map(|(name, mode, r)| {
                serde_json::json!({
                    "iface": name, "mode": mode, "packets": r.packets, "bytes": r.wire_bytes,
                    "seen": r.seen(), "dropped": r.drops(),
                    "drop_causes": capsule_capture::status::DropCauses::of(r),
                    "vlan_restored": r.vlan_restored, "truncated": r.truncated,
                })
            })
            .collect();
        print_json(serde_json::json!({
            "iface": iface, "mode": desc, "packets": stored, "bytes": rep.wire_bytes,
            "seconds": secs, "seen": seen,
            "dropped": drops + written.disk_full_drops, "drop_causes": causes,
            "vlan_restored": rep.vlan_restored, "truncated": rep.truncated,
            "sealed": written.sealed.len(), "store_bytes": written.store_bytes,
            "interfaces": interfaces,
            "failed": failed.iter().map(|e| format!("{e:#}")).collect::<Vec<_>>(),
            "cut_packets": written.cut_packets,
        }));
    } else {
        let causes = match &reports[..] {
            [(_, _, r)] => capsule_capture::status::drop_causes(r),
            _ => String::new(),
        };
        println!(
            "captured {} packets ({}) on {iface} in {secs:.1} s; seen {seen}, dropped \
             {}{causes}; {} VLAN tags restored, {} packets over 256 KiB cut; {} segment(s) \
             sealed, store now {}",
            stored,
            crate::units::format_bytes(rep.wire_bytes),
            drops + written.disk_full_drops,
            rep.vlan_restored,
            rep.truncated,
            written.sealed.len(),
            crate::units::format_bytes(written.store_bytes)
        );
        if reports.len() > 1 {
            for (name, _, r) in &reports {
                println!(
                    "  {name}: {} packets ({}), seen {}, dropped {}{}",
                    r.packets,
                    crate::units::format_bytes(r.wire_bytes),
                    r.seen(),
                    r.drops(),
                    capsule_capture::status::drop_causes(r)
                );
            }
        }
    }
    if written.cut_packets > 0 && !a.json {
        println!(
            "cut-off: {} packets not stored (the index counts them; `capsule flows` shows \
             which flows were cut)",
            written.cut_packets
        );
    }
    // Packets dropped for a full disk were captured (counted above) but not stored.
    print_disk_full(&written, a.json);
    // An interface whose reader failed while the others went on: its error, exit 1.
    if let Some(e) = failed.into_iter().next() {
        return Err(e);
    }
    Ok(ExitCode::SUCCESS)
}

/// Drops by cause summed over the interfaces.
fn drop_causes_of(
    reports: &[(&str, &str, live::LiveReport)],
) -> capsule_capture::status::DropCauses {
    let mut c = capsule_capture::status::DropCauses::default();
    for (_, _, r) in reports {
        let d = capsule_capture::status::DropCauses::of(r);
        c.packet_ring_full += d.packet_ring_full;
        c.xsk_ring_full += d.xsk_ring_full;
        c.xsk_dropped += d.xsk_dropped;
        c.no_socket += d.no_socket;
        c.no_room += d.no_room;
        c.pipeline += d.pipeline;
        c.invalid += d.invalid;
    }
    c
}

/// How often the capture loop pings systemd's watchdog. It can ping only when the readers
/// report, about once a second ([`REPORT_EVERY`]), so it pings at the last report that
/// comes before half the watchdog's interval has passed, not the first one after: waiting
/// for "half the interval passed" would, with a report landing a hair early, put the next
/// ping a whole report later (a 2 s watchdog then saw gaps of 2.007 s, long enough for
/// systemd to kill a healthy capture). The longest gap is half the interval plus a
/// report's lateness.
struct Watchdog {
    every: Duration,
    last: Instant,
}

/// The readers report their counters about this often (`on_stats` of `live::run_all`).
const REPORT_EVERY: Duration = Duration::from_secs(1);

impl Watchdog {
    /// A watchdog of `interval` (systemd's `WATCHDOG_USEC`), last fed at `now`.
    fn new(interval: Duration, now: Instant) -> Self {
        Self {
            every: (interval / 2).saturating_sub(REPORT_EVERY),
            last: now,
        }
    }

    /// Whether a report arriving at `now` must ping; if so, counts it as the last ping.
    fn due(&mut self, now: Instant) -> bool {
        let due = now.saturating_duration_since(self.last) >= self.every;
        if due {
            self.last = now;
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports about a second apart, each a little earlier or later: the gap between two
    /// pings stays within half the watchdog's interval plus a report's lateness.
    fn worst_gap(interval: Duration, reports: &[Duration]) -> Duration {
        let t0 = Instant::now();
        let mut w = Watchdog::new(interval, t0);
        let mut last = t0;
        let mut worst = Duration::ZERO;
        for at in reports {
            let now = t0 + *at;
            if w.due(now) {
                worst = worst.max(now - last);
                last = now;
            }
        }
        worst
    }

    #[test]
    fn a_report_a_hair_early_still_pings_a_two_second_watchdog() {
        // The CI's case: reports 1 s apart, one landing 1 ms short of the previous ping + 1 s.
        let reports: Vec<Duration> = [1000, 2001, 3000, 4001, 5001]
            .iter()
            .map(|ms| Duration::from_millis(*ms))
            .collect();
        let worst = worst_gap(Duration::from_secs(2), &reports);
        assert!(worst <= Duration::from_millis(1002), "gap {worst:?}");
    }

    #[test]
    fn a_long_watchdog_is_pinged_within_half_its_interval() {
        // 30 s (the unit file's WatchdogSec): reports every 1.01 s for two minutes.
        let reports: Vec<Duration> = (1..120).map(|i| Duration::from_millis(i * 1010)).collect();
        let worst = worst_gap(Duration::from_secs(30), &reports);
        assert!(worst <= Duration::from_secs(15), "gap {worst:?}");
        assert!(
            worst >= Duration::from_secs(13),
            "pinged far too often: {worst:?}"
        );
    }
}
