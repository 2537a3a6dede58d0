//! The `[egress]` policy: where each group may send. A group with an entry may send to the
//! groups and prefixes it lists and to its own group; anything else it sends is a finding. A
//! group without an entry, and an address in no group, may send anywhere.

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
    /// `prefixes` as a lookup table.
    #[serde(skip)]
    table: PrefixSet<()>,
}

impl EgressRule {
    /// Whether this rule lets its group send to `dst`, whose group is `dst_group`.
    fn allows(&self, dst: IpAddr, dst_group: Option<GroupId>) -> bool {
        dst_group.is_some_and(|g| g == self.group || self.groups.contains(&g))
            || self.table.lookup(dst).is_some()
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
    pub fn allowed(&self, groups: &Groups, src: Option<GroupId>, dst: IpAddr) -> bool {
        let Some(src) = src else { return true };
        let Some(Some(i)) = self.by_group.get(src.index()) else {
            return true;
        };
        self.rules[*i].allows(dst, groups.group_of(dst))
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
            let items = src.strings(&key, v, "group names or prefixes (strings)");
            let items = src.keep(items).unwrap_or_default();
            let mut rule = EgressRule {
                group,
                groups: Vec::new(),
                prefixes: Vec::new(),
                table: PrefixSet::default(),
            };
            for it in items {
                // Group names start with a letter and hold no ':' or '/': anything else is
                // read as an address or prefix.
                let looks_like_name = it.text.starts_with(|c: char| c.is_ascii_alphabetic())
                    && !it.text.contains([':', '/']);
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
