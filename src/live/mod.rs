//! The runtime of a running `capsule capture` beside the capture library: what the process
//! does besides moving packets. `privs.rs` takes the account of `--user`/`--group` and drops
//! every capability but those capture still needs; `alerts/` evaluates the `[alerts]` rules
//! on the live index and sends events to the sinks; `reload.rs` applies a SIGHUP's config.
//! `cmd/capture.rs` starts and stops them.

pub mod alerts;
pub mod privs;
pub mod reload;
