//! `capsule dscp`: the DSCP audit of a window, from the side index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_answers::analytics::Question;

use crate::cli::DscpArgs;

pub fn run(a: &DscpArgs) -> Result<ExitCode> {
    crate::request::ask_analytics(&a.a, Question::Dscp)
}
