//! pcap and pcapng codec for capsule.
//!
//! This crate owns the two capture-file formats that every other part of capsule speaks:
//!
//! * **Reading** (`read`): a checked parser over untrusted bytes. It reads classic pcap
//!   (microsecond and nanosecond magic, both byte orders) and pcapng (several sections and
//!   interfaces, Enhanced and Simple Packet Blocks, per-interface link type and timestamp
//!   resolution). Any input, however short or lying, yields a packet or a [`ReadError`] that
//!   names the source, the byte offset, what was expected and what was found. It never panics.
//! * **Writing** (`write`): small, allocation-free encoders that append records to a `Vec<u8>`.
//!   The segment store uses the pcapng encoders on its hot path to fill blocks, and export uses
//!   both formats to stream results.
//!
//! Data flow: `import` feeds a file or stdin to [`read::CaptureReader`], which yields
//! [`Record`]s; the store turns packets into pcapng Enhanced Packet Blocks with
//! [`write::pcapng_epb`], and export turns stored packets back into pcap or pcapng.
//!
//! Timestamps are always nanoseconds since the Unix epoch (`u64`) inside capsule.
#![forbid(unsafe_code)]

pub mod read;
pub mod write;

pub use read::{
    check_magic, fragment_packets, fragment_records, fragment_stats, CaptureReader, FileFormat,
    FragmentError, FragmentErrorKind, FragmentPackets, FragmentRecords, FragmentStat, ReadError,
    ReadErrorKind, Record,
};

/// Link-layer header types (`LinkType`, `LINKTYPE_*`), from the one list in
/// [`capsule_wire::linktype`].
pub use capsule_wire::linktype::*;

/// One capture interface: where packets came from and how to decode them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Interface {
    /// Link-layer header type of every packet on this interface.
    pub linktype: LinkType,
    /// Maximum number of bytes captured per packet (0 means no limit, as in pcapng).
    pub snaplen: u32,
    /// Interface name (`if_name`), when known.
    pub name: Option<String>,
}

/// A packet borrowed from a buffer, with capsule's per-packet metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRef<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length of the packet on the wire; `data.len()` is the captured length.
    pub orig_len: u32,
    /// Index of the packet's [`Interface`] in the list its reader or segment keeps.
    pub iface: u32,
    /// The captured bytes, starting at the link-layer header.
    pub data: &'a [u8],
}
