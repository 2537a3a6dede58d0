//! `capsule capture --user/--group`: the account looked up and the store checked before
//! set-up, then every capability but those the capture still needs dropped after it
//! (capsule_capture::privs; docs/capture.md "Privileges").

use anyhow::Result;
use capsule_capture::live::Capture;
use capsule_capture::privs::{self, Account};

use crate::cli::CaptureArgs;

/// Before any set-up, and before any thread starts: the account of --user/--group, checked
/// against the store, and this thread's file-system identity made the account's so that
/// every store file the capture creates is owned by it.
pub fn prepare(a: &CaptureArgs) -> Result<Option<Account>> {
    let Some(account) = privs::account(a.user.as_deref(), a.group.as_deref())? else {
        return Ok(None);
    };
    privs::check_store(&a.store, &account)?;
    privs::open_as(&account)?;
    Ok(Some(account))
}

/// After set-up: to the account (if any), keeping only what `capture` still needs, in every
/// thread. Says what it kept.
pub fn drop(captures: &[Capture], account: Option<&Account>) -> Result<()> {
    // What any of the interfaces still needs (several interfaces: the union).
    let mut keep = privs::Caps::NONE;
    let mut whys: Vec<&str> = Vec::new();
    for c in captures {
        let (k, why) = c.kept_capabilities();
        keep = privs::Caps(keep.0 | k.0);
        if let Some(w) = why.filter(|w| !whys.contains(w)) {
            whys.push(w);
        }
    }
    let why = (!whys.is_empty()).then(|| whys.join("; "));
    let dropped = privs::drop(account, keep)?;
    let who = match account {
        Some(acc) => format!("running as {acc}"),
        None => format!("running as uid {}", dropped.uid),
    };
    let kept = match why {
        Some(why) if dropped.kept != privs::Caps::NONE => format!("{} ({why})", dropped.kept),
        _ => dropped.kept.to_string(),
    };
    crate::logging::note(&format!(
        "capsule: {who}, capabilities kept: {kept}, no_new_privs set"
    ));
    Ok(())
}
