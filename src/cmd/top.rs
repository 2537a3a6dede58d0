//! `capsule top`: the largest talkers of a window, from the side index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_analytics::top::{By, Key};
use capsule_answers::analytics::Question;

use crate::cli::{TopArgs, TopBy, TopKey};

pub fn run(a: &TopArgs) -> Result<ExitCode> {
    let key = match a.key {
        TopKey::Flow => Key::Flow,
        TopKey::Src => Key::Src,
        TopKey::Dst => Key::Dst,
        TopKey::Pair => Key::Pair,
        TopKey::Group => Key::Group,
        TopKey::Dscp => Key::Dscp,
        TopKey::Sni => Key::Sni,
        TopKey::App => Key::App,
        TopKey::Tunnel => Key::Tunnel,
    };
    let by = match a.by {
        TopBy::Bytes => By::Bytes,
        TopBy::Packets => By::Packets,
    };
    let limit = a.limit;
    crate::request::ask_analytics(&a.a, Question::Top { key, by, limit })
}
