//! The admin API over a real socket, on a node over the core plane (the decision the XDP
//! program is proven equal to), without root: bearer auth, bad JSON and TOML (400 with the
//! reason and the field path), unknown routes, `If-Match` (412), concurrent PUTs (exactly
//! one wins per generation), the validate endpoint, the tracer (a Maglev slot computed
//! independently, and a connection-table entry made by a packet through the plane),
//! `/metrics` through a strict format checker — and the node still answering after all of
//! it. The API over the real XDP forwarder: `node_netns/xdp_plane.rs` (root).

#[allow(unused_imports)]
use crate::common;

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use crate::common::sim::{self, backend};
use crate::common::{TcpServer, prom};
use serde_json::Value;
use stator_api::client::{ApiClient, Response};

const TOKEN: &str = "s3cret-token";
const READ_TOKEN: &str = "r3ad-only-token";

fn config(table: u32, extra_backend: bool) -> String {
    let mut t = sim::node_toml(1 << 16, "");
    t += &format!("[api]\ntoken = \"{TOKEN}\"\nread_token = \"{READ_TOKEN}\"\n");
    t += "[[pool]]\nname = \"web\"\n[pool.health]\ninterval = \"100ms\"\ntimeout = \"50ms\"\nrise = 1\nfall = 1\n";
    for h in [2, 3] {
        t += &format!(
            "[[pool.backend]]\naddress = \"{}\"\nport = 8080\nid = \"web-{h}\"\n",
            backend(h)
        );
    }
    if extra_backend {
        t += &format!(
            "[[pool.backend]]\naddress = \"{}\"\nport = 8080\nid = \"web-4\"\n",
            backend(4)
        );
    }
    t += &format!(
        "[[vip]]\nname = \"www\"\naddress = \"192.0.2.10\"\nport = 80\nprotocol = \"tcp\"\n\
         pools = [\"web\"]\ntable_size = {table}\n"
    );
    t
}

fn status_of(r: &Response) -> (u16, Value) {
    (r.status, r.json().unwrap_or(Value::Null))
}

#[test]
fn the_admin_api_over_a_real_socket() {
    let cfg = config(251, false);
    let cfg_241 = config(241, false);
    let cfg_extra = config(251, true);
    let servers: Vec<TcpServer> = (2..=4).map(|_| TcpServer::start("127.0.0.1:0")).collect();
    let pairs: Vec<(IpAddr, u16, SocketAddr)> = servers
        .iter()
        .zip(2..)
        .map(|(s, h)| (backend(h), 8080, s.addr))
        .collect();
    let state = sim::state(1 << 16);
    let rt = common::runtime();
    let node = rt
        .block_on(sim::start_tcp(&cfg, &state, sim::routes(&pairs)))
        .unwrap();
    let addr = node.api_addr().unwrap().to_string();
    let api = ApiClient::new(&addr, Some(TOKEN.into())).unwrap();
    let anon = ApiClient::new(&addr, None).unwrap();
    let wrong = ApiClient::new(&addr, Some("nope".into())).unwrap();
    let reader = ApiClient::new(&addr, Some(READ_TOKEN.into())).unwrap();
    let socket = ApiClient::unix(node.api_socket());

    // --- auth
    for (who, client) in [("no token", &anon), ("wrong token", &wrong)] {
        for path in ["/v1/status", "/metrics", "/v1/nowhere"] {
            let r = client.request("GET", path, &[], &[]).unwrap();
            assert_eq!(r.status, 401, "{who} {path}");
            assert_eq!(r.header("www-authenticate"), Some("Bearer"));
            assert!(
                r.json().unwrap()["error"]
                    .as_str()
                    .unwrap()
                    .contains("token")
            );
        }
    }
    let status = api.get_json("/v1/status").unwrap();
    assert_eq!(status["phase"], "running");
    assert_eq!(status["forwarder"]["kind"], "core");
    // The read token reads, but changes nothing and cannot see the configuration's text
    // (it holds the tokens); the socket (this process is root or the node's user) may do
    // everything without a token.
    assert_eq!(reader.get_json("/v1/status").unwrap()["phase"], "running");
    assert_eq!(
        reader.request("GET", "/metrics", &[], &[]).unwrap().status,
        200
    );
    for (method, path, body) in [
        ("GET", "/v1/config", &b""[..]),
        ("PUT", "/v1/config", cfg.as_bytes()),
        ("POST", "/v1/config:validate", cfg.as_bytes()),
        ("POST", "/v1/backends/web-2/drain", b""),
        ("POST", "/v1/backends/web-2/undrain", b""),
    ] {
        let r = reader
            .request(method, path, &[("Content-Type", "application/toml")], body)
            .unwrap();
        assert_eq!(r.status, 403, "read token {method} {path}: {}", r.text());
        assert!(r.text().contains("needs the admin level"), "{}", r.text());
    }
    assert_eq!(socket.get_json("/v1/status").unwrap()["phase"], "running");
    assert!(
        socket
            .request("GET", "/v1/config", &[], &[])
            .unwrap()
            .status
            == 200,
        "the socket's caller is admin"
    );

    // --- unknown routes and methods
    let (code, body) = status_of(&api.request("GET", "/v1/nowhere", &[], &[]).unwrap());
    assert_eq!(code, 404);
    assert!(body["error"].as_str().unwrap().contains("no such endpoint"));
    let (code, _) = status_of(&api.request("DELETE", "/v1/config", &[], &[]).unwrap());
    assert_eq!(code, 405);

    // --- bad TOML, bad JSON, wrong content type
    let gen0 = api.get_json("/v1/status").unwrap()["config"]["generation"]
        .as_u64()
        .unwrap();
    let bad = cfg.replace("table_size = 251", "table_size = 250");
    let (code, body) = status_of(
        &api.request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/toml")],
            bad.as_bytes(),
        )
        .unwrap(),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["field"], "vip[0].table_size");
    assert!(
        body["error"].as_str().unwrap().contains("not prime"),
        "{body}"
    );
    assert!(
        body["errors"][0]["location"]["line"].as_u64().is_some(),
        "located in the text: {body}"
    );
    let (code, body) = status_of(
        &api.request("PUT", "/v1/config", &[], b"[node\nname = ")
            .unwrap(),
    );
    assert_eq!(code, 400, "{body}");
    let (code, body) = status_of(
        &api.request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/json")],
            b"{\"node\": ",
        )
        .unwrap(),
    );
    assert_eq!(code, 400);
    assert!(
        body["error"].as_str().unwrap().contains("invalid JSON"),
        "{body}"
    );
    let (code, body) = status_of(
        &api.request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/json")],
            br#"{"node": {"name": null}}"#,
        )
        .unwrap(),
    );
    assert_eq!(
        (code, body["field"].as_str()),
        (400, Some("node.name")),
        "{body}"
    );
    let (code, body) = status_of(
        &api.request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/json")],
            br#"{"node": {"name": 7}}"#,
        )
        .unwrap(),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["field"], "node.name", "{body}");
    let (code, body) = status_of(
        &api.request("PUT", "/v1/config", &[("Content-Type", "image/png")], b"x")
            .unwrap(),
    );
    assert_eq!((code, body["field"].as_str()), (415, Some("Content-Type")));
    let (code, body) = status_of(
        &api.request(
            "POST",
            "/v1/backends/web-2/drain",
            &[("Content-Type", "application/json")],
            b"{\"timeout\": \"soon\"}",
        )
        .unwrap(),
    );
    assert_eq!(
        (code, body["field"].as_str()),
        (400, Some("timeout")),
        "{body}"
    );
    let (code, body) = status_of(
        &api.request("POST", "/v1/backends/web-2/drain", &[], b"{\"time\": 1}")
            .unwrap(),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        api.get_json("/v1/status").unwrap()["config"]["generation"].as_u64(),
        Some(gen0),
        "nothing applied"
    );

    // --- JSON configuration: the same document as TOML's structure
    let as_json: toml::Table = toml::from_str(&cfg_241).unwrap();
    let body = serde_json::to_vec(&as_json).unwrap();
    let (code, v) = status_of(
        &api.request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/json")],
            &body,
        )
        .unwrap(),
    );
    assert_eq!(code, 200, "{v}");
    assert!(state.snapshot().vips.values().all(|t| t.table.len() == 241));

    // --- If-Match
    let r = api.request("GET", "/v1/config", &[], &[]).unwrap();
    let etag = r.header("etag").unwrap().to_owned();
    let generation: u64 = etag.trim_matches('"').parse().unwrap();
    assert!(r.text().contains("table_size = 241"));
    let r = api
        .request(
            "PUT",
            "/v1/config",
            &[("If-Match", &format!("\"{}\"", generation + 100))],
            cfg.as_bytes(),
        )
        .unwrap();
    let (code, body) = status_of(&r);
    assert_eq!(code, 412, "{body}");
    assert_eq!(body["generation"], generation);
    let (code, body) = status_of(
        &api.request(
            "PUT",
            "/v1/config",
            &[("If-Match", "yesterday")],
            cfg.as_bytes(),
        )
        .unwrap(),
    );
    assert_eq!((code, body["field"].as_str()), (400, Some("If-Match")));

    // --- concurrent PUTs: two rounds of eight, each naming the generation it read
    for round in 0..2 {
        let current: u64 = api
            .request("GET", "/v1/config", &[], &[])
            .unwrap()
            .header("etag")
            .unwrap()
            .trim_matches('"')
            .parse()
            .unwrap();
        let barrier = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (api, barrier) = (api.clone(), Arc::clone(&barrier));
                let text = if (i + round) % 2 == 0 {
                    cfg.clone()
                } else {
                    cfg_241.clone()
                };
                std::thread::spawn(move || {
                    barrier.wait();
                    api.request(
                        "PUT",
                        "/v1/config",
                        &[("If-Match", &format!("\"{current}\""))],
                        text.as_bytes(),
                    )
                    .unwrap()
                    .status
                })
            })
            .collect();
        let mut codes: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        codes.sort_unstable();
        assert_eq!(
            codes,
            vec![200, 412, 412, 412, 412, 412, 412, 412],
            "round {round}"
        );
    }

    // --- validate: applies nothing, says whether a PUT would be accepted
    let before = api.get_json("/v1/status").unwrap()["config"]["generation"].clone();
    let v = api
        .request("POST", "/v1/config:validate", &[], cfg_extra.as_bytes())
        .unwrap()
        .ok()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["summary"]["backends"], 3);
    let v = api
        .request("POST", "/v1/config:validate", &[], bad.as_bytes())
        .unwrap()
        .ok()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"][0]["path"], "vip[0].table_size");
    let restart = cfg.replace("conntrack_entries = 4096", "conntrack_entries = 8192");
    let v = api
        .request("POST", "/v1/config:validate", &[], restart.as_bytes())
        .unwrap()
        .ok()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"][0]["path"], "dataplane.conntrack_entries");
    let (code, body) = status_of(
        &api.request("PUT", "/v1/config", &[], restart.as_bytes())
            .unwrap(),
    );
    assert_eq!(
        (code, body["field"].as_str()),
        (422, Some("dataplane.conntrack_entries"))
    );
    assert_eq!(
        api.get_json("/v1/status").unwrap()["config"]["generation"],
        before
    );

    // --- trace: Maglev, computed independently from the committed table
    api.put_config(&cfg, None).unwrap();
    let snap = state.snapshot();
    let vip = snap.vips.values().next().unwrap();
    let client: IpAddr = "198.51.100.7".parse().unwrap();
    let vip_addr: IpAddr = "192.0.2.10".parse().unwrap();
    let t = api
        .get_json("/v1/trace?vip=www&src=198.51.100.7&sport=40001")
        .unwrap();
    let hash = stator_hash::flow_hash_v4([198, 51, 100, 7], [192, 0, 2, 10], 40001, 80, 6);
    assert_eq!(t["hash"].as_u64(), Some(u64::from(hash)), "{t}");
    let slot = hash % vip.table.len() as u32;
    assert_eq!(t["maglev"]["slot"], slot);
    assert_eq!(t["decision"], "maglev");
    assert_eq!(t["backend"]["real_id"], vip.table[slot as usize]);
    assert_eq!(t["flow"]["dport"], 80, "the VIP's port by default");
    // a flow to web-2 through the plane's connection table: a SYN through its packet
    // path inserts the entry
    let web2 = snap
        .reals
        .iter()
        .find(|(_, r)| r.addr == backend(2))
        .map(|(id, _)| id.0)
        .unwrap();
    let sport = (40_000..50_000u16)
        .find(|p| {
            let h = stator_hash::flow_hash_v4([198, 51, 100, 7], [192, 0, 2, 10], *p, 80, 6);
            vip.table[(h % vip.table.len() as u32) as usize] == web2
        })
        .unwrap();
    let v = sim::send_syn(&state, client, sport, vip_addr, 80);
    assert_eq!(v.real.map(|r| r.0), Some(web2), "{v:?}");
    // web-2 drains: Maglev no longer picks it, its connection-table entry still does
    api.post_json("/v1/backends/web-2/drain", None).unwrap();
    let t = api
        .get_json(&format!(
            "/v1/trace?vip=192.0.2.10&src=198.51.100.7&sport={sport}&dport=80&proto=tcp"
        ))
        .unwrap();
    assert_eq!(t["decision"], "conntrack", "{t}");
    assert_eq!(t["backend"]["id"], "web-2");
    assert_eq!(t["conntrack"][0]["verdict"], "hit");
    assert_ne!(t["maglev"]["backend"]["id"], "web-2", "{t}");
    let syn = api
        .get_json(&format!(
            "/v1/trace?vip=www&src=198.51.100.7&sport={sport}&syn=true"
        ))
        .unwrap();
    assert_eq!(syn["decision"], "maglev", "a SYN follows Maglev: {syn}");
    let backends = api.get_json("/v1/backends").unwrap();
    let web2_row = backends["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == "web-2")
        .unwrap()
        .clone();
    assert_eq!(web2_row["vips"][0]["connections"], 1, "{web2_row}");
    api.post_json("/v1/backends/web-2/undrain", None).unwrap();
    for (q, code, field) in [
        ("/v1/trace?src=198.51.100.7", 400, Some("vip")),
        ("/v1/trace?vip=www", 400, Some("src")),
        ("/v1/trace?vip=www&src=2001:db8::1", 400, Some("src")),
        (
            "/v1/trace?vip=www&src=198.51.100.7&sport=70000",
            400,
            Some("sport"),
        ),
        (
            "/v1/trace?vip=www&src=198.51.100.7&proto=icmp",
            400,
            Some("proto"),
        ),
        ("/v1/trace?vip=www&src=198.51.100.7&bogus=1", 400, None),
        ("/v1/trace?vip=nope&src=198.51.100.7", 404, None),
    ] {
        let (c, body) = status_of(&api.request("GET", q, &[], &[]).unwrap());
        assert_eq!(c, code, "{q}: {body}");
        assert_eq!(body["field"].as_str(), field, "{q}: {body}");
    }

    // --- metrics: strictly well-formed, and saying what the node knows
    let r = api
        .request("GET", "/metrics", &[], &[])
        .unwrap()
        .ok()
        .unwrap();
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = r.text();
    let samples = prom::check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let g = api.get_json("/v1/status").unwrap()["config"]["generation"]
        .as_f64()
        .unwrap();
    assert_eq!(
        prom::value(&samples, "stator_config_generation", &[]),
        Some(g)
    );
    assert_eq!(
        prom::value(&samples, "stator_backend_up", &[("backend", "web-3")]),
        Some(1.0)
    );
    assert_eq!(
        prom::value(&samples, "stator_vip_usable_backends", &[("vip", "www")]),
        Some(2.0)
    );
    assert_eq!(
        prom::value(&samples, "stator_conntrack_inserts_total", &[]),
        Some(1.0)
    );
    assert!(prom::value(&samples, "stator_vip_packets_total", &[("vip", "www")]).unwrap() >= 1.0);
    assert!(
        prom::value(
            &samples,
            "stator_config_reloads_total",
            &[("result", "failure")]
        )
        .unwrap()
            >= 10.0
    );
    assert_eq!(
        prom::value(&samples, "stator_drops_total", &[("reason", "no_backend")]),
        Some(0.0)
    );
    println!("/metrics: {} samples, {} bytes", samples.len(), text.len());

    // --- garbage on the socket does not take the node down
    let mut raw = TcpStream::connect(node.api_addr().unwrap()).unwrap();
    raw.write_all(b"\x16\x03\x01\x02\x00 not http at all\r\n\r\n")
        .unwrap();
    drop(raw);
    let started = Instant::now();
    assert_eq!(api.get_json("/v1/status").unwrap()["phase"], "running");
    println!("still answering {:?} after garbage", started.elapsed());
    rt.block_on(node.shutdown()).unwrap();
}
