//! The timeline view (`/timeline`): bytes or packets over time stacked by DSCP value, from
//! the side index (capsule_analytics::timeline). Without a filter from the index's
//! millisecond series, in bins down to 1 ms; with one from the window's flows, in bins of
//! whole seconds. Click a bin to zoom into it, drag across the chart to select a window
//! (the script), which the other views' links then keep.

use std::fmt::Write as _;

use hyper::Response;

use super::super::body::Body;
use super::super::guard::{Failure, Guard};
use super::pages::{
    asked, bad_input, esc, page, partial, respond, window_form, Asked, Nav, Window,
};
use capsule_analytics::timeline::{self, Timeline};
use capsule_answers::flows;

/// Bins at most in a chart.
const MAX_BINS: u64 = 120;

/// The colour of a DSCP value, the same in every chart: the classes an operator looks for
/// have their own (EF red, CS5 purple, never alike), the others one of a few by value.
fn colour(v: u8) -> &'static str {
    const OTHERS: [&str; 6] = [
        "#9d755d", "#ff9da7", "#bab0ac", "#79706e", "#d67195", "#8cd17d",
    ];
    match v {
        46 => "#e45756",
        40 => "#8e44ad",
        0 => "#9aa5b1",
        26 => "#4c78a8",
        10 => "#72b7b2",
        34 => "#54a24b",
        18 => "#f58518",
        48 => "#1d2430",
        64 => "#eeca3b",
        v => OTHERS[usize::from(v) % OTHERS.len()],
    }
}

/// What the chart stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Bytes,
    Packets,
}

impl Unit {
    fn of(name: Option<&str>) -> Result<Unit, String> {
        match name {
            None | Some("" | "bytes") => Ok(Unit::Bytes),
            Some("packets") => Ok(Unit::Packets),
            Some(o) => Err(format!(
                "invalid value for unit: expected bytes or packets, found {o:?}"
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Packets => "packets",
        }
    }

    fn values(self, v: &timeline::ValueBins) -> &[u64] {
        match self {
            Unit::Bytes => &v.bytes,
            Unit::Packets => &v.packets,
        }
    }

    fn show(self, n: u64) -> String {
        match self {
            Unit::Bytes => crate::units::format_bytes(n),
            Unit::Packets => format!("{} packets", crate::units::format_count(n)),
        }
    }
}

/// A DSCP value's name (64: not IP).
fn value_name(v: u8) -> String {
    if v == 64 {
        "non-IP".into()
    } else {
        capsule_analytics::dscp_name(v)
    }
}

/// A bin width in words: `5 ms`, `1 s`, `15 min`, `6 h`, `7 d`.
fn width(ns: u64) -> String {
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;
    match ns {
        n if n < S => format!("{} ms", n / MS),
        n if n < 60 * S => format!("{} s", n / S),
        n if n < 3600 * S => format!("{} min", n / (60 * S)),
        n if n < 86_400 * S => format!("{} h", n / (3600 * S)),
        n => format!("{} d", n / (86_400 * S)),
    }
}

/// The window of [a, b) (ns) with `filter`, as a URL's text.
fn window_of(a: u64, b: u64, filter: &str) -> Window {
    Window {
        from: capsule_query::format_instant(a),
        to: capsule_query::format_instant(b),
        filter: filter.to_string(),
    }
}

/// The chart: the bins stacked by value, each a link zooming into it; the plot carries its
/// span (ms since the epoch) and bin width so the script can turn a drag into a window.
fn chart(t: &Timeline, unit: Unit, w: &Window) -> String {
    let (cw, ch, left, top) = (900.0f64, 260.0f64, 70.0f64, 10.0f64);
    let n = t.bins.max(1) as f64;
    let bw = cw / n;
    let max = (0..t.bins)
        .map(|i| t.values.iter().map(|v| unit.values(v)[i]).sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let end = t.end_ns();
    let mut svg = format!(
        "<svg class=\"chart\" data-testid=\"timeline-chart\" viewBox=\"0 0 {} {}\" \
         data-start-ms=\"{}\" data-end-ms=\"{}\" data-step-ms=\"{}\" data-left=\"{left}\" \
         data-width=\"{cw}\" role=\"img\" aria-label=\"{} over time by DSCP value\">",
        left + cw + 10.0,
        top + ch + 30.0,
        t.start_ns / 1_000_000,
        end / 1_000_000,
        t.step_ns / 1_000_000,
        unit.name()
    );
    let _ = write!(
        svg,
        "<text x=\"4\" y=\"{}\" class=\"axis\">{}</text><text x=\"4\" y=\"{}\" \
         class=\"axis\">0</text>",
        top + 10.0,
        esc(&unit.show(max)),
        top + ch
    );
    let unit_param = [("unit", unit.name())];
    let extra: &[(&str, &str)] = if unit == Unit::Bytes {
        &[]
    } else {
        &unit_param
    };
    for i in 0..t.bins {
        let from = t.start_ns + t.step_ns * i as u64;
        let href = window_of(from, from + t.step_ns, &w.filter).url("/timeline", extra);
        let x = left + bw * i as f64;
        let (packets, bytes) = t.total(i);
        let _ = write!(
            svg,
            "<a href=\"{}\" data-testid=\"bin\"><title>{} +{}: {} in {} packets</title>\
             <rect x=\"{x:.2}\" y=\"{top}\" width=\"{bw:.2}\" height=\"{ch}\" class=\"hit\"/>",
            esc(&href),
            esc(&crate::render::ms(from)),
            width(t.step_ns),
            crate::units::format_bytes(bytes),
            packets
        );
        let mut y = top + ch;
        for v in &t.values {
            let n = unit.values(v)[i];
            if n == 0 {
                continue;
            }
            let h = n as f64 / max as f64 * ch;
            y -= h;
            let _ = write!(
                svg,
                "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{h:.2}\" fill=\"{}\"/>",
                (bw - 0.5).max(0.5),
                colour(v.dscp)
            );
        }
        svg.push_str("</a>");
    }
    let _ = write!(
        svg,
        "<text x=\"{left}\" y=\"{}\" class=\"axis\">{}</text>\
         <text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{}</text>\
         <rect class=\"brush\" x=\"0\" y=\"{top}\" width=\"0\" height=\"{ch}\"/></svg>",
        top + ch + 20.0,
        esc(&crate::render::ms(t.start_ns)),
        left + cw,
        top + ch + 20.0,
        esc(&crate::render::ms(end)),
    );
    svg
}

/// `GET /timeline`: bytes or packets over time by DSCP value for the window and filter, from
/// the index; a drag on the chart selects a window (the script sets `from`/`to`).
pub(super) async fn timeline(g: Guard, nav: Nav, q: Option<&str>) -> Response<Body> {
    let (view, action) = ("view-timeline", "/timeline");
    let Asked {
        w,
        query,
        own: unit,
        ..
    } = match asked(q, &["unit"], |p| {
        Unit::of(p.get("unit").map(String::as_str))
    }) {
        Ok(a) => a,
        Err((w, e)) => return bad_input(g, &nav, view, action, &w, &e),
    };
    let store = g.server.store.clone();
    let work = move || {
        let fail =
            |e: capsule_store::StoreError| Failure::Server(format!("{}: {e:#}", store.display()));
        let st = capsule_store::Store::open(&store).map_err(fail)?;
        let (from, to) = (query.from_ns, query.to_ns);
        let mut notes = Vec::new();
        if query.filter.to_string().is_empty() {
            // The whole link: the millisecond series, unless a segment predates it.
            let (t, listing) = timeline::from_series(&st, from, to, MAX_BINS).map_err(fail)?;
            if listing.no_series.is_empty() {
                let mut missing = Vec::new();
                if !listing.unindexed.is_empty() {
                    missing.push(format!(
                        "segment(s) {:?} have no usable side index: their traffic is not in \
                         the chart",
                        listing.unindexed
                    ));
                }
                notes.push(
                    "from the index's millisecond series (every packet under its own \
                            DSCP value)"
                        .to_string(),
                );
                return Ok((t, notes, missing));
            }
            notes.push(format!(
                "segment(s) {:?} were indexed before the millisecond series (`capsule reindex` \
                 rebuilds them): drawn from the flows in bins of whole seconds",
                listing.no_series
            ));
        }
        let listing = capsule_index::flows::list_index_only(&st, &query, true).map_err(fail)?;
        let missing = flows::missing(&listing, &[], &query);
        let t = timeline::from_flows(&listing.flows, from, to, MAX_BINS);
        notes.push(format!(
            "from the {} flows of the window, each direction under the DSCP value that \
             carried most of its bytes",
            listing.flows.len()
        ));
        if t.step_ns == 1_000_000_000
            && t.to_ns.saturating_sub(t.from_ns) < MAX_BINS * 1_000_000_000
            && !query.filter.to_string().is_empty()
        {
            notes.push(
                "bins finer than 1 s need no filter: the millisecond series is the whole \
                 link's"
                    .into(),
            );
        }
        Ok((t, notes, missing))
    };
    let (g, (t, notes, missing)) = match g.blocking("timeline", true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let extra = if unit == Unit::Bytes {
        String::new()
    } else {
        "<input type=\"hidden\" name=\"unit\" value=\"packets\">".into()
    };
    let mut b = window_form(action, &w, &extra);
    b.push_str(&partial(&missing));
    let (bytes, packets): (u64, u64) = t.values.iter().fold((0, 0), |(b, p), v| {
        (
            b + v.bytes.iter().sum::<u64>(),
            p + v.packets.iter().sum::<u64>(),
        )
    });
    let _ = write!(
        b,
        "<p data-testid=\"timeline-summary\" data-packets=\"{packets}\" data-bytes=\"{bytes}\">{} \
         in {} packets from {} to {}; bins of <span data-testid=\"timeline-step\">{}</span>, {}. \
         Drag across the chart to select a window, click a bin to zoom into it.</p>",
        crate::units::format_bytes(bytes),
        packets,
        esc(&crate::render::ms(t.from_ns)),
        esc(&crate::render::ms(t.to_ns)),
        width(t.step_ns),
        esc(&notes.join("; ")),
    );
    // Zoom out (five times the span around its middle), the whole store, the unit, and
    // the other views of this window.
    let (a, z) = (t.from_ns, t.to_ns.max(t.from_ns + 1));
    let span = z - a;
    let mid = a + span / 2;
    let out = window_of(
        mid.saturating_sub(span.saturating_mul(5) / 2),
        mid.saturating_add(span.saturating_mul(5) / 2),
        &w.filter,
    );
    let whole = Window {
        filter: w.filter.clone(),
        ..Window::default()
    };
    let other = match unit {
        Unit::Bytes => Unit::Packets,
        Unit::Packets => Unit::Bytes,
    };
    let keep: &[(&str, &str)] = if unit == Unit::Bytes {
        &[]
    } else {
        &[("unit", "packets")]
    };
    let _ = write!(
        b,
        "<p class=\"links\"><a href=\"{}\" data-testid=\"zoom-out\">Zoom out</a> \
         <a href=\"{}\" data-testid=\"whole-store\">The whole store</a> \
         <a href=\"{}\" data-testid=\"unit-toggle\">Show {}</a> \
         <a href=\"{}\" data-testid=\"timeline-sessions\">Sessions of this window</a> \
         <a href=\"{}\">Analytics of this window</a></p>",
        esc(&out.url(action, keep)),
        esc(&whole.url(action, keep)),
        esc(&w.url(
            action,
            if other == Unit::Bytes {
                &[]
            } else {
                &[("unit", "packets")]
            }
        )),
        other.name(),
        esc(&w.url("/sessions", &[])),
        esc(&w.url("/analytics", &[])),
    );
    b.push_str(&chart(&t, unit, &w));
    b.push_str("<ul class=\"legend\">");
    for v in &t.values {
        let _ = write!(
            b,
            "<li><svg class=\"swatch\" viewBox=\"0 0 10 10\" aria-hidden=\"true\"><rect \
             width=\"10\" height=\"10\" fill=\"{}\"/></svg>{} ({})</li>",
            colour(v.dscp),
            esc(&value_name(v.dscp)),
            v.dscp
        );
    }
    b.push_str("</ul>");
    respond(g, page("Timeline", Some(&nav), view, &w, "", &b), &missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_and_units_read_as_people_say_them() {
        assert_eq!(width(5_000_000), "5 ms");
        assert_eq!(width(1_000_000_000), "1 s");
        assert_eq!(width(900_000_000_000), "15 min");
        assert_eq!(width(7 * 86_400_000_000_000), "7 d");
        assert_eq!(Unit::of(Some("packets")).unwrap(), Unit::Packets);
        assert!(Unit::of(Some("bits")).unwrap_err().contains("\"bits\""));
        assert_eq!(value_name(64), "non-IP");
        assert_eq!(value_name(46), "ef");
        assert_ne!(colour(46), colour(40), "EF and CS5 never look alike");
    }
}
