//! The steps every handler takes around its answer, in one place: the audit line at the
//! end (with the outcome, packets and bytes), the refusal of bad parameters (400), the
//! concurrency slot (429), the blocking thread within the time limit (413), and the status
//! of a failure (400 for the asker's, 500 for the server's).

use std::sync::Arc;

use hyper::{Response, StatusCode};

use super::audit::Record;
use super::body::{error_response, Body};
use super::Server;

/// An authenticated request on its way to its answer.
#[derive(Debug)]
pub(super) struct Guard {
    pub(super) server: Arc<Server>,
    pub(super) rec: Record,
    pub(super) user: String,
}

/// Why an answer failed: the asker's (400) or the server's (500).
#[derive(Debug)]
pub(super) enum Failure {
    Asker(String),
    Server(String),
}

/// Checks a `bpf` parameter as the CLI checks `--bpf`: its length, then a compile for
/// Ethernet in the guard's child process with limits (src/bpf_check.rs); the export then
/// compiles it in-process for each link type it meets, as `query --bpf` does. Run on a
/// blocking thread (it waits for the child).
pub(super) fn check_bpf(expr: &str) -> Result<(), Failure> {
    use crate::bpf_check::BpfGuardError;
    crate::bpf_check::check(expr, &[capsule_pcap::LINKTYPE_ETHERNET]).map_err(|e| {
        match e.downcast_ref::<BpfGuardError>() {
            Some(BpfGuardError::Spawn { .. } | BpfGuardError::Failed { .. }) => {
                Failure::Server(format!("{e:#}"))
            }
            _ => Failure::Asker(format!("{e:#}")),
        }
    })
}

impl Failure {
    /// An answer's error: the asker's when it is a usage error, else the server's (with its
    /// causes).
    pub(super) fn of(e: capsule_answers::AnswerError) -> Failure {
        if e.is_usage() {
            Failure::Asker(e.to_string())
        } else {
            Failure::Server(format!("{:#}", anyhow::Error::from(e)))
        }
    }
}

impl Guard {
    /// The source this request's answer reads: the store, through this request's reader of
    /// the object store when the server has a `[tier]`.
    pub(super) fn source(&self) -> capsule_answers::Source {
        capsule_answers::Source::store(&self.server.store)
            .with_tier(crate::tier::tier_of(self.rec.tier.as_ref()))
    }

    /// Ends the request with `resp`, writing its audit line.
    pub(super) fn finish(
        self,
        resp: Response<Body>,
        outcome: &str,
        packets: Option<u64>,
        bytes: u64,
    ) -> Response<Body> {
        let r = self.rec.finish(resp.status(), outcome, packets, bytes);
        tokio::task::block_in_place(|| self.server.audit.record(&r));
        resp
    }

    /// Ends the request with `resp`, `outcome` in its audit line.
    pub(super) fn done(self, resp: Response<Body>, outcome: &str) -> Response<Body> {
        self.finish(resp, outcome, None, 0)
    }

    /// Ends the request with the error `msg` (as its audit outcome too).
    pub(super) fn refuse(self, status: StatusCode, msg: &str) -> Response<Body> {
        self.done(error_response(status, msg), msg)
    }

    /// Runs `work` on a blocking thread while holding one of the server's query slots
    /// (429 when none is free), at most the server's query time when `timed` (413 past
    /// it). `what` names the work in the message of a task that failed.
    pub(super) async fn blocking<T: Send + 'static>(
        self,
        what: &'static str,
        timed: bool,
        work: impl FnOnce() -> Result<T, Failure> + Send + 'static,
    ) -> Result<(Guard, T), Response<Body>> {
        let slot = match self.server.acquire(&self.user) {
            Ok(s) => s,
            Err(e) => return Err(self.refuse(StatusCode::TOO_MANY_REQUESTS, &e)),
        };
        let task = tokio::task::spawn_blocking(move || {
            // Held until the answer is made, even past a time limit already answered.
            let _slot = slot;
            work()
        });
        let joined = if timed {
            match tokio::time::timeout(self.server.max_time, task).await {
                Ok(j) => j,
                Err(_) => {
                    let m = format!(
                        "the query ran longer than the limit of {} (--max-query-time): narrow \
                         the filter or the window",
                        humantime::format_duration(self.server.max_time)
                    );
                    return Err(self.refuse(StatusCode::PAYLOAD_TOO_LARGE, &m));
                }
            }
        } else {
            task.await
        };
        match joined {
            Ok(Ok(v)) => Ok((self, v)),
            Ok(Err(Failure::Asker(m))) => Err(self.refuse(StatusCode::BAD_REQUEST, &m)),
            Ok(Err(Failure::Server(m))) => Err(self.refuse(StatusCode::INTERNAL_SERVER_ERROR, &m)),
            Err(e) => {
                let m = format!("the {what} task failed: {e}");
                Err(self.refuse(StatusCode::INTERNAL_SERVER_ERROR, &m))
            }
        }
    }
}
