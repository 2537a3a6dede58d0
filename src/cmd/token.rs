//! `capsule token add|revoke|list`: the server's bearer tokens (only their SHA-256 is
//! stored; see src/tokens.rs).

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::TokenCmd;
use crate::render::table::{output_width, Column, Table};

pub fn run(c: &TokenCmd) -> Result<ExitCode> {
    match c {
        TokenCmd::Revoke(a) => {
            let n = crate::tokens::revoke(&a.tokens, &a.user)?;
            println!(
                "revoked {n} token{} of {} in {} (a running server refuses {} at its next \
                 request)",
                if n == 1 { "" } else { "s" },
                a.user,
                a.tokens.display(),
                if n == 1 { "it" } else { "them" }
            );
            Ok(ExitCode::SUCCESS)
        }
        TokenCmd::List(a) => list(a),
        TokenCmd::Add(a) => {
            let token = crate::tokens::add(&a.tokens, &a.user, a.expires)?;
            println!("{token}");
            eprintln!(
                "capsule: added a token for {} to {} (only its SHA-256 is stored: keep the token \
                 now, it cannot be shown again)",
                a.user,
                a.tokens.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `capsule token list`: a table (or one JSON document) of the file's tokens.
fn list(a: &crate::cli::TokenListArgs) -> Result<ExitCode> {
    use std::io::Write;
    let list = crate::tokens::list(&a.tokens)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::json!({ "tokens": list }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        writeln!(out, "no tokens in {}", a.tokens.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(vec![
        Column::left("user", u8::MAX),
        Column::left("id", 9),
        Column::left("created", 5),
        Column::left("expires", 3),
    ]);
    for x in &list {
        t.push(vec![
            x.user.clone(),
            x.id.clone(),
            x.created.clone().unwrap_or_else(|| "-".into()),
            match (&x.expires, x.expired) {
                (None, _) => "never".into(),
                (Some(e), true) => format!("{e} (expired)"),
                (Some(e), false) => e.clone(),
            },
        ]);
    }
    for line in t.render(output_width()) {
        writeln!(out, "{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}
