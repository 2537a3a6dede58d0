//! Interface settings capture changes, recorded in the store so they are put back even
//! after a crash.
//!
//! The one such setting is receive VLAN offload, which XDP capture turns off (see
//! `xdp.rs`). Before turning it off, capture records `{iface, rxvlan_was: true}` in
//! `STORE/interface-state.json` (written to a hidden file, then renamed); at a clean exit it
//! turns the offload back on and removes the record. A capture killed with `kill -9` leaves
//! the record behind, and the next [`super::open`] with the same store restores every
//! setting it lists, logs it, and removes the file before touching the interface.
//!
//! Promiscuous mode is not recorded: it is a per-socket membership (`PACKET_ADD_MEMBERSHIP`)
//! that the kernel drops when the socket closes, whatever way the process ends.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use capsule_store::error::chain as error_chain;
use capsule_sys::rx_vlan_offload;

/// The record's file name in the store directory.
pub const STATE_FILE: &str = "interface-state.json";

/// One setting capture changed on an interface, with the value to put back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    pub iface: String,
    /// Receive VLAN offload was on before capture turned it off.
    pub rxvlan_was: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    changed: Vec<Changed>,
}

fn read(dir: &Path) -> io::Result<Record> {
    match std::fs::read(dir.join(STATE_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(io::Error::other),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Record::default()),
        Err(e) => Err(e),
    }
}

fn write(dir: &Path, rec: &Record) -> io::Result<()> {
    let path = dir.join(STATE_FILE);
    if rec.changed.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    std::fs::create_dir_all(dir)?;
    let bytes = serde_json::to_vec_pretty(rec).map_err(io::Error::other)?;
    // Exclusively created under an unpredictable name, never through a symlink, fsynced,
    // renamed, directory fsynced: the store's own way (a root capture must not be made to
    // write through a link planted in the store).
    capsule_store::fsx::write_atomic(&path, &bytes).map_err(io::Error::other)
}

/// Records `change` in `dir` (before the interface is changed).
pub(crate) fn record(dir: &Path, change: Changed) -> io::Result<()> {
    let mut rec = read(dir)?;
    rec.changed.retain(|c| c.iface != change.iface);
    rec.changed.push(change);
    write(dir, &rec)
}

/// Removes the record of `iface` from `dir` (after its setting was put back).
pub(crate) fn forget(dir: &Path, iface: &str) -> io::Result<()> {
    let mut rec = read(dir)?;
    rec.changed.retain(|c| c.iface != iface);
    write(dir, &rec)
}

/// Puts back every setting recorded in `dir` by a capture that did not exit cleanly, logs
/// each, and removes the record. Returns what was restored. A setting that cannot be put
/// back (the interface is gone) is logged and dropped from the record.
pub fn restore(dir: &Path) -> Vec<Changed> {
    let rec = match read(dir) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(
                "cannot read {}: {}; no interface setting restored",
                dir.join(STATE_FILE).display(),
                error_chain(&e)
            );
            return Vec::new();
        }
    };
    let mut restored = Vec::new();
    for c in rec.changed {
        if !c.rxvlan_was {
            continue;
        }
        match rx_vlan_offload(&c.iface, Some(true)) {
            Ok(_) => {
                tracing::warn!(
                    "restored receive VLAN offload on {}: an earlier capture turned it off and \
                     did not exit cleanly (recorded in {})",
                    c.iface,
                    dir.join(STATE_FILE).display()
                );
                restored.push(c);
            }
            Err(e) => tracing::warn!(
                "cannot restore receive VLAN offload on {} that an earlier capture turned off: \
                 {}",
                c.iface,
                error_chain(&e)
            ),
        }
    }
    if let Err(e) = write(dir, &Record::default()) {
        tracing::warn!(
            "cannot remove {}: {}",
            dir.join(STATE_FILE).display(),
            error_chain(&e)
        );
    }
    restored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_and_forget_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("store");
        let a = Changed {
            iface: "eth0".into(),
            rxvlan_was: true,
        };
        record(&dir, a.clone()).unwrap();
        record(&dir, a.clone()).unwrap();
        assert_eq!(read(&dir).unwrap().changed, vec![a]);
        let text = std::fs::read_to_string(dir.join(STATE_FILE)).unwrap();
        assert!(text.contains("\"rxvlan_was\": true"), "{text}");
        forget(&dir, "eth0").unwrap();
        assert!(!dir.join(STATE_FILE).exists());
        forget(&dir, "eth0").unwrap();
        // A record of an interface that does not exist: logged, dropped.
        record(
            &dir,
            Changed {
                iface: "capsule-none0".into(),
                rxvlan_was: true,
            },
        )
        .unwrap();
        assert!(restore(&dir).is_empty());
        assert!(!dir.join(STATE_FILE).exists());
    }
}
