//! Real backends and clients on loopback for the proxy's tests: HTTP/1.1 servers (hyper) that
//! say who they are, stream bodies of any size and checksum uploads; a TCP echo server; a
//! small HTTP client over one kept-alive connection.
#![allow(dead_code)] // each test file uses a different part

pub mod lab;
pub mod steering;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use stator_proxy::{ListenerSpec, Protocol, Proxy, UpstreamSpec};

/// FNV-1a over a stream of chunks.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn update(&mut self, data: &[u8]) {
        for &b in data {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Byte `i` of the test pattern.
pub fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// `n` bytes of the pattern from offset `start`.
pub fn chunk(start: u64, n: usize) -> Vec<u8> {
    (0..n as u64).map(|i| pattern(start + i)).collect()
}

/// An HTTP backend on 127.0.0.1 (its own thread and runtime), stopped on drop.
#[derive(Debug)]
pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    /// TCP connections accepted.
    pub connections: Arc<AtomicU64>,
    /// Requests answered.
    pub requests: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

type BoxBody = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

impl Backend {
    /// Routes: `/bytes/N` streams N pattern bytes (chunked); `/upload` answers
    /// `"<length> <fnv>"` of the body; `/slow/MS` answers after MS ms; anything else answers
    /// `"<name>\n"`. Every answer carries `X-Backend: <name>` and `X-Seen-XFF` (the
    /// `X-Forwarded-For` it got) and `X-Seen-Forwarded`.
    pub fn start(name: &str) -> Self {
        let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std.set_nonblocking(true).unwrap();
        let addr = std.local_addr().unwrap();
        let connections = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, r, s, n) = (
            Arc::clone(&connections),
            Arc::clone(&requests),
            Arc::clone(&stop),
            name.to_string(),
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let listener = tokio::net::TcpListener::from_std(std).unwrap();
                loop {
                    if s.load(Ordering::SeqCst) {
                        return;
                    }
                    let accepted =
                        tokio::time::timeout(Duration::from_millis(50), listener.accept()).await;
                    let Ok(Ok((stream, _))) = accepted else {
                        continue;
                    };
                    c.fetch_add(1, Ordering::SeqCst);
                    let (r, n) = (Arc::clone(&r), n.clone());
                    tokio::task::spawn_local(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            r.fetch_add(1, Ordering::SeqCst);
                            answer(n.clone(), req)
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            });
        });
        Self {
            name: name.to_string(),
            addr,
            connections,
            requests,
            stop,
        }
    }

    pub fn upstream(&self) -> UpstreamSpec {
        UpstreamSpec {
            name: self.name.clone(),
            addr: self.addr,
            weight: 1,
        }
    }
}

async fn answer(
    name: String,
    req: http::Request<Incoming>,
) -> Result<http::Response<BoxBody>, Infallible> {
    let xff = req
        .headers()
        .get("x-forwarded-for")
        .map(|v| v.to_str().unwrap_or("?").to_string())
        .unwrap_or_default();
    let fwd = req
        .headers()
        .get("forwarded")
        .map(|v| v.to_str().unwrap_or("?").to_string())
        .unwrap_or_default();
    let path = req.uri().path().to_string();
    let body: BoxBody = if let Some(n) = path.strip_prefix("/bytes/") {
        let total: u64 = n.parse().unwrap_or(0);
        let stream = futures_stream(total);
        BodyExt::boxed_unsync(StreamBody::new(stream))
    } else if path == "/upload" {
        let mut body = req.into_body();
        let (mut len, mut h) = (0u64, Fnv::default());
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Some(d) = frame.data_ref() {
                len += d.len() as u64;
                h.update(d);
            }
        }
        full(format!("{len} {:016x}", h.0))
    } else if let Some(ms) = path.strip_prefix("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
        full(format!("{name}\n"))
    } else {
        full(format!("{name}\n"))
    };
    let resp = http::Response::builder()
        .header("x-backend", &name)
        .header("x-seen-xff", xff)
        .header("x-seen-forwarded", fwd)
        .body(body)
        .unwrap();
    Ok(resp)
}

fn full(s: String) -> BoxBody {
    BodyExt::boxed_unsync(Full::new(Bytes::from(s)))
}

/// A stream of `total` pattern bytes in 64 KiB frames.
fn futures_stream(
    total: u64,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, Infallible>> + Unpin {
    let mut sent = 0u64;
    futures_util::stream::poll_fn(move |_| {
        if sent >= total {
            return std::task::Poll::Ready(None);
        }
        let n = (total - sent).min(65_536) as usize;
        let data = chunk(sent, n);
        sent += n as u64;
        std::task::Poll::Ready(Some(Ok(Frame::data(Bytes::from(data)))))
    })
}

/// An address on loopback where nothing listens (connections are refused).
pub fn refused_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a
}

/// A proxy serving one listener on 127.0.0.1:0; returns it and the bound address.
pub fn proxy(spec: ListenerSpec) -> (Proxy, SocketAddr) {
    let name = spec.name.clone();
    let mut p = Proxy::new("test", None);
    p.apply(vec![spec]).unwrap();
    let addr = p.local_addr(&name).unwrap();
    (p, addr)
}

/// A listener spec on 127.0.0.1:0.
pub fn spec(name: &str, protocol: Protocol, upstreams: Vec<UpstreamSpec>) -> ListenerSpec {
    ListenerSpec::new(name, "127.0.0.1:0".parse().unwrap(), protocol, upstreams)
}

/// One kept-alive client connection (hyper), on a runtime of its own.
pub struct Client {
    pub rt: tokio::runtime::Runtime,
    sender: hyper::client::conn::http1::SendRequest<BoxBody>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sender = rt.block_on(async {
            let s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
                .await
                .unwrap();
            tokio::spawn(conn);
            sender
        });
        Self { rt, sender }
    }

    /// GET `path`, or `None` when the connection was closed (the server closed a kept-alive
    /// connection: a client opens a new one).
    pub fn try_get(&mut self, path: &str) -> Option<u16> {
        let req = http::Request::builder()
            .uri(path)
            .header("host", "test")
            .body(full(String::new()))
            .unwrap();
        let sender = &mut self.sender;
        self.rt.block_on(async move {
            sender.ready().await.ok()?;
            let resp = sender.send_request(req).await.ok()?;
            let status = resp.status().as_u16();
            resp.into_body().collect().await.ok()?;
            Some(status)
        })
    }

    /// GET `path`: (status, headers, body).
    pub fn get(&mut self, path: &str) -> (u16, http::HeaderMap, Vec<u8>) {
        self.request("GET", path, full(String::new()))
    }

    /// A request with a body: (status, headers, body).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: BoxBody,
    ) -> (u16, http::HeaderMap, Vec<u8>) {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "test")
            .body(body)
            .unwrap();
        let sender = &mut self.sender;
        self.rt.block_on(async move {
            sender.ready().await.unwrap();
            let resp = sender.send_request(req).await.unwrap();
            let (parts, body) = resp.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes().to_vec();
            (parts.status.as_u16(), parts.headers, bytes)
        })
    }
}

/// A body of `total` pattern bytes streamed in 64 KiB frames without a length (chunked).
pub fn chunked_body(total: u64) -> BoxBody {
    BodyExt::boxed_unsync(StreamBody::new(futures_stream(total)))
}

/// FNV of `total` pattern bytes.
pub fn pattern_fnv(total: u64) -> u64 {
    let mut h = Fnv::default();
    let mut off = 0;
    while off < total {
        let n = (total - off).min(65_536) as usize;
        h.update(&chunk(off, n));
        off += n as u64;
    }
    h.0
}

/// Sends raw bytes on a new connection and reads until the server closes (or 5 s).
pub fn raw(addr: SocketAddr, bytes: &[u8], pause: Duration) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    std::thread::sleep(pause);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// Reads an HTTP head (to the blank line) from `s`, a byte at a time so that nothing after it
/// is consumed; what came before an error or end of stream.
pub fn read_head(s: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    head
}
