//! `capsule`: the capture daemon, query tool and engineers' CLI.
//!
//! This file only dispatches: [`cli`] turns the command line into checked values, [`cmd`]
//! runs the subcommand, and errors become exit statuses here and only here: 0 success (a
//! closed output pipe counts as success, so `capsule query ... | head` behaves), 1 failure,
//! 2 bad usage (clap's own errors, a `--config` file that is not valid, and [`output::Usage`]
//! errors found after parsing).
#![forbid(unsafe_code)]

mod bpf_check;
mod cli;
mod client;
mod cmd;
mod files;
mod fleet_pull;
mod live;
mod logging;
mod metrics;
mod notes;
mod output;
mod progress;
mod publisher;
mod render;
mod report;
mod request;
mod server;
mod tier;
mod tokens;
mod units;

use std::process::ExitCode;

/// The system allocator, except for the buffers that ask for transparent huge pages (the
/// store's block buffers and direct-I/O window, `capsule_sys::huge::vec_with_capacity`):
/// every command's other allocations, a question's large vectors included, are glibc's.
/// See capsule-sys's `huge` and docs/decisions.md.
#[global_allocator]
static ALLOC: capsule_sys::HugeAlloc = capsule_sys::HugeAlloc;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = match cli::parse_args(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(cli::ArgsError::Clap(e)) => e.exit(),
        Err(cli::ArgsError::Config(msg)) => {
            eprintln!("capsule: error: {msg}");
            return ExitCode::from(2);
        }
    };
    let (json_logs, level) = match &cli.cmd {
        cli::Cmd::Capture(a) => (a.log_format == cli::LogFormat::Json, a.log_level.clone()),
        _ => (false, None),
    };
    if let Some(l) = &level {
        if let Err(e) = logging::filter(Some(l)) {
            eprintln!("capsule: error: --log-level: {e}");
            return ExitCode::from(2);
        }
    }
    logging::init(json_logs, level.as_deref());
    match cmd::run(cli) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if is_usage(&e) => {
            logging::line("ERROR", &format!("capsule: error: {e:#}"));
            ExitCode::from(2)
        }
        Err(e) => {
            logging::line("ERROR", &format!("capsule: error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// `print!` and `println!` panic when standard output is a pipe whose reader went away
/// (`capsule status | head`); a CLI should end quietly there, as it does when the same
/// happens on a `write!` whose error reaches `main` (see [`is_broken_pipe`]). The hook
/// recognises that one panic by std's message and exits 0 at once; every other panic is
/// reported as before.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Whether the error is the user's input, not the store's or the machine's: a usage error
/// found after parsing, or a `--bpf` expression that does not compile or is too long (a bad
/// filter of capsule's own language is a `Usage` already; the two must exit alike, 2).
fn is_usage(e: &anyhow::Error) -> bool {
    e.is::<output::Usage>()
        || e.chain().any(|c| {
            matches!(
                c.downcast_ref::<capsule_replay::ExportError>(),
                Some(
                    capsule_replay::ExportError::Bpf { .. }
                        | capsule_replay::ExportError::BpfTooLong { .. }
                )
            )
        })
}

/// Whether the reader of standard output went away: a normal end for a CLI. Every library
/// error keeps its `io::Error` as a source, so the chain holds it.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
