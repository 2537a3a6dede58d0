//! `capsule tcp`: TCP health per interval and host, from the side index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_answers::analytics::Question;

use crate::cli::TcpArgs;

pub fn run(a: &TcpArgs) -> Result<ExitCode> {
    let interval_ns = a.interval;
    crate::request::ask_analytics(&a.a, Question::Tcp { interval_ns })
}
