//! `capsule stragglers`: members of a group sending under its median, from the index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_answers::analytics::Question;

use crate::cli::StragglersArgs;

pub fn run(a: &StragglersArgs) -> Result<ExitCode> {
    let question = Question::Stragglers {
        group: a.group.clone(),
        interval_ns: a.interval,
        ratio: a.ratio,
        min_bytes: a.min_bytes,
    };
    crate::request::ask_analytics(&a.a, question)
}
