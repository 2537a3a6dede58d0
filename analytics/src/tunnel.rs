//! The encapsulation a flow arrived in, in the answers that show flows (issue 32): `top
//! --key tunnel` ranks by tunnel (kind, identifier, top MPLS label, outer endpoints both
//! ways), and flow rows and findings carry their flow's encapsulation, typed in `--json`
//! ([`Tunnel`] per direction) and in words (`vxlan vni 42 192.0.2.1>192.0.2.2`, as `capsule
//! flows` writes it).

use std::net::IpAddr;

use capsule_index::sideindex::{EncapDir, FlowCounts};
use capsule_query::Filter;
use capsule_wire::EncapKind;
use serde::Serialize;

/// A tunnel as `top --key tunnel` groups flows: the two directions of one tunnel are one
/// key (outer endpoints in ascending order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TunnelKey {
    pub kind: EncapKind,
    pub id: Option<u32>,
    pub mpls: Option<u32>,
    pub outer: Option<(IpAddr, IpAddr)>,
}

/// What the identifier of an encapsulation kind is called.
fn id_name(kind: EncapKind) -> &'static str {
    match kind {
        EncapKind::Vxlan | EncapKind::Geneve => "vni",
        EncapKind::Gre => "key",
        EncapKind::Erspan | EncapKind::Pppoe => "session",
        EncapKind::Gtpu => "teid",
        EncapKind::Mpls => "id",
    }
}

impl TunnelKey {
    pub fn of(e: &EncapDir) -> TunnelKey {
        TunnelKey {
            kind: e.kind,
            id: e.id,
            mpls: e.mpls,
            outer: e.outer.map(|(s, d)| if s <= d { (s, d) } else { (d, s) }),
        }
    }

    /// `vxlan vni 42 192.0.2.1<->192.0.2.2`.
    pub fn label(&self) -> String {
        let mut out = self.kind.name().to_string();
        if let Some(id) = self.id {
            out.push_str(&format!(" {} {id}", id_name(self.kind)));
        }
        if let Some(l) = self.mpls {
            out.push_str(&format!(" label {l}"));
        }
        if let Some((a, b)) = self.outer {
            out.push_str(&format!(" {a}<->{b}"));
        }
        out
    }

    /// The filter terms that select the tunnel's packets as far as the filter language
    /// names them (`tunnel vni N`, `tunnel host A`, `mpls L`); `None` when they would
    /// select other tunnels' too (a GRE key, a PPPoE session, a TEID have no term).
    pub fn filter(&self) -> Option<Filter> {
        let mut terms = vec!["tunnel".to_string()];
        match (self.kind, self.id) {
            (EncapKind::Vxlan | EncapKind::Geneve, Some(id)) => {
                terms.push(format!("tunnel vni {id}"))
            }
            (_, Some(_)) => return None,
            _ => {}
        }
        if let Some(l) = self.mpls {
            terms.push(format!("mpls {l}"));
        }
        if let Some((a, b)) = self.outer {
            terms.push(format!("tunnel host {a} and tunnel host {b}"));
        }
        Filter::parse(&terms.join(" and ")).ok()
    }
}

/// One flow direction's encapsulation, as `--json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tunnel {
    /// `mpls`, `pppoe`, `gre`, `erspan`, `vxlan`, `geneve`, `gtpu`.
    pub kind: &'static str,
    /// What `id` is: `vni`, `key`, `session` or `teid` (absent with `id`).
    pub id_kind: Option<&'static str>,
    pub id: Option<u32>,
    /// The top label of the first MPLS label stack crossed.
    pub mpls_label: Option<u32>,
    /// The outer IP packet's source and destination (absent for MPLS and PPPoE alone).
    pub outer_src: Option<IpAddr>,
    pub outer_dst: Option<IpAddr>,
    /// Packets of the direction that arrived encapsulated.
    pub packets: u64,
    /// Some arrived in another encapsulation.
    pub mixed: bool,
}

impl Tunnel {
    pub fn of(e: &EncapDir) -> Tunnel {
        Tunnel {
            kind: e.kind.name(),
            id_kind: e.id.map(|_| id_name(e.kind)),
            id: e.id,
            mpls_label: e.mpls,
            outer_src: e.outer.map(|o| o.0),
            outer_dst: e.outer.map(|o| o.1),
            packets: e.packets,
            mixed: e.mixed,
        }
    }
}

/// A flow's encapsulation: per direction (`[a -> b, b -> a]`), and in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowTunnel {
    pub dirs: [Option<Tunnel>; 2],
    /// As `capsule flows` writes it: `vxlan vni 42 192.0.2.1>192.0.2.2`, `(mixed)`,
    /// `(partly)`.
    pub describe: String,
}

/// Flow `f`'s encapsulation, when any of its packets arrived in one.
pub fn flow_tunnel(f: &FlowCounts) -> Option<FlowTunnel> {
    let e = f.totals.encap.as_deref()?;
    if e.dirs.iter().all(Option::is_none) {
        return None;
    }
    Some(FlowTunnel {
        dirs: e.dirs.map(|d| d.as_ref().map(Tunnel::of)),
        describe: e.describe(f.totals.packets),
    })
}

/// One flow direction's encapsulation, typed and in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirTunnel {
    #[serde(flatten)]
    pub tunnel: Tunnel,
    /// `vxlan vni 42 192.0.2.1>192.0.2.2`, with ` (mixed)` when some of the direction's
    /// packets arrived in another encapsulation, ` (partly)` when some arrived in none.
    pub describe: String,
}

/// Direction `d`'s encapsulation of flow `f`, when its packets arrived in one.
pub fn dir_tunnel(f: &FlowCounts, d: usize) -> Option<DirTunnel> {
    let e = f.totals.encap.as_deref()?.dirs[d & 1].as_ref()?;
    let mut describe = e.describe();
    if e.mixed {
        describe.push_str(" (mixed)");
    } else if e.packets < f.totals.packets[d & 1] {
        describe.push_str(" (partly)");
    }
    Some(DirTunnel {
        tunnel: Tunnel::of(e),
        describe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(kind: EncapKind, id: Option<u32>, outer: Option<(&str, &str)>) -> EncapDir {
        EncapDir {
            kind,
            outer: outer.map(|(s, d)| (s.parse().unwrap(), d.parse().unwrap())),
            id,
            mpls: None,
            layers: 1,
            packets: 3,
            mixed: false,
            outer_dscp: 0,
        }
    }

    #[test]
    fn both_directions_of_a_tunnel_are_one_key_with_a_filter_for_it() {
        let ab = dir(EncapKind::Vxlan, Some(42), Some(("192.0.2.2", "192.0.2.1")));
        let ba = dir(EncapKind::Vxlan, Some(42), Some(("192.0.2.1", "192.0.2.2")));
        assert_eq!(TunnelKey::of(&ab), TunnelKey::of(&ba));
        let k = TunnelKey::of(&ab);
        assert_eq!(k.label(), "vxlan vni 42 192.0.2.1<->192.0.2.2");
        assert_eq!(
            k.filter().unwrap().to_string(),
            Filter::parse(
                "tunnel and tunnel vni 42 and tunnel host 192.0.2.1 and tunnel host 192.0.2.2"
            )
            .unwrap()
            .to_string()
        );
        // No term names a GRE key: no filter rather than one that selects other tunnels.
        assert!(TunnelKey::of(&dir(
            EncapKind::Gre,
            Some(7),
            Some(("192.0.2.1", "192.0.2.2"))
        ))
        .filter()
        .is_none());
        let t = Tunnel::of(&ab);
        assert_eq!((t.kind, t.id_kind, t.id), ("vxlan", Some("vni"), Some(42)));
    }
}
