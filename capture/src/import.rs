//! Offline import of pcap and pcapng files into the store.
//!
//! A damaged input, or a packet the store cannot hold (larger than
//! [`capsule_store::writer::MAX_PACKET`]), stops the import of that file there: the packets
//! before it stay in the store, and the [`FileReport`] carries a [`FileProblem`] naming the
//! file, the byte offset, and what was wrong. A store error (disk full, I/O) is an
//! [`ImportError`]: nothing already sealed is touched, and the caller should still
//! [`finish`](capsule_store::StoreWriter::finish) the writer to seal what was written.

use std::io::Read;

use capsule_pcap::{CaptureReader, FileFormat, Oddity, ReadError, Record};
use capsule_store::{StoreError, StoreWriter};

/// What importing one input did.
#[derive(Debug)]
pub struct FileReport {
    /// The input's name as given (a path, or `-` for stdin).
    pub source: String,
    /// The input's format, once its header was read.
    pub format: Option<FileFormat>,
    pub packets: u64,
    /// Sum of the packets' original lengths.
    pub wire_bytes: u64,
    pub interfaces: usize,
    /// Smallest and largest timestamp imported (ns).
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    /// Packets that arrived earlier than a packet before them.
    pub out_of_order: u64,
    /// Where and why reading stopped early; the packets counted above were kept.
    pub error: Option<FileProblem>,
    /// Packets stored whose link type capsule cannot dissect (802.11 radiotap, ...), by
    /// link type: the side index and the filter see nothing inside them.
    pub undissected: Vec<(capsule_wire::linktype::LinkType, u64)>,
    /// What was odd in the input (skipped, mended or not kept), by kind: the first of each
    /// kind and how many there were, in the order first met.
    pub oddities: Vec<(Oddity, u64)>,
    /// Packets the input holds that were not stored because of an oddity (a time before
    /// 1970, say): the import is incomplete when this is not 0.
    pub skipped: u64,
}

impl FileReport {
    fn new(source: &str) -> Self {
        FileReport {
            source: source.to_string(),
            format: None,
            packets: 0,
            wire_bytes: 0,
            interfaces: 0,
            first_ns: None,
            last_ns: None,
            out_of_order: 0,
            error: None,
            undissected: Vec::new(),
            oddities: Vec::new(),
            skipped: 0,
        }
    }

    /// Counts one oddity under its kind (a block type or option code is a kind of its own).
    fn odd(&mut self, o: Oddity) {
        if o.loses_packet() {
            self.skipped += 1;
        }
        match self
            .oddities
            .iter_mut()
            .find(|(first, _)| first.same_kind(&o))
        {
            Some((_, n)) => *n += 1,
            None => self.oddities.push((o, 1)),
        }
    }

    /// Counts one stored packet.
    fn count(&mut self, ts_ns: u64, orig_len: u32, caplen: usize) {
        if self.last_ns.is_some_and(|l| ts_ns < l) {
            self.out_of_order += 1;
        }
        self.packets += 1;
        self.wire_bytes += u64::from(orig_len.max(caplen as u32));
        self.first_ns = Some(self.first_ns.map_or(ts_ns, |f| f.min(ts_ns)));
        self.last_ns = Some(self.last_ns.map_or(ts_ns, |l| l.max(ts_ns)));
    }
}

/// Why the import of one input stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    /// The input is damaged or not a capture file.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A record the store refuses (for example, too large).
    #[error("{source_name}: at byte {offset}: packet {packet} rejected")]
    Rejected {
        source_name: String,
        offset: u64,
        /// The packet's number in the input, from 1.
        packet: u64,
        #[source]
        error: StoreError,
    },
}

/// A failure that stops the whole import.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The store failed while packet number `packet` (from 1) was being written.
    #[error("{source_name}: packet {packet}")]
    Store {
        source_name: String,
        packet: u64,
        #[source]
        error: Box<StoreError>,
    },
    #[error("{source_name}: at byte {offset}: packet names interface {iface}, which the file has not defined")]
    UndefinedInterface {
        source_name: String,
        offset: u64,
        iface: u32,
    },
}

/// What both import paths do with each record: map the file's interfaces to the store's,
/// keep interface statistics, store packets, and count.
struct Importer<'w> {
    writer: &'w mut StoreWriter,
    source: &'w str,
    /// File interface id -> store interface id.
    ids: Vec<u32>,
    /// File interface id -> its link type.
    linktypes: Vec<u16>,
    rep: FileReport,
}

impl<'w> Importer<'w> {
    fn new(writer: &'w mut StoreWriter, source: &'w str) -> Self {
        Importer {
            writer,
            source,
            ids: Vec::new(),
            linktypes: Vec::new(),
            rep: FileReport::new(source),
        }
    }

    fn interface(&mut self, iface: capsule_pcap::Interface) {
        self.linktypes.push(iface.linktype);
        self.ids.push(self.writer.add_interface(iface));
    }

    fn store_error(&self, error: StoreError) -> ImportError {
        ImportError::Store {
            source_name: self.source.to_string(),
            packet: self.rep.packets + 1,
            error: Box::new(error),
        }
    }

    /// Keeps interface counters, so that exports of the window carry the file's drop counts.
    fn stats(
        &mut self,
        iface: u32,
        ts_ns: u64,
        received: Option<u64>,
        dropped: Option<u64>,
    ) -> Result<(), ImportError> {
        if let Some(&id) = self.ids.get(iface as usize) {
            self.writer
                .record_stats(id, ts_ns, received, dropped)
                .map_err(|e| self.store_error(e))?;
        }
        Ok(())
    }

    /// Stores one packet. `Ok(false)`: the store refused it (too large), the file's import
    /// stops there and the report says why; earlier packets stay.
    fn packet(
        &mut self,
        offset: u64,
        iface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
        options: &[u8],
    ) -> Result<bool, ImportError> {
        let Some(&id) = self.ids.get(iface as usize) else {
            return Err(ImportError::UndefinedInterface {
                source_name: self.source.to_string(),
                offset,
                iface,
            });
        };
        match self.writer.append_with(id, ts_ns, orig_len, data, options) {
            Ok(()) => {
                self.rep.count(ts_ns, orig_len, data.len());
                let lt = self.linktypes[iface as usize];
                if !capsule_wire::linktype::is_dissected(lt) {
                    match self.rep.undissected.iter_mut().find(|(l, _)| *l == lt) {
                        Some((_, n)) => *n += 1,
                        None => self.rep.undissected.push((lt, 1)),
                    }
                }
                Ok(true)
            }
            Err(e) if e.is_packet_refused() => {
                self.rep.error = Some(FileProblem::Rejected {
                    source_name: self.source.to_string(),
                    offset,
                    packet: self.rep.packets + 1,
                    error: e,
                });
                Ok(false)
            }
            Err(e) => Err(self.store_error(e)),
        }
    }

    fn finish(mut self) -> FileReport {
        self.rep.interfaces = self.ids.len();
        self.rep
    }
}

/// Reads every record of `input` into `writer`. See the module docs for error handling.
pub fn import_reader<R: Read>(
    writer: &mut StoreWriter,
    source: &str,
    input: R,
) -> Result<FileReport, ImportError> {
    let mut imp = Importer::new(writer, source);
    let mut reader = match CaptureReader::new(source, input) {
        Ok(r) => r,
        Err(e) => {
            imp.rep.error = Some(e.into());
            return Ok(imp.finish());
        }
    };
    imp.rep.format = Some(reader.format());
    loop {
        // Map the interfaces declared so far before the record that may use them.
        while imp.ids.len() < reader.interfaces().len() {
            imp.interface(reader.interfaces()[imp.ids.len()].clone());
        }
        let offset = reader.offset();
        match reader.next_record() {
            Ok(Some(Record::Packet(p))) => {
                if !imp.packet(offset, p.iface, p.ts_ns, p.orig_len, p.data, p.options)? {
                    break;
                }
            }
            Ok(Some(Record::Odd(o))) => imp.rep.odd(o),
            Ok(Some(Record::Stats {
                iface,
                ts_ns,
                received,
                dropped,
            })) => {
                imp.stats(iface, ts_ns, received, dropped)?;
            }
            // Interfaces are mapped at the top of the loop.
            Ok(Some(Record::Interface { .. })) => {}
            Ok(None) => break,
            Err(e) => {
                imp.rep.error = Some(e.into());
                break;
            }
        }
    }
    Ok(imp.finish())
}

/// A record read by the thread of [`import_live`].
enum Live {
    Format(FileFormat),
    Interface(capsule_pcap::Interface),
    Packet {
        ts_ns: u64,
        iface: u32,
        orig_len: u32,
        offset: u64,
        data: Vec<u8>,
        options: Vec<u8>,
    },
    Odd(Oddity),
    Stats {
        iface: u32,
        ts_ns: u64,
        received: Option<u64>,
        dropped: Option<u64>,
    },
    /// The end of the input: clean (`None`) or at damage.
    End(Option<ReadError>),
}

/// Imports a stream that may stay open and idle, such as `tcpdump -w - | capsule import -`:
/// the input is read and parsed on a thread of its own, and while no packet arrives the
/// writer's open blocks are cut by age ([`StoreWriter::tick`]), so what was received is
/// queryable within the block age. Errors are handled as in [`import_reader`].
pub fn import_live<R: Read + Send + 'static>(
    writer: &mut StoreWriter,
    source: &str,
    input: R,
) -> Result<FileReport, ImportError> {
    let (tx, rx) = crossbeam_channel::bounded::<Live>(4096);
    let name = source.to_string();
    let reader = std::thread::Builder::new()
        .name("capsule-import-read".into())
        .spawn(move || {
            let mut r = match CaptureReader::new(name, input) {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Live::End(Some(e)));
                    return;
                }
            };
            if tx.send(Live::Format(r.format())).is_err() {
                return;
            }
            let mut sent = 0;
            loop {
                while sent < r.interfaces().len() {
                    if tx
                        .send(Live::Interface(r.interfaces()[sent].clone()))
                        .is_err()
                    {
                        return;
                    }
                    sent += 1;
                }
                let offset = r.offset();
                let msg = match r.next_record() {
                    Ok(Some(Record::Packet(p))) => Live::Packet {
                        ts_ns: p.ts_ns,
                        iface: p.iface,
                        orig_len: p.orig_len,
                        offset,
                        data: p.data.to_vec(),
                        options: p.options.to_vec(),
                    },
                    Ok(Some(Record::Odd(o))) => Live::Odd(o),
                    Ok(Some(Record::Stats {
                        iface,
                        ts_ns,
                        received,
                        dropped,
                    })) => Live::Stats {
                        iface,
                        ts_ns,
                        received,
                        dropped,
                    },
                    Ok(Some(Record::Interface { .. })) => continue,
                    Ok(None) => Live::End(None),
                    Err(e) => Live::End(Some(e)),
                };
                let end = matches!(msg, Live::End(_));
                if tx.send(msg).is_err() || end {
                    return;
                }
            }
        })
        .map_err(|e| ImportError::Store {
            source_name: source.to_string(),
            packet: 0,
            error: Box::new(StoreError::Thread("input", e)),
        })?;
    let mut imp = Importer::new(writer, source);
    let wait = (imp.writer.config().block_age / 2).max(std::time::Duration::from_millis(1));
    let mut ended = false;
    loop {
        let msg = match rx.recv_timeout(wait) {
            Ok(m) => m,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                imp.writer.tick().map_err(|e| imp.store_error(e))?;
                continue;
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Live::Format(f) => imp.rep.format = Some(f),
            Live::Odd(o) => imp.rep.odd(o),
            Live::Interface(i) => imp.interface(i),
            Live::Stats {
                iface,
                ts_ns,
                received,
                dropped,
            } => {
                imp.stats(iface, ts_ns, received, dropped)?;
            }
            Live::End(e) => {
                imp.rep.error = e.map(FileProblem::Read);
                ended = true;
                break;
            }
            Live::Packet {
                ts_ns,
                iface,
                orig_len,
                offset,
                data,
                options,
            } => {
                if !imp.packet(offset, iface, ts_ns, orig_len, &data, &options)? {
                    break;
                }
                // Cut aged blocks while busy too (cheap: a clock read per lane).
                if imp.rep.packets.is_multiple_of(1024) {
                    imp.writer.tick().map_err(|e| imp.store_error(e))?;
                }
            }
        }
    }
    drop(rx);
    if ended {
        let _ = reader.join();
    }
    // Otherwise the thread may be blocked reading an open pipe: it ends by itself when its
    // next send finds the channel closed, or with the process.
    Ok(imp.finish())
}
