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

pub mod options;
pub mod read;
pub mod write;

pub use read::{
    check_magic, fragment_packets, fragment_records, fragment_stats, CaptureReader, FileFormat,
    FragmentError, FragmentErrorKind, FragmentPackets, FragmentRecords, FragmentStat, Oddity,
    ReadError, ReadErrorKind, Record,
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
    /// The rest of what the capture said of the interface and its section (description,
    /// filter, comments, ...), kept to be written back on export.
    pub options: InterfaceOptions,
}

/// pcapng options of an interface beyond its name, in the form of [`options`]: little-endian,
/// without `opt_endofopt`. Empty for a classic pcap file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct InterfaceOptions {
    /// The IDB's options other than `if_name`, `if_tsresol` and `if_tsoffset` (which capsule
    /// writes itself): `if_description`, `if_filter`, `if_os`, `if_hardware`, comments, ...
    pub idb: Vec<u8>,
    /// The options of the Section Header Block of the section that described the interface:
    /// section comments, `shb_hardware`, `shb_os`, `shb_userappl`.
    pub section: Vec<u8>,
}

impl Interface {
    /// An interface with no options beyond its name.
    pub fn new(linktype: LinkType, snaplen: u32, name: Option<String>) -> Self {
        Interface {
            linktype,
            snaplen,
            name,
            options: InterfaceOptions::default(),
        }
    }

    /// `if_description`, when the interface has one.
    pub fn description(&self) -> Option<String> {
        options::texts(&self.options.idb, options::OPT_IF_DESCRIPTION)
            .into_iter()
            .next()
    }

    /// Sets `if_description` (replacing any), as capture does to say how it captured.
    pub fn set_description(&mut self, text: &str) {
        let mut idb = options::without(&self.options.idb, options::OPT_IF_DESCRIPTION);
        options::put(&mut idb, options::OPT_IF_DESCRIPTION, text.as_bytes());
        self.options.idb = idb;
    }
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
    /// The packet's pcapng options (comments, `epb_flags`, `epb_dropcount`, ...) in the form
    /// of [`options`]; empty for most packets (live capture writes none).
    pub options: &'a [u8],
}
