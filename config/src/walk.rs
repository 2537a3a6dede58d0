//! Walking the parsed TOML document with its spans: each accessor checks one value's type
//! and turns a mismatch into an [`Invalid`] that names the key's dotted path and its line.
//!
//! The raw TOML types (`toml::de::DeTable`, `DeValue`) stay inside the crate: the section
//! parsers read them through this module and build the typed model.

use std::cell::RefCell;
use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::error::{line_col, ConfigError, ErrorKind, Invalid};

/// The text being parsed, the name to report it under, and the problems found so far: a
/// parser that can go on past a problem (the next key, the next list element) hands it to
/// [`Src::keep`] and goes on, so one run reports every problem it can find.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Src<'a> {
    pub file: &'a str,
    pub text: &'a str,
    pub found: &'a RefCell<Vec<Invalid>>,
}

impl Src<'_> {
    /// The value of `r`, or `None` with its problem kept for the end of the parse.
    pub fn keep<T>(&self, r: Result<T, ConfigError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.found.borrow_mut().extend(e.into_invalid());
                None
            }
        }
    }

    /// `value` if no problem was kept, else every problem kept, in file order.
    pub fn finish<T>(&self, value: T) -> Result<T, ConfigError> {
        let mut all = std::mem::take(&mut *self.found.borrow_mut());
        all.sort_by_key(|i| (i.line, i.column));
        match ConfigError::from_invalid(all) {
            Some(e) => Err(e),
            None => Ok(value),
        }
    }

    /// An error at byte range `span`.
    pub fn err(
        &self,
        span: Range<usize>,
        key: &str,
        kind: ErrorKind,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = line_col(self.text, span.start);
        ConfigError::Invalid(Box::new(Invalid {
            file: self.file.to_string(),
            line,
            column,
            key: key.to_string(),
            kind,
            expected: expected.into(),
            found: found.into(),
        }))
    }

    /// The line of byte `offset`, for messages that point back at an earlier entry.
    pub fn line(&self, offset: usize) -> usize {
        line_col(self.text, offset).0
    }

    /// What the file has at `span`, for "found ...": its type and text (cut at 60
    /// characters).
    pub fn found(&self, v: &Spanned<DeValue<'_>>) -> String {
        // One line: a table or array may span many.
        let text = self.text.get(v.span()).unwrap_or("");
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut cut: String = text.chars().take(60).collect();
        if cut.len() < text.len() {
            cut.push_str("...");
        }
        if cut.is_empty() {
            article(v.get_ref().type_str())
        } else {
            format!("{} {cut}", article(v.get_ref().type_str()))
        }
    }

    /// The value as a table, or a type error.
    pub fn table<'v, 'i>(
        &self,
        key: &str,
        v: &'v Spanned<DeValue<'i>>,
        expected: &str,
    ) -> Result<&'v DeTable<'i>, ConfigError> {
        match v.get_ref() {
            DeValue::Table(t) => Ok(t),
            _ => Err(self.err(v.span(), key, ErrorKind::WrongType, expected, self.found(v))),
        }
    }

    /// The value as a string, or a type error.
    pub fn string<'v>(
        &self,
        key: &str,
        v: &'v Spanned<DeValue<'_>>,
        expected: &str,
    ) -> Result<&'v str, ConfigError> {
        match v.get_ref() {
            DeValue::String(s) => Ok(s),
            _ => Err(self.err(v.span(), key, ErrorKind::WrongType, expected, self.found(v))),
        }
    }

    /// The value as an array of strings, each with its dotted path (`key[i]`) and span, or
    /// a type error naming the array or the element.
    pub fn strings(
        &self,
        key: &str,
        v: &Spanned<DeValue<'_>>,
        expected: &str,
    ) -> Result<Vec<Item>, ConfigError> {
        let DeValue::Array(a) = v.get_ref() else {
            return Err(self.err(
                v.span(),
                key,
                ErrorKind::WrongType,
                format!("an array of {expected}"),
                self.found(v),
            ));
        };
        a.iter()
            .enumerate()
            .map(|(i, e)| {
                let path = format!("{key}[{i}]");
                let s = self.string(&path, e, expected)?.to_string();
                Ok(Item {
                    path,
                    text: s,
                    span: e.span(),
                })
            })
            .collect()
    }

    /// Keeps a problem for each key of `table` not in `known`, naming it and listing the
    /// known ones; the caller goes on with the known keys.
    pub fn only_keys(&self, path: &str, table: &DeTable<'_>, known: &[&str]) {
        for k in table.keys() {
            if !known.contains(&k.get_ref().as_ref()) {
                let list = known.join(", ");
                self.keep::<()>(Err(self.err(
                    k.span(),
                    &join(path, k.get_ref()),
                    ErrorKind::UnknownKey,
                    format!("one of {list}"),
                    format!("`{}`", k.get_ref()),
                )));
            }
        }
    }
}

/// One string of an array, with where it is.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// Dotted path, `groups.gpu[2]`.
    pub path: String,
    pub text: String,
    pub span: Range<usize>,
}

/// The dotted path of `key` inside `path`, the key quoted when it is not a bare TOML key.
pub(crate) fn join(path: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let key = if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    };
    if path.is_empty() {
        key
    } else {
        format!("{path}.{key}")
    }
}

/// "a string", "an integer", "an array", ...
fn article(type_str: &str) -> String {
    let an = type_str.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {type_str}", if an { "an" } else { "a" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_quote_keys_that_are_not_bare() {
        assert_eq!(join("", "groups"), "groups");
        assert_eq!(join("groups", "model-store"), "groups.model-store");
        assert_eq!(join("groups", ""), "groups.\"\"");
        assert_eq!(join("groups", "a b"), "groups.\"a b\"");
    }
}
