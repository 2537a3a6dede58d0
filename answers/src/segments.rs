//! The segments of a store: `capsule segments`, one row per segment, with where its bytes
//! are (the local disk, the object store of `[tier]`, or both). A segment trimmed after
//! upload is described through the source's tier (its cached footer: no packet is fetched);
//! without a tier it is named as unreadable, with what to give.

use std::path::PathBuf;

use capsule_store::ledger::Location;
use capsule_store::{SegmentState, Unreadable};
use serde::{Deserialize, Serialize};

use crate::AnswerError;

/// One interface a segment's packets were captured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Interface {
    pub linktype: u16,
    pub snaplen: u32,
    pub name: Option<String>,
}

/// One segment file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Segment {
    pub seq: u64,
    /// `sealed` or `open`.
    pub state: String,
    /// Where its bytes are: `local`, `tiered` (in the object store only: its local file
    /// trimmed) or `both` (uploaded, the local file still there). Absent in the answer of a
    /// server older than this field.
    #[serde(default)]
    pub location: Option<String>,
    pub path: PathBuf,
    pub blocks: usize,
    pub packets: u64,
    pub bytes: u64,
    /// First and last packet time (none for a segment without packets).
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    pub interfaces: Vec<Interface>,
}

/// The segments, oldest first, and those that cannot be read.
#[derive(Debug)]
pub struct Answer {
    pub segments: Vec<Segment>,
    pub unreadable: Vec<Unreadable>,
}

/// `{"segments": [...], "unreadable": [{"seq", "path", "problem"}]}`.
impl Serialize for Answer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let unreadable: Vec<serde_json::Value> = self
            .unreadable
            .iter()
            .map(|u| serde_json::json!({"seq": u.seq, "path": u.path, "problem": u.problem}))
            .collect();
        serde_json::json!({ "segments": self.segments, "unreadable": unreadable }).serialize(s)
    }
}

/// The answer read back from its JSON (`GET /v1/segments`): an unreadable segment's span is
/// not in it (`None`).
impl<'de> Deserialize<'de> for Answer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Doc {
            segments: Vec<Segment>,
            unreadable: Vec<UnreadableDoc>,
        }
        #[derive(Deserialize)]
        struct UnreadableDoc {
            seq: u64,
            path: PathBuf,
            problem: String,
        }
        let doc = Doc::deserialize(d)?;
        Ok(Answer {
            segments: doc.segments,
            unreadable: doc
                .unreadable
                .into_iter()
                .map(|u| Unreadable {
                    seq: u.seq,
                    path: u.path,
                    problem: u.problem,
                    span: None,
                })
                .collect(),
        })
    }
}

/// Lists the segments of the source's store, the trimmed ones through its tier.
pub fn answer(source: &crate::Source) -> Result<Answer, AnswerError> {
    let err = |e| AnswerError::Store {
        store: source.store.display().to_string(),
        source: e,
    };
    let store = source.open().map_err(err)?;
    let (segs, unreadable) = store.open_segments_checked().map_err(err)?;
    let ledger = capsule_store::ledger::read(&store.segments_dir()).map_err(err)?;
    let location = |seq: u64| {
        let at = ledger.as_ref().and_then(|l| l.location(seq));
        match at.unwrap_or(Location::Local) {
            Location::Local => "local",
            Location::Tiered => "tiered",
            Location::Both => "both",
        }
        .to_string()
    };
    let segments = segs
        .iter()
        .map(|s| Segment {
            seq: s.seq(),
            state: match s.state() {
                SegmentState::Sealed => "sealed",
                SegmentState::Open => "open",
            }
            .to_string(),
            location: Some(location(s.seq())),
            path: s.path().to_path_buf(),
            blocks: s.blocks().len(),
            packets: s.blocks().iter().map(|b| u64::from(b.packets)).sum(),
            bytes: s.bytes(),
            first_ns: s.blocks().iter().map(|b| b.first_ns).min(),
            last_ns: s.blocks().iter().map(|b| b.last_ns).max(),
            interfaces: s
                .interfaces()
                .iter()
                .map(|i| Interface {
                    linktype: i.linktype,
                    snaplen: i.snaplen,
                    name: i.name.clone(),
                })
                .collect(),
        })
        .collect();
    Ok(Answer {
        segments,
        unreadable,
    })
}
