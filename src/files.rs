//! Files the commands write packets into: created with the store's mode, written whole or
//! not at all (`capsule query -w FILE` and triage's evidence).

use anyhow::{Context, Result};
use capsule_answers::{export, Source};

/// Creates (or truncates) the output file. Packet data: owner and group only (0640), like
/// the store's own files; a file that existed keeps its mode.
pub(crate) fn create(path: &str, existed: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(capsule_store::fsx::FILE_MODE)
        .open(path)
        .with_context(|| format!("cannot create {path}"))?;
    if !existed {
        f.set_permissions(std::fs::Permissions::from_mode(
            capsule_store::fsx::FILE_MODE,
        ))
        .with_context(|| format!("cannot set the mode of {path}"))?;
    }
    Ok(f)
}

/// Writes the export of `opts` into the file `path` (the `-w FILE` of `capsule query`, and
/// the evidence of `capsule triage`).
pub(crate) fn write_file(
    source: &Source,
    request: &export::Request,
    path: &str,
) -> Result<capsule_replay::ExportReport> {
    // A failed export leaves no file behind that was not there before (an empty
    // or half-written pcap looks like an answer).
    let existed = std::path::Path::new(path).exists();
    let f = create(path, existed)?;
    let progress = crate::progress::Progress::bytes(path, None);
    let done = export::stream(source, request, progress.writer(f));
    progress.finish();
    match done {
        Ok(r) => Ok(r),
        Err(e) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Err(crate::request::answer_error(e))
        }
    }
}
