//! The output encoder: nanosecond pcap or pcapng records through a 1 MiB buffer.

use std::io::Write;

use capsule_pcap::{write as pw, FragmentStat, Interface};

use crate::error::ExportError;

/// Output file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic pcap with nanosecond timestamps (one link type per file).
    Pcap,
    /// pcapng, one interface block per capture interface, `if_tsresol` = 9.
    PcapNg,
}

/// Streams records in the chosen format through a 1 MiB buffer.
pub(crate) struct Encoder<W: Write> {
    out: W,
    buf: Vec<u8>,
    format: Format,
    /// Bytes already handed to `out` (the file's size is this plus `buf`).
    flushed: u64,
}

const FLUSH_AT: usize = 1 << 20;

impl<W: Write> Encoder<W> {
    pub(crate) fn new(out: W, format: Format, ifaces: &[Interface]) -> Result<Self, ExportError> {
        let mut buf = Vec::with_capacity(FLUSH_AT + 70_000);
        match format {
            Format::Pcap => {
                let mut types: Vec<u16> = ifaces.iter().map(|i| i.linktype).collect();
                types.sort_unstable();
                types.dedup();
                if types.len() > 1 {
                    let list: Vec<String> = types.iter().map(|t| t.to_string()).collect();
                    return Err(ExportError::MixedLinkTypes(list.join(", ")));
                }
                let linktype = types
                    .first()
                    .copied()
                    .unwrap_or(capsule_pcap::LINKTYPE_ETHERNET);
                let snaplen = ifaces
                    .iter()
                    .map(|i| if i.snaplen == 0 { 262_144 } else { i.snaplen })
                    .max()
                    .unwrap_or(262_144);
                pw::pcap_header(&mut buf, linktype, snaplen);
            }
            Format::PcapNg => {
                pw::pcapng_shb_with(
                    &mut buf,
                    concat!("capsule ", env!("CARGO_PKG_VERSION")),
                    &section_options(ifaces),
                );
                for i in ifaces {
                    pw::pcapng_idb(&mut buf, i);
                }
            }
        }
        Ok(Encoder {
            out,
            buf,
            format,
            flushed: 0,
        })
    }

    /// Bytes encoded so far (header, records, statistics): the file's size if it ended now.
    pub(crate) fn encoded(&self) -> u64 {
        self.flushed + self.buf.len() as u64
    }

    /// The encoded size of one packet record carrying `caplen` captured bytes and
    /// `options` bytes of pcapng options (pcap has no place for them).
    pub(crate) fn record_len(&self, caplen: usize, options: usize) -> u64 {
        match self.format {
            Format::Pcap => 16 + caplen as u64,
            Format::PcapNg => pw::pcapng_epb_len_with(caplen, options) as u64,
        }
    }

    /// The encoded size of the interface statistics [`Encoder::stats`] would write.
    pub(crate) fn stats_len(&self, iface: u32, st: &FragmentStat) -> u64 {
        if self.format != Format::PcapNg {
            return 0;
        }
        let mut scratch = Vec::new();
        pw::pcapng_isb(&mut scratch, iface, st.ts_ns, st.received, st.dropped);
        scratch.len() as u64
    }

    pub(crate) fn packet(
        &mut self,
        iface: u32,
        ts: u64,
        orig_len: u32,
        data: &[u8],
        options: &[u8],
    ) -> Result<(), ExportError> {
        match self.format {
            Format::Pcap => pw::pcap_record(&mut self.buf, ts, orig_len, data),
            Format::PcapNg => {
                pw::pcapng_epb_with(&mut self.buf, iface, ts, orig_len, data, options)
            }
        }
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf).map_err(ExportError::Write)?;
            self.flushed += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Interface statistics go into pcapng only (classic pcap has no place for them).
    pub(crate) fn stats(&mut self, iface: u32, st: &FragmentStat) {
        if self.format == Format::PcapNg {
            pw::pcapng_isb(&mut self.buf, iface, st.ts_ns, st.received, st.dropped);
        }
    }

    /// Ends a pcapng file with `note` as the comment of an empty last section; pcap has no
    /// place for it.
    pub(crate) fn note(&mut self, note: &str) {
        if self.format == Format::PcapNg {
            pw::pcapng_section_note(&mut self.buf, note);
        }
    }

    pub(crate) fn finish(mut self) -> Result<(), ExportError> {
        self.out.write_all(&self.buf).map_err(ExportError::Write)?;
        self.out.flush().map_err(ExportError::Write)
    }
}

/// The section options an export's one Section Header Block carries: those of the sections
/// its interfaces came from (comments, `shb_hardware`, `shb_os`), each option once, in the
/// order first met. `shb_userappl` is capsule's own (it wrote the file), so the sources' are
/// left out.
fn section_options(ifaces: &[capsule_pcap::Interface]) -> Vec<u8> {
    use capsule_pcap::options;
    let mut seen: Vec<(u16, &[u8])> = Vec::new();
    for i in ifaces {
        for (code, value) in options::iter(&i.options.section) {
            if code != options::OPT_SHB_USERAPPL && !seen.contains(&(code, value)) {
                seen.push((code, value));
            }
        }
    }
    let mut out = Vec::new();
    for (code, value) in seen {
        options::put(&mut out, code, value);
    }
    out
}
