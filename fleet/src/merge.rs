//! Captures from several nodes merged by timestamp into one pcapng: one interface per node
//! and node interface, named after the node (`NODE` when the node's interface has no name,
//! else `NODE/NAME`), so Wireshark's `frame.interface_name` says which capture point saw a
//! packet. Equal timestamps keep the order of the inputs (then each input's own order).
//!
//! The inputs may still be arriving (capsule_fleet::spool): the merge reads each input only
//! as far as it needs its next packet, so it writes its first packet once every input's
//! first packet is in. An input that ends early or damaged (a node cut off mid-answer) ends
//! there: its packets so far are in the output, the rest is missing, and the merge says so
//! ([`Merged::ended`]); the other inputs are merged on. A `keep` predicate (`--bpf`) drops
//! packets it refuses.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{Read, Write};

use capsule_pcap::{CaptureReader, Interface, Record};

use crate::FleetError;

/// One node's packets: a pcap or pcapng stream.
#[derive(Debug)]
pub struct Input<R> {
    pub node: String,
    pub reader: R,
}

/// What [`merge`] wrote: packets in all and per input (in the inputs' order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    pub packets: u64,
    pub bytes: u64,
    pub per_input: Vec<u64>,
    /// Per input: why it ended before its end (damaged, cut off), when it did.
    pub ended: Vec<Option<String>>,
}

/// Whether a packet (its link type, its bytes) is kept: `--bpf`.
pub type Keep<'a> = dyn FnMut(u16, &[u8]) -> Result<bool, FleetError> + 'a;

/// A packet read ahead from one input.
struct Head {
    ts_ns: u64,
    orig_len: u32,
    iface: u32,
    data: Vec<u8>,
}

struct Source<R: Read> {
    node: String,
    /// None: the input never began (no capture header came).
    reader: Option<CaptureReader<R>>,
}

impl<R: Read> Source<R> {
    /// The next packet, or `None` at the end.
    fn next(&mut self) -> Result<Option<Head>, String> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(None);
        };
        loop {
            let rec = reader.next_record().map_err(|e| e.to_string())?;
            match rec {
                None => return Ok(None),
                Some(Record::Packet(p)) => {
                    return Ok(Some(Head {
                        ts_ns: p.ts_ns,
                        orig_len: p.orig_len,
                        iface: p.iface,
                        data: p.data.to_vec(),
                    }))
                }
                Some(_) => continue,
            }
        }
    }
}

/// The interface of node `node` as the merged file names it.
pub fn interface_name(node: &str, iface: &Interface) -> String {
    match iface.name.as_deref() {
        Some(n) if !n.is_empty() => format!("{node}/{n}"),
        _ => node.to_string(),
    }
}

/// Merges `inputs` by timestamp into one pcapng written to `out`, keeping the packets
/// `keep` keeps (all without one).
pub fn merge<R: Read, W: Write>(
    inputs: Vec<Input<R>>,
    mut out: W,
    mut keep: Option<&mut Keep<'_>>,
) -> Result<Merged, FleetError> {
    let io = |source| FleetError::Io {
        op: "write the merged packets",
        path: "-".into(),
        source,
    };
    let mut merged = Merged {
        per_input: vec![0; inputs.len()],
        ended: vec![None; inputs.len()],
        ..Merged::default()
    };
    let mut sources = Vec::with_capacity(inputs.len());
    for (k, i) in inputs.into_iter().enumerate() {
        let reader = match CaptureReader::new(format!("node {}", i.node), i.reader) {
            Ok(r) => Some(r),
            Err(e) => {
                merged.ended[k] = Some(format!("its answer is not a capture: {e}"));
                None
            }
        };
        sources.push(Source {
            node: i.node,
            reader,
        });
    }
    let mut buf = Vec::with_capacity(1 << 20);
    capsule_pcap::write::pcapng_shb(&mut buf, Some("capsule fleet query"));
    let mut heads: Vec<Option<Head>> = Vec::with_capacity(sources.len());
    let mut heap = BinaryHeap::new();
    // The next packet of input `i`; an input that fails ends there, said in `ended`.
    let next = |s: &mut Source<R>, ended: &mut Option<String>| match s.next() {
        Ok(h) => h,
        Err(e) => {
            *ended = Some(format!("its answer ended damaged or cut off: {e}"));
            None
        }
    };
    for (i, s) in sources.iter_mut().enumerate() {
        let h = next(s, &mut merged.ended[i]);
        if let Some(h) = &h {
            heap.push(Reverse((h.ts_ns, i)));
        }
        heads.push(h);
    }
    let mut ids: HashMap<(usize, u32), u32> = HashMap::new();
    let mut flushed = false;
    while let Some(Reverse((_, i))) = heap.pop() {
        let Some(h) = heads[i].take() else { continue };
        let src = &sources[i];
        let described = src
            .reader
            .as_ref()
            .and_then(|r| r.interfaces().get(h.iface as usize))
            .cloned()
            .ok_or_else(|| FleetError::Decode {
                what: format!("the packets node {} sent", src.node),
                problem: format!("a packet names interface {} it never described", h.iface),
            })?;
        let kept = match keep.as_mut() {
            Some(k) => k(described.linktype, &h.data)?,
            None => true,
        };
        if kept {
            let next_id = ids.len() as u32;
            let id = match ids.get(&(i, h.iface)) {
                Some(&id) => id,
                None => {
                    let mut iface = described;
                    iface.name = Some(interface_name(&src.node, &iface));
                    capsule_pcap::write::pcapng_idb(&mut buf, &iface);
                    ids.insert((i, h.iface), next_id);
                    next_id
                }
            };
            capsule_pcap::write::pcapng_epb(&mut buf, id, h.ts_ns, h.orig_len, &h.data);
            merged.packets += 1;
            merged.bytes += h.data.len() as u64;
            merged.per_input[i] += 1;
            // The first packet goes out at once (a reader sees the answer begin), then in
            // large writes.
            if buf.len() >= 1 << 20 || !flushed {
                out.write_all(&buf).map_err(io)?;
                out.flush().map_err(io)?;
                buf.clear();
                flushed = true;
            }
        }
        let n = next(&mut sources[i], &mut merged.ended[i]);
        if let Some(n) = &n {
            heap.push(Reverse((n.ts_ns, i)));
        }
        heads[i] = n;
    }
    out.write_all(&buf).map_err(io)?;
    out.flush().map_err(io)?;
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_pcap::write;

    fn capture(name: Option<&str>, times: &[u64]) -> Vec<u8> {
        let mut b = Vec::new();
        write::pcapng_shb(&mut b, None);
        write::pcapng_idb(
            &mut b,
            &Interface {
                linktype: 1,
                snaplen: 0,
                name: name.map(str::to_string),
                options: Default::default(),
            },
        );
        for &t in times {
            write::pcapng_epb(&mut b, 0, t, 60, &t.to_le_bytes());
        }
        b
    }

    /// What the merge wrote, told to the test as it is written.
    struct Told(std::sync::mpsc::Sender<usize>);

    impl Write for Told {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.send(b.len());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A node that sends its first packet and then stalls does not hold the answer back:
    /// the first packet is written while it stalls (an asker that buffered a node's answer,
    /// or waited for every node's end, would write nothing until the stall ended).
    #[test]
    fn the_first_packet_is_written_while_a_node_stalls_after_its_first() {
        let whole = capture(None, &[5, 6, 7]);
        let stalled = capture(None, &[1, 2, 3]);
        // The stalled node's header and first packet, then nothing until released.
        let first_len = capture(None, &[1]).len();
        let (mut w, r) = crate::spool::spool(tempfile::tempfile().unwrap()).unwrap();
        w.write_all(&stalled[..first_len]).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let merging = std::thread::spawn(move || {
            merge(
                vec![
                    Input {
                        node: "a".into(),
                        reader: Box::new(std::io::BufReader::new(r)) as Box<dyn Read + Send>,
                    },
                    Input {
                        node: "b".into(),
                        reader: Box::new(std::io::Cursor::new(whole)),
                    },
                ],
                Told(tx),
                None,
            )
        });
        let first = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the first packet is written while node a stalls");
        assert!(first > 0);
        // Released: the rest comes, every packet in time order.
        w.write_all(&stalled[first_len..]).unwrap();
        w.finish();
        let m = merging.join().unwrap().unwrap();
        assert_eq!((m.packets, m.per_input), (6, vec![3, 3]));
    }

    #[test]
    fn inputs_merge_in_time_order_with_one_interface_per_node() {
        let a = capture(Some("eth0"), &[1, 4, 4, 9]);
        let b = capture(None, &[2, 4, 10]);
        let empty = capture(None, &[]);
        let mut out = Vec::new();
        let m = merge(
            vec![
                Input {
                    node: "a".into(),
                    reader: &a[..],
                },
                Input {
                    node: "b".into(),
                    reader: &b[..],
                },
                Input {
                    node: "c".into(),
                    reader: &empty[..],
                },
            ],
            &mut out,
            None,
        )
        .unwrap();
        assert_eq!((m.packets, m.per_input.clone()), (7, vec![4, 3, 0]));
        assert_eq!(m.ended, vec![None, None, None]);
        let mut r = CaptureReader::new("merged", &out[..]).unwrap();
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            if let Record::Packet(p) = rec {
                got.push((p.ts_ns, p.iface));
            }
        }
        assert_eq!(
            got,
            vec![(1, 0), (2, 1), (4, 0), (4, 0), (4, 1), (9, 0), (10, 1)]
        );
        let names: Vec<_> = r.interfaces().iter().map(|i| i.name.clone()).collect();
        assert_eq!(names, vec![Some("a/eth0".into()), Some("b".into())]);
        // A damaged input, and one cut off mid-packet, end there, said; the others are
        // merged whole, and `keep` drops what it refuses.
        let bad = b"not a capture".to_vec();
        let cut = &b[..b.len() - 5];
        let mut out = Vec::new();
        let mut odd = |_: u16, d: &[u8]| Ok(d[0] % 2 == 1);
        let m = merge(
            vec![
                Input {
                    node: "z".into(),
                    reader: &bad[..],
                },
                Input {
                    node: "a".into(),
                    reader: &a[..],
                },
                Input {
                    node: "b".into(),
                    reader: cut,
                },
            ],
            &mut out,
            Some(&mut odd),
        )
        .unwrap();
        assert!(m.ended[0].as_deref().unwrap().contains("not a capture"));
        assert_eq!(m.ended[1], None);
        assert!(m.ended[2].as_deref().unwrap().contains("cut off"), "{m:?}");
        // a's odd times (1, 9), b's before the cut (2, 4: none odd).
        assert_eq!((m.packets, m.per_input.clone()), (2, vec![0, 2, 0]));
    }
}
