//! The Prometheus endpoint of a capture (`capsule capture --metrics ADDR`): `GET /metrics`
//! answers with the same figures as `capsule status --json`, in the OpenMetrics text format
//! (prometheus-client's encoder), named by Prometheus conventions (`capsule_..._total` for
//! counters, base units: bytes, seconds).
//!
//! Every scrape reads what a capture already publishes, so nothing on the capture path
//! waits for a scrape: `STORE/capture-status.json` (rewritten each second), the segment
//! directory's listing, the oldest segment's footer and the open segment's block headers
//! (for the retention horizon and the freshness lag), the saved budgets, and statvfs of the
//! store's file system. A scrape costs a few small reads.
//!
//! The server is one thread running a single-threaded tokio runtime: every connection is a
//! task, not a thread, at most [`Limits::connections`] of them at once (one more is closed
//! unanswered); a connection has [`Limits::request_time`] to send its request and is closed
//! after the answer. So whoever can reach the port can hold at most that many of capture's
//! file descriptors, for at most that long each, and never a thread.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// The figures of one scrape.
#[derive(Debug)]
struct Figures {
    store: PathBuf,
}

type Labels = Vec<(String, String)>;

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> std::fmt::Result {
    let c = ConstCounter::new(0u64);
    let mut m = enc.encode_descriptor(name, help, None, c.metric_type())?;
    if let [(labels, v)] = series {
        if labels.is_empty() {
            return ConstCounter::new(*v).encode(m);
        }
    }
    for (labels, v) in series {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, f64)],
) -> std::fmt::Result {
    let g = ConstGauge::new(0f64);
    let mut m = enc.encode_descriptor(name, help, None, g.metric_type())?;
    if let [(labels, v)] = series {
        if labels.is_empty() {
            return ConstGauge::new(*v).encode(m);
        }
    }
    for (labels, v) in series {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn one<T>(v: T) -> Vec<(Labels, T)> {
    vec![(Vec::new(), v)]
}

fn label(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Collector for Figures {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let now = capsule_store::now_ns();
        gauge(
            &mut enc,
            "capsule_build_info",
            "The running build: version and git commit.",
            &[(
                vec![
                    ("version".into(), env!("CARGO_PKG_VERSION").into()),
                    ("commit".into(), env!("CAPSULE_GIT_COMMIT").into()),
                ],
                1.0,
            )],
        )?;
        if let Ok(Some(s)) = capsule_capture::status::read_status(&self.store) {
            let running = s.running && now.saturating_sub(s.updated_ns) < 5_000_000_000;
            gauge(
                &mut enc,
                "capsule_capture_running",
                "1 while a capture runs on the store and updated its status within 5 s.",
                &one(f64::from(u8::from(running))),
            )?;
            gauge(
                &mut enc,
                "capsule_status_age_seconds",
                "Time since the capture last updated its status.",
                &one(secs(now.saturating_sub(s.updated_ns))),
            )?;
            counter(
                &mut enc,
                "capsule_packets_captured",
                "Packets stored since the capture started.",
                &one(s.packets),
            )?;
            counter(
                &mut enc,
                "capsule_packets_seen",
                "Packets the interface delivered (stored or dropped) since the capture started.",
                &one(s.seen),
            )?;
            counter(
                &mut enc,
                "capsule_captured_bytes",
                "Wire bytes of the packets stored since the capture started.",
                &one(s.wire_bytes),
            )?;
            let c = &s.drop_causes;
            let causes = [
                ("packet_ring_full", c.packet_ring_full),
                ("xsk_ring_full", c.xsk_ring_full),
                ("xsk_dropped", c.xsk_dropped),
                ("no_socket", c.no_socket),
                ("no_headroom", c.no_room),
                ("store_behind", c.pipeline),
                ("invalid", c.invalid),
                ("disk_full", c.disk_full),
            ];
            let series: Vec<_> = causes
                .iter()
                .map(|(k, v)| (label("cause", k), *v))
                .collect();
            counter(
                &mut enc,
                "capsule_packets_dropped",
                "Packets lost since the capture started, by cause.",
                &series,
            )?;
            // Each interface on its own (one series for a single interface too): the totals
            // above are their sums, plus the store-wide disk-full drops.
            let each = |f: &dyn Fn(&capsule_capture::status::InterfaceStatus) -> u64| {
                s.interfaces
                    .iter()
                    .map(|i| (label("iface", &i.iface), f(i)))
                    .collect::<Vec<_>>()
            };
            counter(
                &mut enc,
                "capsule_interface_packets_captured",
                "Packets stored from each interface since the capture started.",
                &each(&|i| i.packets),
            )?;
            counter(
                &mut enc,
                "capsule_interface_packets_seen",
                "Packets each interface delivered (stored or dropped) since the capture started.",
                &each(&|i| i.seen),
            )?;
            counter(
                &mut enc,
                "capsule_interface_captured_bytes",
                "Wire bytes of the packets stored from each interface.",
                &each(&|i| i.wire_bytes),
            )?;
            let mut series = Vec::new();
            for i in &s.interfaces {
                let c = &i.drop_causes;
                for (k, v) in [
                    ("packet_ring_full", c.packet_ring_full),
                    ("xsk_ring_full", c.xsk_ring_full),
                    ("xsk_dropped", c.xsk_dropped),
                    ("no_socket", c.no_socket),
                    ("no_headroom", c.no_room),
                    ("store_behind", c.pipeline),
                    ("invalid", c.invalid),
                ] {
                    let labels = vec![
                        ("iface".to_string(), i.iface.clone()),
                        ("cause".to_string(), k.to_string()),
                    ];
                    series.push((labels, v));
                }
            }
            counter(
                &mut enc,
                "capsule_interface_packets_dropped",
                "Packets each interface lost since the capture started, by cause (disk-full \
                 drops are store-wide: in capsule_packets_dropped_total only).",
                &series,
            )?;
            let up: Vec<_> = s
                .interfaces
                .iter()
                .map(|i| {
                    let up = running && i.error.is_none();
                    (label("iface", &i.iface), f64::from(u8::from(up)))
                })
                .collect();
            gauge(
                &mut enc,
                "capsule_interface_capturing",
                "1 while the capture reads this interface (0: stopped, or its reader failed).",
                &up,
            )?;
            // An info series: the labels say how each interface is captured, the value is 1.
            let how: Vec<_> = s
                .interfaces
                .iter()
                .filter_map(|i| {
                    let m = i.method.as_ref()?;
                    let opt = |v: Option<String>| v.unwrap_or_default();
                    let labels = vec![
                        ("iface".to_string(), i.iface.clone()),
                        ("backend".to_string(), m.backend.clone()),
                        ("xdp_mode".to_string(), opt(m.xdp_mode.clone())),
                        ("xdp_program".to_string(), opt(m.xdp_program.clone())),
                        (
                            "xdp_carrier".to_string(),
                            opt(m.xdp_carrier.map(|c| c.name().to_string())),
                        ),
                        ("socket_mode".to_string(), opt(m.socket_mode.clone())),
                        (
                            "timestamps".to_string(),
                            serde_json::to_value(m.timestamps)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_string))
                                .unwrap_or_default(),
                        ),
                    ];
                    Some((labels, 1.0))
                })
                .collect();
            gauge(
                &mut enc,
                "capsule_interface_capture_info",
                "How each interface is captured (labels: backend, XDP mode, program variant, \
                 carrier, socket mode, timestamp source); the value is always 1.",
                &how,
            )?;
            let p = &s.store;
            let rungs = ["level", "-10", "-1000", "store"];
            let series: Vec<_> = rungs
                .iter()
                .zip(p.blocks_by_rung)
                .map(|(r, v)| (label("rung", r), v))
                .collect();
            counter(
                &mut enc,
                "capsule_blocks_written",
                "Blocks written, by compression rung (level: the configured one).",
                &series,
            )?;
            counter(
                &mut enc,
                "capsule_segments_deleted_for_space",
                "Segments deleted because the disk was full.",
                &one(p.segments_deleted_for_space),
            )?;
            gauge(
                &mut enc,
                "capsule_compaction_pending_bytes",
                "Bytes of blocks written below the configured level, waiting for the compactor.",
                &one(p.pending_compaction_bytes as f64),
            )?;
            gauge(
                &mut enc,
                "capsule_compaction_age_tier_pending_bytes",
                "Bytes of old segments' blocks below the age tier's level (0 without a tier).",
                &one(p.tier_pending_bytes as f64),
            )?;
            counter(
                &mut enc,
                "capsule_compacted_segments",
                "Segments the compactor rewrote.",
                &one(p.compacted_segments),
            )?;
            gauge(
                &mut enc,
                "capsule_capture_packets_per_second",
                "Packets stored per second over the last status interval.",
                &one(s.packets_per_s),
            )?;
        }
        let store = capsule_store::Store::open(&self.store).ok();
        let list = store
            .as_ref()
            .and_then(|s| s.list().ok())
            .unwrap_or_default();
        gauge(
            &mut enc,
            "capsule_store_bytes",
            "Bytes of segment files in the store.",
            &one(list.iter().map(|e| e.bytes).sum::<u64>() as f64),
        )?;
        gauge(
            &mut enc,
            "capsule_store_segments",
            "Segment files in the store (sealed and open).",
            &one(list.len() as f64),
        )?;
        // The oldest packet held (the retention horizon) and the newest queryable one.
        let times = |e: &capsule_store::SegmentEntry| {
            let r = capsule_store::SegmentReader::open(&e.path).ok()?;
            let blocks = || r.blocks().iter().filter(|b| b.packets > 0);
            Some((
                blocks().map(|b| b.first_ns).min()?,
                blocks().map(|b| b.last_ns).max()?,
            ))
        };
        let oldest = list.iter().find_map(|e| times(e).map(|t| t.0));
        let newest = list.iter().rev().find_map(|e| times(e).map(|t| t.1));
        if let Some(o) = oldest {
            gauge(
                &mut enc,
                "capsule_oldest_packet_timestamp_seconds",
                "Time of the oldest packet held, seconds since the Unix epoch.",
                &one(secs(o)),
            )?;
            gauge(
                &mut enc,
                "capsule_retention_horizon_seconds",
                "How far back the store reaches: now minus the oldest packet held.",
                &one(secs(now.saturating_sub(o))),
            )?;
        }
        if let Some(n) = newest {
            gauge(
                &mut enc,
                "capsule_freshness_lag_seconds",
                "Now minus the newest packet a query can read.",
                &one(secs(now.saturating_sub(n))),
            )?;
        }
        if let Ok((size, avail)) = capsule_store::budget::disk_space(&self.store) {
            gauge(
                &mut enc,
                "capsule_disk_size_bytes",
                "Size of the file system holding the store.",
                &one(size as f64),
            )?;
            gauge(
                &mut enc,
                "capsule_disk_free_bytes",
                "Space available on the file system holding the store.",
                &one(avail as f64),
            )?;
            if let Ok(Some(b)) = capsule_store::budget::load(&self.store) {
                let mut series = Vec::new();
                if let Some(m) = b.max_bytes {
                    series.push((label("budget", "max_bytes"), m as f64));
                }
                if let Some(f) = b.min_free {
                    series.push((label("budget", "min_free"), f.bytes(size) as f64));
                }
                gauge(
                    &mut enc,
                    "capsule_budget_bytes",
                    "Retention budgets in bytes: the store's size, the free space kept.",
                    &series,
                )?;
                if let Some(age) = b.max_age {
                    gauge(
                        &mut enc,
                        "capsule_budget_max_age_seconds",
                        "The retention budget of age, by packet time.",
                        &one(age.as_secs_f64()),
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// Renders the metrics of the store at `store`.
pub fn render(store: &Path) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Figures {
        store: store.to_path_buf(),
    }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

/// How much of the process the metrics endpoint may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; one past them is closed at once, unanswered.
    pub connections: usize,
    /// Time a connection has to send its request head; it is then closed.
    pub request_time: std::time::Duration,
    /// Time the answer may take to be written.
    pub write_time: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 32,
            request_time: std::time::Duration::from_secs(5),
            write_time: std::time::Duration::from_secs(10),
        }
    }
}

/// The longest request head read, in bytes (a scrape's is a few hundred).
const MAX_HEAD: usize = 8192;

/// Binds `addr` and serves `GET /metrics` for the store at `store` on a thread of its own,
/// for the life of the process. Returns the address bound (port 0 picks one). An address
/// on every interface (`0.0.0.0`, `[::]`) is served with a warning: anyone who reaches the
/// port reads the figures.
pub fn serve(addr: &str, store: &Path) -> Result<std::net::SocketAddr> {
    serve_with(addr, store, Limits::default())
}

/// [`serve`] with other limits (the tests' short timeouts).
pub fn serve_with(addr: &str, store: &Path, limits: Limits) -> Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    listener
        .set_nonblocking(true)
        .context("cannot make the metrics listener non-blocking")?;
    let bound = listener
        .local_addr()
        .context("the metrics listener has no address")?;
    if bound.ip().is_unspecified() {
        crate::logging::note(&format!(
            "capsule: warning: --metrics {addr} listens on every interface: anyone who \
             reaches port {} reads the store's figures (interfaces, traffic, disk); give a \
             loopback or management address",
            bound.port()
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(1)
        .build()
        .context("cannot start the metrics runtime")?;
    let store = store.to_path_buf();
    std::thread::Builder::new()
        .name("capsule-metrics".into())
        .spawn(move || rt.block_on(accept_loop(listener, store, limits)))
        .context("cannot start the metrics thread")?;
    Ok(bound)
}

async fn accept_loop(listener: std::net::TcpListener, store: PathBuf, limits: Limits) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            crate::logging::note(&format!("capsule: error: the metrics listener: {e}"));
            return;
        }
    };
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(limits.connections));
    loop {
        let conn = match listener.accept().await {
            Ok((conn, _)) => conn,
            Err(_) => {
                // Out of descriptors or a connection reset before it was taken: the
                // listener stays; try again shortly.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(conn); // over the cap: closed, unanswered
            continue;
        };
        let store = store.clone();
        tokio::spawn(async move {
            let _slot = slot;
            answer(conn, &store, limits).await;
        });
    }
}

/// Reads one request head within the limits, answers it and closes the connection.
async fn answer(mut conn: tokio::net::TcpStream, store: &Path, limits: Limits) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout(limits.request_time, async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if read != Ok(true) {
        return; // too slow, gone, or no request: closed
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    let (status, body, ctype) = match (method, path) {
        (b"GET", b"/metrics") => {
            let store = store.to_path_buf();
            let text = tokio::task::spawn_blocking(move || render(&store))
                .await
                .unwrap_or_default();
            (
                "200 OK",
                text,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
        }
        (b"GET", _) => (
            "404 Not Found",
            "not found: the metrics are at /metrics\n".to_string(),
            "text/plain; charset=utf-8",
        ),
        _ => (
            "405 Method Not Allowed",
            "only GET is served\n".to_string(),
            "text/plain; charset=utf-8",
        ),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    // A client gone or too slow mid-answer is its own problem.
    let _ = tokio::time::timeout(limits.write_time, async {
        conn.write_all(resp.as_bytes()).await?;
        conn.shutdown().await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GETs `/metrics` on a fresh connection: the status line, or `None` when the server
    /// closed it unanswered.
    fn scrape(addr: std::net::SocketAddr) -> Option<String> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut text = String::new();
        let _ = c.read_to_string(&mut text);
        text.lines().next().map(str::to_string)
    }

    /// Idle connections hold at most the cap, for at most the request time; one past the
    /// cap is closed unanswered and a scrape is answered again once the idle ones are shut.
    /// Before, every connection got a thread and an fd for as long as it stayed open.
    #[test]
    fn idle_connections_are_capped_and_timed_out() {
        use std::io::Read;
        let d = tempfile::tempdir().unwrap();
        capsule_store::Store::create_or_open(d.path()).unwrap();
        let limits = Limits {
            connections: 4,
            request_time: std::time::Duration::from_millis(700),
            write_time: std::time::Duration::from_secs(5),
        };
        let addr = serve_with("127.0.0.1:0", d.path(), limits).unwrap();
        assert!(scrape(addr).unwrap().starts_with("HTTP/1.1 200"));
        let mut idle: Vec<_> = (0..4)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(150));
        let t0 = std::time::Instant::now();
        assert_eq!(
            scrape(addr),
            None,
            "a fifth connection must be closed unanswered"
        );
        assert!(t0.elapsed() < std::time::Duration::from_millis(600));
        // The server shuts the idle ones after the request time.
        for c in &mut idle {
            c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let mut b = [0u8; 16];
            let n = c.read(&mut b).unwrap_or(0);
            assert_eq!(n, 0, "an idle connection was answered");
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(3));
        let mut status = scrape(addr);
        for _ in 0..20 {
            if status.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            status = scrape(addr);
        }
        assert!(status.unwrap().starts_with("HTTP/1.1 200"));
        // Other paths and methods are answered, and closed.
        use std::io::Write;
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"POST /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 405"), "{text}");
    }

    #[test]
    fn an_empty_store_still_renders_build_info_and_disk() {
        let d = tempfile::tempdir().unwrap();
        capsule_store::Store::create_or_open(d.path()).unwrap();
        let text = render(d.path());
        assert!(text.contains("capsule_build_info{"), "{text}");
        assert!(text.contains("capsule_disk_free_bytes "), "{text}");
        assert!(text.contains("capsule_store_segments 0.0\n"), "{text}");
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    #[test]
    fn a_capture_on_two_interfaces_is_labelled_per_interface() {
        use capsule_capture::live::{IfaceState, LiveReport};
        let d = tempfile::tempdir().unwrap();
        capsule_store::Store::create_or_open(d.path()).unwrap();
        let mut f =
            capsule_capture::status::StatusFile::new_many(d.path(), &[("a", "m1"), ("b", "m2")]);
        let state = |iface: &str, packets: u64, drops: u64| {
            let mut report = LiveReport {
                packets,
                wire_bytes: packets * 100,
                ..LiveReport::default()
            };
            report.kernel.packets = packets + drops;
            report.kernel.drops = drops;
            let method = if iface == "a" {
                serde_json::from_value(serde_json::json!({
                    "backend": "af_xdp", "xdp_mode": "native",
                    "xdp_program": "capsule_xdp_head", "xdp_carrier": "headroom",
                    "socket_mode": "copy", "timestamps": "xdp-entry"
                }))
                .unwrap()
            } else {
                serde_json::from_value(
                    serde_json::json!({"backend": "af_packet", "timestamps": "kernel"}),
                )
                .unwrap()
            };
            IfaceState {
                iface: iface.into(),
                description: String::new(),
                method: Some(method),
                report,
                error: None,
            }
        };
        f.update_many(&[state("a", 5, 1), state("b", 7, 0)], Default::default());
        let text = render(d.path());
        for want in [
            "capsule_packets_captured_total 12\n",
            "capsule_interface_packets_captured_total{iface=\"a\"} 5\n",
            "capsule_interface_packets_captured_total{iface=\"b\"} 7\n",
            "capsule_interface_packets_seen_total{iface=\"a\"} 6\n",
            "capsule_interface_captured_bytes_total{iface=\"b\"} 700\n",
            "capsule_interface_packets_dropped_total{iface=\"a\",cause=\"packet_ring_full\"} 1\n",
            "capsule_interface_packets_dropped_total{iface=\"b\",cause=\"packet_ring_full\"} 0\n",
            "capsule_packets_dropped_total{cause=\"packet_ring_full\"} 1\n",
            "capsule_interface_capturing{iface=\"b\"} 1",
            "capsule_interface_capture_info{iface=\"a\",backend=\"af_xdp\",xdp_mode=\"native\",\
             xdp_program=\"capsule_xdp_head\",xdp_carrier=\"headroom\",socket_mode=\"copy\",\
             timestamps=\"xdp-entry\"} 1.0\n",
            "capsule_interface_capture_info{iface=\"b\",backend=\"af_packet\",xdp_mode=\"\",\
             xdp_program=\"\",xdp_carrier=\"\",socket_mode=\"\",timestamps=\"kernel\"} 1.0\n",
        ] {
            assert!(text.contains(want), "no {want:?} in\n{text}");
        }
    }
}
