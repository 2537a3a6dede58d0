//! The argument groups every question shares, defined once: the window and filter
//! ([`WindowArgs`]), the server to ask instead of a local store ([`RemoteArgs`]), and the
//! two together with the store ([`Selection`]).

use std::path::PathBuf;

use clap::Args;

/// The window and filter of a question.
#[derive(Args, Debug)]
pub struct WindowArgs {
    /// Start of the window (inclusive): RFC 3339 (`2026-11-30T02:00:00.5Z`), a date
    /// (`2026-11-30`, midnight UTC), Unix seconds, `@NANOS`, `now`, or a duration before now
    /// (`-10m`). Default: the oldest packet held.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_time_now)]
    pub from: Option<u64>,
    /// End of the window (exclusive): any form `--from` takes, or a duration after `--from`
    /// (`+1ms`, `+10m`). Default: after the newest packet.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_end_now)]
    pub to: Option<capsule_query::TimeArg>,
    /// Filter, e.g. `host 10.1.2.3 and tcp port 443`, `dscp ef and not net 10.40.0.0/24`.
    pub filter: Vec<String>,
}

/// The store (or the server), the window and the filter of a question: `query`, `flows`
/// and the analytics commands.
#[derive(Args, Debug)]
pub struct Selection {
    /// The store directory.
    #[arg(
        long,
        required_unless_present_any = ["to_server", "fleet"],
        conflicts_with_all = ["to_server", "fleet"]
    )]
    pub store: Option<PathBuf>,
    /// Answer over every node of the fleet, from its ClickHouse catalog (the `[fleet]`
    /// section of --config FILE; docs/fleet.md): the same answer as the local command over
    /// all the nodes' published segments. The analytics commands (top, tcp, dscp, matrix,
    /// stragglers, alerts) answer from the catalog; `query` pulls the packets from the nodes
    /// that hold them (their `serve`), merged by time into one pcapng.
    #[arg(long, conflicts_with = "to_server")]
    pub fleet: bool,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub window: WindowArgs,
}

/// The store, filter and window of a command that only runs beside the store (`replay`).
#[derive(Args, Debug)]
pub struct StoredWindow {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
    #[command(flatten)]
    pub window: WindowArgs,
}

/// `--server` (or `--remote`) and its options. The client certificate is
/// `--client-cert`/`--client-key` (`top --key` is taken); `query` and `flows` also take their
/// older names, `--cert` and `--key` ([`OldClientCert`]). The options not given here come
/// from the client file (`~/.config/capsule/client.toml`, docs/serve.md), read only when a
/// server is asked.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("to_server").args(["server", "remote"])))]
pub struct RemoteArgs {
    /// Ask a `capsule serve` (https://HOST:PORT) instead of a local store: the same answer
    /// as the local command, from the server's store and config (docs/api.md).
    #[arg(long, value_name = "URL", conflicts_with = "remote")]
    pub server: Option<String>,
    /// Ask the server named in the client file (`server` in
    /// ~/.config/capsule/client.toml): `--server` without typing it.
    #[arg(long)]
    pub remote: bool,
    /// With --server: a file holding the bearer token (`capsule token add` printed it).
    /// Default: `token_file` in the client file.
    #[arg(long, value_name = "FILE", requires = "to_server")]
    pub token_file: Option<PathBuf>,
    /// With --server: CA certificates (PEM) to verify the server with. Default: `ca` in the
    /// client file, else the system's.
    #[arg(long, value_name = "FILE", requires = "to_server")]
    pub ca: Option<PathBuf>,
    /// With --server: a client certificate (PEM) for a server that asks for one (mutual
    /// TLS, `serve --client-ca`). Default: `client_cert` in the client file.
    #[arg(long, value_name = "FILE", requires_all = ["to_server", "client_key"])]
    pub client_cert: Option<PathBuf>,
    /// With --client-cert: its private key (PEM).
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
}

/// `query --cert/--key`, `flows --cert/--key`: the names the client certificate had before
/// every command took `--client-cert`/`--client-key`; kept, hidden, so scripts still run.
#[derive(Args, Debug)]
pub struct OldClientCert {
    /// Same as --client-cert.
    #[arg(long, value_name = "FILE", requires_all = ["to_server", "key"], hide = true)]
    pub cert: Option<PathBuf>,
    /// Same as --client-key.
    #[arg(long, value_name = "FILE", requires = "cert", hide = true)]
    pub key: Option<PathBuf>,
}

/// A time on the command line, relative forms resolved against the wall clock now.
pub(super) fn parse_time_now(s: &str) -> Result<u64, capsule_query::TimeError> {
    capsule_query::parse_time(s, capsule_store::now_ns())
}

/// The end of a window on the command line: as [`parse_time_now`], or `+DURATION` after the
/// start.
fn parse_end_now(s: &str) -> Result<capsule_query::TimeArg, capsule_query::TimeError> {
    capsule_query::TimeArg::parse_end(s, capsule_store::now_ns())
}
