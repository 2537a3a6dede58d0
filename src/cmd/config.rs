//! `capsule config check FILE`: validates a config file and summarises it (or prints the
//! validated model with `--json`), `[alerts]` as each rule with its thresholds. An invalid or
//! unreadable file is a [`Usage`](crate::output::Usage) error: exit 2, one line per problem
//! (every one found) naming file, line, column and key.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use capsule_config::{Config, GroupId};

use crate::cli::{ConfigCheckArgs, ConfigCmd};

pub fn run(c: &ConfigCmd) -> Result<ExitCode> {
    match c {
        ConfigCmd::Check(a) => check(a),
    }
}

fn check(a: &ConfigCheckArgs) -> Result<ExitCode> {
    let config = crate::request::load_config(&a.file)?;
    // The [cutoff] keep filters are parsed with the query language here, as capture and
    // import parse them: a bad one names its key and line.
    crate::request::cutoff_from(Some((&config, &a.file)), None)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        // To text first: a closed pipe must reach `main` as an io::Error (a normal end).
        let text = serde_json::to_string_pretty(&config)?;
        writeln!(out, "{text}")?;
    } else {
        summary(&mut out, &a.file.display().to_string(), &config)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn summary(out: &mut impl Write, file: &str, c: &Config) -> std::io::Result<()> {
    let groups = c.groups();
    let name = |g: &GroupId| groups.name(*g).to_string();
    writeln!(out, "{file}: valid")?;
    let width = groups
        .iter()
        .map(|g| g.name.len())
        .max()
        .unwrap_or(0)
        .max(8);
    if groups.is_empty() {
        writeln!(out, "groups: none (every address is unassigned)")?;
    } else {
        writeln!(
            out,
            "groups ({}, the most specific prefix wins):",
            groups.len()
        )?;
        for g in groups.iter() {
            let shown: Vec<String> = g.prefixes.iter().take(4).map(|p| p.to_string()).collect();
            let more = if g.prefixes.len() > 4 { ", ..." } else { "" };
            let count = match g.prefixes.len() {
                1 => "1 prefix".to_string(),
                n => format!("{n} prefixes"),
            };
            writeln!(
                out,
                "  {:<width$}  {count:>12}  {}{more}",
                g.name,
                shown.join(", ")
            )?;
        }
    }
    if c.dscp_rules().is_empty() {
        writeln!(out, "dscp: no policy (every value free)")?;
    } else {
        writeln!(
            out,
            "dscp ({} listed; every other value is free):",
            c.dscp_rules().len()
        )?;
        for r in c.dscp_rules() {
            let who = if r.groups.is_empty() {
                "nobody".to_string()
            } else {
                r.groups.iter().map(name).collect::<Vec<_>>().join(", ")
            };
            let label = format!("{} ({})", r.name, r.value);
            writeln!(out, "  {label:<width$}  allowed for: {who}")?;
        }
    }
    if c.egress_rules().is_empty() {
        writeln!(out, "egress: no policy (every group may send anywhere)")?;
    } else {
        let n = c.egress_rules().len();
        let groups_word = if n == 1 { "group" } else { "groups" };
        writeln!(
            out,
            "egress ({n} {groups_word} limited; the others may send anywhere):"
        )?;
        for r in c.egress_rules() {
            let mut to = vec!["its own group".to_string()];
            to.extend(r.groups.iter().map(name));
            to.extend(r.prefixes.iter().map(|p| p.to_string()));
            to.extend(r.names.iter().cloned());
            writeln!(
                out,
                "  {:<width$}  may send to: {}",
                name(&r.group),
                to.join(", ")
            )?;
        }
    }
    match c.work_hours() {
        Some(w) => writeln!(out, "work hours: {}", w.describe())?,
        None => writeln!(out, "work hours: none")?,
    }
    let cut = c.cutoff();
    if cut.enabled() {
        let mut limits = Vec::new();
        if cut.bytes > 0 {
            limits.push(crate::units::format_bytes(cut.bytes));
        }
        if cut.packets > 0 {
            limits.push(format!("{} packets", cut.packets));
        }
        writeln!(
            out,
            "cutoff: first {} of each flow direction stored, afresh after {} s idle",
            limits.join(" and "),
            cut.idle_ns / 1_000_000_000
        )?;
        for k in &cut.keep {
            writeln!(out, "  kept whole: {}", k.filter)?;
        }
    } else {
        writeln!(out, "cutoff: none (every packet stored)")?;
    }
    alerts(out, c)?;
    if c.capture().is_empty() {
        writeln!(
            out,
            "capture: no settings (capsule capture takes flags only)"
        )?;
    } else {
        writeln!(
            out,
            "capture ({} settings; flags on the command line override them):",
            c.capture().len()
        )?;
        for s in c.capture() {
            writeln!(out, "  {:<16}  {}", s.flag, s.value)?;
        }
    }
    if !c.serve().is_empty() {
        writeln!(
            out,
            "serve ({} settings; flags on the command line override them):",
            c.serve().len()
        )?;
        for s in c.serve() {
            writeln!(out, "  {:<22}  {}", s.flag, s.value)?;
        }
    }
    if let Some(f) = c.fleet() {
        writeln!(out, "fleet: node {} publishes to {}", f.node, f.clickhouse)?;
        let path = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .map_or("-".to_string(), |p| p.display().to_string())
        };
        writeln!(
            out,
            "  {:<24}  {}",
            "advertise",
            f.advertise.as_deref().unwrap_or("-")
        )?;
        writeln!(
            out,
            "  {:<24}  {}",
            "clickhouse_password_file",
            path(&f.clickhouse_password_file)
        )?;
        writeln!(out, "  {:<24}  {}", "ca", path(&f.ca))?;
        writeln!(out, "  {:<24}  {}", "token_file", path(&f.token_file))?;
    }
    Ok(())
}

/// `[alerts]`: each rule with its thresholds (or `off`), then the live sinks.
fn alerts(out: &mut impl Write, c: &Config) -> std::io::Result<()> {
    use crate::units::{format_bytes, format_duration_ns};
    let a = c.alerts();
    let rules = capsule_config::ALERT_RULES;
    let off = rules.iter().filter(|r| !a.enabled(r)).count();
    writeln!(out, "alerts ({} rules on, {off} off):", rules.len() - off)?;
    for rule in rules {
        let what = if !a.enabled(rule) {
            "off".to_string()
        } else {
            match rule {
                "egress" => format!(
                    "{} per flow direction in {} to a destination [egress] does not allow",
                    format_bytes(a.egress_bytes),
                    format_duration_ns(a.egress_window_ns)
                ),
                "off_hours" if c.work_hours().is_none() => {
                    "nothing to check (no [work_hours])".to_string()
                }
                "off_hours" => format!(
                    "{} per flow direction outside work hours to an address in no group",
                    format_bytes(a.off_hours_bytes)
                ),
                "dscp" => format!(
                    "{} to one destination marked with a value [dscp] forbids the sender",
                    format_bytes(a.dscp_bytes)
                ),
                "group_pair" => format!(
                    "{} from a group to another its [egress] entry does not list",
                    format_bytes(a.pair_bytes)
                ),
                "straggler" if a.straggler_groups.is_empty() => {
                    "nothing to check (no straggler_groups)".to_string()
                }
                "straggler" => format!(
                    "groups {}: a member under {}% of the median per {} (idle below {})",
                    a.straggler_groups.join(", "),
                    a.straggler_ratio * 100.0,
                    format_duration_ns(a.straggler_interval_ns),
                    format_bytes(a.straggler_min_bytes)
                ),
                "tcp_retransmissions" => format!(
                    "a host with {}% of its data segments retransmitted, of at least {} sent",
                    a.retransmission_rate * 100.0,
                    a.retransmission_min_segments
                ),
                "tcp_zero_window" => format!(
                    "a host advertising a zero window {} times or more",
                    a.zero_windows
                ),
                "ef_share" => match a.ef_share {
                    None => "nothing to check (no ef_share)".to_string(),
                    Some(x) => format!(
                        "EF above {}% of the link for {} ms or more",
                        x * 100.0,
                        a.ef_share_for_ns / 1_000_000
                    ),
                },
                "microburst" => match &a.microburst_rate {
                    None => "nothing to check (no microburst_rate)".to_string(),
                    Some(r) => format!(
                        "{} above {} for {} ms or more",
                        a.microburst_class
                            .map_or("the link".to_string(), capsule_config::dscp_name),
                        r.text(),
                        a.microburst_for_ns / 1_000_000
                    ),
                },
                "incast" => match a.incast_senders {
                    None => "nothing to check (no incast_senders)".to_string(),
                    Some(n) => format!("{n} or more senders to one address within 1 ms"),
                },
                "rate_ceiling" | "active_hours" => {
                    let groups: Vec<String> = c
                        .expectations()
                        .iter()
                        .filter_map(|e| match rule {
                            "rate_ceiling" => e.max_rate.as_ref().map(|m| {
                                format!(
                                    "{} {} per {} ms",
                                    e.group_name,
                                    capsule_config::rate_text(m.bits_per_second),
                                    m.per_ms
                                )
                            }),
                            _ => e
                                .hours
                                .as_ref()
                                .map(|h| format!("{} {}", e.group_name, h.describe())),
                        })
                        .collect();
                    if groups.is_empty() {
                        "nothing to check (no [expect.GROUP] entry for it)".to_string()
                    } else {
                        groups.join(", ")
                    }
                }
                _ => "on".to_string(),
            }
        };
        writeln!(out, "  {rule:<19}  {what}")?;
    }
    let mut sinks = Vec::new();
    if let Some(f) = &a.live_file {
        sinks.push(format!("file {f}"));
    }
    if let Some(u) = &a.syslog_udp {
        sinks.push(format!("syslog udp {u}"));
    }
    if let Some(s) = &a.syslog_socket {
        sinks.push(format!("syslog socket {s}"));
    }
    if let Some(w) = &a.webhook {
        sinks.push(format!("webhook {}", w.url));
    }
    if sinks.is_empty() {
        writeln!(out, "  live alerts: none (capsule alerts and triage only)")?;
    } else {
        writeln!(
            out,
            "  live alerts from capture every {} to: {}",
            format_duration_ns(a.live_every_ns),
            sinks.join(", ")
        )?;
    }
    Ok(())
}
