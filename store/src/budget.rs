//! Retention budgets: how much of its disk a store may use, and for how long it keeps data.
//!
//! Three budgets, each optional, enforced by the writer (writer/retention.rs) before every
//! block it writes, by deleting the oldest sealed segments:
//!
//! * `max_bytes`: the store's own size (sealed segments at their current size, plus the
//!   open one);
//! * `min_free`: free space left on the store's file system, in bytes or a percentage of
//!   its size; a store that has no floor saved keeps [`FreeSpace::Default`] (10% or 5 GiB,
//!   whichever is smaller), so a store never fills its disk unless told to
//!   (`--min-free 0`);
//! * `max_age`: the age of data by packet time, measured back from the newest packet
//!   written: a segment whose last packet is older goes.
//!
//! Budgets given once are saved in `STORE/retention.json` (written atomically under the
//! writer lock) and apply to every later writer unless changed explicitly
//! ([`BudgetFlags`]): a capture restarted by hand without its flags keeps the limits it was
//! given.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::fsx;

/// The file in the store root holding the saved budgets.
pub const BUDGET_FILE: &str = "retention.json";

/// The default floor of free space: 10% of the file system...
pub const DEFAULT_FREE_PERCENT: f64 = 10.0;
/// ...or 5 GiB, whichever is smaller.
pub const DEFAULT_FREE_BYTES: u64 = 5 << 30;

/// A floor of free space on the store's file system.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreeSpace {
    /// Bytes.
    Bytes(u64),
    /// A percentage of the file system's size, 0 to 100.
    Percent(f64),
    /// Nothing was said: [`DEFAULT_FREE_PERCENT`] or [`DEFAULT_FREE_BYTES`], whichever is
    /// smaller.
    Default,
}

impl FreeSpace {
    /// Parses `10%` (a percentage, 0 to 100); anything else is left to the caller's size
    /// parser (`None`).
    pub fn parse_percent(s: &str) -> Option<std::result::Result<FreeSpace, String>> {
        let n = s.trim().strip_suffix('%')?;
        Some(match n.trim().parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(FreeSpace::Percent(p)),
            Ok(p) => Err(format!(
                "{s:?}: a percentage of the disk must be 0% to 100%, not {p}%"
            )),
            Err(_) => Err(format!("{s:?}: expected a percentage such as 10%")),
        })
    }

    /// The floor in bytes on a file system of `fs_bytes`.
    pub fn bytes(self, fs_bytes: u64) -> u64 {
        match self {
            FreeSpace::Bytes(b) => b,
            FreeSpace::Percent(p) => (fs_bytes as f64 * p / 100.0) as u64,
            FreeSpace::Default => {
                ((fs_bytes as f64 * DEFAULT_FREE_PERCENT / 100.0) as u64).min(DEFAULT_FREE_BYTES)
            }
        }
    }

    /// Zero: no floor at all.
    pub fn is_zero(self) -> bool {
        matches!(self, FreeSpace::Bytes(0)) || matches!(self, FreeSpace::Percent(p) if p == 0.0)
    }

    /// For a person: `10%`, `2147483648 bytes`, `10% or 5 GiB, whichever is smaller`.
    pub fn describe(self) -> String {
        match self {
            FreeSpace::Bytes(b) => format!("{b} bytes"),
            FreeSpace::Percent(p) => format!("{p}% of the disk"),
            FreeSpace::Default => format!(
                "{DEFAULT_FREE_PERCENT}% of the disk or 5 GiB, whichever is smaller (the default)"
            ),
        }
    }
}

/// The budgets a writer enforces.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Budgets {
    /// The store's size.
    pub max_bytes: Option<u64>,
    /// Free space kept on the store's file system; `None`: none (the disk may fill, and
    /// then the oldest data is deleted for room, see docs/format.md "A full disk").
    pub min_free: Option<FreeSpace>,
    /// Age of data by packet time.
    #[serde(with = "opt_duration_ns", rename = "max_age_ns")]
    pub max_age: Option<Duration>,
}

/// What a command line says about budgets: for each, nothing (keep what is saved), a value,
/// or `None` given explicitly (`--max-age none`: remove it).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BudgetFlags {
    pub max_bytes: Option<Option<u64>>,
    pub min_free: Option<Option<FreeSpace>>,
    pub max_age: Option<Option<Duration>>,
}

impl BudgetFlags {
    /// True when no budget flag was given.
    pub fn is_empty(&self) -> bool {
        self.max_bytes.is_none() && self.min_free.is_none() && self.max_age.is_none()
    }

    /// The budgets that apply: `saved` with each given flag in its place. A store with no
    /// floor of free space saved or given keeps [`FreeSpace::Default`]; an explicit 0 or
    /// `none` removes it.
    pub fn apply(&self, saved: Option<Budgets>) -> Budgets {
        let saved = saved.unwrap_or(Budgets {
            min_free: Some(FreeSpace::Default),
            ..Budgets::default()
        });
        let min_free = match self.min_free {
            Some(Some(f)) if f.is_zero() => None,
            Some(v) => v,
            None => saved.min_free,
        };
        Budgets {
            max_bytes: self.max_bytes.unwrap_or(saved.max_bytes),
            min_free,
            max_age: self.max_age.unwrap_or(saved.max_age),
        }
    }
}

/// Reads the budgets saved in the store at `root`; `None` when none were ever saved.
pub fn load(root: &Path) -> Result<Option<Budgets>> {
    let path = root.join(BUDGET_FILE);
    let bytes = match fsx::read(&path, "read retention budgets") {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| StoreError::BadBudgets {
            path,
            detail: e.to_string(),
        })
}

/// Saves `budgets` in the store at `root` (atomically, durably). Only the holder of the
/// writer lock calls it.
pub fn save(root: &Path, budgets: &Budgets) -> Result<()> {
    let body = serde_json::to_string_pretty(budgets).expect("plain struct serializes");
    fsx::write_atomic(&root.join(BUDGET_FILE), (body + "\n").as_bytes())
}

/// The size and the space available to an unprivileged writer of the file system holding
/// `path`, in bytes.
pub fn disk_space(path: &Path) -> Result<(u64, u64)> {
    let st = rustix::fs::statvfs(path)
        .map_err(|e| StoreError::io("read free space (statvfs)", path, e.into()))?;
    Ok((
        st.f_blocks.saturating_mul(st.f_frsize),
        st.f_bavail.saturating_mul(st.f_frsize),
    ))
}

mod opt_duration_ns {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_nanos().min(u128::from(u64::MAX)) as u64)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_what_is_saved_and_none_removes() {
        let saved = Budgets {
            max_bytes: Some(1000),
            min_free: Some(FreeSpace::Percent(20.0)),
            max_age: Some(Duration::from_secs(60)),
        };
        assert_eq!(BudgetFlags::default().apply(Some(saved)), saved);
        let f = BudgetFlags {
            max_bytes: Some(None),
            min_free: Some(Some(FreeSpace::Bytes(0))),
            max_age: Some(Some(Duration::from_secs(5))),
        };
        assert_eq!(
            f.apply(Some(saved)),
            Budgets {
                max_bytes: None,
                min_free: None,
                max_age: Some(Duration::from_secs(5)),
            }
        );
        // A new store keeps the default floor.
        assert_eq!(
            BudgetFlags::default().apply(None).min_free,
            Some(FreeSpace::Default)
        );
    }

    #[test]
    fn the_default_floor_is_the_smaller_of_10_percent_and_5_gib() {
        assert_eq!(FreeSpace::Default.bytes(1 << 30), (1u64 << 30) / 10);
        assert_eq!(FreeSpace::Default.bytes(1 << 40), 5 << 30);
        assert_eq!(FreeSpace::Percent(50.0).bytes(1000), 500);
        assert_eq!(
            FreeSpace::parse_percent("10%"),
            Some(Ok(FreeSpace::Percent(10.0)))
        );
        assert!(matches!(FreeSpace::parse_percent("120%"), Some(Err(_))));
        assert!(matches!(FreeSpace::parse_percent("x%"), Some(Err(_))));
        assert_eq!(FreeSpace::parse_percent("10G"), None);
    }

    #[test]
    fn saved_budgets_read_back() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(load(d.path()).unwrap(), None);
        let b = Budgets {
            max_bytes: None,
            min_free: Some(FreeSpace::Default),
            max_age: Some(Duration::from_secs(30 * 86400)),
        };
        save(d.path(), &b).unwrap();
        assert_eq!(load(d.path()).unwrap(), Some(b));
        std::fs::write(d.path().join(BUDGET_FILE), b"{nope").unwrap();
        let e = load(d.path()).unwrap_err().to_string();
        assert!(e.contains("retention.json"), "{e}");
    }
}
