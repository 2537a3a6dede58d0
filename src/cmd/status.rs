//! `capsule status`: how the store's capture runs and what the store holds.

use std::process::ExitCode;

use anyhow::Result;
use capsule_answers::status;

use crate::cli::StatusArgs;

fn secs(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{s:.1} s")
    }
}

pub fn run(a: &StatusArgs) -> Result<ExitCode> {
    let (json, watch) = (a.json, a.watch);
    let remote = a.remote.remote(None)?;
    loop {
        // The text, wrapped to the terminal, printed at once (redrawn in place by --watch).
        let width = crate::render::table::output_width();
        let mut out: Vec<String> = Vec::new();
        macro_rules! say {
            ($($t:tt)*) => {
                out.extend(crate::render::table::wrap(&format!($($t)*), width))
            };
        }
        let request = status::Request {
            level: a.level,
            max_bytes: a.max_bytes,
        };
        // The document of `--json`, of this store or (`--server`) the server's; the text
        // is printed from it either way.
        let doc = match &remote {
            Some(r) => crate::client::get_json(r, "/v1/status")?,
            None => {
                let store_dir = a.store.as_deref().expect("clap requires --store");
                let g =
                    status::answer(store_dir, &request).map_err(crate::request::answer_error)?;
                crate::notes::warn_unreadable(&g.unreadable, "");
                for w in &g.warnings {
                    eprintln!("capsule: warning: {w}");
                }
                g.to_json()
            }
        };
        let g = status::Shown::from_json(doc.clone())
            .map_err(|e| anyhow::anyhow!("the status document is not as expected: {e}"))?;
        let status::Shown {
            st,
            live,
            segments,
            packets,
            bytes,
            first,
            last,
            span,
            cp,
            rate,
            saved,
            alerts,
            levels,
            tier,
        } = &g;
        let (live, packets, bytes, first, last, span, rate) =
            (*live, *packets, *bytes, *first, *last, *span, *rate);
        let running = st.as_ref().filter(|_| live);
        let now = capsule_store::now_ns();
        if json {
            crate::output::print_json(doc);
        } else {
            match &st {
                None => say!("capture: none has run on this store"),
                Some(s) => {
                    let state = if live {
                        "running"
                    } else if s.running {
                        "not running (stopped without a clean exit)"
                    } else {
                        "stopped"
                    };
                    say!(
                        "capture: {state}, pid {}, on {} since {}",
                        s.pid,
                        s.iface,
                        capsule_query::format_instant(s.started_ns)
                    );
                    // The mode in one short line; the setup's details and why auto
                    // fell back only with --verbose. Several interfaces: a line each.
                    let several = s.interfaces.len() > 1;
                    let modes: Vec<(&str, &str)> = if several {
                        s.interfaces
                            .iter()
                            .map(|i| (i.iface.as_str(), i.mode.as_str()))
                            .collect()
                    } else {
                        vec![("", s.mode.as_str())]
                    };
                    for (name, m) in modes {
                        let (mode, why) = match m.split_once("; ") {
                            Some((m, why)) => (m, Some(why)),
                            None => (m, None),
                        };
                        let head = if several {
                            format!("{name} mode")
                        } else {
                            "mode".to_string()
                        };
                        if a.verbose {
                            say!("  {head}: {mode}");
                            if let Some(why) = why {
                                say!("  {name}{}fallback: {why}", if several { " " } else { "" });
                            }
                        } else {
                            let short = mode.split(", queues").next().unwrap_or(mode);
                            let more = if why.is_some() {
                                " (fell back; --verbose says why)"
                            } else {
                                ""
                            };
                            say!("  {head}: {short}{more}");
                        }
                    }
                    say!(
                        "  stored {} packets ({}) of {} seen; dropped {}",
                        s.packets,
                        crate::units::format_bytes(s.wire_bytes),
                        s.seen,
                        s.drops
                    );
                    let causes = crate::render::status::drop_causes(&s.drop_causes, &s.mode, true);
                    say!("  drops by cause: {causes}");
                    if several {
                        for i in &s.interfaces {
                            // The disk is the store's, counted once above.
                            let causes =
                                crate::render::status::drop_causes(&i.drop_causes, &i.mode, false);
                            let rate = if live {
                                format!(
                                    "; {:.0} packets/s, {:.1} Mbit/s",
                                    i.packets_per_s,
                                    i.bits_per_s / 1e6
                                )
                            } else {
                                String::new()
                            };
                            say!(
                                "  {}: stored {} packets ({}) of {} seen; dropped {} ({}){rate}",
                                i.iface,
                                i.packets,
                                crate::units::format_bytes(i.wire_bytes),
                                i.seen,
                                i.drops,
                                causes
                            );
                            if let Some(e) = &i.error {
                                say!("  {}: stopped: {e}", i.iface);
                            }
                        }
                    }
                    if live {
                        say!(
                            "  rate: {:.0} packets/s, {:.1} Mbit/s, {:.0} drops/s",
                            s.packets_per_s,
                            s.bits_per_s / 1e6,
                            s.drops_per_s
                        );
                    }
                    let p = &s.store;
                    let [level, fast, fastest, stored] = p.blocks_by_rung;
                    say!(
                        "  blocks written: {level} at the configured level, {fast} at -10, \
                         {fastest} at -1000, {stored} stored uncompressed; {}{}",
                        if s.drop_causes.disk_full > 0 {
                            format!(
                                "the disk filled: {} packets were dropped for want of room",
                                s.drop_causes.disk_full
                            )
                        } else if p.disk_bound {
                            "the disk is busy (the writer spends half its time writing; \
                             blocks that queue for it are compressed at the configured level)"
                                .to_string()
                        } else {
                            "the disk keeps up".to_string()
                        },
                        match p.readers_behind {
                            0 => String::new(),
                            n => format!("; {n} capture reader(s) behind their ring"),
                        }
                    );
                    if p.segments_deleted_for_space > 0 {
                        say!(
                            "  disk full: deleted {} oldest segment(s) ({}) to make room",
                            p.segments_deleted_for_space,
                            crate::units::format_bytes(p.bytes_deleted_for_space)
                        );
                    }
                    say!(
                        "  VLAN tags restored {}, packets cut at 256 KiB {}, NIC timestamps {}; \
                         updated {} ({} ago)",
                        s.vlan_restored,
                        s.truncated,
                        s.hw_timestamps,
                        capsule_query::format_instant(s.updated_ns),
                        crate::units::format_duration_ns(now.saturating_sub(s.updated_ns))
                    );
                }
            }
            say!(
                "store: {} segment(s), {} packets, {}, {} .. {}",
                segments,
                packets,
                crate::units::format_bytes(bytes),
                first.map(capsule_query::format_instant).unwrap_or_default(),
                last.map(capsule_query::format_instant).unwrap_or_default()
            );
            let after = cp.after.map_or("unknown".to_string(), |b| {
                format!("about {}", crate::units::format_bytes(b))
            });
            say!(
                "compaction: {} of blocks below level {}; compacted, the store would be {after}{}",
                crate::units::format_bytes(cp.pending),
                cp.target,
                match (rate, running.map(|s| s.store)) {
                    (Some(r), Some(p)) => format!(
                        "; compactor {:.1} MB/s, {} segment(s) compacted ({} -> {}){}",
                        r / 1e6,
                        p.compacted_segments,
                        crate::units::format_bytes(p.compacted_bytes_before),
                        crate::units::format_bytes(p.compacted_bytes_after),
                        if p.compactor_paused {
                            ", paused for capture"
                        } else {
                            ""
                        }
                    ),
                    _ => String::new(),
                }
            );
            let levels: Vec<String> = levels
                .iter()
                .map(|(l, b, _)| format!("{l}: {}", crate::units::format_bytes(*b)))
                .collect();
            if !levels.is_empty() {
                say!("bytes by level: {}", levels.join(", "));
            }
            if let Some(p) = running.map(|s| s.store) {
                if let (Some(l), Some(age)) = (p.tier_level, p.tier_age_ns) {
                    say!(
                        "age tier: segments older than {} at level {l}, {} below it",
                        crate::units::format_duration_ns(age),
                        crate::units::format_bytes(p.tier_pending_bytes)
                    );
                }
            }
            if let Some(al) = alerts {
                say!("live alerts: {}", crate::render::status::live_alerts(al));
                for sk in &al.sinks {
                    say!(
                        "  alert sink {} {}: {} sent, {} undelivered{}",
                        sk.sink,
                        sk.target,
                        sk.sent,
                        sk.undelivered,
                        sk.last_error.as_ref().map_or(String::new(), |e| format!(
                            "; last error{}: {e}",
                            sk.last_error_at_ns.map_or(String::new(), |t| format!(
                                " at {}",
                                capsule_query::format_instant(t)
                            ))
                        ))
                    );
                }
            }
            say!(
                "budgets: {}",
                crate::render::status::describe_budgets(saved.as_ref())
            );
            if let Some(t) = tier {
                say!(
                    "tier: {} local in {} segment(s), {} in the object store in {} segment(s) \
                     ({} only there), oldest packet there {}; upload backlog {} segment(s), {}",
                    crate::units::format_bytes(t.local_bytes),
                    t.local_segments,
                    crate::units::format_bytes(t.tiered_bytes),
                    t.tiered_segments,
                    t.tiered_only_segments,
                    t.horizon_ns
                        .map_or("-".into(), capsule_query::format_instant),
                    t.backlog_segments,
                    crate::units::format_bytes(t.backlog_bytes)
                );
            }
            match (cp.budget, cp.horizon_now_ns) {
                (Some(b), Some(h)) => say!(
                    "retention: a budget of {} holds {} of packets at the ratio now, {} after \
                     compaction",
                    crate::units::format_bytes(b),
                    secs(h),
                    cp.horizon_after_ns.map_or("unknown".into(), secs)
                ),
                _ => say!(
                    "retention: no byte budget (the store holds {} of packets)",
                    secs(span)
                ),
            }
            if watch && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                // Redraw in place: home, each line cleared to its end, the rest cleared.
                let mut frame = String::from("\x1b[H");
                for l in &out {
                    frame.push_str(l);
                    frame.push_str("\x1b[K\n");
                }
                frame.push_str("\x1b[J");
                print!("{frame}");
                std::io::Write::flush(&mut std::io::stdout())?;
            } else {
                for l in &out {
                    println!("{l}");
                }
                if watch {
                    println!();
                }
            }
        }
        if !watch {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
