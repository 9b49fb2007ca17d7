//! Warnings: valid configurations that are probably not what was meant. Computed from a
//! [`Config`] on demand; they never reject anything.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::error::{FieldPath, Warning, WarningKind};
use crate::types::{Config, PoolId};

impl Config {
    /// Everything that is valid but probably not meant, in document order.
    pub fn warnings(&self) -> Vec<Warning> {
        let mut out = Vec::new();
        let mut warn = |path: FieldPath, kind| {
            out.push(Warning {
                path,
                location: None,
                kind,
            })
        };
        if let Some(bgp) = &self.bgp {
            for (family, is_v4) in [("IPv4", true), ("IPv6", false)] {
                let has_vip = self.vips.iter().any(|v| v.key.addr.is_ipv4() == is_v4);
                let has_neighbor = bgp.neighbors.iter().any(|n| n.address.is_ipv4() == is_v4);
                if has_vip && !has_neighbor {
                    warn(
                        FieldPath::root().key("bgp"),
                        WarningKind::NotAnnounced { family },
                    );
                }
            }
        }
        let mut used = vec![false; self.pools.len()];
        for vip in &self.vips {
            for pool in self.pools_reached(&vip.pools) {
                used[pool.0] = true;
            }
        }
        for listener in &self.listeners {
            for pool in self.pools_reached(&[listener.pool]) {
                used[pool.0] = true;
            }
        }
        for (i, pool) in self.pools.iter().enumerate() {
            if !used[i] {
                warn(
                    FieldPath::root().key("pool").index(i),
                    WarningKind::UnusedPool {
                        name: pool.name.clone(),
                    },
                );
            }
        }
        for (i, vip) in self.vips.iter().enumerate() {
            let at = FieldPath::root().key("vip").index(i);
            let backends = vip.backends.len();
            if u64::from(vip.table_size) < 100 * backends as u64 {
                warn(
                    at.key("table_size"),
                    WarningKind::SmallTable {
                        table_size: vip.table_size,
                        backends,
                    },
                );
            }
            let mut by_address: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
            for (backend, _) in self.vip_backends(vip) {
                by_address
                    .entry(backend.address)
                    .or_default()
                    .push(backend.name.clone());
            }
            for (address, backends) in by_address {
                if backends.len() > 1 {
                    warn(
                        at.key("pools"),
                        WarningKind::SharedAddress {
                            address: address.to_string(),
                            backends,
                        },
                    );
                }
            }
            if vip.key.port != 0 {
                for (backend, _) in self.vip_backends(vip) {
                    if backend.port.is_some_and(|p| p != vip.key.port) {
                        warn(
                            at.key("pools"),
                            WarningKind::PortNotRewritten {
                                backend: backend.name.clone(),
                                vip_port: vip.key.port,
                            },
                        );
                        // One example per VIP is enough to make the point.
                        break;
                    }
                }
            }
        }
        out
    }

    /// Warnings that depend on the host the configuration is checked on: a worst case of
    /// descriptors that does not fit its limit (pointing at the setting that needs the most).
    pub fn host_warnings(&self, host: &crate::check::Host) -> Vec<Warning> {
        let Some(limit) = host.nofile else {
            return Vec::new();
        };
        let plan = self.descriptor_plan(host.cores.max(1));
        if plan.fit(limit) == crate::descriptors::Fit::Fits {
            return Vec::new();
        }
        let path = plan
            .largest_traffic()
            .map_or_else(|| FieldPath::root().key("api"), |p| p.path.clone());
        vec![Warning {
            path,
            location: None,
            kind: WarningKind::Descriptors {
                need: plan.total(),
                limit,
                budget: plan.budget(limit),
                min_traffic: plan.min_traffic,
                parts: plan.lines(),
            },
        }]
    }

    /// Pools reached from `roots` through include, each once.
    fn pools_reached(&self, roots: &[PoolId]) -> Vec<PoolId> {
        let mut seen = vec![false; self.pools.len()];
        let mut stack: Vec<PoolId> = roots.to_vec();
        let mut out = Vec::new();
        while let Some(p) = stack.pop() {
            if !std::mem::replace(&mut seen[p.0], true) {
                out.push(p);
                stack.extend(&self.pool(p).includes);
            }
        }
        out
    }
}
