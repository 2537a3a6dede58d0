//! Segments read from somewhere other than the local disk: the seam through which the tier
//! (capsule-tier, an object store) serves the segments retention trimmed. The store knows
//! nothing of object stores: it reads a tiered segment through [`RangeRead`] exactly as it
//! reads a local file, through its footer, and opens one through [`RemoteSegments`].

use std::fmt::Debug;
use std::sync::Arc;

use crate::error::Result;

/// Reads byte ranges of one segment's bytes.
pub trait RangeRead: Send + Sync + Debug {
    /// Fills `buf` with the bytes at `offset`; an error when fewer are there.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl RangeRead for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

/// Opens the segments that live only in the object store.
pub trait RemoteSegments: Send + Sync + Debug {
    /// Segment `seq`, `bytes` long (what the ledger recorded at upload): its bytes by range,
    /// and a name for messages (the object's URL).
    fn open(&self, seq: u64, bytes: u64) -> Result<(Arc<dyn RangeRead>, String)>;
}

static INSTALLED: std::sync::OnceLock<Arc<dyn RemoteSegments>> = std::sync::OnceLock::new();

/// Makes `tier` the way every [`crate::Store`] this process opens from now on reads its
/// trimmed segments (a command given a config with a `[tier]` section installs it once,
/// before it opens the store, so every reader, whichever crate opens the store, sees the
/// tiered segments as part of it). A second call is ignored; returns whether this one was
/// installed.
pub fn install(tier: Arc<dyn RemoteSegments>) -> bool {
    INSTALLED.set(tier).is_ok()
}

/// The tier [`install`]ed, if any.
pub(crate) fn installed() -> Option<Arc<dyn RemoteSegments>> {
    INSTALLED.get().cloned()
}
