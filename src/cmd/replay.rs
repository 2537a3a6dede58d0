//! `capsule replay`: a past window's packets sent onto an interface, paced as recorded.

use std::process::ExitCode;

use anyhow::{Context, Result};
use capsule_capture::{SendError, Transmitter};
use capsule_replay::{Pacing, ReplayOptions, ReplayReport, Wire, WireError};
use capsule_store::Store;

use crate::cli::ReplayArgs;
use crate::units;

/// capsule-capture's sending socket as the replay's wire.
struct Tx(Transmitter);

impl Wire for Tx {
    fn send(&mut self, frame: &[u8]) -> Result<(), WireError> {
        self.0.send(frame).map_err(|e| match e {
            SendError::TooLong { .. } => WireError::TooLong,
            SendError::QueueFull(_) => WireError::QueueFull,
            SendError::Down(e) => WireError::Down(e),
            SendError::Failed(e) => WireError::Failed(e),
        })
    }
}

pub fn run(a: &ReplayArgs) -> Result<ExitCode> {
    let query = a.q.window.query()?;
    let pacing = match (a.speed, a.pps, a.topspeed) {
        (_, _, true) => Pacing::Top,
        (_, Some(pps), _) => Pacing::Pps(pps),
        (speed, None, false) => Pacing::Original {
            speed: speed.unwrap_or(1.0),
        },
    };
    let store = Store::open(&a.q.store)?;
    refuse_captured_interface(&a.q.store, &a.iface)?;
    let tx = Transmitter::open(&a.iface).map_err(anyhow::Error::new)?;
    let mtu = tx.mtu();
    let opts = ReplayOptions {
        query,
        pacing,
        mtu,
        threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    let mut wire = Tx(tx);
    let rep = capsule_replay::replay(&store, &opts, &mut wire)
        .with_context(|| format!("cannot replay onto {}", a.iface))?;
    if a.json {
        crate::output::print_json(json(a, &opts, &rep));
    } else {
        print_report(a, opts.pacing, mtu, &rep);
    }
    for s in &rep.read.skipped {
        eprintln!(
            "capsule: warning: skipped damaged block {} of segment {} ({}): {} packets from {} \
             to {} were not sent: {}",
            s.block,
            s.seq,
            s.path.display(),
            s.packets,
            capsule_query::format_instant(s.first_ns),
            capsule_query::format_instant(s.last_ns),
            s.problem
        );
    }
    crate::notes::warn_unreadable(&rep.read.unreadable, "whatever it holds was not sent");
    for l in &rep.read.lost {
        eprintln!(
            "capsule: warning: segment {} ({}) lost a stretch this window reaches, whatever \
             it held was not sent: {}",
            l.seq,
            l.path.display(),
            l.problem
        );
    }
    crate::notes::note_window(
        &store.open_segments_checked()?.0,
        &opts.query,
        rep.read.packets == 0,
    );
    if let Some(why) = &rep.stopped {
        anyhow::bail!(
            "replay onto {} stopped after {} packets: {why}",
            a.iface,
            rep.sent
        );
    }
    if rep.not_sent.total() > 0 || rep.read.is_partial() {
        return Ok(ExitCode::from(crate::output::PARTIAL));
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses `iface` when a capture running now into `store` reads it: the replayed packets
/// would be captured into the store they came from.
fn refuse_captured_interface(store: &std::path::Path, iface: &str) -> Result<()> {
    let live = capsule_capture::status::live_capture(store)
        .with_context(|| format!("cannot read the capture status of {}", store.display()))?;
    if let Some(st) = live.filter(|s| s.iface == iface) {
        return Err(crate::output::Usage(format!(
            "refusing to replay onto {iface}: a capture of this store (pid {}, running since \
             {}, `capsule status --store {}`) is reading {iface}, so the packets would be \
             stored again; replay onto another interface",
            st.pid,
            capsule_query::format_instant(st.started_ns),
            store.display()
        ))
        .into());
    }
    Ok(())
}

fn pacing_text(p: Pacing) -> String {
    match p {
        Pacing::Original { speed: 1.0 } => "recorded gaps".into(),
        Pacing::Original { speed } => format!("recorded gaps at speed {speed}"),
        Pacing::Pps(pps) => format!("{pps} packets/s"),
        Pacing::Top => "top speed".into(),
    }
}

fn print_report(a: &ReplayArgs, pacing: Pacing, mtu: u32, rep: &ReplayReport) {
    println!(
        "sent {} of {} packets ({}) onto {} in {:.3} s",
        rep.sent,
        rep.read.packets,
        units::format_bytes(rep.bytes_sent),
        a.iface,
        rep.elapsed.as_secs_f64()
    );
    println!(
        "rate {} packets/s, {} ({})",
        units::format_count(rep.packets_per_s() as u64),
        crate::render::bps(rep.bits_per_s()),
        pacing_text(pacing)
    );
    if let (Some(max), Some(mean)) = (rep.lateness_max, rep.lateness_mean) {
        println!(
            "late against the schedule: worst {}, mean {}",
            units::format_duration_ns(max.as_nanos() as u64),
            units::format_duration_ns(mean.as_nanos() as u64)
        );
    }
    let n = &rep.not_sent;
    let causes: Vec<String> = [
        ("truncated in the store", n.truncated),
        (&*format!("over the MTU ({mtu})"), n.over_mtu),
        ("not Ethernet", n.not_ethernet),
        ("shorter than 14 bytes", n.too_short),
        ("transmit queue full", n.queue_full),
        ("send failed", n.send_failed),
    ]
    .into_iter()
    .filter(|(_, c)| *c > 0)
    .map(|(what, c)| format!("{c} {what}"))
    .collect();
    if !causes.is_empty() {
        let line = format!("not sent: {}", causes.join(", "));
        for l in crate::render::table::wrap(
            &line,
            Some(crate::render::table::output_width().unwrap_or(80)),
        ) {
            println!("{l}");
        }
    }
    if let Some(f) = &rep.first_failure {
        println!("first send failure: {f}");
    }
}

fn json(a: &ReplayArgs, opts: &ReplayOptions, rep: &ReplayReport) -> serde_json::Value {
    let (mode, speed, pps) = match opts.pacing {
        Pacing::Original { speed } => ("recorded", Some(speed), None),
        Pacing::Pps(p) => ("pps", None, Some(p)),
        Pacing::Top => ("topspeed", None, None),
    };
    let not_sent: serde_json::Map<String, serde_json::Value> = rep
        .not_sent
        .causes()
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).into()))
        .collect();
    serde_json::json!({
        "iface": a.iface,
        "mtu": opts.mtu,
        "pacing": { "mode": mode, "speed": speed, "pps": pps, "text": pacing_text(opts.pacing) },
        "from_ns": opts.query.from_ns, "to_ns": opts.query.to_ns,
        "first_ns": rep.first_ns, "last_ns": rep.last_ns,
        "packets": rep.read.packets,
        "sent": rep.sent,
        "bytes_sent": rep.bytes_sent,
        "not_sent": not_sent,
        "not_sent_total": rep.not_sent.total(),
        "first_failure": rep.first_failure,
        "elapsed_seconds": rep.elapsed.as_secs_f64(),
        "packets_per_s": rep.packets_per_s(),
        "bits_per_s": rep.bits_per_s(),
        "lateness_max_ns": rep.lateness_max.map(|d| d.as_nanos() as u64),
        "lateness_mean_ns": rep.lateness_mean.map(|d| d.as_nanos() as u64),
        "blocks_read": rep.read.blocks_read, "blocks_total": rep.read.blocks_total,
        "partial": rep.read.is_partial(),
        "stopped": rep.stopped,
    })
}
