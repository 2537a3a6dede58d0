//! What `capsule status` and the console's status view say of a capture and its store in
//! words: the drop causes a capture mode can have, the budgets saved in the store, live
//! alerts' counts.

/// The budgets saved in the store, for a person.
pub(crate) fn describe_budgets(b: Option<&capsule_store::budget::Budgets>) -> String {
    let Some(b) = b else {
        return "none saved (a writer keeps the default floor of free space: 10% of the disk \
                or 5 GiB, whichever is smaller)"
            .into();
    };
    let mut parts = Vec::new();
    if let Some(m) = b.max_bytes {
        parts.push(format!("at most {}", crate::units::format_bytes(m)));
    }
    if let Some(f) = b.min_free {
        let f = match f {
            capsule_store::budget::FreeSpace::Bytes(n) => crate::units::format_bytes(n),
            other => other.describe(),
        };
        parts.push(format!("keep {f} free"));
    }
    if let Some(age) = b.max_age {
        parts.push(format!(
            "data at most {} old",
            humantime::format_duration(age)
        ));
    }
    if parts.is_empty() {
        return "none (the disk may fill; then the oldest segments are deleted for room)".into();
    }
    format!("{} (saved in the store)", parts.join(", "))
}

/// The drop causes the capture mode `mode` can have, and any other that counted, as
/// `"packet ring full 0, disk full 0"`; `disk` lists the store's disk-full drops.
pub(crate) fn drop_causes(
    c: &capsule_capture::status::DropCauses,
    mode: &str,
    disk: bool,
) -> String {
    let xdp = mode.starts_with("XDP");
    [
        ("packet ring full", c.packet_ring_full, !xdp),
        ("AF_XDP RX ring full", c.xsk_ring_full, xdp),
        ("AF_XDP dropped", c.xsk_dropped, xdp),
        ("queue without socket", c.no_socket, xdp),
        ("no headroom", c.no_room, false),
        ("store behind", c.pipeline, xdp),
        ("invalid descriptors", c.invalid, xdp),
        ("disk full", c.disk_full, true),
    ]
    .into_iter()
    .filter(|&(what, _, _)| disk || what != "disk full")
    .filter(|&(_, n, active)| active || n > 0)
    .map(|(what, n, _)| format!("{what} {n}"))
    .collect::<Vec<_>>()
    .join(", ")
}

/// Live alerts' counts in words: `3 evaluation(s), 2 event(s) sent, 0 undelivered, 1
/// engaged`, and the last failed evaluation.
pub(crate) fn live_alerts(al: &capsule_answers::status::AlertStatus) -> String {
    format!(
        "{} evaluation(s), {} event(s) sent, {} undelivered, {} engaged{}",
        al.evaluations,
        al.sent,
        al.undelivered,
        al.engaged,
        al.last_error
            .as_ref()
            .map_or(String::new(), |e| format!("; last error: {e}"))
    )
}
