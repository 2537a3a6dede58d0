//! The status view (`/status`): the capture writing the store (state, live rates, drops by
//! cause, each interface), the disk and the budgets, how far back the store goes and how
//! fresh its newest packet is, compaction, the object-store tier and live alerts. The page
//! reloads itself every few seconds (a `refresh` header of the page: no script needed).

use std::fmt::Write as _;

use hyper::Response;

use super::super::body::Body;
use super::super::guard::{Failure, Guard};
use super::pages::{esc, page, respond, Nav, Window};
use crate::units::{format_bytes, format_duration_ns};

/// Seconds between two reloads of the page.
const REFRESH_S: u64 = 5;

/// `GET /status`: the capture and the store, reloaded every [`REFRESH_S`] seconds.
pub(super) async fn status(g: Guard, nav: Nav) -> Response<Body> {
    let store = g.server.store.clone();
    let work = move || {
        let a =
            capsule_answers::status::answer(&store, &capsule_answers::status::Request::default())
                .map_err(|e| Failure::Server(format!("{e:#}")))?;
        // The disk holding the store: its size and what is free (unknown: not shown).
        let disk = capsule_store::budget::disk_space(&store).ok();
        Ok((a, disk))
    };
    let (g, (a, disk)) = match g.blocking("status", false, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let now = capsule_store::now_ns();
    let ago = |ns: u64| format_duration_ns(now.saturating_sub(ns));
    let mut b = String::from("<h1>Capture status</h1><dl class=\"status\">");
    let mut row = |id: &str, k: &str, v: String| {
        let _ = write!(
            b,
            "<dt>{}</dt><dd data-testid=\"status-{id}\">{}</dd>",
            esc(k),
            esc(&v)
        );
    };
    match &a.st {
        None => row("capture", "Capture", "none has run on this store".into()),
        Some(s) => {
            let state = if a.live {
                "running"
            } else if s.running {
                "not running (stopped without a clean exit)"
            } else {
                "stopped"
            };
            row(
                "capture",
                "Capture",
                format!(
                    "{state}, pid {} on {} since {}; {}",
                    s.pid,
                    s.iface,
                    capsule_query::format_instant(s.started_ns),
                    s.mode.split(", queues").next().unwrap_or(&s.mode)
                ),
            );
            if a.live {
                row(
                    "rates",
                    "Live rates",
                    format!(
                        "{:.0} packets/s, {:.1} Mbit/s, {:.0} drops/s",
                        s.packets_per_s,
                        s.bits_per_s / 1e6,
                        s.drops_per_s
                    ),
                );
            }
            row(
                "packets",
                "Packets stored / seen",
                format!(
                    "{} / {} ({})",
                    s.packets,
                    s.seen,
                    format_bytes(s.wire_bytes)
                ),
            );
            row(
                "drops",
                "Drops by cause",
                format!(
                    "{} in all: {}",
                    s.drops,
                    crate::render::status::drop_causes(&s.drop_causes, &s.mode, true)
                ),
            );
            if s.interfaces.len() > 1 {
                for i in &s.interfaces {
                    row(
                        "interface",
                        &format!("Interface {}", i.iface),
                        format!(
                            "{} / {} packets, dropped {} ({}); {:.0} packets/s, {:.1} Mbit/s{}",
                            i.packets,
                            i.seen,
                            i.drops,
                            crate::render::status::drop_causes(&i.drop_causes, &i.mode, false),
                            i.packets_per_s,
                            i.bits_per_s / 1e6,
                            i.error
                                .as_ref()
                                .map_or(String::new(), |e| format!("; stopped: {e}"))
                        ),
                    );
                }
            }
            let p = &s.store;
            row(
                "writer",
                "Store writer",
                if s.drop_causes.disk_full > 0 {
                    format!(
                        "the disk filled: {} packets dropped for want of room",
                        s.drop_causes.disk_full
                    )
                } else if p.disk_bound {
                    "the disk is busy: blocks queue for it".to_string()
                } else {
                    "the disk keeps up".to_string()
                },
            );
            row(
                "updated",
                "Status written",
                format!("{} ago", ago(s.updated_ns)),
            );
        }
    }
    row(
        "store",
        "Store",
        format!(
            "{} segment(s), {} packets, {}",
            a.segs.len(),
            a.packets,
            format_bytes(a.bytes)
        ),
    );
    if let Some((size, free)) = disk {
        row(
            "disk",
            "Disk",
            format!(
                "{} free of {} ({:.1}%)",
                format_bytes(free),
                format_bytes(size),
                free as f64 * 100.0 / size.max(1) as f64
            ),
        );
    }
    row(
        "budgets",
        "Budgets",
        crate::render::status::describe_budgets(a.saved.as_ref()),
    );
    row(
        "first",
        "Oldest packet",
        match a.first {
            Some(f) => format!(
                "{} (the store spans {})",
                capsule_query::format_instant(f),
                format_duration_ns(a.span)
            ),
            None => "—".into(),
        },
    );
    row(
        "freshness",
        "Newest packet (freshness)",
        match a.last {
            Some(l) => format!("{} ({} ago)", capsule_query::format_instant(l), ago(l)),
            None => "—".into(),
        },
    );
    let cp = &a.cp;
    row(
        "horizon",
        "Retention horizon",
        match (cp.budget, cp.horizon_now_ns) {
            (Some(b), Some(h)) => format!(
                "a budget of {} holds {} of packets at the compression ratio now, {} after \
                 compaction",
                format_bytes(b),
                format_duration_ns(h),
                cp.horizon_after_ns
                    .map_or("unknown".into(), format_duration_ns)
            ),
            _ => format!(
                "no byte budget: the store holds {} of packets",
                format_duration_ns(a.span)
            ),
        },
    );
    row(
        "compaction",
        "Compaction",
        format!(
            "{} of blocks below the compaction target ({}); compacted, the store would be {}",
            format_bytes(cp.pending),
            match cp.target {
                capsule_store::writer::Level::Zstd(l) => format!("zstd level {l}"),
                capsule_store::writer::Level::Store => "stored uncompressed".into(),
            },
            cp.after
                .map_or("unknown".into(), |b| format!("about {}", format_bytes(b)))
        ),
    );
    if let Some(t) = &a.tier {
        row(
            "tier",
            "Object store",
            format!(
                "{} in {} segment(s) there ({} only there), oldest packet {}; upload backlog {} \
                 segment(s), {}",
                format_bytes(t.tiered_bytes),
                t.tiered_segments,
                t.tiered_only_segments,
                t.horizon_ns
                    .map_or("—".into(), capsule_query::format_instant),
                t.backlog_segments,
                format_bytes(t.backlog_bytes)
            ),
        );
    }
    if let Some(al) = &a.alerts {
        row(
            "live-alerts",
            "Live alerts",
            crate::render::status::live_alerts(al),
        );
    }
    for u in &a.unreadable {
        row(
            "unreadable",
            "Unreadable",
            format!("segment {}: {}", u.seq, u.problem),
        );
    }
    for w in &a.warnings {
        row("warning", "Warning", w.clone());
    }
    b.push_str("</dl>");
    let _ = write!(
        b,
        "<p class=\"note\" data-testid=\"status-time\">As of {}; reloads every {REFRESH_S} s.</p>",
        esc(&capsule_query::format_instant(now))
    );
    respond(
        g,
        page(
            "Status",
            Some(&nav),
            "view-status",
            &Window::default(),
            &format!("<meta http-equiv=\"refresh\" content=\"{REFRESH_S}\">"),
            &b,
        ),
        &[],
    )
}
