//! `capsule import`: pcap and pcapng files, or a pipe, into a store.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Result};

use crate::cli::ImportArgs;
use crate::notes::{mb_per_s, print_disk_full, print_open_report};
use crate::output::print_json;
use crate::progress::Progress;

/// How an input file is compressed, from its first bytes (whatever its name).
#[derive(Clone, Copy)]
enum Packing {
    Plain,
    Zstd,
    Gzip,
}

/// The first bytes of `r` (up to four: a capture file's magic number), or why they could not
/// be read.
fn first_bytes(mut r: impl Read) -> std::io::Result<Vec<u8>> {
    let mut head = [0u8; 4];
    let mut n = 0;
    while n < head.len() {
        match r.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(head[..n].to_vec())
}

/// Checks that the (decompressed) first bytes of input `name` start a pcap or pcapng file.
fn check_capture(name: &str, first: &[u8]) -> Result<()> {
    capsule_pcap::check_magic(name, first).map_err(|e| anyhow::anyhow!("{e}; nothing was imported"))
}

/// An input of the import, opened and known to hold a capture before the store is opened.
enum Input {
    /// A file at its start, how it is compressed, and its size.
    File(std::fs::File, Packing, u64),
    /// Standard input, through its decompressor.
    Stdin(Box<dyn Read + Send>),
}

/// Opens `path` for import, before the store is opened, so that a file that cannot be read
/// or is not a capture (by its first bytes, decompressed) fails the import before anything
/// is created. Returns the file (at its start), how it is compressed, and its size.
fn open_input(path: &str) -> Result<(std::fs::File, Packing, u64)> {
    let cannot = |why: String| anyhow::anyhow!("cannot read {path}: {why}");
    let meta = std::fs::metadata(path).map_err(|e| cannot(e.to_string()))?;
    if meta.is_dir() {
        return Err(cannot("it is a directory".into()));
    }
    let mut file = std::fs::File::open(path).map_err(|e| cannot(e.to_string()))?;
    let head = first_bytes(&mut file).map_err(|e| cannot(e.to_string()))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| cannot(e.to_string()))?;
    let packing = if head.starts_with(&ZSTD_MAGIC) {
        Packing::Zstd
    } else if head.starts_with(&GZIP_MAGIC) {
        Packing::Gzip
    } else {
        Packing::Plain
    };
    let first = match packing {
        Packing::Plain => Ok(head),
        Packing::Zstd => zstd::stream::read::Decoder::new(&file).and_then(first_bytes),
        Packing::Gzip => first_bytes(flate2::read::MultiGzDecoder::new(&file)),
    }
    .map_err(|e| cannot(e.to_string()))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| cannot(e.to_string()))?;
    check_capture(path, &first)?;
    Ok((file, packing, meta.len()))
}

/// The reader of an opened input: through its decompressor, with the bytes read from the
/// file counted for the progress display.
fn input_reader(
    path: &str,
    file: std::fs::File,
    packing: Packing,
    progress: &Progress,
) -> Result<Box<dyn Read>> {
    let buf = BufReader::with_capacity(1 << 20, progress.reader(file));
    Ok(match packing {
        Packing::Plain => Box::new(buf),
        Packing::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(buf)
                .map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?,
        ),
        Packing::Gzip => Box::new(flate2::read::MultiGzDecoder::new(buf)),
    })
}

/// Standard input for import, through a decompressor when its first bytes say it is zstd
/// or gzip (as a path's are recognised): `zcat`-free `import -` of a compressed capture.
/// Its first bytes (decompressed) are checked to start a capture, as a file's are.
fn stdin_reader() -> Result<Box<dyn Read + Send>> {
    let mut r = stdin_decompressed()?;
    let first =
        first_bytes(&mut r).map_err(|e| anyhow::anyhow!("cannot read standard input: {e}"))?;
    check_capture("-", &first)?;
    Ok(Box::new(std::io::Cursor::new(first).chain(r)))
}

/// Standard input through its decompressor, if any.
fn stdin_decompressed() -> Result<Box<dyn Read + Send>> {
    let mut stdin = std::io::stdin();
    let mut head = Vec::with_capacity(4);
    while head.len() < 4 {
        let mut b = [0u8; 4];
        match stdin.read(&mut b[..4 - head.len()]) {
            Ok(0) => break,
            Ok(k) => head.extend_from_slice(&b[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => bail!("cannot read standard input: {e}"),
        }
    }
    let packing = if head.starts_with(&ZSTD_MAGIC) {
        Packing::Zstd
    } else if head.starts_with(&GZIP_MAGIC) {
        Packing::Gzip
    } else {
        Packing::Plain
    };
    let whole = std::io::Cursor::new(head).chain(stdin);
    Ok(match packing {
        Packing::Plain => Box::new(whole),
        Packing::Zstd => Box::new(
            zstd::stream::read::Decoder::new(whole)
                .map_err(|e| anyhow::anyhow!("cannot read standard input: {e}"))?,
        ),
        Packing::Gzip => Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(whole))),
    })
}

/// The first bytes of a zstd frame and of a gzip member.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

pub fn run(a: &ImportArgs) -> Result<ExitCode> {
    let (store, args, files) = (&a.store, &a.writer, &a.files);
    let (mut cfg, note) = args.config(store)?;
    let config = crate::request::config_of(a.config.as_deref())?;
    // With [tier]: segments are uploaded beside the import, and only uploaded ones leave
    // the disk (docs/tier.md).
    let tier = crate::tier::upload_client_of(config.as_ref())?;
    cfg.tier = tier.is_some();
    let trim_cfg = cfg.clone();
    let cutoff = crate::request::cutoff_from(config.as_ref().zip(a.config.as_deref()), a.cutoff)?;
    // Every input is opened first: one that cannot be read, or is not a capture, stops the
    // import before the store is created or touched.
    let mut opened_inputs = Vec::with_capacity(files.len());
    for f in files {
        opened_inputs.push(if f == "-" {
            Input::Stdin(stdin_reader()?)
        } else {
            let (file, packing, size) = open_input(f)?;
            Input::File(file, packing, size)
        });
    }
    let t0 = Instant::now();
    let (mut writer, opened) = capsule_index::open_writer(store, cfg)?;
    if let Some(c) = cutoff {
        writer.set_cut_policy(Box::new(c));
    }
    let upload = match tier {
        Some(client) => {
            let budgets =
                capsule_store::budget::load(store)?.unwrap_or(capsule_store::budget::Budgets {
                    max_bytes: trim_cfg.max_bytes,
                    min_free: trim_cfg.min_free,
                    max_age: trim_cfg.max_age,
                });
            Some(crate::tier::Upload::start(
                client,
                store,
                writer.budget_handle(),
                budgets,
            )?)
        }
        None => None,
    };
    if let Some(n) = note {
        eprintln!("{n}");
    }
    print_open_report(&opened, a.json);
    let mut inputs = Vec::new();
    let mut damaged = Vec::new();
    // Packets an input holds that were not stored (times capsule cannot keep).
    let mut skipped = Vec::new();
    // A store failure stops the import, but what was written is still sealed below.
    let mut failed = None;
    for (f, input) in files.iter().zip(opened_inputs) {
        let rep = match input {
            // A pipe may stay open and idle: read it on a thread and cut blocks by age.
            Input::Stdin(r) => capsule_capture::import_live(&mut writer, "<stdin>", r),
            Input::File(file, packing, size) => {
                let progress = Progress::bytes(f, Some(size));
                let rep = capsule_capture::import_reader(
                    &mut writer,
                    f,
                    input_reader(f, file, packing, &progress)?,
                );
                progress.finish();
                rep
            }
        };
        let rep = match rep {
            Ok(r) => r,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        if a.json {
            inputs.push(serde_json::json!({
                "source": rep.source, "packets": rep.packets, "bytes": rep.wire_bytes,
                "interfaces": rep.interfaces, "out_of_order": rep.out_of_order,
                "first_ns": rep.first_ns, "last_ns": rep.last_ns,
                "error": rep.error.as_ref().map(|e| capsule_store::error::chain(e)),
                "undissected": rep.undissected.iter().map(|(lt, n)| serde_json::json!({
                    "linktype": lt, "name": capsule_pcap::name(*lt), "packets": n,
                })).collect::<Vec<_>>(),
                "skipped": rep.skipped,
                "oddities": rep.oddities.iter().map(|(first, n)| serde_json::json!({
                    "first": first.to_string(), "count": n,
                })).collect::<Vec<_>>(),
            }));
        } else {
            let disorder = if rep.out_of_order > 0 {
                format!(
                    ", {} out of timestamp order (sorted within blocks)",
                    rep.out_of_order
                )
            } else {
                String::new()
            };
            println!(
                "{}: {} packets, {}, {} interface(s){disorder}",
                rep.source,
                rep.packets,
                crate::units::format_bytes(rep.wire_bytes),
                rep.interfaces
            );
        }
        for &(lt, n) in &rep.undissected {
            let name = capsule_pcap::name(lt).map_or(String::new(), |n| format!(" ({n})"));
            eprintln!(
                "capsule: warning: {}: {n} packets of link type {lt}{name} were stored, but \
                 capsule cannot dissect that link type: the index and the filter see nothing \
                 inside them (they are found by time, with an empty filter or with --bpf)",
                rep.source
            );
        }
        for (first, n) in &rep.oddities {
            let more = if *n > 1 {
                format!(" (and {} more like it)", n - 1)
            } else {
                String::new()
            };
            eprintln!("capsule: note: {}: {first}{more}", rep.source);
        }
        if rep.skipped > 0 {
            skipped.push(format!("{} packets of {}", rep.skipped, rep.source));
        }
        if let Some(e) = rep.error {
            eprintln!(
                "capsule: error: {}; the {} packets before it were kept",
                capsule_store::error::chain(&e),
                rep.packets
            );
            damaged.push(f.clone());
        }
    }
    let finished = writer.finish();
    if let Some(e) = failed {
        // After a store failure the writer has already stopped for the same reason; say
        // more only if sealing failed for another one.
        if let (Err(f), capsule_capture::ImportError::UndefinedInterface { .. }) = (&finished, &e) {
            eprintln!(
                "capsule: error: sealing the store after the failure: {}",
                capsule_store::error::chain(f)
            );
        }
        return Err(e.into());
    }
    let report = finished?;
    if let Some(u) = upload {
        u.finish(store, &trim_cfg)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    // A node of a fleet publishes what it sealed (the outbox keeps it if ClickHouse is down).
    if let Some(said) = config
        .as_ref()
        .and_then(|c| crate::publisher::publish_once(store, c, None))
    {
        eprintln!("capsule: {said}");
    }
    // Packets dropped for a full disk were read, not stored.
    let stored = report.packets.saturating_sub(report.disk_full_drops);
    let ratio = report.uncompressed_bytes as f64 / report.compressed_bytes.max(1) as f64;
    if a.json {
        print_json(serde_json::json!({
            "inputs": inputs,
            "packets": stored, "bytes": report.wire_bytes, "seconds": secs,
            "cut_packets": report.cut_packets,
            "mb_per_s": mb_per_s(report.uncompressed_bytes, secs), "blocks": report.blocks,
            "compression": ratio,
            "sealed": report.sealed.iter().map(|s| serde_json::json!({
                "seq": s.seq, "path": s.path, "bytes": s.bytes, "packets": s.packets,
                "blocks": s.blocks, "first_ns": s.first_ns, "last_ns": s.last_ns,
            })).collect::<Vec<_>>(),
            "deleted": report.deleted.iter().map(|d| serde_json::json!({
                "seq": d.seq, "bytes": d.bytes})).collect::<Vec<_>>(),
            "deleted_for_space": report.deleted_for_space.iter().map(|d| serde_json::json!({
                "seq": d.seq, "bytes": d.bytes})).collect::<Vec<_>>(),
            "disk_full_drops": report.disk_full_drops,
            "store_bytes": report.store_bytes,
            "damaged_inputs": damaged,
        }));
    } else {
        // With disk-full drops the byte count is of what was read, not of what was stored.
        let what = if report.disk_full_drops > 0 {
            format!(
                "{stored} of {} packets read ({} read)",
                report.packets,
                crate::units::format_bytes(report.wire_bytes)
            )
        } else {
            format!(
                "{stored} packets ({})",
                crate::units::format_bytes(report.wire_bytes)
            )
        };
        println!(
            "stored {what} in {:.2} s, {:.0} MB/s; {} blocks, compression {ratio:.2}x; {} \
             segment(s) sealed, {} deleted by retention; store now {}",
            secs,
            mb_per_s(report.uncompressed_bytes, secs),
            report.blocks,
            report.sealed.len(),
            report.deleted.len(),
            crate::units::format_bytes(report.store_bytes)
        );
    }
    if report.cut_packets > 0 && !a.json {
        println!(
            "cut-off: {} packets not stored (their flows' counters in the index still count \
             them; `capsule flows` shows which flows were cut)",
            report.cut_packets
        );
    }
    print_disk_full(&report, a.json);
    if report.disk_full_drops > 0 {
        bail!(
            "the disk was full: {} of {} packets read were not stored (no sealed segment was \
             left to delete); free space or give the store a smaller --max-bytes, then import \
             again{}",
            report.disk_full_drops,
            report.packets,
            if damaged.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} input(s) were also damaged: {}",
                    damaged.len(),
                    damaged.join(", ")
                )
            }
        )
    }
    if !damaged.is_empty() {
        bail!(
            "{} input(s) were damaged: {}",
            damaged.len(),
            damaged.join(", ")
        )
    }
    if skipped.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        // Incomplete, not failed: what could be stored was, and is whole.
        eprintln!(
            "capsule: incomplete: {} not stored (see the notes above); the rest is stored",
            skipped.join(", ")
        );
        Ok(ExitCode::from(crate::output::PARTIAL))
    }
}
