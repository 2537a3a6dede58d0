//! What can go wrong reading a config file, and where: every problem found in the text names
//! the file, the line and column, the key (full dotted path, `groups.gpu[2]`), what was
//! expected and what was found.

use std::path::PathBuf;

/// A config file that could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the config file", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not valid: a TOML syntax error, an unknown key or a bad value.
    #[error("{0}")]
    Invalid(Box<Invalid>),
    /// The file was read but has several problems: each one, in file order (one per line
    /// when displayed).
    #[error("{}", display_all(.0))]
    Several(Vec<Invalid>),
}

fn display_all(all: &[Invalid]) -> String {
    let lines: Vec<String> = all.iter().map(Invalid::to_string).collect();
    lines.join("\n")
}

impl ConfigError {
    /// The first problem in the text, if the file was read.
    pub fn invalid(&self) -> Option<&Invalid> {
        self.all_invalid().first()
    }

    /// Every problem found in the text, in file order (none if the file was not read).
    pub fn all_invalid(&self) -> &[Invalid] {
        match self {
            ConfigError::Invalid(i) => std::slice::from_ref(&**i),
            ConfigError::Several(all) => all,
            ConfigError::Read { .. } => &[],
        }
    }

    /// The problems as a list (a read error has none: the parsers read no file).
    pub(crate) fn into_invalid(self) -> Vec<Invalid> {
        match self {
            ConfigError::Invalid(i) => vec![*i],
            ConfigError::Several(all) => all,
            ConfigError::Read { .. } => Vec::new(),
        }
    }

    /// One error for `all` (`None` when empty): [`ConfigError::Invalid`] for one problem,
    /// [`ConfigError::Several`] for more.
    pub(crate) fn from_invalid(mut all: Vec<Invalid>) -> Option<ConfigError> {
        match all.len() {
            0 => None,
            1 => all.pop().map(|i| ConfigError::Invalid(Box::new(i))),
            _ => Some(ConfigError::Several(all)),
        }
    }
}

/// One problem in the text of a config file, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The file's name as given.
    pub file: String,
    /// 1-based line of the offending key or value.
    pub line: usize,
    /// 1-based column (in characters) on that line.
    pub column: usize,
    /// Full dotted path of the key (`groups.gpu[2]`, `work_hours.timezone`); empty for a
    /// syntax error outside any key.
    pub key: String,
    /// What kind of problem.
    pub kind: ErrorKind,
    /// What the key takes.
    pub expected: String,
    /// What the file has (for a syntax error: toml's message).
    pub found: String,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        write!(f, "{}", self.kind)?;
        if !self.expected.is_empty() {
            write!(f, ": expected {}", self.expected)?;
        }
        if self.kind == ErrorKind::Syntax {
            // toml's own message says what it expected and found.
            write!(f, ": {}", self.found)?;
        } else if !self.found.is_empty() {
            let sep = if self.expected.is_empty() { ": " } else { ", " };
            write!(f, "{sep}found {}", self.found)?;
        }
        Ok(())
    }
}

impl std::error::Error for Invalid {}

/// The kinds of problem, so callers and tests can tell them apart without reading text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Not TOML.
    Syntax,
    /// A key the schema does not have.
    UnknownKey,
    /// A key the schema needs is absent.
    MissingKey,
    /// A value of the wrong TOML type (a string where an array is needed, ...).
    WrongType,
    /// A group name that is empty, reserved (`unassigned`) or not a name.
    BadName,
    /// Text that is not an address or an `ADDR/LEN` prefix.
    BadPrefix,
    /// A prefix with bits set past its length (`10.1.1.5/24`).
    HostBits,
    /// The same prefix listed twice (in two groups, or twice in one list).
    DuplicatePrefix,
    /// A group name that no `[groups]` entry defines.
    UnknownGroup,
    /// A DSCP value that is neither a known name nor a number 0-63.
    BadDscp,
    /// The same DSCP value given twice (`ef` and `46`).
    DuplicateDscp,
    /// A `days` list that does not parse.
    BadDays,
    /// A time of day that is not `HH:MM`, or an empty range.
    BadTime,
    /// A time zone the bundled IANA database does not know.
    UnknownZone,
    /// A list with too many entries for the model.
    TooMany,
    /// A number, size, duration or name out of what the key takes.
    BadValue,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorKind::Syntax => "TOML syntax error",
            ErrorKind::UnknownKey => "unknown key",
            ErrorKind::MissingKey => "missing key",
            ErrorKind::WrongType => "wrong type",
            ErrorKind::BadName => "bad group name",
            ErrorKind::BadPrefix => "bad address or prefix",
            ErrorKind::HostBits => "host bits set",
            ErrorKind::DuplicatePrefix => "prefix listed twice",
            ErrorKind::UnknownGroup => "unknown group",
            ErrorKind::BadDscp => "bad DSCP value",
            ErrorKind::DuplicateDscp => "DSCP value listed twice",
            ErrorKind::BadDays => "bad days",
            ErrorKind::BadTime => "bad time of day",
            ErrorKind::UnknownZone => "unknown time zone",
            ErrorKind::TooMany => "too many entries",
            ErrorKind::BadValue => "bad value",
        })
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`. An offset past the
/// end, or inside a character, is moved back to the last character boundary before it.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_lines_and_characters() {
        let t = "a = 1\nbé = 2\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 4), (1, 5));
        assert_eq!(line_col(t, 6), (2, 1));
        // 'é' is two bytes: the '=' (byte 10) is the fourth character of line 2.
        assert_eq!(line_col(t, 10), (2, 4));
        // Inside the 'é': moved back to its start.
        assert_eq!(line_col(t, 8), (2, 2));
        assert_eq!(line_col(t, 999), (3, 1));
    }

    #[test]
    fn display_names_file_line_key_expected_and_found() {
        let e = Invalid {
            file: "c.toml".into(),
            line: 3,
            column: 9,
            key: "groups.gpu[2]".into(),
            kind: ErrorKind::BadPrefix,
            expected: "an address or ADDR/LEN".into(),
            found: "\"10.1.1.0/33\"".into(),
        };
        assert_eq!(
            e.to_string(),
            "c.toml:3:9: groups.gpu[2]: bad address or prefix: expected an address or ADDR/LEN, \
             found \"10.1.1.0/33\""
        );
    }
}
