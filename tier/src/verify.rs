//! `capsule verify` of the segments in the object store: each tiered segment's object
//! against what the ledger recorded when the uploader confirmed it (`tiered SEQ BYTES
//! ETAG`), and with `deep` the object's bytes themselves.
//!
//! ```text
//! ledger: tiered segments (live) -> HEAD each object: there? size and ETag as recorded?
//!   deep: GET it in PART_BYTES ranges -> the ETag recomputed from the bytes (MD5, or MD5 of
//!         the parts' MD5s) -> a scratch file (STORE/.verify-tiered/) -> capsule_store's
//!         verify_segment (head frame, every block's checksum, footer) -> scratch removed
//! ```
//!
//! A problem names the object (`endpoint/bucket/key`), what was recorded and what was
//! found; one inside the segment names its offset in the object, as for a local file.

use std::io::Write;
use std::path::PathBuf;

use md5::{Digest, Md5};

use capsule_store::verify::{verify_segment, Problem};
use capsule_store::{ledger, Store};

use crate::client::{expected_etag, Client, PART_BYTES};
use crate::error::TierError;
use crate::remote::segment_key;

/// What [`verify_tiered`] looked at.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// Tiered segments whose object was checked.
    pub segments: usize,
    /// Of them, the ones only in the object store (local file trimmed).
    pub tiered_only: usize,
    /// Bytes read from the object store (deep only).
    pub bytes_read: u64,
}

/// Checks every live tiered segment of `store` in the object store; with `deep`, reads each
/// object whole and verifies its bytes as a local segment is verified. `progress` is told
/// the bytes read as they are read.
///
/// Errors are the object store's own (the endpoint down): the check could not be made,
/// which is not a problem of the segments.
pub fn verify_tiered(
    client: &Client,
    store: &Store,
    deep: bool,
    mut progress: impl FnMut(u64),
) -> Result<(Checked, Vec<Problem>), TierError> {
    let dir = store.segments_dir();
    let mut checked = Checked::default();
    let mut problems = Vec::new();
    let Some(l) = ledger::read(&dir)? else {
        return Ok((checked, problems));
    };
    for (&seq, t) in &l.tiered {
        if !l.live.contains_key(&seq) {
            continue;
        }
        let key = segment_key(client, seq);
        let name = PathBuf::from(format!("{}/{key}", client.url()));
        let trimmed = l.trimmed.contains(&seq);
        checked.segments += 1;
        checked.tiered_only += usize::from(trimmed);
        let problem = |detail: String| Problem {
            path: name.clone(),
            what: "tiered segment",
            offset: None,
            len: None,
            detail,
        };
        let local = if trimmed {
            "its local file was trimmed after the upload: the segment is lost".to_string()
        } else {
            "its local file is still there".to_string()
        };
        let Some((size, etag)) = client.head(&key)? else {
            problems.push(problem(format!(
                "the object is gone; the ledger records it uploaded ({} bytes, ETag {}); \
                 {local}",
                t.bytes, t.etag
            )));
            continue;
        };
        if size != t.bytes {
            problems.push(problem(format!(
                "the object holds {size} bytes; the ledger recorded {} ({local})",
                t.bytes
            )));
            continue;
        }
        let replaced = etag != t.etag;
        if replaced {
            problems.push(problem(format!(
                "the object's ETag is {etag}; the ledger recorded {} (the object was replaced \
                 after the upload; {local})",
                t.etag
            )));
        }
        if deep {
            // A replaced object's bytes are still checked: what in it is damaged, by offset.
            let (read, found) = deep_check(client, store, seq, t, !replaced, &mut progress)?;
            checked.bytes_read += read;
            problems.extend(found);
        }
    }
    Ok((checked, problems))
}

/// Reads the object of segment `seq` whole into a scratch file, checks its ETag against the
/// bytes (unless `compare_etag` is false: the object is known replaced) and the segment's
/// structure and checksums, and removes the scratch file.
fn deep_check(
    client: &Client,
    store: &Store,
    seq: u64,
    t: &ledger::Tiered,
    compare_etag: bool,
    progress: &mut impl FnMut(u64),
) -> Result<(u64, Vec<Problem>), TierError> {
    let key = &segment_key(client, seq);
    let name = &PathBuf::from(format!("{}/{key}", client.url()));
    // Named as the segment (the checks read its number from its name), in a directory of
    // its own so no reader of the store ever takes it for one of the store's segments.
    let scratch_dir = store.root().join(".verify-tiered");
    let scratch = scratch_dir.join(capsule_store::segment::sealed_name(seq));
    let io = |op, source| TierError::Io {
        op,
        path: scratch.clone(),
        source,
    };
    let result = (|| {
        std::fs::create_dir_all(&scratch_dir).map_err(|e| io("create the directory of", e))?;
        let mut file = std::fs::File::create(&scratch).map_err(|e| io("create", e))?;
        let mut md5s = Vec::new();
        let mut at = 0u64;
        while at < t.bytes {
            let to = (at + PART_BYTES).min(t.bytes);
            let part = client.get_range(key, at..to)?;
            md5s.push(<[u8; 16]>::from(Md5::digest(&part)));
            file.write_all(&part).map_err(|e| io("write", e))?;
            progress(part.len() as u64);
            at = to;
        }
        file.flush().map_err(|e| io("write", e))?;
        drop(file);
        let mut found = Vec::new();
        // The ETag is comparable when the server gives the S3 one (MD5 of one PUT, or of
        // the parts' MD5s for a multipart upload, always in PART_BYTES parts here); some
        // servers give other ETags (encryption at rest), which the checksums below cover.
        let md5_shaped = t
            .etag
            .split('-')
            .next()
            .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        let parts_recorded = t
            .etag
            .split_once('-')
            .and_then(|(_, n)| n.parse::<usize>().ok());
        let comparable = md5_shaped && parts_recorded.is_none_or(|n| n == md5s.len());
        let computed = if parts_recorded.is_some() || md5s.len() > 1 {
            // A multipart ETag even for one part.
            let mut h = Md5::new();
            md5s.iter().for_each(|m| h.update(m));
            let hex: String = h.finalize().iter().map(|x| format!("{x:02x}")).collect();
            format!("{hex}-{}", md5s.len())
        } else {
            expected_etag(&md5s)
        };
        if compare_etag && comparable && computed != t.etag {
            found.push(Problem {
                path: name.clone(),
                what: "tiered segment",
                offset: None,
                len: Some(t.bytes),
                detail: format!(
                    "its bytes have ETag {computed}; the ledger recorded {} (the object \
                     changed in the object store)",
                    t.etag
                ),
            });
        }
        for mut p in verify_segment(&scratch) {
            p.path = name.clone();
            found.push(p);
        }
        Ok((t.bytes, found))
    })();
    let _ = std::fs::remove_file(&scratch);
    let _ = std::fs::remove_dir(&scratch_dir);
    result
}
