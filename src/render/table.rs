//! Tables for people: columns sized to their content, fitted to the terminal.
//!
//! A table wider than the terminal keeps every column: its number (right-aligned) columns
//! are narrowed first, down to their longest word, then its text (left-aligned) columns,
//! the lowest-ranked first and then the widest, down to their header's longest word (at
//! least 4); a cell longer than its column wraps onto more lines inside its column (at
//! spaces where it can, so a number never splits: `8.1 Mbit/s` becomes `8.1` over `Mbit/s`). A
//! table that cannot fit even so is printed wider, and its lines are never re-wrapped. Output that is not a
//! terminal keeps every column at full width (scripts and `| less -S` see everything),
//! unless `COLUMNS` says otherwise.

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column: its header, alignment, and rank (higher: kept at full width longer when space is
/// short).
#[derive(Debug, Clone)]
pub struct Column {
    pub header: &'static str,
    pub align: Align,
    pub rank: u8,
}

impl Column {
    pub fn left(header: &'static str, rank: u8) -> Self {
        Column {
            header,
            align: Align::Left,
            rank,
        }
    }
    pub fn right(header: &'static str, rank: u8) -> Self {
        Column {
            header,
            align: Align::Right,
            rank,
        }
    }
}

/// Cells in rows, rendered by [`Table::render`].
#[derive(Debug, Default)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<String>>,
}

/// Space between columns.
const GAP: usize = 2;

fn width_of(s: &str) -> usize {
    s.chars().count()
}

/// `s` in pieces of at most `w` characters (`w` at least 1): cut after the last space (or
/// comma) that fits, else at `w`. A string that fits is one piece; an empty one too.
fn pieces(s: &str, w: usize) -> Vec<String> {
    let w = w.max(1);
    let mut out = Vec::new();
    let mut rest: Vec<char> = s.chars().collect();
    while rest.len() > w {
        let at = rest[..=w]
            .iter()
            .rposition(|&c| c == ' ' || c == ',')
            .filter(|&i| i > 0)
            .map_or(w, |i| if rest[i] == ',' { i + 1 } else { i })
            .min(w);
        let head: String = rest[..at].iter().collect();
        out.push(head.trim_end().to_string());
        let skip = rest[at..].iter().take_while(|&&c| c == ' ').count();
        rest.drain(..at + skip);
    }
    out.push(rest.into_iter().collect());
    out
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Self {
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// The table as lines, none longer than `max_width` characters when given.
    pub fn render(&self, max_width: Option<usize>) -> Vec<String> {
        let n = self.columns.len();
        let mut widths: Vec<usize> = (0..n)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| width_of(&r[c]))
                    .chain([width_of(self.columns[c].header)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let total = |widths: &[usize]| -> usize {
            widths.iter().sum::<usize>() + GAP * n.saturating_sub(1)
        };
        if let Some(max) = max_width {
            // The longest word of a column (its cells and header, cut at spaces): a
            // number column is never narrower, so a number never splits.
            let longest_word = |c: usize| {
                self.rows
                    .iter()
                    .map(|r| r[c].as_str())
                    .chain([self.columns[c].header])
                    .flat_map(|t| t.split(' '))
                    .map(width_of)
                    .max()
                    .unwrap_or(1)
            };
            let header_word = |c: usize| {
                self.columns[c]
                    .header
                    .split(' ')
                    .map(width_of)
                    .max()
                    .unwrap_or(1)
            };
            // First every column is narrowed, the widest first, down to its longest word:
            // cells wrap at their spaces, no word splits ("8.1 Mbit/s" over two lines).
            // Then, if that is not enough, text columns split words, the lowest rank first,
            // down to their header's longest word (at least 4). Numbers never split.
            let words: Vec<usize> = (0..n).map(longest_word).collect();
            while total(&widths) > max {
                let Some(c) = (0..n)
                    .filter(|&c| widths[c] > words[c])
                    .max_by_key(|&c| (widths[c], std::cmp::Reverse(self.columns[c].rank)))
                else {
                    break;
                };
                // Down to the next widest column's width (or its least), a step at a time.
                let next = (0..n)
                    .filter(|&d| d != c && widths[d] < widths[c])
                    .map(|d| widths[d])
                    .max()
                    .unwrap_or(0);
                let over = total(&widths) - max;
                widths[c] = widths[c]
                    .saturating_sub(over)
                    .max(next)
                    .max(words[c])
                    .min(widths[c] - 1);
            }
            while total(&widths) > max {
                let Some(c) = (0..n)
                    .filter(|&c| {
                        self.columns[c].align == Align::Left && widths[c] > header_word(c).max(4)
                    })
                    .min_by_key(|&c| (self.columns[c].rank, std::cmp::Reverse(widths[c])))
                else {
                    break;
                };
                let over = total(&widths) - max;
                widths[c] = widths[c].saturating_sub(over).max(header_word(c).max(4));
            }
            // Still wider than `max`: printed wider, never a column dropped.
        }
        // One table row is as many lines as its tallest cell has pieces.
        let lines_of = |cells: &[String]| -> Vec<String> {
            let parts: Vec<Vec<String>> = (0..n).map(|c| pieces(&cells[c], widths[c])).collect();
            let height = parts.iter().map(Vec::len).max().unwrap_or(1);
            (0..height)
                .map(|h| {
                    let mut out = String::new();
                    for c in 0..n {
                        let cell = parts[c].get(h).map_or("", String::as_str);
                        let pad = widths[c].saturating_sub(width_of(cell));
                        let last = c + 1 == n;
                        match self.columns[c].align {
                            Align::Left if last => out.push_str(cell),
                            Align::Left => {
                                out.push_str(cell);
                                out.extend(std::iter::repeat_n(' ', pad));
                            }
                            Align::Right => {
                                out.extend(std::iter::repeat_n(' ', pad));
                                out.push_str(cell);
                            }
                        }
                        if !last {
                            out.push_str("  ");
                        }
                    }
                    // An empty last cell leaves the gap before it.
                    out.truncate(out.trim_end().len());
                    out
                })
                .collect()
        };
        let headers: Vec<String> = self.columns.iter().map(|c| c.header.to_string()).collect();
        let mut lines = lines_of(&headers);
        for r in &self.rows {
            lines.extend(lines_of(r));
        }
        lines
    }
}

/// `line` cut at spaces into lines of at most `width` characters (a word longer than the
/// width stays whole); continuation lines are indented four more than the line's own
/// indent. `None`: the line as it is.
pub fn wrap(line: &str, width: Option<usize>) -> Vec<String> {
    // A line that fits stays as it is: a table row's runs of spaces are its columns. So
    // does a laid-out line (a run of two spaces after its indent: a table row that could
    // not fit), which re-wrapping would turn into a jumble of cells.
    let laid_out = line.trim_start_matches(' ').contains("  ");
    let Some(width) = width.filter(|&w| width_of(line) > w && !laid_out) else {
        return vec![line.to_string()];
    };
    let indent = line.len() - line.trim_start_matches(' ').len();
    let mut lines = Vec::new();
    let mut cur = " ".repeat(indent);
    let mut empty = true;
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        if !empty && width_of(&cur) + 1 + width_of(word) > width {
            lines.push(std::mem::replace(&mut cur, " ".repeat(indent + 4)));
            empty = true;
        }
        if !empty {
            cur.push(' ');
        }
        cur.push_str(word);
        empty = false;
    }
    lines.push(cur);
    lines
}

/// The width to fit tables to: `COLUMNS` when set to a number, else the terminal's width
/// when standard output is one, else none (no limit).
pub fn output_width() -> Option<usize> {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return Some(c.max(20));
    }
    let out = std::io::stdout();
    if !std::io::IsTerminal::is_terminal(&out) {
        return None;
    }
    rustix::termios::tcgetwinsize(&out)
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|&w| w > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table row that fits keeps its runs of spaces: before, every line went through the
    /// word wrapper whenever a width was known, and tables collapsed to single spaces.
    #[test]
    fn a_line_that_fits_is_left_as_it_is() {
        let row = "1  tcp 10.0.0.1     101 MB    98.9k";
        assert_eq!(wrap(row, Some(240)), vec![row]);
        assert_eq!(wrap(row, Some(row.len())), vec![row]);
        // A longer table row stays whole (re-wrapping would jumble its cells); a longer
        // line of prose is wrapped at its spaces.
        assert_eq!(wrap(row, Some(row.len() - 1)), vec![row]);
        let prose = "one two three four";
        assert_ne!(wrap(prose, Some(prose.len() - 1)), vec![prose]);
    }

    #[test]
    fn wrap_cuts_at_spaces_and_indents_the_rest() {
        assert_eq!(wrap("a b c", None), vec!["a b c"]);
        assert_eq!(
            wrap("  aaa bbb ccc", Some(9)),
            vec!["  aaa bbb", "      ccc"]
        );
        assert_eq!(
            wrap("x longerthanwidth y", Some(5)),
            vec!["x", "    longerthanwidth", "    y"]
        );
        for l in wrap(&"word ".repeat(50), Some(20)) {
            assert!(l.chars().count() <= 20, "{l:?}");
        }
    }

    fn table() -> Table {
        let mut t = Table::new(vec![
            Column::left("flow", u8::MAX),
            Column::right("bytes", 5),
            Column::left("note", 1),
        ]);
        t.push(vec![
            "10.0.0.1:40000 -> 10.0.0.2:443".into(),
            "1.25 GB".into(),
            "a long note".into(),
        ]);
        t.push(vec!["b".into(), "3 B".into(), "".into()]);
        t
    }

    #[test]
    fn columns_fit_their_content() {
        let lines = table().render(None);
        assert_eq!(lines[0], "flow                              bytes  note");
        assert_eq!(
            lines[1],
            "10.0.0.1:40000 -> 10.0.0.2:443  1.25 GB  a long note"
        );
        assert_eq!(lines[2], "b                                   3 B");
    }

    /// A narrow width keeps every column: text columns narrow (the lowest rank first) and
    /// their cells wrap inside the column; numbers stay whole. Before, low-ranked columns
    /// were dropped (at 80 columns `alerts` lost its severity, `matrix` its flagged cell).
    #[test]
    fn narrow_output_keeps_every_column_and_wraps_text_cells() {
        let lines = table().render(Some(40));
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        assert!(
            lines[0].contains("flow") && lines[0].contains("bytes") && lines[0].contains("note"),
            "{lines:?}"
        );
        let all: String = lines.join(" ");
        for word in [
            "10.0.0.1:40000",
            "10.0.0.2:443",
            "1.25",
            "GB",
            "long",
            "note",
        ] {
            assert!(all.contains(word), "{word} lost: {lines:?}");
        }
        // Narrower than the numbers and the least widths allow: wider, never dropped.
        let lines = table().render(Some(10));
        assert!(
            lines[0].contains("note") && lines[0].contains("bytes"),
            "{lines:?}"
        );
        assert!(lines.iter().any(|l| l.contains("1.25")), "{lines:?}");
    }

    #[test]
    fn pieces_cut_at_spaces_and_commas_else_hard() {
        assert_eq!(pieces("abc", 5), ["abc"]);
        assert_eq!(pieces("", 5), [""]);
        assert_eq!(pieces("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(pieces("a,b,c,d", 4), ["a,b,", "c,d"]);
        assert_eq!(pieces("abcdefgh", 3), ["abc", "def", "gh"]);
    }
}
