//! What can go wrong between capsule and the object store.

use std::path::PathBuf;

/// An error of the tier: each names the file, the key or the field concerned.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("[tier] credentials_file {path}: {detail}")]
    Credentials { path: PathBuf, detail: String },
    #[error("[tier] {what}: {source}")]
    Setup {
        what: &'static str,
        #[source]
        source: Box<object_store::Error>,
    },
    #[error("object store {url}: {op} {key}: {source}")]
    Request {
        url: String,
        op: &'static str,
        key: String,
        #[source]
        source: Box<object_store::Error>,
    },
    #[error(
        "object store {url}: {key} already holds a different object ({found} bytes, ETag \
         {found_etag}; expected {expected} bytes, ETag {expected_etag}): it is left as it is \
         and the segment stays local; remove the object or change [tier] prefix"
    )]
    Conflict {
        url: String,
        key: String,
        found: u64,
        found_etag: String,
        expected: u64,
        expected_etag: String,
    },
    #[error("object store {url}: {key}: the upload does not check out: {detail}")]
    Verify {
        url: String,
        key: String,
        detail: String,
    },
    #[error(
        "the upload of {key} was stopped before it was done (the segment stays in the \
         backlog: the next writer uploads it)"
    )]
    Stopped { key: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] capsule_store::StoreError),
}
