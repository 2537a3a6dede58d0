//! Why an export failed.

use capsule_store::StoreError;

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write the export")]
    Write(#[source] std::io::Error),
    #[error(
        "the export holds packets of link types {0}, but a pcap file holds one link type; \
         use --format pcapng"
    )]
    MixedLinkTypes(String),
    #[error(
        "--bpf {} does not compile for link type {linktype}",
        capsule_query::excerpt::quoted(expr)
    )]
    Bpf {
        expr: String,
        linktype: u16,
        #[source]
        error: pcap::Error,
    },
    #[error(
        "--bpf: the expression is {len} bytes long, over the {max}-byte limit ({})",
        capsule_query::excerpt::quoted(expr)
    )]
    BpfTooLong {
        expr: String,
        len: usize,
        max: usize,
    },
    #[error("{}: block {block}: packet data is damaged", path.display())]
    BadPacket {
        path: std::path::PathBuf,
        block: u32,
        #[source]
        problem: capsule_pcap::FragmentError,
    },
    #[error("cannot create a zstd decompressor")]
    Decompressor(#[source] std::io::Error),
    #[error("a block reader thread stopped before handing over its block")]
    ReaderStopped,
}

impl ExportError {
    /// Whether this is damage in the store (a block that fails its checks, a segment that
    /// cannot be read) rather than a failure of the export itself: the export skips it.
    pub fn is_damage(&self) -> bool {
        match self {
            ExportError::BadPacket { .. } => true,
            ExportError::Store(e) => {
                matches!(e, StoreError::BadBlock { .. } | StoreError::Corrupt { .. })
                    || matches!(e, StoreError::Io { error, .. }
                if error.kind() != std::io::ErrorKind::NotFound
                    && error.raw_os_error() == Some(5))
            }
            _ => false,
        }
    }

    /// Whether a read found its segment removed (retention) or replaced (compaction) after
    /// the question opened it: a reader whose descriptor the budget had closed reopens the
    /// file by path and finds it gone or another file (store/src/segment/handles.rs).
    pub fn is_gone(&self) -> bool {
        matches!(self, ExportError::Store(StoreError::Io { error, .. })
            if error.kind() == std::io::ErrorKind::NotFound)
    }

    /// What the export skips and names, going on with the rest (the answer is partial, exit
    /// 3): damage ([`ExportError::is_damage`]) or a segment gone during the question
    /// ([`ExportError::is_gone`]).
    pub fn is_skippable(&self) -> bool {
        self.is_damage() || self.is_gone()
    }

    /// Whether the reader of the output went away (`| head`): a normal end for a CLI.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, ExportError::Write(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}
