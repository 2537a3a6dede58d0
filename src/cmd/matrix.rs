//! `capsule matrix`: traffic from group to group, from the side index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_analytics::matrix::By;
use capsule_answers::analytics::Question;

use crate::cli::{MatrixArgs, MatrixBy};

pub fn run(a: &MatrixArgs) -> Result<ExitCode> {
    let by = match a.by {
        MatrixBy::Bytes => By::Bytes,
        MatrixBy::Packets => By::Packets,
        MatrixBy::Flows => By::Flows,
    };
    crate::request::ask_analytics(&a.a, Question::Matrix { by })
}
