//! `[tunnels]`: the UDP ports on which the dissector opens VXLAN, Geneve and GTP-U
//! (capsule_wire::set_tunnel_ports; the binary applies them when it loads the file).
//!
//! ```toml
//! [tunnels]
//! vxlan_ports = [4789, 8472]
//! geneve_ports = [6081]
//! gtpu_ports = [2152]
//! ```
//!
//! A key left out keeps its default port; an empty list opens that tunnel on no port.

use serde::Serialize;
use toml::de::DeTable;

use crate::alerts::count;
use crate::error::ErrorKind;
use crate::walk::{join, Src};

/// The keys of `[tunnels]`.
pub const TUNNELS_KEYS: [&str; 3] = ["vxlan_ports", "geneve_ports", "gtpu_ports"];

/// The `[tunnels]` section: UDP ports per tunnel kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tunnels {
    pub vxlan_ports: Vec<u16>,
    pub geneve_ports: Vec<u16>,
    pub gtpu_ports: Vec<u16>,
}

impl Default for Tunnels {
    fn default() -> Self {
        Tunnels {
            vxlan_ports: vec![4789],
            geneve_ports: vec![6081],
            gtpu_ports: vec![2152],
        }
    }
}

/// The `[tunnels]` table; a problem is kept (see [`Src::keep`]) and the reading goes on.
pub(crate) fn parse(src: &Src<'_>, path: &str, table: &DeTable<'_>) -> Tunnels {
    src.only_keys(path, table, &TUNNELS_KEYS);
    let mut t = Tunnels::default();
    for (k, v) in table {
        let name = k.get_ref().as_ref();
        let key = join(path, name);
        let slot = match name {
            "vxlan_ports" => &mut t.vxlan_ports,
            "geneve_ports" => &mut t.geneve_ports,
            "gtpu_ports" => &mut t.gtpu_ports,
            _ => continue,
        };
        let toml::de::DeValue::Array(items) = v.get_ref() else {
            src.keep::<()>(Err(src.err(
                v.span(),
                &key,
                ErrorKind::WrongType,
                "an array of UDP ports (1-65535)",
                src.found(v),
            )));
            continue;
        };
        let mut ports = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = format!("{key}[{i}]");
            let port = count(src, &at, item).and_then(|n| {
                u16::try_from(n).ok().filter(|&p| p > 0).ok_or_else(|| {
                    src.err(
                        item.span(),
                        &at,
                        ErrorKind::BadValue,
                        "a UDP port (1-65535)",
                        src.found(item),
                    )
                })
            });
            if let Some(p) = src.keep(port) {
                ports.push(p);
            }
        }
        *slot = ports;
    }
    t
}
