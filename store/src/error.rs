//! Typed errors of the segment store. Every message names the file and, where it applies,
//! the byte offset, what was expected and what was found.
//!
//! A message does not repeat its cause: the cause is kept as the error's `source()`, so a
//! printer of error chains (`anyhow`'s `{:#}`, which the binary uses) says each part once,
//! and a caller can still find the `io::Error` underneath (a full disk, a closed pipe).

use std::path::PathBuf;
use std::sync::Arc;

use crate::format::DecodeError;

/// Errors of the segment store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O call failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    /// A metadata record in a segment is damaged or of an unknown version.
    #[error("{}: at byte {offset}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        #[source]
        problem: DecodeError,
    },
    /// A file of derived data (a side index) is damaged; it is rebuilt from its segment.
    #[error("{}: damaged (it is derived data: `capsule reindex` rebuilds it)", path.display())]
    DerivedDamaged {
        path: PathBuf,
        #[source]
        problem: DecodeError,
    },
    /// A block's compressed frame is damaged.
    #[error("{}: block {block} at byte {offset}", path.display())]
    BadBlock {
        path: PathBuf,
        block: u32,
        offset: u64,
        #[source]
        problem: BlockProblem,
    },
    /// The saved retention budgets are not the JSON they should be.
    #[error(
        "{}: the saved retention budgets cannot be read (expected JSON with max_bytes, \
         min_free and max_age_ns): {detail}; give the budgets again (--max-bytes, --min-free, \
         --max-age) to replace the file",
        path.display()
    )]
    BadBudgets { path: PathBuf, detail: String },
    /// The directory is not a capsule store, or one this build cannot read.
    #[error("{}: not a capsule store: {detail}", path.display())]
    NotAStore { path: PathBuf, detail: String },
    /// The store's identity file is not the JSON it should be.
    #[error(
        "{}: not a capsule store: expected JSON with magic, format and created_ns",
        path.display()
    )]
    BadIdentity {
        path: PathBuf,
        #[source]
        error: serde_json::Error,
    },
    /// Another process holds the store's writer lock.
    #[error(
        "{}: the store is being written by another process (its lock is held); \
         stop that capture or import first",
        path.display()
    )]
    Locked { path: PathBuf },
    /// A symlink where the store expects one of its own files or directories: the store
    /// never follows one (see the `fsx` module).
    #[error(
        "{}: is a symlink; the store follows no symlink inside it (remove it)",
        path.display()
    )]
    Symlink { path: PathBuf },
    /// Something other than what the store expects (a FIFO where a file should be, a file
    /// where a directory should be).
    #[error("{}: is not a {expected}", path.display())]
    WrongType {
        path: PathBuf,
        expected: &'static str,
    },
    /// The writer was configured in a way that cannot work.
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// A packet longer than the store keeps.
    #[error("{len} captured bytes exceed the {max}-byte limit")]
    PacketTooLong { len: usize, max: usize },
    /// A packet or statistics record naming an interface never registered.
    #[error("unknown interface id {0}")]
    UnknownInterface(u32),
    /// A thread could not be started.
    #[error("cannot start the {0} thread")]
    Thread(&'static str, #[source] std::io::Error),
    /// A pipeline thread of the writer stopped; the error it stopped with is the source.
    #[error("the store writer stopped")]
    WriterStopped(#[source] Arc<StoreError>),
    /// A pipeline thread ended without an error of its own to give.
    #[error("the store writer stopped: {0}")]
    PipelineBroken(&'static str),
    /// A compressor stopped early, leaving blocks unwritten.
    #[error(
        "the store writer stopped: a compressor stopped: {pending} blocks could not be written"
    )]
    CompressorStopped { pending: usize },
}

/// What is wrong with a block's frame.
#[derive(Debug, thiserror::Error)]
pub enum BlockProblem {
    #[error("frame crc32c {computed:#010x} does not match the recorded {recorded:#010x}")]
    Checksum { computed: u32, recorded: u32 },
    #[error("zstd frame does not decompress")]
    Decompress(#[source] std::io::Error),
    #[error("expected {expected} decompressed bytes, found {found}")]
    Length { expected: u32, found: usize },
    #[error(
        "the block claims {claimed} decompressed bytes, more than any block capsule writes \
         ({max})"
    )]
    TooLarge { claimed: u32, max: usize },
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

    /// Whether this is an I/O error of a full disk or an exhausted quota (ENOSPC, EDQUOT):
    /// the writer makes room or drops blocks, and goes on.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Io { error, .. } => {
                matches!(
                    error.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                ) || matches!(error.raw_os_error(), Some(28 | 122))
            }
            StoreError::WriterStopped(e) => e.is_disk_full(),
            _ => false,
        }
    }

    /// Whether the packet itself was refused (the store is fine and takes the next one).
    pub fn is_packet_refused(&self) -> bool {
        matches!(
            self,
            StoreError::PacketTooLong { .. } | StoreError::UnknownInterface(_)
        )
    }
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The error and its causes on one line, `: `-separated (as anyhow's `{:#}` prints them):
/// for messages and logs that hold an error as text.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
