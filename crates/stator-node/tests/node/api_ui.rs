//! The status page's side of the admin API's TCP endpoint, on a node over the stator-core data
//! plane (`CorePlane`, no root): the page and its assets (types, CSP) served without the
//! token, the token still required for every JSON endpoint, cross-origin requests refused even
//! with it, `GET /v1/events` recording the start, applied and refused reloads, drains and
//! health changes in order with `since` and `limit`, and `GET /v1/dataplane`. (The page in a
//! real browser: `crates/stator/tests/netns/status_page.rs`.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use stator_api::client::{Response, parse_response};
use stator_node::{Node, NodeOptions};
use stator_plane::coreplane::{CoreOptions, CorePlane, CoreState, TokioClock};

const TOKEN: &str = "page-token-1";

/// The admin token's header line.
fn admin() -> String {
    format!("Authorization: Bearer {TOKEN}")
}

fn config(weight: u32) -> String {
    let mut t = String::from(
        "[node]\nname = \"ui\"\naddress_v4 = \"10.9.0.1\"\n[dataplane]\ninterfaces = [\"d0\"]\n\
         conntrack = \"shared\"\nconntrack_entries = 4096\nslots_per_generation = 4096\n",
    );
    t += &format!("[api]\ntoken = \"{TOKEN}\"\n");
    t += &format!(
        "[[pool]]\nname = \"web\"\n[pool.health]\nmethod = \"none\"\n\
         [[pool.backend]]\nid = \"a\"\naddress = \"10.9.1.1\"\nweight = {weight}\n\
         [[pool.backend]]\nid = \"b\"\naddress = \"10.9.1.2\"\n\
         [[vip]]\nname = \"www\"\naddress = \"192.0.2.80\"\nport = 80\nprotocol = \"tcp\"\n\
         pools = [\"web\"]\ntable_size = 251\n"
    );
    t
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn start(rt: &tokio::runtime::Runtime, text: &str) -> Node {
    let opts = CoreOptions::default();
    let state = CoreState::new(opts, Arc::new(TokioClock::new()));
    let _guard = rt.enter();
    rt.block_on(Node::start(
        text.to_owned(),
        "ui.toml".into(),
        NodeOptions {
            plane: Some(Box::new(CorePlane::new(state))),
            no_attach: true,
            no_preflight: true,
            listen: Some("127.0.0.1:0".parse().unwrap()),
            socket: Some(stator_testkit::scratch::unique_path(
                "stator-api-ui",
                ".sock",
            )),
            ..NodeOptions::default()
        },
    ))
    .unwrap()
}

/// One raw HTTP/1.1 request with exactly these header lines.
fn raw(addr: SocketAddr, method: &str, path: &str, headers: &[String], body: &str) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for h in headers {
        req += h;
        req += "\r\n";
    }
    req += &format!("Content-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    parse_response(&out).unwrap()
}

fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Response {
    let mut h = vec![format!("Host: {addr}")];
    if let Some(t) = token {
        h.push(format!("Authorization: Bearer {t}"));
    }
    raw(addr, "GET", path, &h, "")
}

fn json(r: &Response) -> Value {
    assert!((200..300).contains(&r.status), "{} {}", r.status, r.text());
    r.json().unwrap()
}

fn kinds(events: &Value) -> Vec<String> {
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn page_assets_and_cross_origin_requests() {
    let rt = runtime();
    let node = start(&rt, &config(1));
    let addr = node.api_addr().unwrap();
    std::thread::spawn(move || {
        let page = get(addr, "/", None);
        assert_eq!(page.status, 200);
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        let csp = page.header("content-security-policy").unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
        let html = page.text();
        assert!(html.contains("<script src=\"/ui/status.js\""), "{html}");
        assert!(html.contains("href=\"/ui/status.css\""));
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "no external resource"
        );
        let js = get(addr, "/ui/status.js", None);
        assert_eq!(
            js.header("content-type"),
            Some("text/javascript; charset=utf-8")
        );
        for endpoint in [
            "/v1/status",
            "/v1/vips",
            "/v1/backends",
            "/v1/dataplane",
            "/v1/events",
        ] {
            assert!(js.text().contains(endpoint), "the script polls {endpoint}");
        }
        let css = get(addr, "/ui/status.css", None);
        assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
        assert!(css.text().contains("@media (max-width"), "a phone layout");

        // Another site's script, from an operator's browser (even one that somehow has the
        // token): refused, the drain does not happen.
        let cross = raw(
            addr,
            "POST",
            "/v1/backends/a/drain",
            &[
                format!("Host: {addr}"),
                "Origin: http://evil.example".into(),
                "Content-Type: text/plain".into(),
                admin(),
            ],
            "",
        );
        assert_eq!(cross.status, 403, "{}", cross.text());
        let b = json(&get(addr, "/v1/backends", Some(TOKEN)));
        assert_eq!(b["backends"][0]["drain"]["state"], "none");
        // The page's own origin may.
        let same = raw(
            addr,
            "POST",
            "/v1/backends/a/drain",
            &[
                format!("Host: {addr}"),
                format!("Origin: http://{addr}"),
                admin(),
            ],
            "",
        );
        assert_eq!(same.status, 200, "{}", same.text());
    })
    .join()
    .unwrap();
    rt.block_on(node.shutdown()).unwrap();
}

#[test]
fn with_a_token_the_page_is_served_and_the_data_are_not() {
    let rt = runtime();
    let node = start(&rt, &config(1));
    let addr = node.api_addr().unwrap();
    std::thread::spawn(move || {
        for path in ["/", "/ui/status.js", "/ui/status.css"] {
            assert_eq!(
                get(addr, path, None).status,
                200,
                "{path} holds no node data"
            );
        }
        for path in [
            "/v1/status",
            "/v1/events",
            "/v1/dataplane",
            "/metrics",
            "/nope",
        ] {
            let r = get(addr, path, None);
            assert_eq!(r.status, 401, "{path}: {}", r.text());
            assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        }
        assert_eq!(json(&get(addr, "/v1/status", Some(TOKEN)))["node"], "ui");
        // A token protects a named Host; a foreign Origin is refused even with the token.
        let named = raw(
            addr,
            "GET",
            "/v1/status",
            &[
                "Host: lb1.example:9180".into(),
                format!("Authorization: Bearer {TOKEN}"),
            ],
            "",
        );
        assert_eq!(named.status, 200);
        let cross = raw(
            addr,
            "GET",
            "/v1/status",
            &[
                format!("Host: {addr}"),
                "Origin: https://evil.example".into(),
                format!("Authorization: Bearer {TOKEN}"),
            ],
            "",
        );
        assert_eq!(cross.status, 403);
        // Only GET serves the page.
        let post = raw(addr, "POST", "/", &[format!("Host: {addr}")], "");
        assert_eq!(post.status, 401);
    })
    .join()
    .unwrap();
    rt.block_on(node.shutdown()).unwrap();
}

#[test]
fn events_and_dataplane_feeds() {
    let rt = runtime();
    let node = start(&rt, &config(1));
    let addr = node.api_addr().unwrap();
    let put = move |text: String| {
        raw(
            addr,
            "PUT",
            "/v1/config",
            &[
                format!("Host: {addr}"),
                "Content-Type: application/toml".into(),
                admin(),
            ],
            &text,
        )
    };
    std::thread::spawn(move || {
        // The watchdog's first check comes within a second of the start.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let first = loop {
            let e = json(&get(addr, "/v1/events", Some(TOKEN)));
            if kinds(&e).contains(&"announce".to_owned()) || std::time::Instant::now() > deadline {
                break e;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // The first health results, the start, the forwarder's first check, the announcement.
        let k = kinds(&first);
        for kind in ["backend_up", "start", "forwarder_healthy", "announce"] {
            assert!(k.contains(&kind.to_owned()), "{kind}: {first}");
        }
        assert_eq!(
            k.iter().filter(|k| *k == "backend_up").count(),
            2,
            "{first}"
        );
        assert_eq!(first["truncated"], false);
        let since = first["last"].as_u64().unwrap();

        assert_eq!(put(config(3)).status, 200);
        let refused = put(config(1).replace("table_size = 251", "table_size = 250"));
        assert_eq!(refused.status, 400);
        assert_eq!(
            raw(
                addr,
                "POST",
                "/v1/backends/b/drain",
                &[format!("Host: {addr}"), admin()],
                "{\"timeout\": \"1h\"}"
            )
            .status,
            200
        );
        assert_eq!(
            raw(
                addr,
                "POST",
                "/v1/backends/b/undrain",
                &[format!("Host: {addr}"), admin()],
                ""
            )
            .status,
            200
        );
        let newer = json(&get(
            addr,
            &format!("/v1/events?since={since}"),
            Some(TOKEN),
        ));
        println!("{newer:#}");
        assert_eq!(
            kinds(&newer),
            ["reload", "reload_failed", "drain", "undrain"]
        );
        let ev = newer["events"].as_array().unwrap();
        let seqs: Vec<u64> = ev.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1) && seqs[0] == since + 1);
        assert_eq!(ev[0]["config_generation"], ev[1]["config_generation"]);
        assert!(ev[0]["message"].as_str().unwrap().contains("applied"));
        assert!(
            ev[1]["message"].as_str().unwrap().contains("not prime"),
            "{}",
            ev[1]
        );
        assert_eq!(ev[2]["backend"], "b");
        assert_eq!(newer["last"], *seqs.last().unwrap());

        let one = json(&get(
            addr,
            &format!("/v1/events?since={since}&limit=1"),
            Some(TOKEN),
        ));
        assert_eq!(kinds(&one), ["undrain"]);
        assert_eq!(one["truncated"], true);
        let none = json(&get(
            addr,
            &format!("/v1/events?since={}", newer["last"]),
            Some(TOKEN),
        ));
        assert!(none["events"].as_array().unwrap().is_empty());
        for bad in [
            "/v1/events?limit=0",
            "/v1/events?since=x",
            "/v1/events?what=1",
        ] {
            assert_eq!(get(addr, bad, Some(TOKEN)).status, 400, "{bad}");
        }

        let dp = json(&get(addr, "/v1/dataplane", Some(TOKEN)));
        assert_eq!(dp["kind"], "core");
        for key in ["act_pass", "act_tx", "act_drop", "ct_hit", "non_vip"] {
            assert!(dp["counters"][key].is_u64(), "{key}: {dp}");
        }
        assert!(dp["drops"]["no_backend"].is_u64(), "{dp}");
    })
    .join()
    .unwrap();
    rt.block_on(node.shutdown()).unwrap();
}
