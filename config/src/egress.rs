//! The `[egress]` policy: where each group may send. A group with an entry may send to the
//! groups, prefixes and names it lists and to its own group; anything else it sends is a
//! finding. A group without an entry, and an address in no group, may send anywhere.
//!
//! A name (`backup.example.com`, or `*.backup.example.com` for any name under it) allows a
//! destination the traffic names so: the TLS server name or HTTP host of the flow (when the
//! destination is its server), or a DNS answer of the window that gave the destination's
//! address for that name. The caller gives those names ([`Egress::allowed`]); matching is
//! capsule-names' (`name_matches`: case-insensitive, `*.` any name under the suffix).

use std::net::IpAddr;

use serde::Serialize;
use toml::de::DeTable;

use crate::error::ErrorKind;
use crate::groups::{parse_prefix, GroupId, Groups, Prefix, PrefixSet};
use crate::walk::{join, Src};

/// One `[egress]` entry.
#[derive(Debug, Clone, Serialize)]
pub struct EgressRule {
    /// The sending group.
    pub group: GroupId,
    /// Groups it may send to (besides itself), in file order.
    pub groups: Vec<GroupId>,
    /// Prefixes it may send to, in file order.
    pub prefixes: Vec<Prefix>,
    /// Names it may send to (`backup.example.com`, `*.backup.example.com`), in file order.
    pub names: Vec<String>,
    /// `prefixes` as a lookup table.
    #[serde(skip)]
    table: PrefixSet<()>,
}

impl EgressRule {
    /// Whether this rule lets its group send to `dst`, whose group is `dst_group` and which
    /// the traffic names `dst_names`.
    fn allows(&self, dst: IpAddr, dst_group: Option<GroupId>, dst_names: &[&str]) -> bool {
        dst_group.is_some_and(|g| g == self.group || self.groups.contains(&g))
            || self.table.lookup(dst).is_some()
            || self
                .names
                .iter()
                .any(|p| dst_names.iter().any(|n| capsule_names::name_matches(p, n)))
    }
}

/// The `[egress]` section.
#[derive(Debug, Clone, Default)]
pub(crate) struct Egress {
    rules: Vec<EgressRule>,
    /// GroupId index -> index in `rules`.
    by_group: Vec<Option<usize>>,
}

impl Egress {
    pub fn allowed(
        &self,
        groups: &Groups,
        src: Option<GroupId>,
        dst: IpAddr,
        dst_names: &[&str],
    ) -> bool {
        let Some(src) = src else { return true };
        let Some(Some(i)) = self.by_group.get(src.index()) else {
            return true;
        };
        self.rules[*i].allows(dst, groups.group_of(dst), dst_names)
    }

    /// Whether some entry lists a name (so the names of a destination matter).
    pub fn has_names(&self) -> bool {
        self.rules.iter().any(|r| !r.names.is_empty())
    }

    pub fn rules(&self) -> &[EgressRule] {
        &self.rules
    }

    pub fn parse(src: &Src<'_>, path: &str, table: &DeTable<'_>, groups: &Groups) -> Egress {
        let mut e = Egress {
            rules: Vec::new(),
            by_group: vec![None; groups.len()],
        };
        for (k, v) in table {
            let name = k.get_ref().as_ref();
            let key = join(path, name);
            let group = groups
                .by_name(name)
                .ok_or_else(|| groups.unknown(src, &key, name, k.span()));
            let Some(group) = src.keep(group) else {
                continue;
            };
            let items = src.strings(&key, v, "group names, prefixes or DNS names (strings)");
            let items = src.keep(items).unwrap_or_default();
            let mut rule = EgressRule {
                group,
                groups: Vec::new(),
                prefixes: Vec::new(),
                names: Vec::new(),
                table: PrefixSet::default(),
            };
            for it in items {
                // What an item is (docs/config.md): with a ':' or '/' an address or prefix; a
                // defined group's name a group; `*.` and then a name, or a dotted name whose
                // last label starts with a letter, a DNS name; else a group name when it
                // starts with a letter (undefined: an error), an address otherwise.
                let text = it.text.as_str();
                let prefix_like = text.contains([':', '/']);
                let dns_like = text.starts_with("*.")
                    || (text.contains('.')
                        && text
                            .rsplit('.')
                            .next()
                            .is_some_and(|l| l.starts_with(|c: char| c.is_ascii_alphabetic())));
                if !prefix_like && groups.by_name(text).is_none() && dns_like {
                    match check_dns_name(text) {
                        Ok(()) => {
                            let lower = text.to_ascii_lowercase();
                            if rule.names.contains(&lower) {
                                src.keep::<()>(Err(src.err(
                                    it.span,
                                    &it.path,
                                    ErrorKind::DuplicatePrefix,
                                    "each name once",
                                    format!("{text} twice in this list"),
                                )));
                            } else {
                                rule.names.push(lower);
                            }
                        }
                        Err(why) => {
                            src.keep::<()>(Err(src.err(
                                it.span,
                                &it.path,
                                ErrorKind::BadValue,
                                "a DNS name (`backup.example.com`) or `*.` and one \
                                 (`*.backup.example.com`)",
                                format!("{text:?} ({why})"),
                            )));
                        }
                    }
                    continue;
                }
                let looks_like_name =
                    text.starts_with(|c: char| c.is_ascii_alphabetic()) && !prefix_like;
                if looks_like_name {
                    let g = groups
                        .by_name(&it.text)
                        .ok_or_else(|| groups.unknown(src, &it.path, &it.text, it.span.clone()));
                    let Some(g) = src.keep(g) else { continue };
                    if !rule.groups.contains(&g) {
                        rule.groups.push(g);
                    }
                } else {
                    let p = parse_prefix(src, &it.path, &it.text, it.span.clone());
                    let Some(p) = src.keep(p) else { continue };
                    if rule.table.insert(p, ()).is_some() {
                        src.keep::<()>(Err(src.err(
                            it.span,
                            &it.path,
                            ErrorKind::DuplicatePrefix,
                            "each prefix once",
                            format!("{p} twice in this list"),
                        )));
                        continue;
                    }
                    rule.prefixes.push(p);
                }
            }
            rule.table.build();
            e.by_group[group.index()] = Some(e.rules.len());
            e.rules.push(rule);
        }
        e
    }
}

/// Whether `text` is a DNS name an allow-list can hold: `*.` at most once, at the start,
/// then labels of letters, digits and `-` (1 to 63 bytes, not starting or ending with `-`)
/// joined by dots, 253 bytes at most.
fn check_dns_name(text: &str) -> Result<(), String> {
    let name = text.strip_prefix("*.").unwrap_or(text);
    if name.is_empty() {
        return Err("no name after `*.`".into());
    }
    if name.len() > 253 {
        return Err(format!("{} bytes, a DNS name has at most 253", name.len()));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("an empty label (two dots, or a dot at an end)".into());
        }
        if label == "*" {
            return Err("`*` only as the first label, as `*.`".into());
        }
        if label.len() > 63 {
            return Err(format!("label {label:?} is longer than 63 bytes"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(format!(
                "label {label:?}: letters, digits and `-` (not at an end) only"
            ));
        }
    }
    Ok(())
}
