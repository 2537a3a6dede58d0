//! The report's charts as inline SVG: stacked bars over time, ranked bars, the group
//! matrix.

use std::fmt::Write as _;

use capsule_analytics::matrix;

use crate::units;

/// Text for HTML.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

pub(crate) const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Stacked bars of `series` (name, values per slot) over `n` slots, with a legend. The
/// top of the scale is labelled with the tallest bar's value and `scale`, what it is of.
pub(crate) fn stacked_svg(
    title: &str,
    series: &[(String, Vec<u64>)],
    unit: &str,
    axis: (&str, &str),
    scale: Option<&str>,
) -> String {
    let (w, h, left, bottom) = (900.0, 260.0, 70.0, 30.0);
    let n = series.first().map_or(1, |s| s.1.len()).max(1);
    let totals: Vec<u64> = (0..n)
        .map(|i| {
            series
                .iter()
                .map(|s| s.1.get(i).copied().unwrap_or(0))
                .sum()
        })
        .collect();
    let max = totals.iter().copied().max().unwrap_or(0).max(1) as f64;
    let bw = (w - left - 10.0) / n as f64;
    let mut o = format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"{}\" width=\"{w}\" height=\"{}\" \
         viewBox=\"0 0 {w} {}\">",
        esc(title),
        h + 20.0 * series.len().div_ceil(4) as f64,
        h + 20.0 * series.len().div_ceil(4) as f64
    );
    let _ = write!(
        o,
        "<text x=\"4\" y=\"14\" class=\"ax\">{}</text><text x=\"4\" y=\"{}\" class=\"ax\">0</text>",
        esc(&format!(
            "{}{}",
            fmt_num(max as u64, unit),
            scale.map_or(String::new(), |s| format!(" ({s})"))
        )),
        h - bottom
    );
    let _ = write!(
        o,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>",
        h - bottom,
        w - 10.0,
        h - bottom
    );
    let _ = write!(
        o,
        "<text x=\"{left}\" y=\"{}\" class=\"ax\">{}</text>\
         <text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"end\">{}</text>",
        h - bottom + 16.0,
        esc(axis.0),
        w - 10.0,
        h - bottom + 16.0,
        esc(axis.1)
    );
    for i in 0..n {
        let mut y = h - bottom;
        for (k, (name, vals)) in series.iter().enumerate() {
            let v = vals.get(i).copied().unwrap_or(0);
            if v == 0 {
                continue;
            }
            let bh = v as f64 / max * (h - bottom - 20.0);
            y -= bh;
            let _ = write!(
                o,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"{}\">\
                 <title>{} slot {i}: {}</title></rect>",
                left + i as f64 * bw,
                (bw - 1.0).max(1.0),
                PALETTE[k % PALETTE.len()],
                esc(name),
                v
            );
        }
    }
    for (k, (name, _)) in series.iter().enumerate() {
        let x = left + (k % 4) as f64 * 200.0;
        let y = h + 5.0 + (k / 4) as f64 * 20.0;
        let _ = write!(
            o,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            y - 10.0,
            PALETTE[k % PALETTE.len()],
            x + 16.0,
            y,
            esc(name)
        );
    }
    o.push_str("</svg>");
    o
}

/// A value with its unit, said once: `151 MB`, `32 segments`.
pub(crate) fn fmt_num(v: u64, unit: &str) -> String {
    if unit == "bytes" {
        units::format_bytes(v)
    } else {
        format!("{v} {unit}")
    }
}

/// Horizontal bars (label, value).
pub(crate) fn bars_svg(
    title: &str,
    rows: &[(String, f64, bool)],
    fmt: &dyn Fn(f64) -> String,
) -> String {
    // Room for the longest label (about 7 px a character at 12 px), within bounds.
    let longest = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let (w, row_h, left) = (
        900.0,
        22.0,
        (longest as f64 * 7.0 + 12.0).clamp(120.0, 420.0),
    );
    let h = row_h * rows.len().max(1) as f64 + 10.0;
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max).max(1e-9);
    let mut o = format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"{}\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\">",
        esc(title)
    );
    if rows.is_empty() {
        o.push_str("<text x=\"4\" y=\"16\">nothing in the window</text>");
    }
    for (i, (label, v, hot)) in rows.iter().enumerate() {
        let y = i as f64 * row_h + 4.0;
        let bw = v / max * (w - left - 120.0);
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{left}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{}\">{}</text>",
            left - 6.0,
            y + 14.0,
            esc(label),
            bw.max(1.0),
            row_h - 6.0,
            if *hot { "#e15759" } else { "#4e79a7" },
            left + bw + 6.0,
            y + 14.0,
            esc(&fmt(*v))
        );
    }
    o.push_str("</svg>");
    o
}

pub(crate) fn matrix_svg(m: &matrix::Matrix) -> String {
    let n = m.groups.len().max(1);
    let (cell, left, topm) = (70.0, 130.0, 110.0);
    let w = left + cell * n as f64 + 60.0;
    let h = topm + cell * n as f64 + 10.0;
    let max = m.cells.iter().map(|c| c.bytes).max().unwrap_or(0).max(1) as f64;
    let mut o = format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"group matrix\" width=\"{w}\" \
         height=\"{h}\" viewBox=\"0 0 {w} {h}\">"
    );
    for (i, g) in m.groups.iter().enumerate() {
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <text transform=\"translate({},{}) rotate(-45)\">{}</text>",
            left - 6.0,
            topm + i as f64 * cell + cell / 2.0 + 4.0,
            esc(g),
            left + i as f64 * cell + cell / 2.0,
            topm - 6.0,
            esc(g)
        );
    }
    for (r, g) in m.groups.iter().enumerate() {
        for (c, hgrp) in m.groups.iter().enumerate() {
            let cellv = m
                .cells
                .iter()
                .find(|x| &x.src_group == g && &x.dst_group == hgrp);
            let (bytes, flagged) = cellv.map_or((0, false), |x| (x.bytes, x.flagged));
            let t = if bytes == 0 {
                0.0
            } else {
                (bytes as f64).ln_1p() / max.ln_1p()
            };
            let x = left + c as f64 * cell;
            let y = topm + r as f64 * cell;
            let _ = write!(
                o,
                "<rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"rgb({},{},{})\" \
                 stroke=\"{}\" stroke-width=\"{}\"><title>{} -&gt; {}: {} bytes{}</title></rect>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
                cell - 2.0,
                cell - 2.0,
                (255.0 - 200.0 * t) as u8,
                (255.0 - 150.0 * t) as u8,
                255,
                if flagged { "#e15759" } else { "#ccc" },
                if flagged { 3 } else { 1 },
                esc(g),
                esc(hgrp),
                bytes,
                if flagged { " (not allowed)" } else { "" },
                x + cell / 2.0,
                y + cell / 2.0 + 4.0,
                if bytes == 0 {
                    "-".to_string()
                } else {
                    units::format_bytes(bytes)
                }
            );
        }
    }
    o.push_str("</svg>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_text_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&"), "&lt;a href=&quot;x&quot;&gt;&amp;");
    }
}
