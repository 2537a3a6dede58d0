//! Packets pulled from the fleet's nodes: each node the plan names is asked for its
//! candidate window (`GET /v1/packets`, pcapng) on a thread of its own, with the connect,
//! first-byte and idle deadlines of [`DEADLINES`], into an unlinked temporary file. A node
//! that fails or does not answer in time is reported with why; the caller makes the answer
//! partial (exit 3) and names it.
//!
//! [`pull_all`] hands each node's file over once the node finished (`fleet diff` compares
//! whole captures); [`stream_all`] hands the merge a reader of each file while it is being
//! written (capsule_fleet::spool), so `query --fleet` writes its first packet once every
//! node's first packet is in, not after the slowest node's last byte. [`count_all`] asks
//! each node for its count (`GET /v1/count`).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capsule_fleet::plan::NodePlan;

use crate::client::{Deadlines, Remote};

/// Connect 3 s (TCP, TLS, HTTP); the answer's head within 30 s of the request (a node's
/// export plans and opens its segments first); then never 10 s without a byte.
pub const DEADLINES: Deadlines = Deadlines {
    connect: Duration::from_secs(3),
    first_byte: Duration::from_secs(30),
    idle: Duration::from_secs(10),
};

/// What one node gave.
#[derive(Debug)]
pub struct Pulled {
    pub plan: NodePlan,
    /// Its packets (pcapng), rewound, when it answered whole.
    pub file: Option<File>,
    pub bytes: u64,
    pub seconds: f64,
    /// Why its packets are missing (it failed or did not answer in time).
    pub failed: Option<String>,
    /// The node's own word that its answer is partial (damaged or missing data there).
    pub partial: Option<String>,
}

/// How this node asks the others: the `[fleet]` section's `ca` and `token_file`.
pub fn remote_of(fleet: &capsule_config::Fleet, url: &str) -> Result<Remote> {
    let token_file: PathBuf = fleet.token_file.clone().ok_or_else(|| {
        crate::output::Usage(
            "pulling packets from the fleet's nodes needs `token_file` in the [fleet] section \
             (a token their `capsule serve` accepts; docs/fleet.md)"
                .into(),
        )
    })?;
    Ok(Remote {
        url: url.to_string(),
        token_file,
        ca: fleet.ca.clone(),
        cert: None,
        key: None,
        given: format!("--server {}", capsule_analytics::shell_quote(url)),
    })
}

/// An unlinked temporary file, read and write.
fn scratch(i: usize) -> Result<File> {
    let path = std::env::temp_dir().join(format!(
        "capsule-fleet-{}-{i}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    Ok(f)
}

/// What every node is asked: the filter, and the `--bpf` expression the node applies
/// itself (its `serve` checks it in its guard's child, as `query --bpf` does).
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub filter: &'a str,
    pub bpf: Option<&'a str>,
}

/// The path of `/v1/packets` for `plan` and `ask` (pcapng): the node's window and its
/// candidate segments (`segments`; a segment it no longer holds it names, and its answer
/// is partial).
pub fn packets_path(plan: &NodePlan, ask: &Ask) -> String {
    format!("/v1/packets?{}", window_params(plan, ask))
}

/// `filter`, `bpf`, `from`, `to`, `format=pcapng` and `segments` of `plan` (none when the
/// plan lists no segment: every segment of the window), as a query string.
fn window_params(plan: &NodePlan, ask: &Ask) -> String {
    let mut q = format!(
        "filter={}&from=%40{}&to=%40{}&format=pcapng",
        crate::client::encode(ask.filter),
        plan.from_ns,
        plan.to_ns,
    );
    if let Some(bpf) = ask.bpf {
        q.push_str("&bpf=");
        q.push_str(&crate::client::encode(bpf));
    }
    if !plan.segments.is_empty() {
        let segments: Vec<String> = plan.segments.iter().map(u64::to_string).collect();
        q.push_str("&segments=");
        q.push_str(&segments.join("%2C"));
    }
    q
}

/// What a node's pull gave when it could not be asked or its thread failed.
fn failed(plan: &NodePlan, why: &str) -> Pulled {
    Pulled {
        plan: plan.clone(),
        file: None,
        bytes: 0,
        seconds: 0.0,
        failed: Some(why.to_string()),
        partial: None,
    }
}

/// Runs `one` for every plan at once, on a thread each; a thread that panicked is a failed
/// node.
fn each_node<T: Send>(
    plans: &[NodePlan],
    one: impl Fn(usize, &NodePlan) -> (Pulled, T) + Sync,
    none: impl Fn() -> T,
) -> Vec<(Pulled, T)> {
    std::thread::scope(|s| {
        let one = &one;
        let handles: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(i, plan)| s.spawn(move || one(i, plan)))
            .collect();
        handles
            .into_iter()
            .zip(plans)
            .map(|(h, plan)| {
                h.join()
                    .unwrap_or_else(|_| (failed(plan, "the thread pulling it failed"), none()))
            })
            .collect()
    })
}

/// A missing token file is the asker's to fix, before anything is asked.
fn check_token(fleet: &capsule_config::Fleet, plans: &[NodePlan]) -> Result<()> {
    if !plans.is_empty() {
        remote_of(fleet, "https://x")?;
    }
    Ok(())
}

/// Pulls every node of `plans` at once, each with `deadlines`, each into a file handed
/// over (rewound) when the node finished.
pub fn pull_all(
    fleet: &capsule_config::Fleet,
    plans: &[NodePlan],
    ask: &Ask,
    deadlines: &Deadlines,
) -> Result<Vec<Pulled>> {
    check_token(fleet, plans)?;
    let one = |i: usize, plan: &NodePlan| {
        let mut f = match scratch(i) {
            Ok(f) => f,
            Err(e) => return (failed(plan, &format!("{e:#}")), ()),
        };
        let mut out = {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut f);
            pull_into(
                fleet,
                plan,
                &packets_path(plan, ask),
                deadlines,
                None,
                &mut w,
            )
        };
        if out.failed.is_none() {
            match f.seek(SeekFrom::Start(0)) {
                Ok(_) => out.file = Some(f),
                Err(e) => out.failed = Some(format!("cannot rewind the pulled packets: {e}")),
            }
        }
        (out, ())
    };
    Ok(each_node(plans, one, || ())
        .into_iter()
        .map(|(p, ())| p)
        .collect())
}

/// Connections to the fleet's nodes made while ClickHouse plans (TCP, TLS and HTTP
/// handshakes; no request, no token sent), by serve URL: a pull takes its node's.
#[derive(Debug, Default)]
pub struct Warm {
    conns: std::sync::Mutex<std::collections::HashMap<String, Connecting>>,
    at: Option<Instant>,
}

/// A connection being made on a thread of its own.
type Connecting = std::thread::JoinHandle<Result<crate::client::Connected>>;

/// A connection older than this is not used (a node's `serve` drops a connection that
/// sends no request head within 30 s): the pull connects again.
const WARM_FOR: Duration = Duration::from_secs(10);

impl Warm {
    /// The connection to `url` made ahead, if one was and is fresh.
    fn take(&self, url: &str) -> Option<Connecting> {
        let h = self.conns.lock().ok()?.remove(url)?;
        self.at
            .is_some_and(|at| at.elapsed() < WARM_FOR)
            .then_some(h)
    }
}

/// Starts connecting to every node of the catalog's registry that advertised a serve URL,
/// each on a thread of its own with the connect deadline of `deadlines`, while the caller
/// plans: the registry is asked here (one small question beside the plan's). The
/// connections come with the handle's [`Warm`]; none when the registry cannot be read or
/// the `[fleet]` section names no token file (the pulls then say why).
pub fn warm(
    fleet: &capsule_config::Fleet,
    ch: &capsule_fleet::ClickHouse,
    deadlines: &Deadlines,
) -> std::thread::JoinHandle<Warm> {
    let (fleet, ch, connect) = (fleet.clone(), ch.clone(), deadlines.connect);
    std::thread::spawn(move || {
        let at = Instant::now();
        let Ok(registry) = capsule_fleet::nodes::registry(&ch) else {
            return Warm::default();
        };
        let mut conns = std::collections::HashMap::new();
        for n in registry {
            if n.advertise.is_empty() || conns.contains_key(&n.advertise) {
                continue;
            }
            let Ok(remote) = remote_of(&fleet, &n.advertise) else {
                return Warm::default();
            };
            let h = std::thread::spawn(move || crate::client::connect(&remote, Some(connect)));
            conns.insert(n.advertise, h);
        }
        Warm {
            conns: std::sync::Mutex::new(conns),
            at: Some(at),
        }
    })
}

/// Pulls every node of `plans` at once and gives `consume` a reader of each node's packets
/// (in the order of `plans`) while they arrive; the pulls' reports once every pull ended,
/// with what `consume` returned. A node's connection made ahead (`warm`) is used.
pub fn stream_all<T>(
    fleet: &capsule_config::Fleet,
    plans: &[NodePlan],
    ask: &Ask,
    deadlines: &Deadlines,
    warm: &Warm,
    consume: impl FnOnce(Vec<capsule_fleet::spool::SpoolReader>) -> T,
) -> Result<(Vec<Pulled>, T)> {
    check_token(fleet, plans)?;
    let mut writers = Vec::with_capacity(plans.len());
    let mut readers = Vec::with_capacity(plans.len());
    for i in 0..plans.len() {
        let f = scratch(i)?;
        let (w, r) = capsule_fleet::spool::spool(f).context("cannot open a spool file twice")?;
        writers.push(std::sync::Mutex::new(Some(w)));
        readers.push(r);
    }
    Ok(std::thread::scope(|s| {
        let pulls = s.spawn(|| {
            let one = |i: usize, plan: &NodePlan| {
                let w = writers[i].lock().ok().and_then(|mut w| w.take());
                let Some(mut w) = w else {
                    return (failed(plan, "its spool was taken twice"), ());
                };
                let path = packets_path(plan, ask);
                let out = pull_into(fleet, plan, &path, deadlines, Some(warm), &mut w);
                // Dropped: the merge reads to the end of what came.
                w.finish();
                (out, ())
            };
            each_node(plans, one, || ())
        });
        let got = consume(readers);
        let pulled = pulls
            .join()
            .unwrap_or_else(|_| {
                plans
                    .iter()
                    .map(|p| (failed(p, "the thread pulling it failed"), ()))
                    .collect()
            })
            .into_iter()
            .map(|(p, ())| p)
            .collect();
        (pulled, got)
    }))
}

/// Asks every node of `plans` for its count of `ask` in its window (`GET /v1/count`),
/// at once, each with `deadlines`.
pub fn count_all(
    fleet: &capsule_config::Fleet,
    plans: &[NodePlan],
    ask: &Ask,
    deadlines: &Deadlines,
) -> Result<Vec<(Pulled, Option<capsule_answers::export::Count>)>> {
    check_token(fleet, plans)?;
    let one = |_: usize, plan: &NodePlan| {
        let path = format!("/v1/count?{}", window_params(plan, ask));
        let mut body = Vec::new();
        let mut out = pull_into(fleet, plan, &path, deadlines, None, &mut body);
        if out.failed.is_some() {
            return (out, None);
        }
        match serde_json::from_slice::<capsule_answers::export::Count>(&body) {
            Ok(c) => (out, Some(c)),
            Err(e) => {
                out.failed = Some(format!("its answer to {path} is not a count: {e}"));
                (out, None)
            }
        }
    };
    Ok(each_node(plans, one, || None))
}

/// Asks one node for `path` with `deadlines` (on its connection of `warm` when there is
/// one), its answer written into `w`.
fn pull_into(
    fleet: &capsule_config::Fleet,
    plan: &NodePlan,
    path: &str,
    deadlines: &Deadlines,
    warm: Option<&Warm>,
    w: &mut dyn std::io::Write,
) -> Pulled {
    let t0 = Instant::now();
    let mut out = failed(plan, "");
    out.failed = None;
    let got = (|| -> Result<crate::client::Got> {
        if plan.advertise.is_empty() {
            anyhow::bail!(
                "it advertised no serve URL (`advertise` in its [fleet] section), so its \
                 packets cannot be pulled"
            );
        }
        let remote = remote_of(fleet, &plan.advertise)?;
        let ahead = warm.and_then(|warm| warm.take(&plan.advertise));
        let got = match ahead {
            Some(h) => {
                let token = crate::client::read_token(&remote)?;
                let c = h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the thread connecting failed")))?;
                crate::client::get_on(c, &token, path, w, false, Some(deadlines))?
            }
            None => crate::client::get_with(&remote, path, w, false, Some(deadlines))?,
        };
        w.flush().context("cannot write the pulled packets")?;
        Ok(got)
    })();
    out.seconds = t0.elapsed().as_secs_f64();
    match got {
        Ok(got) => {
            out.bytes = got.bytes;
            out.partial = got.partial();
        }
        Err(e) => out.failed = Some(format!("{e:#}")),
    }
    out
}
