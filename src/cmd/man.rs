//! `capsule man DIR`, `capsule completions SHELL` and `capsule filters`: the documentation
//! the binary carries.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::Cli;

/// `capsule completions SHELL`.
pub fn completions(a: &crate::cli::CompletionsArgs) -> Result<ExitCode> {
    // Into a buffer first: clap_complete panics on a failed write, and a closed pipe
    // (`| head`) must end quietly like every other command's output.
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "capsule", &mut out);
    std::io::Write::write_all(&mut std::io::stdout().lock(), &out)?;
    Ok(ExitCode::SUCCESS)
}

/// `capsule filters`: the filter language's help.
pub fn filters() -> Result<ExitCode> {
    let text = crate::cli::FILTERS_HELP.as_bytes();
    std::io::Write::write_all(&mut std::io::stdout().lock(), text)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `capsule.1` and a page per visible subcommand (`capsule-query.1`, ...) into `dir`.
pub fn run(dir: &std::path::Path) -> Result<ExitCode> {
    use anyhow::Context;
    use std::io::Write;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let cmd = <Cli as clap::CommandFactory>::command();
    let mut pages = vec![("capsule".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("capsule-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page)
            .render(&mut out)
            .with_context(|| format!("render {name}.1"))?;
        std::fs::write(&path, out).with_context(|| format!("write {}", path.display()))?;
        writeln!(std::io::stdout(), "{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}
