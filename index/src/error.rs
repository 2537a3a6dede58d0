//! Typed errors of the segment store. Every message names the file and, where it applies,
//! the byte offset, what was expected and what was found.

use std::path::PathBuf;

use crate::format::DecodeError;

/// Errors of the segment store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O call failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A metadata record in a segment is damaged or of an unknown version.
    #[error("{}: at byte {offset}: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        #[source]
        source: DecodeError,
    },
    /// A block's compressed frame is damaged.
    #[error("{}: block {block} at byte {offset}: {detail}", path.display())]
    BadBlock {
        path: PathBuf,
        block: u32,
        offset: u64,
        detail: String,
    },
    /// The directory is not a capsule store, or one this build cannot read.
    #[error("{}: not a capsule store: {detail}", path.display())]
    NotAStore { path: PathBuf, detail: String },
    /// Another process holds the store's writer lock.
    #[error(
        "{}: the store is being written by another process (its lock is held); \
         stop that capture or import first",
        path.display()
    )]
    Locked { path: PathBuf },
    /// The writer was configured in a way that cannot work.
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// A packet that the store cannot hold.
    #[error("packet rejected: {0}")]
    Packet(String),
    /// A pipeline thread of the writer stopped; the error it stopped with follows.
    #[error("the store writer stopped: {0}")]
    WriterStopped(String),
}

impl StoreError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
