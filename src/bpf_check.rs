//! The `--bpf` guard: a tcpdump expression is compiled first in a child process with limits,
//! so that one libpcap's optimiser cannot finish (minutes and gigabytes for a thousand
//! `port N` terms) is refused instead of taking the host's memory.
//!
//! ```text
//! capsule query --bpf EXPR        length <= 4096 bytes (capsule_replay::MAX_BPF_LEN)
//!   for each link type of the store:
//!     spawn `capsule __check-bpf --linktype N -- EXPR`   (std::env::current_exe)
//!        child: setrlimit CPU 10 s, address space 1 GiB, then compile: exit 0 / 3 / 4
//!     wait at most 10 s of wall-clock time, then kill it
//!   then the export, which compiles in-process as every library caller does
//! ```
//!
//! The limits are set by the child on itself with `setrlimit` (rustix's safe API), so no
//! `pre_exec` hook is needed.

use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;
use capsule_replay::ExportError;

use crate::cli::CheckBpfArgs;

/// CPU time and wall-clock time the compiler is given: 10 s, or `CAPSULE_BPF_CHECK_SECS`
/// (1 to 60; the tests set it low so that a machine's speed cannot decide them).
pub fn time_limit() -> Duration {
    let secs = std::env::var("CAPSULE_BPF_CHECK_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(10, |s| s.clamp(1, 60));
    Duration::from_secs(secs)
}
/// Address space the compiling process is given.
pub const MEMORY_LIMIT: u64 = 1 << 30;

/// Exit status of the child for an expression that does not compile.
const DOES_NOT_COMPILE: i32 = 3;
/// Exit status of the child when libpcap ran out of (limited) memory.
const OUT_OF_MEMORY: i32 = 4;

/// Why the guard refused an expression or could not check it.
#[derive(Debug, thiserror::Error)]
pub enum BpfGuardError {
    #[error(
        "--bpf: the expression is too complex: libpcap's compiler did not finish within \
         {} s / {} GiB for link type {linktype} ({how})",
        time_limit().as_secs(),
        MEMORY_LIMIT >> 30
    )]
    TooComplex { linktype: u16, how: String },
    #[error("--bpf: cannot run the check process {}", exe.display())]
    Spawn {
        exe: std::path::PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("--bpf: the check process for link type {linktype} failed: {status}: {stderr}")]
    Failed {
        linktype: u16,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// `capsule __check-bpf`: limits itself, compiles, exits 0, 3 or 4.
pub fn child(a: &CheckBpfArgs) -> Result<ExitCode> {
    use rustix::process::{setrlimit, Resource, Rlimit};
    let secs = time_limit().as_secs();
    // SIGXCPU at the soft limit, SIGKILL a second later.
    setrlimit(
        Resource::Cpu,
        Rlimit {
            current: Some(secs),
            maximum: Some(secs + 1),
        },
    )?;
    setrlimit(
        Resource::As,
        Rlimit {
            current: Some(MEMORY_LIMIT),
            maximum: Some(MEMORY_LIMIT),
        },
    )?;
    match capsule_replay::bpf_compiles(&a.expr, a.linktype) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(ExportError::Bpf { error, .. }) => {
            // The bare message: the parent wraps it in the same pcap error again.
            let msg = match error {
                pcap::Error::PcapError(m) => m,
                other => other.to_string(),
            };
            eprint!("{}", msg.chars().take(500).collect::<String>());
            let oom = msg.contains("memory") || msg.contains("malloc");
            Ok(ExitCode::from(
                if oom { OUT_OF_MEMORY } else { DOES_NOT_COMPILE } as u8,
            ))
        }
        Err(e) => Err(e.into()),
    }
}

/// Checks `expr` for every link type in a child process with limits: `Ok` if it compiles
/// within them; the same [`ExportError::Bpf`] as an in-process compile if it does not
/// compile; [`BpfGuardError::TooComplex`] if the compiler does not finish within them.
pub fn check(expr: &str, linktypes: &[u16]) -> Result<()> {
    capsule_replay::check_bpf_len(expr)?;
    let exe = std::env::current_exe().map_err(|error| BpfGuardError::Spawn {
        exe: "capsule".into(),
        error,
    })?;
    for &linktype in linktypes {
        check_one(&exe, expr, linktype)?;
    }
    Ok(())
}

fn check_one(exe: &std::path::Path, expr: &str, linktype: u16) -> Result<()> {
    let mut child = Command::new(exe)
        .args([
            "__check-bpf",
            "--linktype",
            &linktype.to_string(),
            "--",
            expr,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("CAPSULE_LOG", "off")
        .spawn()
        .map_err(|error| BpfGuardError::Spawn {
            exe: exe.to_path_buf(),
            error,
        })?;
    let mut pipe = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(p) = pipe.as_mut() {
            let _ = p.take(64 << 10).read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).trim().to_string()
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if t0.elapsed() >= time_limit() {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = reader.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(BpfGuardError::TooComplex {
            linktype,
            how: format!(
                "killed after {} s of wall-clock time",
                time_limit().as_secs()
            ),
        }
        .into());
    };
    match status.code() {
        Some(0) => Ok(()),
        Some(DOES_NOT_COMPILE) => Err(ExportError::Bpf {
            expr: expr.to_string(),
            linktype,
            error: pcap::Error::PcapError(stderr),
        }
        .into()),
        Some(OUT_OF_MEMORY) => Err(BpfGuardError::TooComplex {
            linktype,
            how: format!("out of memory: {stderr}"),
        }
        .into()),
        None => {
            use std::os::unix::process::ExitStatusExt;
            let how = match status.signal() {
                Some(24) => "CPU time limit reached".to_string(),
                Some(9) => "killed at the CPU time limit".to_string(),
                Some(6) => "out of memory (aborted)".to_string(),
                Some(s) => format!("killed by signal {s}"),
                None => status.to_string(),
            };
            Err(BpfGuardError::TooComplex { linktype, how }.into())
        }
        Some(_) if stderr.contains("memory allocation") => Err(BpfGuardError::TooComplex {
            linktype,
            how: "out of memory".to_string(),
        }
        .into()),
        Some(_) => Err(BpfGuardError::Failed {
            linktype,
            status,
            stderr: capsule_query::excerpt::quoted(&stderr),
        }
        .into()),
    }
}
