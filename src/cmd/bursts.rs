//! `capsule bursts`: the millisecond view of a window, from the side index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_answers::analytics::Question;

use crate::cli::BurstsArgs;

pub fn run(a: &BurstsArgs) -> Result<ExitCode> {
    crate::request::ask_analytics(
        &a.a,
        Question::Bursts {
            above: a.above,
            incast: a.incast,
            limit: a.limit,
            series: a.series,
        },
    )
}
