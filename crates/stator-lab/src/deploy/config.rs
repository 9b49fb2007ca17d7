//! The configuration every node of a deployment runs: the same VIPs, pools, health checks and
//! HTTP listener everywhere; only `[node]`, the listener's address (the node's own), the
//! node's own BIRD files and (per [`DeploySpec::bfd_nodes`]) BFD differ. Its admin API listens on every address of the node's namespace, so that the lab's
//! Prometheus (in the router's namespace) scrapes it at the node's address.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{
    Deployment, ECHO_PORT, HTTP_PORT, LISTENER_PORT, NODE_AS, ROUTER_AS, UDP_PORT, cluster_vip,
};
use crate::topo::Host;

impl Deployment {
    /// The configuration node `j` runs: identical on every node but for `[node]`, the
    /// node's own BIRD files and BFD.
    pub(super) fn node_config(&self, j: usize, host: &Host) -> String {
        let spec = &self.spec;
        let dir = spec.dir.display();
        let s = spec.subnet;
        let bfd = spec.bfd_nodes.contains(&j);
        // BFD as the router runs it (lan::router_bird_config): 100 ms, multiplier 3.
        let (bfd_timers, bfd_session) = if bfd {
            (
                "bfd_interval = \"100ms\"\nbfd_multiplier = 3\n",
                "bfd = true\n",
            )
        } else {
            ("", "")
        };
        let mut c = format!(
            r#"# stator lab node n{j} (generated; every node has the same VIPs and pools)
[node]
name = "n{j}"
address_v4 = "{a4}"
address_v6 = "{a6}"

[dataplane]
mode = "{mode}"
interfaces = ["eth0"]
pin_path = "{pins}/n{j}"
conntrack = "shared"
conntrack_entries = 65536
slots_per_generation = {slots}
{on_exit}{afxdp}
[bgp]
bird_socket = "{dir}/n{j}.ctl"
bird_config = "{dir}/n{j}-stator.conf"
local_as = {nas}
{bfd_timers}
[[bgp.neighbor]]
name = "router_v4"
address = "{r4}"
remote_as = {ras}
hold_time = "{hold}s"
keepalive = "{ka}s"
connect_retry = "1s"
error_wait = "1s"
{bfd_session}
[[bgp.neighbor]]
name = "router_v6"
address = "{r6}"
remote_as = {ras}
hold_time = "{hold}s"
keepalive = "{ka}s"
connect_retry = "1s"
error_wait = "1s"
{bfd_session}
[tracer]
# the lab's key (stator trace --send --key-file {dir}/{trace_key}); reports only to lab addresses
key_file = "{dir}/{trace_key}"
receivers = ["10.0.0.0/8", "fd00::/8"]

[api]
socket = "{socket}"
# every address of the namespace: the lab's Prometheus scrapes the node's address
listen = "0.0.0.0:{api_port}"
token_file = "{dir}/{admin_token}"
read_token_file = "{dir}/{read_token}"

[log]
format = "json"
"#,
            mode = if spec.is_afxdp(j) { "afxdp" } else { "xdp" },
            // supervised like the packaged unit: with the packaged configuration's choice, so
            // that a restart never stops the data plane
            on_exit = if spec.supervise.is_some() || spec.keep_on_exit {
                "on_exit = \"keep\"\n"
            } else {
                ""
            },
            // one packet thread beside the I/O thread, unpinned: the lab shares two cores
            afxdp = if spec.is_afxdp(j) {
                "\n[dataplane.afxdp]\npacket_threads = 1\npin = false\nframes = 4096\n\
                 ring_size = 1024\nbusy_poll = \"0s\"\n"
            } else {
                ""
            },
            a4 = host.v4[0],
            a6 = host.v6[0],
            r4 = Ipv4Addr::new(10, s, 1, 1),
            r6 = Ipv6Addr::new(0xfd00, u16::from(s), 1, 0, 0, 0, 0, 1),
            pins = self.pins().display(),
            // six VIPs, and with second chance a previous table for each
            slots = u64::from(spec.table_size) * if spec.second_chance { 12 } else { 6 } + 251,
            nas = NODE_AS,
            ras = ROUTER_AS,
            hold = spec.hold_time,
            ka = (spec.hold_time / 3).max(1),
            api_port = super::NODE_API.port(),
            socket = super::node_socket(&spec.dir, j).display(),
            admin_token = super::ADMIN_TOKEN_FILE,
            read_token = super::READ_TOKEN_FILE,
            trace_key = super::TRACE_KEY_FILE,
        );
        let cluster = spec.node_cluster(j);
        if spec.second_chance {
            // GUE carries the previous backend; the grace covers any test's length
            c.push_str("\n[encap]\ndefault = \"gue\"\nsecond_chance = \"10m\"\n");
        }
        if spec.fragments {
            let peers: Vec<String> = self
                .lab()
                .lbs
                .iter()
                .enumerate()
                .filter(|(i, _)| spec.node_cluster(*i) == cluster)
                .map(|(_, h)| format!("\"{}\"", h.v4[0]))
                .collect();
            c.push_str(&format!(
                "\n[fragments]\npeers = [{}]\ntable_size = 251\n",
                peers.join(", ")
            ));
        }
        if spec.clusters > 1 {
            c.push_str(
                "\n[[vip_class]]\nname = \"svc\"\nprefixes = [\"192.0.2.0/24\", \"2001:db8:100::/48\"]\n\
                 suffix_bits_v4 = 4\nsuffix_bits_v6 = 64\n",
            );
        }
        for (pool, v6) in [("web4", false), ("web6", true)] {
            c.push_str(&format!(
                "\n[[pool]]\nname = \"{pool}\"\n[pool.health]\nmethod = \"http\"\nport = {HTTP_PORT}\n\
                 interval = \"{i}ms\"\ntimeout = \"{t}ms\"\nrise = 2\nfall = 2\n",
                i = spec.health_interval_ms,
                t = spec.health_interval_ms * 3 / 5,
            ));
            for (k, b) in self.backends.iter().enumerate() {
                if b.in_config && spec.backend_cluster(k) == cluster {
                    let fam = if v6 { "v6" } else { "v4" };
                    c.push_str(&format!(
                        "[[pool.backend]]\nid = \"b{k}-{fam}\"\naddress = \"{a}\"\nport = {HTTP_PORT}\n\
                         weight = {w}\n",
                        a = b.host.addr(v6),
                        w = b.weight,
                    ));
                }
            }
        }
        for (v6, fam, pool) in [(false, "4", "web4"), (true, "6", "web6")] {
            let vip = cluster_vip(cluster, v6);
            for (name, port, proto) in [
                ("http", HTTP_PORT, "tcp"),
                ("echo", ECHO_PORT, "tcp"),
                ("udp", UDP_PORT, "udp"),
            ] {
                c.push_str(&format!(
                    "\n[[vip]]\nname = \"{name}{fam}\"\naddress = \"{vip}\"\nport = {port}\n\
                     protocol = \"{proto}\"\npools = [\"{pool}\"]\ntable_size = {ts}\n",
                    ts = spec.table_size,
                ));
                if spec.fragments && proto == "udp" {
                    c.push_str("fragments = true\n");
                }
                if spec.clusters > 1 {
                    let other = cluster_vip((cluster + 1) % spec.clusters, v6);
                    c.push_str(&format!("class = \"svc\"\nfailover = \"{other}\"\n"));
                }
            }
        }
        // The proxy tier: one HTTP listener on the node's own address (one worker: the lab
        // shares two cores), using the same health states as the VIPs.
        c.push_str(&format!(
            "\n[[listener]]\nname = \"web4\"\naddress = \"{a4}:{LISTENER_PORT}\"\n\
             protocol = \"http\"\npool = \"web4\"\nworkers = 1\n",
            a4 = host.v4[0],
        ));
        c
    }
}
