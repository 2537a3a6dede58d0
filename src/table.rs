//! Tables for people: columns sized to their content, fitted to the terminal.
//!
//! A table that is wider than the terminal first loses its least important columns (each
//! column has a rank; the lowest ranks go first), then its widest remaining column is cut
//! with `…`. Output that is not a terminal keeps every column at full width (scripts and
//! `| less -S` see everything), unless `COLUMNS` says otherwise.

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column: its header, alignment, and rank (higher: kept longer when space is short).
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

/// Cuts `s` to `w` characters, the last one `…` when anything was cut.
fn cut(s: &str, w: usize) -> String {
    if width_of(s) <= w {
        return s.to_string();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    out.push('…');
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
        let mut shown: Vec<usize> = (0..n).collect();
        let total = |shown: &[usize], widths: &[usize]| -> usize {
            shown.iter().map(|&c| widths[c]).sum::<usize>() + GAP * shown.len().saturating_sub(1)
        };
        if let Some(max) = max_width {
            // Drop the lowest-ranked columns (the rightmost first among equals) while the
            // table is too wide and more than one column is left.
            while total(&shown, &widths) > max && shown.len() > 1 {
                let (i, _) = shown
                    .iter()
                    .enumerate()
                    .min_by_key(|&(i, &c)| (self.columns[c].rank, std::cmp::Reverse(i)))
                    .expect("at least one column");
                if self.columns[shown[i]].rank == u8::MAX {
                    break; // only columns that must stay are left
                }
                shown.remove(i);
            }
            // Then cut the widest column until it fits (a header keeps at least 3 chars).
            while total(&shown, &widths) > max {
                let &widest = shown
                    .iter()
                    .max_by_key(|&&c| widths[c])
                    .expect("at least one column");
                if widths[widest] <= 3 {
                    break;
                }
                let over = total(&shown, &widths) - max;
                widths[widest] = widths[widest].saturating_sub(over).max(3);
            }
        }
        let line = |cells: &[String]| -> String {
            let mut out = String::new();
            for (k, &c) in shown.iter().enumerate() {
                let cell = cut(&cells[c], widths[c]);
                let pad = widths[c] - width_of(&cell);
                let last = k + 1 == shown.len();
                match self.columns[c].align {
                    Align::Left if last => out.push_str(&cell),
                    Align::Left => {
                        out.push_str(&cell);
                        out.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        out.extend(std::iter::repeat_n(' ', pad));
                        out.push_str(&cell);
                    }
                }
                if !last {
                    out.push_str("  ");
                }
            }
            // An empty last cell leaves the gap before it.
            out.truncate(out.trim_end().len());
            out
        };
        let headers: Vec<String> = self.columns.iter().map(|c| c.header.to_string()).collect();
        let mut lines = vec![line(&headers)];
        lines.extend(self.rows.iter().map(|r| line(r)));
        lines
    }
}

/// `line` cut at spaces into lines of at most `width` characters (a word longer than the
/// width stays whole); continuation lines are indented four more than the line's own
/// indent. `None`: the line as it is.
pub fn wrap(line: &str, width: Option<usize>) -> Vec<String> {
    // A line that fits stays as it is: a table row's runs of spaces are its columns.
    let Some(width) = width.filter(|&w| width_of(line) > w) else {
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
        // A longer one is wrapped at its spaces.
        assert_ne!(wrap(row, Some(row.len() - 1)), vec![row]);
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

    #[test]
    fn narrow_output_drops_low_ranks_then_cuts() {
        let lines = table().render(Some(40));
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        assert!(!lines[0].contains("note"), "{lines:?}");
        assert!(lines[0].contains("bytes"));
        let lines = table().render(Some(20));
        assert!(lines.iter().all(|l| l.chars().count() <= 20), "{lines:?}");
        assert!(lines[1].contains('…'), "{lines:?}");
    }
}
