//! Reading ahead of the merge: the planned blocks are read, checked, decompressed and
//! filtered (window, capsule's filter, `--bpf`) on worker threads, and handed over in plan
//! order, each with the positions of its selected packets.

use std::collections::HashMap;
use std::sync::Arc;

use capsule_pcap::{read::fragment_packets, PacketRef};
use capsule_query::Query;
use capsule_store::SegmentReader;
use capsule_wire::fragments::{FragmentKey, FragmentPorts};
use capsule_wire::{dissect, L4};
use crossbeam_channel::{bounded, Receiver};

use crate::error::ExportError;

/// A block chosen by the plan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned {
    pub(crate) seg: usize,
    pub(crate) block: usize,
    pub(crate) first_ns: u64,
}

/// Where one packet lies in a decompressed block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PacketLoc {
    pub(crate) ts_ns: u64,
    pub(crate) iface: u32,
    pub(crate) orig_len: u32,
    pub(crate) start: u32,
    pub(crate) end: u32,
    /// The packet's pcapng options (comments, flags, ...): `data[opts_start..opts_end]`.
    pub(crate) opts_start: u32,
    pub(crate) opts_end: u32,
}

/// A decompressed block with its selected packets located.
pub(crate) struct Loaded {
    pub(crate) seg: usize,
    pub(crate) block: usize,
    pub(crate) data: Vec<u8>,
    pub(crate) packets: Vec<PacketLoc>,
}

pub(crate) type Reply = crossbeam_channel::Sender<Result<Loaded, ExportError>>;

/// What every packet read must pass: the window, capsule's filter, and `--bpf`.
#[derive(Debug, Clone)]
pub(crate) struct PacketFilter {
    pub(crate) query: Query,
}

/// Longest `--bpf` expression accepted, in bytes: a tcpdump filter a person writes is a
/// line or two; libpcap's optimiser takes minutes and gigabytes on a few thousand terms.
pub const MAX_BPF_LEN: usize = 4096;

/// Compiles `expr` for `linktype` in this process, as the export does, and drops the
/// program: whether it compiles. Refuses an expression over [`MAX_BPF_LEN`] bytes first.
pub fn bpf_compiles(expr: &str, linktype: u16) -> Result<(), ExportError> {
    check_bpf_len(expr)?;
    Bpf::new(expr.to_string()).program(linktype).map(|_| ())
}

/// Refuses an expression over [`MAX_BPF_LEN`] bytes.
pub fn check_bpf_len(expr: &str) -> Result<(), ExportError> {
    if expr.len() > MAX_BPF_LEN {
        return Err(ExportError::BpfTooLong {
            expr: expr.to_string(),
            len: expr.len(),
            max: MAX_BPF_LEN,
        });
    }
    Ok(())
}

/// A `--bpf` expression compiled by libpcap, once per link type. Each thread keeps its own:
/// a compiled program may be sent to another thread but not shared.
///
/// VLAN tags: a BPF program reads fixed offsets, so `tcp[13] & 4 != 0` never matches a
/// tagged frame unless written `vlan and ...`. capsule's own filter looks through tags, and
/// `--bpf` does too: an Ethernet frame with 802.1Q / 802.1ad tags (up to two) that the
/// program rejects is tried again with its tags taken out. An expression that names `vlan`
/// (or `mpls`, `pppoes`, `geneve`: the other keywords that move libpcap's offsets) is taken
/// to manage tags itself and is applied to the frame as it is, with libpcap's meaning.
pub struct Bpf {
    expr: String,
    programs: HashMap<u16, pcap::BpfProgram>,
    through_tags: bool,
    untagged: Vec<u8>,
}

/// Every expression compiled in this process, once per compile (the tests count them).
#[cfg(test)]
pub(crate) static COMPILED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Whether `expr` uses a libpcap keyword that shifts the offsets of what follows it.
fn manages_tags(expr: &str) -> bool {
    expr.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| ["vlan", "mpls", "pppoes", "geneve"].contains(&w.to_ascii_lowercase().as_str()))
}

/// `frame` (Ethernet) without its 802.1Q / 802.1ad tags (at most two), into `out`; false
/// when the frame carries none.
fn strip_tags(frame: &[u8], out: &mut Vec<u8>) -> bool {
    const TPIDS: [u16; 3] = [0x8100, 0x88a8, 0x9100];
    let mut at = 12;
    let mut tags = 0;
    while tags < 2 {
        match frame.get(at..at + 2) {
            Some(&[a, b])
                if TPIDS.contains(&u16::from_be_bytes([a, b])) && frame.len() >= at + 6 =>
            {
                at += 4;
                tags += 1;
            }
            _ => break,
        }
    }
    if tags == 0 {
        return false;
    }
    out.clear();
    out.extend_from_slice(&frame[..12]);
    out.extend_from_slice(&frame[at..]);
    true
}

impl std::fmt::Debug for Bpf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bpf")
            .field("expr", &self.expr)
            .field("through_tags", &self.through_tags)
            .finish_non_exhaustive()
    }
}

impl Bpf {
    pub fn new(expr: String) -> Self {
        Bpf {
            through_tags: !manages_tags(&expr),
            expr,
            programs: HashMap::new(),
            untagged: Vec::new(),
        }
    }

    /// Whether the packet `data` of link type `linktype` passes the program (see the type's
    /// docs for VLAN-tagged frames).
    pub fn matches(&mut self, linktype: u16, data: &[u8]) -> Result<bool, ExportError> {
        if self.program(linktype)?.filter(data) {
            return Ok(true);
        }
        if !self.through_tags || linktype != 1 {
            return Ok(false);
        }
        let mut untagged = std::mem::take(&mut self.untagged);
        let hit = strip_tags(data, &mut untagged) && self.program(linktype)?.filter(&untagged);
        self.untagged = untagged;
        Ok(hit)
    }

    pub(crate) fn program(&mut self, linktype: u16) -> Result<&pcap::BpfProgram, ExportError> {
        if !self.programs.contains_key(&linktype) {
            let err = |error: pcap::Error| ExportError::Bpf {
                expr: self.expr.clone(),
                linktype,
                error,
            };
            let dead = pcap::Capture::dead(pcap::Linktype(i32::from(linktype))).map_err(err)?;
            #[cfg(test)]
            COMPILED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(self.expr.clone());
            let prog = dead.compile(&self.expr, true).map_err(err)?;
            self.programs.insert(linktype, prog);
        }
        Ok(&self.programs[&linktype])
    }
}

/// The link type of interface `iface` of `seg` (0 for one it does not declare).
pub(crate) fn linktype_of(seg: &SegmentReader, iface: u32) -> u16 {
    seg.interfaces()
        .get(iface as usize)
        .map_or(0, |i| i.linktype)
}

/// Reads, decompresses and filters the planned blocks on `threads` threads, delivering them
/// in plan order. At most a few blocks per thread are held ahead of the consumer.
pub(crate) fn prefetch(
    segments: Arc<Vec<SegmentReader>>,
    plan: Vec<Planned>,
    threads: usize,
    filter: PacketFilter,
    reuse: Receiver<Vec<u8>>,
) -> Receiver<Result<Loaded, ExportError>> {
    let threads = threads.clamp(1, 16);
    let (out_tx, out_rx) = bounded(2);
    // Each job carries its own one-shot reply channel; the orderer waits on them in order.
    let (job_tx, job_rx) = bounded::<(Planned, Reply)>(threads * 2);
    let (order_tx, order_rx) = bounded::<Receiver<Result<Loaded, ExportError>>>(threads * 2);
    for _ in 0..threads {
        let job_rx = job_rx.clone();
        let segments = segments.clone();
        let filter = filter.clone();
        let reuse = reuse.clone();
        std::thread::spawn(move || {
            let Ok(mut dctx) = zstd::bulk::Decompressor::new() else {
                return;
            };
            let mut frame = Vec::new();
            for (p, reply) in job_rx {
                let data = reuse.try_recv().unwrap_or_default();
                let seg = &segments[p.seg];
                let r = load(seg, p, &mut dctx, &mut frame, data, &filter.query);
                let _ = reply.send(r);
            }
        });
    }
    std::thread::spawn(move || {
        for p in plan {
            let (tx, rx) = bounded(1);
            if job_tx.send((p, tx)).is_err() || order_tx.send(rx).is_err() {
                return;
            }
        }
    });
    std::thread::spawn(move || {
        for rx in order_rx {
            let Ok(r) = rx.recv() else {
                return;
            };
            // Damage in one block is the merge's to skip; any other error ends the export.
            let stop = r.as_ref().is_err_and(|e| !e.is_skippable());
            if out_tx.send(r).is_err() || stop {
                return;
            }
        }
    });
    out_rx
}

/// Reads block `p`, and keeps the packets in the window that pass the filter (`--bpf` is
/// applied after, by the one thread that merges: see `Window`).
///
/// A datagram's later fragments (no transport header) are judged with the ports of its first
/// fragment, found as the side index finds them (capsule_wire::fragments: earlier in this
/// block, or in the blocks before it whose time range comes within the window of this one's,
/// read only when a later fragment is not resolved in this block), so a port filter selects
/// every fragment of the datagrams it selects.
fn load(
    seg: &SegmentReader,
    p: Planned,
    dctx: &mut zstd::bulk::Decompressor<'static>,
    frame: &mut Vec<u8>,
    mut data: Vec<u8>,
    query: &Query,
) -> Result<Loaded, ExportError> {
    seg.read_block(p.block, dctx, frame, &mut data)?;
    let mut packets = Vec::new();
    let base = data.as_ptr() as usize;
    let filtering = !query.filter.is_all();
    let mut frags = FragmentPorts::default();
    // This block's first fragments so far, and whether the blocks before were read.
    let mut firsts: Vec<(FragmentKey, (u16, u16), u64)> = Vec::new();
    let mut widened = false;
    for r in fragment_packets(&data) {
        let pkt: PacketRef<'_> = r.map_err(|problem| ExportError::BadPacket {
            path: seg.path().to_path_buf(),
            block: p.block as u32,
            problem,
        })?;
        let in_window = query.in_window(pkt.ts_ns);
        if filtering {
            let linktype = linktype_of(seg, pkt.iface);
            let mut d = dissect(linktype, pkt.data);
            // First fragments count whether or not they are in the window.
            if let Some((fk, ports)) = d.fragment_key() {
                match ports {
                    Some(ports) => {
                        frags.first(fk, ports, pkt.ts_ns);
                        firsts.push((fk, ports, pkt.ts_ns));
                    }
                    None => {
                        let mut found = frags.later(&fk, pkt.ts_ns);
                        if found.is_none() && !widened && p.block > 0 && in_window {
                            widened = true;
                            frags = firsts_before(seg, p.block, dctx, frame);
                            for &(k, ports, ts) in &firsts {
                                frags.first(k, ports, ts);
                            }
                            found = frags.later(&fk, pkt.ts_ns);
                        }
                        if let Some((src_port, dst_port)) = found {
                            d.l4 = match fk.proto {
                                capsule_wire::ipproto::SCTP => L4::Sctp { src_port, dst_port },
                                // No TCP header: the ports of its first fragment, no flags,
                                // no sequence number, no payload of its own.
                                capsule_wire::ipproto::TCP => L4::Tcp(capsule_wire::TcpInfo {
                                    src_port,
                                    dst_port,
                                    seq: 0,
                                    ack: 0,
                                    flags: 0,
                                    window: 0,
                                    payload_len: 0,
                                }),
                                _ => L4::Udp { src_port, dst_port },
                            };
                        }
                    }
                }
            }
            if !in_window
                || !query
                    .filter
                    .matches_packet(&d, linktype, pkt.data, pkt.orig_len)
            {
                continue;
            }
        } else if !in_window {
            continue;
        }
        let start = pkt.data.as_ptr() as usize - base;
        let opts_start = if pkt.options.is_empty() {
            0
        } else {
            pkt.options.as_ptr() as usize - base
        };
        packets.push(PacketLoc {
            ts_ns: pkt.ts_ns,
            iface: pkt.iface,
            orig_len: pkt.orig_len,
            start: start as u32,
            end: (start + pkt.data.len()) as u32,
            opts_start: opts_start as u32,
            opts_end: (opts_start + pkt.options.len()) as u32,
        });
    }
    Ok(Loaded {
        seg: p.seg,
        block: p.block,
        data,
        packets,
    })
}

/// The first fragments of the blocks before block `block` whose time range comes within
/// [`FragmentPorts::WINDOW_NS`] of its own: those the side index may join a later fragment of
/// `block` to. A block that cannot be read adds none (its own load reports the damage).
fn firsts_before(
    seg: &SegmentReader,
    block: usize,
    dctx: &mut zstd::bulk::Decompressor<'static>,
    frame: &mut Vec<u8>,
) -> FragmentPorts {
    let mut frags = FragmentPorts::default();
    let mut data = Vec::new();
    let Some(me) = seg.blocks().get(block) else {
        return frags;
    };
    let w = FragmentPorts::WINDOW_NS;
    let (from, to) = (me.first_ns.saturating_sub(w), me.last_ns.saturating_add(w));
    for (b, meta) in seg.blocks().iter().enumerate().take(block) {
        if meta.last_ns < from || meta.first_ns > to {
            continue;
        }
        if seg.read_block(b, dctx, frame, &mut data).is_err() {
            continue;
        }
        for pkt in fragment_packets(&data) {
            let Ok(pkt) = pkt else { break };
            let d = dissect(linktype_of(seg, pkt.iface), pkt.data);
            if let Some((fk, Some(ports))) = d.fragment_key() {
                frags.first(fk, ports, pkt.ts_ns);
            }
        }
    }
    frags
}

#[cfg(test)]
mod vlan_tests {
    use super::*;

    /// An Ethernet frame, with `tags` 802.1Q tags, of IPv4/TCP with the RST flag.
    fn rst(tags: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for t in 0..tags {
            f.extend_from_slice(&[0x81, 0x00, 0, 100 + t as u8]);
        }
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2, 0x9c, 0x40, 0x01, 0xbb]);
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x04, 0, 0, 0, 0, 0, 0]);
        f
    }

    #[test]
    fn a_bpf_sees_through_vlan_tags_unless_it_names_them() {
        let mut b = Bpf::new("tcp[13] & 4 != 0".into());
        for tags in 0..3 {
            assert!(b.matches(1, &rst(tags)).unwrap(), "{tags} tags");
        }
        // An expression about tags keeps libpcap's meaning.
        let mut b = Bpf::new("not vlan".into());
        assert!(b.matches(1, &rst(0)).unwrap());
        assert!(!b.matches(1, &rst(1)).unwrap());
        let mut b = Bpf::new("vlan 100 and tcp[13] & 4 != 0".into());
        assert!(b.matches(1, &rst(1)).unwrap());
        assert!(!b.matches(1, &rst(0)).unwrap());
        assert!(manages_tags("VLAN and tcp") && !manages_tags("host 10.0.0.1"));
    }
}
