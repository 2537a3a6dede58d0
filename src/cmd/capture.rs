//! `capsule capture`: a network interface into a store until SIGINT or SIGTERM.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capsule_capture::live::{self, CaptureConfig, Mode};

use super::{print_disk_full, print_json, print_open_report};
use crate::cli::{CaptureArgs, CaptureMode};

impl CaptureArgs {
    /// The capture these arguments ask for.
    fn config(&self) -> CaptureConfig {
        CaptureConfig {
            iface: self.iface.clone(),
            mode: match self.mode {
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
        }
    }
}

pub fn run(a: &CaptureArgs) -> Result<ExitCode> {
    let iface = &a.iface;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install a signal handler")?;
    }
    let (writer_cfg, note) = a.writer.config(&a.store)?;
    let cfg = capsule_store::WriterConfig {
        // Live packets cannot wait: compress faster rather than let the ring overflow.
        adaptive: true,
        // What the ladder wrote below `--level` is recompressed in the background, at the
        // lowest priority, pausing while capture is short of CPU.
        compact: true,
        ..writer_cfg
    };
    // The store first: a locked or unusable store fails in well under a second, before the
    // interface is touched (XDP attach attempts, rings of hundreds of MiB).
    let (mut writer, opened) = capsule_index::open_writer(&a.store, cfg)?;
    if let Some(n) = note {
        eprintln!("{n}");
    }
    print_open_report(&opened, a.json);
    // Live alerts when the config names a sink: loaded before the interface is touched, so
    // a bad file fails early.
    let alert_config = a.config.as_deref().map(super::config::load).transpose();
    let alert_config = match alert_config.and_then(|c| {
        // The config's [cutoff] applies to what this capture stores.
        let cut = super::cutoff_from(c.as_ref().zip(a.config.as_deref()), None)?;
        Ok((c, cut))
    }) {
        Ok((c, cut)) => {
            if let Some(cut) = cut {
                writer.set_cut_policy(Box::new(cut));
            }
            c
        }
        Err(e) => {
            let _ = writer.finish();
            return Err(e);
        }
    };
    if let Some(addr) = &a.metrics {
        match crate::metrics::serve(addr, &a.store) {
            Ok(bound) => eprintln!("capsule: metrics at http://{bound}/metrics"),
            Err(e) => {
                let _ = writer.finish();
                return Err(e);
            }
        }
    }
    let capturer = match live::open(&a.config()) {
        Ok(c) => c,
        Err(e) => {
            // Nothing was captured; seal nothing, release the lock.
            let _ = writer.finish();
            return Err(e.into());
        }
    };
    let desc = capturer.description().to_string();
    // The status file first: whoever sees the line below may read it at once.
    let mut status = capsule_capture::status::StatusFile::new(&a.store, iface, &desc);
    let alerts = alert_config.and_then(|c| super::live_alerts::LiveAlerts::start(&a.store, c));
    eprintln!("capsule: capturing on {iface} with {desc}");
    if alerts.is_some() {
        eprintln!("capsule: live alerts on, see `capsule status`");
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
    let watchdog = sd_notify::watchdog_enabled(false, &mut watchdog_usec)
        .then(|| Duration::from_micros(watchdog_usec) / 2);
    let mut last_ping = Instant::now();
    let t0 = Instant::now();
    let mut last_log = Instant::now();
    let gauge = writer.pressure_gauge();
    let on_stats = |r: &live::LiveReport| {
        if watchdog.is_some_and(|every| last_ping.elapsed() >= every) {
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
            last_ping = Instant::now();
        }
        status.update(r, gauge.read());
        if last_log.elapsed() >= Duration::from_secs(10) {
            tracing::info!(
                packets = r.packets,
                bytes = r.wire_bytes,
                drops = r.drops(),
                "capturing"
            );
            last_log = Instant::now();
        }
    };
    let result = capturer.run(&mut writer, &stop, on_stats);
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    // Seal what was captured whether the capture ended well or not.
    let finished = writer.finish();
    status.finish();
    if let Some(al) = alerts {
        al.finish();
    }
    let rep = result?;
    let written = finished?;
    let secs = t0.elapsed().as_secs_f64();
    if a.json {
        let mut causes = serde_json::to_value(capsule_capture::status::DropCauses::of(&rep))?;
        causes["disk_full"] = written.disk_full_drops.into();
        print_json(serde_json::json!({
            "iface": iface, "mode": desc, "packets": rep.packets, "bytes": rep.wire_bytes,
            "seconds": secs, "seen": rep.seen(),
            "dropped": rep.drops() + written.disk_full_drops, "drop_causes": causes,
            "vlan_restored": rep.vlan_restored, "truncated": rep.truncated,
            "sealed": written.sealed.len(), "store_bytes": written.store_bytes,
            "cut_packets": written.cut_packets,
        }));
    } else {
        println!(
            "captured {} packets ({} bytes) on {iface} in {secs:.1} s; seen {}, dropped {}{}; \
             {} VLAN tags restored, {} packets over 256 KiB cut; {} segment(s) sealed, \
             store now {} bytes",
            rep.packets,
            rep.wire_bytes,
            rep.seen(),
            rep.drops() + written.disk_full_drops,
            capsule_capture::status::drop_causes(&rep),
            rep.vlan_restored,
            rep.truncated,
            written.sealed.len(),
            written.store_bytes
        );
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
    Ok(ExitCode::SUCCESS)
}
