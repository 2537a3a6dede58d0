//! `capsule xdp-probe`: which XDP carriers this kernel accepts, as capture's ladder sees
//! them.

use std::process::ExitCode;

use anyhow::Result;

/// `capsule xdp-probe`: the carriers this kernel accepts, best first, as capture's ladder
/// sees them.
pub fn run(a: &crate::cli::XdpProbeArgs) -> Result<ExitCode> {
    use std::io::Write;
    let probed = capsule_capture::live::probe_xdp();
    let best = probed
        .iter()
        .find(|p| p.refused.is_none())
        .map(|p| p.carrier);
    let mut out = std::io::stdout().lock();
    if a.json {
        let doc = serde_json::json!({
            "kernel": kernel_release(),
            "best": best,
            "carriers": probed.iter().map(|p| serde_json::json!({
                "carrier": p.carrier,
                "accepted": p.refused.is_none(),
                "refused": p.refused,
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
    } else {
        writeln!(out, "kernel {}", kernel_release())?;
        for p in probed {
            match &p.refused {
                None => writeln!(out, "  {:<9} loads", p.carrier.name())?,
                Some(why) => writeln!(out, "  {:<9} refused: {why}", p.carrier.name())?,
            }
        }
        match best {
            Some(c) => writeln!(
                out,
                "capture takes the {} variant ({})",
                c.name(),
                c.describe()
            )?,
            None => writeln!(out, "no variant loads: capture falls back to AF_PACKET")?,
        }
    }
    Ok(if best.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The running kernel's release (`uname -r`), or `unknown`.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
