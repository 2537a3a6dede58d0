//! Packets pulled from the fleet's nodes: each node the plan names is asked for its
//! candidate window (`GET /v1/packets`, pcapng) on a thread of its own, with the connect,
//! first-byte and idle deadlines of [`DEADLINES`], into an unlinked temporary file. A node
//! that fails or does not answer in time is reported with why, and its packets are left out
//! whole (never half a node); the caller makes the answer partial (exit 3) and names it.

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

/// The path of `/v1/packets` for `plan` and `filter` (pcapng).
pub fn packets_path(plan: &NodePlan, filter: &str) -> String {
    format!(
        "/v1/packets?filter={}&from=%40{}&to=%40{}&format=pcapng",
        crate::client::encode(filter),
        plan.from_ns,
        plan.to_ns
    )
}

/// Pulls every node of `plans` at once, each with `deadlines`.
pub fn pull_all(
    fleet: &capsule_config::Fleet,
    plans: &[NodePlan],
    filter: &str,
    deadlines: &Deadlines,
) -> Result<Vec<Pulled>> {
    // A missing token file is the asker's to fix, before anything is asked.
    if !plans.is_empty() {
        remote_of(fleet, "https://x")?;
    }
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(i, plan)| s.spawn(move || pull_one(fleet, plan, filter, deadlines, i)))
            .collect();
        handles
            .into_iter()
            .zip(plans)
            .map(|(h, plan)| {
                h.join().unwrap_or_else(|_| Pulled {
                    plan: plan.clone(),
                    file: None,
                    bytes: 0,
                    seconds: 0.0,
                    failed: Some("the thread pulling it failed".into()),
                    partial: None,
                })
            })
            .collect()
    });
    Ok(results)
}

fn pull_one(
    fleet: &capsule_config::Fleet,
    plan: &NodePlan,
    filter: &str,
    deadlines: &Deadlines,
    i: usize,
) -> Pulled {
    let t0 = Instant::now();
    let mut out = Pulled {
        plan: plan.clone(),
        file: None,
        bytes: 0,
        seconds: 0.0,
        failed: None,
        partial: None,
    };
    let got = (|| -> Result<(File, crate::client::Got)> {
        if plan.advertise.is_empty() {
            anyhow::bail!(
                "it advertised no serve URL (`advertise` in its [fleet] section), so its \
                 packets cannot be pulled"
            );
        }
        let remote = remote_of(fleet, &plan.advertise)?;
        let mut f = scratch(i)?;
        let got = {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut f);
            crate::client::get_with(
                &remote,
                &packets_path(plan, filter),
                &mut w,
                false,
                Some(deadlines),
            )?
        };
        f.seek(SeekFrom::Start(0))
            .context("cannot rewind the pulled packets")?;
        Ok((f, got))
    })();
    out.seconds = t0.elapsed().as_secs_f64();
    match got {
        Ok((f, got)) => {
            out.bytes = got.bytes;
            out.partial = got.partial();
            out.file = Some(f);
        }
        Err(e) => out.failed = Some(format!("{e:#}")),
    }
    out
}
