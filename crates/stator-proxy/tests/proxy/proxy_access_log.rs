//! The access log over real sockets on loopback: one JSON line per HTTP request (a response
//! from a backend, an answer of the proxy's own, a head hyper refused), per TCP connection and
//! per UDP session, with the client, the upstream, the status or outcome and the bytes each way
//! as they really were; a reconfiguration to off writes nothing more. Unprivileged.

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::udp_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Backend, Client, refused_addr, spec};
use crate::udp_common::{Echo, ask, eventually};
use serde_json::Value;
use stator_proxy::{
    AccessLog, AccessLogFormat, AccessLogSpec, ListenerSpec, Protocol, Proxy, UpstreamSpec,
};
use stator_testkit::scratch::TempDir;

const WAIT: Duration = Duration::from_secs(10);

/// A proxy with an access log (JSON, every record) in `dir`, serving `specs`.
fn proxy_with_log(dir: &TempDir, specs: Vec<ListenerSpec>) -> (Proxy, Arc<AccessLog>) {
    let log = AccessLog::new();
    log.configure(Some(AccessLogSpec {
        path: Some(dir.join("access.log")),
        format: AccessLogFormat::Json,
        sample: 1.0,
    }))
    .unwrap();
    let mut p = Proxy::new("test", None).with_access_log(Arc::clone(&log));
    p.apply(specs).unwrap();
    (p, log)
}

/// The log's lines once `n` are there (every one JSON), or a failure after [`WAIT`].
fn lines(dir: &TempDir, n: usize) -> Vec<Value> {
    let mut got = Vec::new();
    let found = eventually(WAIT, || {
        let text = std::fs::read_to_string(dir.join("access.log")).unwrap_or_default();
        got = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        got.len() >= n
    });
    assert!(found, "{} of {n} lines: {got:#?}", got.len());
    got
}

fn find<'a>(lines: &'a [Value], pred: impl Fn(&Value) -> bool, what: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| pred(l))
        .unwrap_or_else(|| panic!("no line for {what} in {lines:#?}"))
}

#[test]
fn http_requests_are_logged_with_status_upstream_and_bytes() {
    let dir = TempDir::new("stator-access-http");
    let backend = Backend::start("b1");
    let dead = UpstreamSpec {
        name: "dead".into(),
        addr: refused_addr(),
        weight: 1,
    };
    let mut bad = spec("bad", Protocol::Http, vec![dead]);
    bad.retries = 0;
    let (p, log) = proxy_with_log(
        &dir,
        vec![spec("web", Protocol::Http, vec![backend.upstream()]), bad],
    );
    let web = p.local_addr("web").unwrap();
    let mut c = Client::connect(web);
    let (status, _, body) = c.get("/bytes/1000");
    assert_eq!((status, body.len()), (200, 1000));
    let (status, _, _) = Client::connect(p.local_addr("bad").unwrap()).get("/x?y=1");
    assert_eq!(status, 502);
    // a head hyper refuses: no request line
    let mut raw = TcpStream::connect(web).unwrap();
    raw.set_read_timeout(Some(WAIT)).unwrap();
    raw.write_all(b"\x01\x02 nonsense\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    assert!(answer.starts_with(b"HTTP/1.1 400"), "{answer:?}");
    let client_addr = raw.local_addr().unwrap();
    let all = lines(&dir, 3);
    let ok = find(&all, |l| l["status"] == 200, "the 200");
    assert_eq!(ok["kind"], "http");
    assert_eq!(ok["listener"], "web");
    assert_eq!(ok["method"], "GET");
    assert_eq!(ok["target"], "/bytes/1000");
    assert_eq!(ok["upstream"], backend.addr.to_string());
    assert_eq!(ok["outcome"], "ok");
    assert_eq!(ok["bytes_out"], 1000);
    assert_eq!(ok["bytes_in"], 0);
    assert!(ok["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(ok["duration_ms"].as_f64().unwrap() >= 0.0);
    assert!(ok["time"].as_str().unwrap().ends_with('Z'));
    let failed = find(&all, |l| l["status"] == 502, "the 502");
    assert_eq!(failed["listener"], "bad");
    assert_eq!(failed["target"], "/x?y=1");
    assert_eq!(failed["upstream"], Value::Null, "the proxy answered");
    let refused = find(&all, |l| l["status"] == 400, "the 400");
    assert_eq!(refused["outcome"], "bad_request");
    assert_eq!(refused["client"], client_addr.to_string());
    assert!(refused.get("method").is_none());
    // off: nothing more is written
    log.configure(None).unwrap();
    let _ = c.get("/bytes/10");
    drop(c);
    p.shutdown(Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(lines(&dir, 3).len(), 3, "a line written while off");
    assert_eq!(log.counts().written, 3);
    assert_eq!(log.counts().dropped, 0);
}

#[test]
fn a_tcp_connection_is_one_line_with_its_bytes_each_way() {
    let dir = TempDir::new("stator-access-tcp");
    // answers "<bytes read>\n" once the client shut its side
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = l.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            let _ = s.write_all(format!("{}\n", got.len()).as_bytes());
        }
    });
    let upstream = UpstreamSpec {
        name: "u".into(),
        addr: up,
        weight: 1,
    };
    let (p, _log) = proxy_with_log(&dir, vec![spec("t", Protocol::Tcp, vec![upstream])]);
    let mut s = TcpStream::connect(p.local_addr("t").unwrap()).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(&[7u8; 12_345]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "12345\n");
    let all = lines(&dir, 1);
    let line = &all[0];
    assert_eq!(line["kind"], "tcp");
    assert_eq!(line["upstream"], up.to_string());
    assert_eq!(line["client"], s.local_addr().unwrap().to_string());
    assert_eq!(line["bytes_in"], 12_345);
    assert_eq!(line["bytes_out"], 6);
    assert_eq!(line["outcome"], "ok");
    assert!(line.get("status").is_none());
    p.shutdown(Duration::from_secs(5));
}

#[test]
fn a_udp_session_is_one_line_with_its_datagrams() {
    let dir = TempDir::new("stator-access-udp");
    let echo = Echo::start("e", "127.0.0.1:0");
    let mut s = ListenerSpec::new(
        "u",
        "127.0.0.1:0".parse().unwrap(),
        Protocol::Udp,
        vec![echo.upstream()],
    );
    s.workers = 1;
    let (p, log) = proxy_with_log(&dir, vec![s]);
    let addr: SocketAddr = p.local_addr("u").unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..3 {
        let reply = ask(&client, addr, format!("q{i}").as_bytes(), WAIT).expect("a reply");
        assert_eq!(reply, format!("e|q{i}").as_bytes());
    }
    p.shutdown(Duration::from_secs(5));
    let all = lines(&dir, 1);
    let line = &all[0];
    assert_eq!(line["kind"], "udp");
    assert_eq!(line["client"], client.local_addr().unwrap().to_string());
    assert_eq!(line["upstream"], echo.addr.to_string());
    assert_eq!(line["datagrams_in"], 3);
    assert_eq!(line["datagrams_out"], 3);
    assert_eq!(line["bytes_in"], 6);
    assert_eq!(line["bytes_out"], 12);
    assert_eq!(line["outcome"], "closed", "ended by the shutdown");
    assert_eq!(log.counts().written, 1);
}
