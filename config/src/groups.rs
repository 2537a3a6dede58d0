//! Host groups: names for sets of addresses and prefixes (IPv4 and IPv6), and the lookup that
//! gives an address its group, the most specific prefix winning.
//!
//! ```text
//! [groups] gpu = ["10.1.1.0/24"]  -> Prefix::parse -> per family, the prefixes flattened
//!                                    into sorted disjoint ranges, each with the GroupId of
//!                                    the most specific prefix covering it
//! Groups::group_of(ip)            -> one binary search (IPv4-mapped IPv6 looked up as IPv4)
//! ```
//!
//! A lookup costs about log2(2 x prefixes) comparisons and no hashing: it runs for every
//! flow endpoint.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;
use toml::de::DeTable;

use crate::error::{ConfigError, ErrorKind};
use crate::walk::{join, Src};

/// The name analytics gives to addresses in no group; no group may take it.
pub const UNASSIGNED: &str = "unassigned";

/// A group, by its position in the file (0 is the first `[groups]` entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct GroupId(u16);

impl GroupId {
    /// The position of the group in the file, from 0.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// An address prefix: an address with the bits past `len` zero. A plain address is a
/// prefix of its full length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a text is not a [`Prefix`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Not an address, or a length that is not a number in range.
    #[error("{0}")]
    Syntax(String),
    /// Bits set past the length.
    #[error("host bits set past /{}; the prefix meant is {meant}", meant.len())]
    HostBits {
        /// The prefix with those bits cleared.
        meant: Prefix,
    },
}

impl Prefix {
    /// Parses `10.1.0.0/16`, `fd00:4::/64`, `10.7.0.10` (a /32) or `fd00::1` (a /128).
    /// An IPv4-mapped IPv6 prefix of length 96 or more becomes the IPv4 prefix it maps.
    pub fn parse(text: &str) -> Result<Prefix, PrefixError> {
        let (addr_text, len_text) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = addr_text.parse().map_err(|_| {
            PrefixError::Syntax(format!("`{addr_text}` is not an IPv4 or IPv6 address"))
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len_text {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max && !l.starts_with('+') => n,
                _ => {
                    return Err(PrefixError::Syntax(format!(
                        "prefix length `{l}` is not a number from 0 to {max}"
                    )))
                }
            },
        };
        let (addr, len) = match addr {
            IpAddr::V6(a) if len >= 96 => match a.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), len - 96),
                None => (addr, len),
            },
            _ => (addr, len),
        };
        let p = Prefix { addr, len };
        let meant = Prefix {
            addr: p.network(),
            len,
        };
        if meant.addr != addr {
            return Err(PrefixError::HostBits { meant });
        }
        Ok(p)
    }

    /// The address (its host bits are zero).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether this is a /0 (every address of its family).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `ip` lies inside (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, unmap(ip)) {
            (IpAddr::V4(p), IpAddr::V4(a)) => mask4(u32::from(a), self.len) == u32::from(p),
            (IpAddr::V6(p), IpAddr::V6(a)) => mask6(u128::from(a), self.len) == u128::from(p),
            _ => false,
        }
    }

    /// The address with the bits past the length cleared.
    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(mask4(u32::from(a), self.len))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(mask6(u128::from(a), self.len))),
        }
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Prefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// IPv4-mapped IPv6 (`::ffff:10.0.0.1`) as the IPv4 address it maps; anything else as is.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn mask4(a: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        a & (u32::MAX << (32 - u32::from(len)))
    }
}

fn mask6(a: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        a & (u128::MAX << (128 - u32::from(len)))
    }
}

/// Longest-prefix match as a sorted table: the prefixes of a family flattened into disjoint
/// address ranges, each with the value of the most specific prefix covering it (prefixes
/// nest or are disjoint, never overlap partly). A lookup is one binary search: about
/// log2(2n) comparisons, whatever the lengths.
#[derive(Debug, Clone)]
pub(crate) struct PrefixSet<V> {
    /// Every prefix added, for duplicates and for building.
    entries: HashMap<Prefix, V>,
    /// (first, last, value), sorted, disjoint.
    v4: Vec<(u32, u32, V)>,
    v6: Vec<(u128, u128, V)>,
}

impl<V> Default for PrefixSet<V> {
    fn default() -> Self {
        PrefixSet {
            entries: HashMap::new(),
            v4: Vec::new(),
            v6: Vec::new(),
        }
    }
}

impl<V: Copy> PrefixSet<V> {
    /// Adds `p` with value `v`, or returns the value already there for the same prefix
    /// (and changes nothing). [`PrefixSet::build`] must run before lookups see it.
    pub fn insert(&mut self, p: Prefix, v: V) -> Option<V> {
        match self.entries.entry(p) {
            std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(v);
                None
            }
        }
    }

    /// Builds the lookup tables from what was inserted.
    pub fn build(&mut self) {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for (p, v) in &self.entries {
            match p.addr {
                IpAddr::V4(a) => {
                    let lo = u32::from(a);
                    v4.push((lo, lo | !mask4(u32::MAX, p.len), *v));
                }
                IpAddr::V6(a) => {
                    let lo = u128::from(a);
                    v6.push((lo, lo | !mask6(u128::MAX, p.len), *v));
                }
            }
        }
        self.v4 = flatten(v4);
        self.v6 = flatten(v6);
    }

    /// The value of the longest prefix holding `ip`.
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Option<V> {
        match unmap(ip) {
            IpAddr::V4(a) => find(&self.v4, u32::from(a)),
            IpAddr::V6(a) => find(&self.v6, u128::from(a)),
        }
    }
}

#[inline]
fn find<K: Ord + Copy, V: Copy>(table: &[(K, K, V)], a: K) -> Option<V> {
    // The last range starting at or before `a`.
    let i = table.partition_point(|(lo, _, _)| *lo <= a);
    let (_, hi, v) = table.get(i.checked_sub(1)?)?;
    (a <= *hi).then_some(*v)
}

/// Nested or disjoint ranges -> disjoint ranges, each with the value of the innermost range
/// covering it.
fn flatten<K, V>(mut ranges: Vec<(K, K, V)>) -> Vec<(K, K, V)>
where
    K: Ord + Copy + Step,
    V: Copy,
{
    // Outer first when two start together: wider ranges end later.
    ranges.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut out: Vec<(K, K, V)> = Vec::with_capacity(ranges.len() * 2);
    // Ranges open around the cursor, innermost last; `next` is the first address not yet
    // given out (None: past the end of the family).
    let mut open: Vec<(K, V)> = Vec::new();
    let mut next: Option<K> = None;
    let close_to = |out: &mut Vec<(K, K, V)>,
                    open: &mut Vec<(K, V)>,
                    next: &mut Option<K>,
                    until: Option<K>| {
        // Close every open range that ends before `until` (None: all of them).
        while let Some(&(hi, v)) = open.last() {
            if until.is_some_and(|u| hi >= u) {
                break;
            }
            if let Some(n) = *next {
                if n <= hi {
                    out.push((n, hi, v));
                }
            }
            *next = hi.succ();
            open.pop();
        }
    };
    for (lo, hi, v) in ranges {
        close_to(&mut out, &mut open, &mut next, Some(lo));
        if let (Some(&(_, outer)), Some(n)) = (open.last(), next) {
            if n < lo {
                out.push((n, lo.pred(), outer));
            }
        }
        next = Some(lo);
        open.push((hi, v));
    }
    close_to(&mut out, &mut open, &mut next, None);
    out
}

/// The neighbours of an address.
trait Step: Sized {
    fn succ(self) -> Option<Self>;
    /// Only called on a value that has a predecessor.
    fn pred(self) -> Self;
}

impl Step for u32 {
    fn succ(self) -> Option<u32> {
        self.checked_add(1)
    }
    fn pred(self) -> u32 {
        self.saturating_sub(1)
    }
}

impl Step for u128 {
    fn succ(self) -> Option<u128> {
        self.checked_add(1)
    }
    fn pred(self) -> u128 {
        self.saturating_sub(1)
    }
}

/// One group: its name and prefixes, in file order.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// The group's id.
    #[serde(skip)]
    pub id: GroupId,
    /// The name.
    pub name: String,
    /// Its prefixes, as listed (addresses as /32 or /128).
    pub prefixes: Vec<Prefix>,
}

/// The host groups of a config: names, prefixes, and the address lookup.
#[derive(Debug, Clone, Default)]
pub struct Groups {
    groups: Vec<Group>,
    by_name: HashMap<String, GroupId>,
    table: PrefixSet<GroupId>,
}

impl Groups {
    /// The group of `ip`: the one whose most specific prefix holds it, or `None` (analytics
    /// calls that [`UNASSIGNED`]). IPv4-mapped IPv6 addresses are looked up as IPv4.
    #[inline]
    pub fn group_of(&self, ip: IpAddr) -> Option<GroupId> {
        self.table.lookup(ip)
    }

    /// The name of a group.
    ///
    /// # Panics
    /// If `id` comes from another config with more groups.
    pub fn name(&self, id: GroupId) -> &str {
        &self.groups[id.index()].name
    }

    /// The group of a name.
    pub fn by_name(&self, name: &str) -> Option<GroupId> {
        self.by_name.get(name).copied()
    }

    /// A group by id (`None` for an id of another config).
    pub fn get(&self, id: GroupId) -> Option<&Group> {
        self.groups.get(id.index())
    }

    /// The groups, in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Group> + '_ {
        self.groups.iter()
    }

    /// How many groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The groups of a `[groups]` table. A problem is kept (see [`Src::keep`]) and the
    /// reading goes on: a group with a bad name is left out, one with a bad element keeps
    /// the others.
    pub(crate) fn parse(src: &Src<'_>, path: &str, table: &DeTable<'_>) -> Groups {
        let mut g = Groups::default();
        // Prefix -> (group, byte offset of its entry), to name both sides of a duplicate.
        let mut seen: HashMap<Prefix, (GroupId, usize)> = HashMap::new();
        for (k, v) in table {
            let name = k.get_ref().as_ref();
            let key = join(path, name);
            let ok = check_name(name).map_err(|why| {
                src.err(k.span(), &key, ErrorKind::BadName, why, format!("{name:?}"))
            });
            if src.keep(ok).is_none() {
                continue;
            }
            let id = u16::try_from(g.groups.len()).map(GroupId).map_err(|_| {
                src.err(
                    k.span(),
                    &key,
                    ErrorKind::TooMany,
                    "at most 65536 groups",
                    "more",
                )
            });
            let Some(id) = src.keep(id) else { break };
            let items = src.strings(&key, v, "addresses or prefixes (strings)");
            let items = src.keep(items).unwrap_or_default();
            let mut prefixes = Vec::with_capacity(items.len());
            for it in items {
                let p = parse_prefix(src, &it.path, &it.text, it.span.clone());
                let Some(p) = src.keep(p) else { continue };
                if let Some((other, at)) = seen.get(&p) {
                    let where_ = if *other == id {
                        "earlier in the same group".to_string()
                    } else {
                        format!("also in group `{}`", g.groups[other.index()].name)
                    };
                    src.keep::<()>(Err(src.err(
                        it.span,
                        &it.path,
                        ErrorKind::DuplicatePrefix,
                        "each prefix in one group only",
                        format!("{p} {where_} (line {})", src.line(*at)),
                    )));
                    continue;
                }
                seen.insert(p, (id, it.span.start));
                g.table.insert(p, id);
                prefixes.push(p);
            }
            g.by_name.insert(name.to_string(), id);
            g.groups.push(Group {
                id,
                name: name.to_string(),
                prefixes,
            });
        }
        g.table.build();
        g
    }
}

impl Groups {
    /// "unknown group `x`: expected a group defined in [groups] (a, b, c)".
    pub(crate) fn unknown(
        &self,
        src: &Src<'_>,
        path: &str,
        name: &str,
        span: std::ops::Range<usize>,
    ) -> ConfigError {
        let groups = self;
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).take(12).collect();
        let expected = if names.is_empty() {
            "a group defined in [groups] (there are none)".to_string()
        } else {
            let more = if groups.len() > names.len() {
                ", ..."
            } else {
                ""
            };
            format!("a group defined in [groups] ({}{more})", names.join(", "))
        };
        src.err(
            span,
            path,
            ErrorKind::UnknownGroup,
            expected,
            format!("`{name}`"),
        )
    }
}

/// A prefix in the file: a syntax error is [`ErrorKind::BadPrefix`], host bits
/// [`ErrorKind::HostBits`] naming the prefix meant.
pub(crate) fn parse_prefix(
    src: &Src<'_>,
    path: &str,
    text: &str,
    span: std::ops::Range<usize>,
) -> Result<Prefix, ConfigError> {
    Prefix::parse(text).map_err(|e| match e {
        PrefixError::Syntax(why) => src.err(
            span,
            path,
            ErrorKind::BadPrefix,
            "an IPv4 or IPv6 address or ADDR/LEN prefix (10.1.0.0/16, fd00:4::/64, 10.7.0.10)",
            format!("{text:?} ({why})"),
        ),
        PrefixError::HostBits { meant } => src.err(
            span,
            path,
            ErrorKind::HostBits,
            format!("no bits set past the prefix length (did you mean {meant}?)"),
            format!("{text:?}"),
        ),
    })
}

/// Group names: a letter, then letters, digits, `-`, `_`, `.`; never `unassigned`. (So a
/// name never reads as an address: egress targets are names or prefixes.)
fn check_name(name: &str) -> Result<(), String> {
    const RULE: &str = "a name: a letter, then letters, digits, '-', '_' or '.'";
    if name.is_empty() {
        return Err(format!("{RULE} (the name is empty)"));
    }
    if name.eq_ignore_ascii_case(UNASSIGNED) {
        return Err(format!(
            "a name other than `{UNASSIGNED}` (reserved for addresses in no group)"
        ));
    }
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(RULE.to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    #[test]
    fn prefixes_parse_both_families_and_plain_addresses() {
        assert_eq!(p("10.1.0.0/16").to_string(), "10.1.0.0/16");
        assert_eq!(p("10.7.0.10").to_string(), "10.7.0.10/32");
        assert_eq!(p("fd00:4::/64").to_string(), "fd00:4::/64");
        assert_eq!(p("fd00::1").len(), 128);
        assert_eq!(p("0.0.0.0/0").len(), 0);
        // IPv4-mapped IPv6 becomes IPv4.
        assert_eq!(p("::ffff:10.0.0.0/104").to_string(), "10.0.0.0/8");
    }

    #[test]
    fn bad_prefixes_say_why() {
        for bad in [
            "10.1.1.0/33",
            "fd00::/129",
            "10.1.1/24",
            "x",
            "",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/a",
        ] {
            assert!(
                matches!(Prefix::parse(bad), Err(PrefixError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            Prefix::parse("10.1.1.5/24"),
            Err(PrefixError::HostBits {
                meant: p("10.1.1.0/24")
            })
        );
        assert_eq!(
            Prefix::parse("fd00:4::1/64"),
            Err(PrefixError::HostBits {
                meant: p("fd00:4::/64")
            })
        );
    }

    #[test]
    fn contains_masks_and_unmaps() {
        assert!(p("10.1.0.0/16").contains("10.1.200.3".parse().unwrap()));
        assert!(!p("10.1.0.0/16").contains("10.2.0.1".parse().unwrap()));
        assert!(p("10.1.0.0/16").contains("::ffff:10.1.0.1".parse().unwrap()));
        assert!(p("0.0.0.0/0").contains("1.2.3.4".parse().unwrap()));
        assert!(!p("0.0.0.0/0").contains("fd00::1".parse().unwrap()));
        assert!(p("::/0").contains("fd00::1".parse().unwrap()));
    }

    #[test]
    fn the_longest_prefix_wins_in_a_set() {
        let mut s = PrefixSet::default();
        assert_eq!(s.insert(p("10.0.0.0/8"), 1), None);
        assert_eq!(s.insert(p("10.1.0.0/16"), 2), None);
        assert_eq!(s.insert(p("10.1.1.7"), 3), None);
        assert_eq!(s.insert(p("fd00::/16"), 4), None);
        assert_eq!(s.insert(p("fd00:1::/32"), 5), None);
        assert_eq!(s.insert(p("10.1.0.0/16"), 9), Some(2));
        s.build();
        let l = |a: &str| s.lookup(a.parse().unwrap());
        assert_eq!(l("10.9.9.9"), Some(1));
        assert_eq!(l("10.1.9.9"), Some(2));
        assert_eq!(l("10.1.1.7"), Some(3));
        assert_eq!(l("::ffff:10.1.1.7"), Some(3));
        assert_eq!(l("11.0.0.1"), None);
        assert_eq!(l("fd00:2::1"), Some(4));
        assert_eq!(l("fd00:1::1"), Some(5));
        assert_eq!(l("fe80::1"), None);
    }

    #[test]
    fn flattening_keeps_the_innermost_value_at_every_edge() {
        let mut s = PrefixSet::default();
        for (t, v) in [
            ("0.0.0.0/0", 0),
            ("10.0.0.0/8", 1),
            ("10.0.0.0/16", 2),
            ("10.0.0.0/24", 3),
            ("10.255.255.255", 4),
            ("255.255.255.255", 5),
            ("10.128.0.0/9", 6),
            ("::/0", 7),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 8),
        ] {
            assert_eq!(s.insert(p(t), v), None);
        }
        s.build();
        let l = |a: &str| s.lookup(a.parse().unwrap());
        assert_eq!(l("0.0.0.0"), Some(0));
        assert_eq!(l("9.255.255.255"), Some(0));
        assert_eq!(l("10.0.0.0"), Some(3));
        assert_eq!(l("10.0.0.255"), Some(3));
        assert_eq!(l("10.0.1.0"), Some(2));
        assert_eq!(l("10.0.255.255"), Some(2));
        assert_eq!(l("10.1.0.0"), Some(1));
        assert_eq!(l("10.127.255.255"), Some(1));
        assert_eq!(l("10.128.0.0"), Some(6));
        assert_eq!(l("10.255.255.254"), Some(6));
        assert_eq!(l("10.255.255.255"), Some(4));
        assert_eq!(l("11.0.0.0"), Some(0));
        assert_eq!(l("255.255.255.254"), Some(0));
        assert_eq!(l("255.255.255.255"), Some(5));
        assert_eq!(l("::"), Some(7));
        assert_eq!(l("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), Some(7));
        assert_eq!(l("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Some(8));
    }

    proptest::proptest! {
        /// The sorted table agrees with a linear scan for the longest prefix.
        #[test]
        fn lookup_agrees_with_a_linear_scan(
            prefixes in proptest::collection::vec((proptest::prelude::any::<u32>(), 0u8..=32), 0..40),
            probes in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..40),
        ) {
            let mut s = PrefixSet::default();
            let mut all = Vec::new();
            for (i, (a, len)) in prefixes.iter().enumerate() {
                let pf = Prefix { addr: IpAddr::V4(Ipv4Addr::from(mask4(*a, *len))), len: *len };
                if s.insert(pf, i).is_none() {
                    all.push((pf, i));
                }
            }
            s.build();
            // Probe the prefixes' own edges as well as random addresses.
            let mut addrs: Vec<u32> = probes;
            for (pf, _) in &all {
                let IpAddr::V4(a) = pf.addr else { unreachable!() };
                let lo = u32::from(a);
                let hi = lo | !mask4(u32::MAX, pf.len);
                addrs.extend([lo, hi, lo.wrapping_sub(1), hi.wrapping_add(1)]);
            }
            for a in addrs {
                let ip = IpAddr::V4(Ipv4Addr::from(a));
                let want = all.iter().filter(|(pf, _)| pf.contains(ip)).max_by_key(|(pf, _)| pf.len).map(|(_, v)| *v);
                proptest::prop_assert_eq!(s.lookup(ip), want, "{}", ip);
            }
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("model-store").is_ok());
        assert!(check_name("gpu.rack_2").is_ok());
        assert!(check_name("").unwrap_err().contains("empty"));
        assert!(check_name("unassigned").unwrap_err().contains("reserved"));
        assert!(check_name("Unassigned").unwrap_err().contains("reserved"));
        assert!(check_name("10net").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name("a/b").is_err());
    }
}
