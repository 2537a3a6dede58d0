//! Captures from several nodes merged by timestamp into one pcapng: one interface per node
//! and node interface, named after the node (`NODE` when the node's interface has no name,
//! else `NODE/NAME`), so Wireshark's `frame.interface_name` says which capture point saw a
//! packet. Equal timestamps keep the order of the inputs (then each input's own order).

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
}

/// A packet read ahead from one input.
struct Head {
    ts_ns: u64,
    orig_len: u32,
    iface: u32,
    data: Vec<u8>,
}

struct Source<R: Read> {
    node: String,
    reader: CaptureReader<R>,
}

impl<R: Read> Source<R> {
    /// The next packet, or `None` at the end.
    fn next(&mut self) -> Result<Option<Head>, FleetError> {
        loop {
            let rec = self.reader.next_record().map_err(|e| FleetError::Decode {
                what: format!("the packets node {} sent", self.node),
                problem: e.to_string(),
            })?;
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

/// Merges `inputs` by timestamp into one pcapng written to `out`.
pub fn merge<R: Read, W: Write>(inputs: Vec<Input<R>>, mut out: W) -> Result<Merged, FleetError> {
    let io = |source| FleetError::Io {
        op: "write the merged packets",
        path: "-".into(),
        source,
    };
    let mut sources = Vec::with_capacity(inputs.len());
    for i in inputs {
        let reader = CaptureReader::new(format!("node {}", i.node), i.reader).map_err(|e| {
            FleetError::Decode {
                what: format!("the packets node {} sent", i.node),
                problem: e.to_string(),
            }
        })?;
        sources.push(Source {
            node: i.node,
            reader,
        });
    }
    let mut buf = Vec::with_capacity(1 << 20);
    capsule_pcap::write::pcapng_shb(&mut buf, Some("capsule fleet query"));
    let mut heads: Vec<Option<Head>> = Vec::with_capacity(sources.len());
    let mut heap = BinaryHeap::new();
    for (i, s) in sources.iter_mut().enumerate() {
        let h = s.next()?;
        if let Some(h) = &h {
            heap.push(Reverse((h.ts_ns, i)));
        }
        heads.push(h);
    }
    let mut ids: HashMap<(usize, u32), u32> = HashMap::new();
    let mut merged = Merged {
        per_input: vec![0; sources.len()],
        ..Merged::default()
    };
    while let Some(Reverse((_, i))) = heap.pop() {
        let Some(h) = heads[i].take() else { continue };
        let next_id = ids.len() as u32;
        let id = match ids.get(&(i, h.iface)) {
            Some(&id) => id,
            None => {
                let src = &sources[i];
                let mut iface = src
                    .reader
                    .interfaces()
                    .get(h.iface as usize)
                    .cloned()
                    .ok_or_else(|| FleetError::Decode {
                        what: format!("the packets node {} sent", src.node),
                        problem: format!("a packet names interface {} it never described", h.iface),
                    })?;
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
        if buf.len() >= 1 << 20 {
            out.write_all(&buf).map_err(io)?;
            buf.clear();
        }
        let n = sources[i].next()?;
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
        )
        .unwrap();
        assert_eq!((m.packets, m.per_input.clone()), (7, vec![4, 3, 0]));
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
        // A damaged input is an error naming its node, never a panic.
        let bad = b"not a capture".to_vec();
        let e = merge(
            vec![Input {
                node: "z".into(),
                reader: &bad[..],
            }],
            Vec::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("node z"), "{e}");
    }
}
