//! DSCP names and the `[dscp]` policy: which groups may send each listed code point.
//!
//! Names (RFC 2474, 2597, 3246, 5865, 8622): `df` (also `be`, `cs0`, `default`) = 0, `le` =
//! 1, `cs1`..`cs7` = 8 x N, `af11`..`af43` = 8 x class + 2 x drop precedence, `va` = 44
//! (VOICE-ADMIT), `ef` = 46. `ef` and `cs5` (40) are different values and keep different
//! names. A value with no entry is free for anyone; a listed value only for senders in its
//! groups (an empty list: for nobody).

use serde::Serialize;
use toml::de::DeTable;

use crate::error::ErrorKind;
use crate::groups::{GroupId, Groups};
use crate::walk::{join, Src};

/// The canonical name of a DSCP value: `df`, `le`, `cs1`..`cs7`, `af11`..`af43`, `va`,
/// `ef`; the number for values without a name (`3`), and for values past 63.
pub fn dscp_name(v: u8) -> String {
    known_name(v).map_or_else(|| v.to_string(), str::to_string)
}

fn known_name(v: u8) -> Option<&'static str> {
    const CS: [&str; 8] = ["df", "cs1", "cs2", "cs3", "cs4", "cs5", "cs6", "cs7"];
    const AF: [&str; 12] = [
        "af11", "af12", "af13", "af21", "af22", "af23", "af31", "af32", "af33", "af41", "af42",
        "af43",
    ];
    match v {
        46 => Some("ef"),
        44 => Some("va"),
        1 => Some("le"),
        v if v < 64 && v % 8 == 0 => Some(CS[usize::from(v / 8)]),
        // AFxy = 8x + 2y, x in 1..=4, y in 1..=3.
        v if (10..=38).contains(&v) && v % 2 == 0 && (1..=3).contains(&(v % 8 / 2)) => {
            Some(AF[usize::from(v / 8 - 1) * 3 + usize::from(v % 8 / 2 - 1)])
        }
        _ => None,
    }
}

/// The DSCP value of a name (case-insensitive; `df`, `be`, `cs0`, `default` all 0) or a
/// decimal number 0-63.
pub fn parse_dscp(text: &str) -> Option<u8> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<u8>().ok().filter(|&v| v < 64);
    }
    let lower = text.to_ascii_lowercase();
    if matches!(lower.as_str(), "be" | "cs0" | "default") {
        return Some(0);
    }
    (0..64).find(|&v| known_name(v) == Some(lower.as_str()))
}

/// One `[dscp]` entry: a value and the groups allowed to send it.
#[derive(Debug, Clone, Serialize)]
pub struct DscpRule {
    /// The DSCP value, 0-63.
    pub value: u8,
    /// Its canonical name ([`dscp_name`]).
    pub name: String,
    /// The groups allowed to send it, in file order (empty: nobody).
    pub groups: Vec<GroupId>,
}

/// The `[dscp]` section.
#[derive(Debug, Clone)]
pub(crate) struct DscpPolicy {
    rules: Vec<DscpRule>,
    /// Value -> index in `rules`.
    by_value: [Option<u16>; 64],
}

impl Default for DscpPolicy {
    fn default() -> Self {
        DscpPolicy {
            rules: Vec::new(),
            by_value: [None; 64],
        }
    }
}

impl DscpPolicy {
    /// Whether a sender in `group` (or in none) may send `dscp`.
    pub fn allowed(&self, dscp: u8, group: Option<GroupId>) -> bool {
        let Some(Some(i)) = self.by_value.get(usize::from(dscp)) else {
            return true;
        };
        let rule = &self.rules[usize::from(*i)];
        group.is_some_and(|g| rule.groups.contains(&g))
    }

    pub fn rules(&self) -> &[DscpRule] {
        &self.rules
    }

    /// The rules of a `[dscp]` table; every group named must be in `groups`. A problem is
    /// kept (see [`Src::keep`]) and the reading goes on with the next entry or name.
    pub fn parse(src: &Src<'_>, path: &str, table: &DeTable<'_>, groups: &Groups) -> DscpPolicy {
        let mut p = DscpPolicy::default();
        let mut at = [0usize; 64];
        for (k, v) in table {
            let text = k.get_ref().as_ref();
            let key = join(path, text);
            let value = parse_dscp(text).ok_or_else(|| {
                src.err(
                    k.span(),
                    &key,
                    ErrorKind::BadDscp,
                    "a DSCP name (df, be, le, cs0-cs7, af11-af43, va, ef) or a number 0-63",
                    format!("`{text}`"),
                )
            });
            let Some(value) = src.keep(value) else {
                continue;
            };
            if let Some(i) = p.by_value[usize::from(value)] {
                let first = &p.rules[usize::from(i)];
                src.keep::<()>(Err(src.err(
                    k.span(),
                    &key,
                    ErrorKind::DuplicateDscp,
                    "each DSCP value once",
                    format!(
                        "`{text}` = {value}, already given as {} (line {})",
                        first.name,
                        src.line(at[usize::from(value)])
                    ),
                )));
                continue;
            }
            let items = src.strings(&key, v, "group names (strings)");
            let items = src.keep(items).unwrap_or_default();
            let mut allowed = Vec::with_capacity(items.len());
            for it in items {
                let g = groups
                    .by_name(&it.text)
                    .ok_or_else(|| groups.unknown(src, &it.path, &it.text, it.span.clone()));
                let Some(g) = src.keep(g) else { continue };
                if !allowed.contains(&g) {
                    allowed.push(g);
                }
            }
            at[usize::from(value)] = k.span().start;
            p.by_value[usize::from(value)] = Some(p.rules.len() as u16);
            p.rules.push(DscpRule {
                value,
                name: dscp_name(value),
                groups: allowed,
            });
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_has_one_canonical_name_that_parses_back() {
        for v in 0..64u8 {
            assert_eq!(parse_dscp(&dscp_name(v)), Some(v), "{v}");
        }
        assert_eq!(dscp_name(46), "ef");
        assert_eq!(dscp_name(40), "cs5");
        assert_eq!(dscp_name(44), "va");
        assert_eq!(dscp_name(0), "df");
        assert_eq!(dscp_name(1), "le");
        assert_eq!(dscp_name(10), "af11");
        assert_eq!(dscp_name(38), "af43");
        assert_eq!(dscp_name(34), "af41");
        assert_eq!(dscp_name(3), "3");
        assert_eq!(dscp_name(200), "200");
    }

    #[test]
    fn names_and_numbers_parse() {
        for (t, v) in [
            ("df", 0),
            ("be", 0),
            ("cs0", 0),
            ("DEFAULT", 0),
            ("le", 1),
            ("cs1", 8),
            ("cs7", 56),
            ("af11", 10),
            ("AF43", 38),
            ("va", 44),
            ("ef", 46),
            ("EF", 46),
            ("63", 63),
            ("0", 0),
        ] {
            assert_eq!(parse_dscp(t), Some(v), "{t}");
        }
        for t in [
            "64",
            "256",
            "-1",
            "",
            "af14",
            "af51",
            "cs8",
            "e f",
            "0x2e",
            "99999999999",
        ] {
            assert_eq!(parse_dscp(t), None, "{t}");
        }
    }
}
