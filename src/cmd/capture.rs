//! `capsule capture`: a network interface into a store until SIGINT or SIGTERM.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};

use super::print_open_report;
use crate::cli::{CaptureArgs, CaptureMode};

/// The capture chosen by `--mode`.
enum Capturer {
    Xdp(capsule_capture::xdp::XdpCapture),
    Packet(capsule_capture::live::Live),
}

fn parse_queues(s: &str) -> Result<capsule_capture::xdp::Queues> {
    if s == "all" {
        return Ok(capsule_capture::xdp::Queues::All);
    }
    let list = s
        .split(',')
        .map(|q| {
            q.trim()
                .parse::<u32>()
                .with_context(|| format!("--queues: {q:?} is not a queue number (or use `all`)"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(capsule_capture::xdp::Queues::List(list))
}

fn open_capturer(a: &CaptureArgs) -> Result<(Capturer, String)> {
    use capsule_capture::ring::xsk::{XdpAttach, XskConfig};
    use capsule_capture::xdp::{XdpCapture, XdpConfig};
    let attach = match a.mode {
        CaptureMode::Auto | CaptureMode::Xdp => vec![XdpAttach::Native, XdpAttach::Generic],
        CaptureMode::XdpNative => vec![XdpAttach::Native],
        CaptureMode::XdpGeneric => vec![XdpAttach::Generic],
        CaptureMode::Afpacket => vec![],
    };
    let mut why_not_xdp = None;
    if !attach.is_empty() {
        let cfg = XdpConfig {
            iface: a.iface.clone(),
            queues: parse_queues(&a.queues)?,
            attach,
            socket: XskConfig {
                frame_size: a.frame_size,
                ..XskConfig::default()
            },
            umem_bytes: Some(a.ring_size),
            snaplen: a.snaplen,
        };
        match XdpCapture::open(cfg) {
            Ok(x) => {
                let desc = x.setup().to_string();
                return Ok((Capturer::Xdp(x), desc));
            }
            Err(e) if matches!(a.mode, CaptureMode::Auto) => why_not_xdp = Some(e.to_string()),
            Err(e) => return Err(e.into()),
        }
    }
    let ring_bytes = a.ring_size;
    let block_size: u32 = 1 << 22;
    let ring = capsule_capture::ring::RingConfig {
        block_size,
        block_nr: (ring_bytes / u64::from(block_size)).clamp(2, 4096) as u32,
        fanout_group: a.fanout_group,
        ..Default::default()
    };
    let live = capsule_capture::live::Live::open(capsule_capture::live::LiveConfig {
        iface: a.iface.clone(),
        snaplen: a.snaplen,
        ring,
    })?;
    let mut desc = format!(
        "AF_PACKET (TPACKET_V3 ring of {} MiB)",
        (u64::from(ring.block_nr) * u64::from(block_size)) >> 20
    );
    if let Some(why) = why_not_xdp {
        desc.push_str(&format!("; AF_XDP was not possible: {why}"));
    }
    Ok((Capturer::Packet(live), desc))
}

pub fn run(a: &CaptureArgs) -> Result<ExitCode> {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let iface = &a.iface;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install a signal handler")?;
    }
    let (capturer, desc) = open_capturer(a)?;
    let cfg = capsule_store::WriterConfig {
        // Live packets cannot wait: compress faster rather than let the ring overflow.
        adaptive: true,
        ..a.writer.config()?
    };
    let (mut writer, opened) = capsule_index::open_writer(&a.store, cfg)?;
    print_open_report(&opened);
    eprintln!("capsule: capturing on {iface} with {desc}");
    let mut status = capsule_capture::status::StatusFile::new(&a.store, iface, &desc);
    let t0 = Instant::now();
    let mut last_log = Instant::now();
    let gauge = writer.pressure_gauge();
    let on_stats = |r: &capsule_capture::live::LiveReport| {
        status.update(r, gauge.read());
        if last_log.elapsed() >= std::time::Duration::from_secs(10) {
            tracing::info!(
                packets = r.packets,
                bytes = r.wire_bytes,
                drops = r.drops(),
                "capturing"
            );
            last_log = Instant::now();
        }
    };
    let result = match capturer {
        Capturer::Xdp(x) => x.run(&mut writer, &stop, on_stats),
        Capturer::Packet(mut live) => live.run(&mut writer, &stop, on_stats),
    };
    // Seal what was captured whether the capture ended well or not.
    let finished = writer.finish();
    status.finish();
    let rep = result?;
    let written = finished?;
    println!(
        "captured {} packets ({} bytes) on {iface} in {:.1} s; seen {}, dropped {}{}; \
         {} VLAN tags restored, {} packets over 256 KiB cut; {} segment(s) sealed, \
         store now {} bytes",
        rep.packets,
        rep.wire_bytes,
        t0.elapsed().as_secs_f64(),
        rep.seen(),
        rep.drops(),
        capsule_capture::status::drop_causes(&rep),
        rep.vlan_restored,
        rep.truncated,
        written.sealed.len(),
        written.store_bytes
    );
    Ok(ExitCode::SUCCESS)
}
