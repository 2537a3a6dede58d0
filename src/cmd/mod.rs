//! The command bodies, one file per subcommand, and the dispatcher. A command turns its
//! checked arguments into a typed request (src/request.rs), gets the answer (the
//! capsule-answers crate, a library, or the server through src/client.rs) and renders it
//! (src/render/, src/report/). No command module uses another: what two commands share
//! lives in a room of its own beside `cmd/`.
//!
//! A command returns its exit status or an error; `main` turns errors into messages and
//! statuses. An error that is the user's (a bad filter, a window that ends before it
//! starts) is a [`Usage`](crate::output::Usage) error and exits 2 like clap's own.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{Cli, Cmd};

mod alerts;
mod bursts;
mod capture;
mod compact;
mod config;
mod dscp;
mod fleet;
mod flows;
mod import;
mod man;
mod matrix;
mod query;
mod reindex;
mod replay;
mod segments;
mod status;
mod stragglers;
mod synth;
mod tcp;
mod token;
mod top;
mod triage;
mod verify;
mod xdp_probe;

/// Runs the subcommand.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Import(a) => import::run(&a),
        Cmd::Capture(a) => capture::run(&a),
        Cmd::Query(a) => query::run(&a),
        Cmd::Replay(a) => replay::run(&a),
        Cmd::Flows(a) => flows::run(&a),
        Cmd::Top(a) => top::run(&a),
        Cmd::Tcp(a) => tcp::run(&a),
        Cmd::Dscp(a) => dscp::run(&a),
        Cmd::Bursts(a) => bursts::run(&a),
        Cmd::Matrix(a) => matrix::run(&a),
        Cmd::Stragglers(a) => stragglers::run(&a),
        Cmd::Alerts(a) => alerts::run(&a),
        Cmd::Triage(a) => triage::run(&a),
        Cmd::Reindex(a) => reindex::run(&a),
        Cmd::Compact(a) => compact::run(&a),
        Cmd::Status(a) => status::run(&a),
        Cmd::Segments(a) => segments::run(&a),
        Cmd::Synth(a) => synth::run(&a),
        Cmd::Verify(a) => verify::run(&a),
        Cmd::Config(c) => config::run(&c),
        Cmd::Serve(a) => crate::server::run(&a),
        Cmd::Token(c) => token::run(&c),
        Cmd::Fleet(c) => fleet::run(&c),
        Cmd::Completions(a) => man::completions(&a),
        Cmd::Man(a) => man::run(&a.dir),
        Cmd::Filters => man::filters(),
        Cmd::CheckBpf(a) => crate::bpf_check::child(&a),
        Cmd::XdpProbe(a) => xdp_probe::run(&a),
    }
}
