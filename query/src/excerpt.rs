//! Short excerpts of long inputs, so that an error about a 100 KB filter, time or `--bpf`
//! expression stays a few lines long: at most [`MAX_EXCERPT_CHARS`] characters of the input,
//! with `...` where it was cut.

/// Most characters of an input an error message shows.
pub const MAX_EXCERPT_CHARS: usize = 120;

/// `text` quoted as `{:?}` does when it is short; otherwise its first
/// [`MAX_EXCERPT_CHARS`] characters quoted, then `...` and its length in bytes.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_EXCERPT_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &text[..cut], text.len()),
    }
}

/// One line of `text` (control characters as spaces) and the column, in characters, of the
/// byte range `pos..end` in it, and that range's width in characters (at least 1). A text
/// longer than [`MAX_EXCERPT_CHARS`] is cut to a window around the range, marked `...` on a
/// cut side; the column counts those marks, so a caret line stays under the range.
pub fn window(text: &str, pos: usize, end: usize) -> (String, usize, usize) {
    let pos = floor_char_boundary(text, pos);
    let end = floor_char_boundary(text, end).max(pos);
    let line: Vec<char> = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let col = text[..pos].chars().count();
    let width = text[pos..end].chars().count().max(1);
    if line.len() <= MAX_EXCERPT_CHARS {
        return (line.into_iter().collect(), col, width);
    }
    let width = width.min(MAX_EXCERPT_CHARS / 2);
    let start = col.saturating_sub((MAX_EXCERPT_CHARS - width) / 2);
    let stop = (start + MAX_EXCERPT_CHARS).min(line.len());
    let start = stop.saturating_sub(MAX_EXCERPT_CHARS);
    let mut out = String::new();
    if start > 0 {
        out.push_str("...");
    }
    out.extend(&line[start..stop]);
    if stop < line.len() {
        out.push_str("...");
    }
    let mark = if start > 0 { 3 } else { 0 };
    (
        out,
        col - start + mark,
        width.min(stop.saturating_sub(col)).max(1),
    )
}

/// The largest char boundary of `s` at or below `i` (clamped to `s.len()`).
pub(crate) fn floor_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_inputs_are_whole() {
        assert_eq!(quoted("tcp[[ or"), "\"tcp[[ or\"");
        assert_eq!(window("a\tb", 2, 3), ("a b".to_string(), 2, 1));
        assert_eq!(window("ab", 2, 2), ("ab".to_string(), 2, 1));
    }

    #[test]
    fn long_inputs_are_cut_around_the_position() {
        let text = format!("{}XYZ{}", "a".repeat(50_000), "b".repeat(50_000));
        let q = quoted(&text);
        assert!(q.len() < 150 && q.ends_with("... (100003 bytes)"), "{q}");
        let (line, col, width) = window(&text, 50_000, 50_003);
        assert!(line.starts_with("...") && line.ends_with("..."), "{line}");
        assert_eq!(line.chars().count(), MAX_EXCERPT_CHARS + 6);
        assert_eq!(&line[col..col + width], "XYZ");
        // At the very start and end.
        let (line, col, _) = window(&text, 0, 1);
        assert!(!line.starts_with("...") && line.ends_with("..."));
        assert_eq!(col, 0);
        let (line, col, width) = window(&text, text.len(), text.len());
        assert!(line.starts_with("...") && !line.ends_with("..."));
        assert_eq!((col, width), (line.chars().count(), 1));
        // Multi-byte characters: columns count characters.
        let text = "é".repeat(1000) + "!";
        let (line, col, _) = window(&text, text.len() - 1, text.len());
        assert_eq!(line.chars().nth(col), Some('!'));
    }
}
