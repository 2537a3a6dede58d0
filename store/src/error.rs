//! Typed errors of the segment store. Every message names the file and, where it applies,
//! the byte offset, what was expected and what was found.
//!
//! A message includes its cause's text, and the cause is not also returned from
//! `Error::source()`, so a printer of error chains (`anyhow`'s `{:#}`) says it once.

use std::path::PathBuf;

use crate::format::DecodeError;

/// Errors of the segment store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O call failed.
    #[error("cannot {op} {}: {error}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// A metadata record in a segment is damaged or of an unknown version.
    #[error("{}: at byte {offset}: {problem}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        problem: DecodeError,
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
    #[error("{0}")]
    Packet(String),
    /// A pipeline thread of the writer stopped; the error it stopped with follows.
    #[error("the store writer stopped: {0}")]
    WriterStopped(String),
}

impl StoreError {
    /// An I/O error of `op` on `path`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            error,
        }
    }

    /// Whether this is an I/O error of kind NotFound (a file deleted under a reader).
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
