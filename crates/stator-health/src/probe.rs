//! One probe of each method, bounded by the check's timeout.
//!
//! - **TCP**: the connection is established (then closed).
//! - **HTTP**: an HTTP/1.1 `GET` (with `Host`, `Connection: close`) is answered with a status
//!   line whose status is in the expected range. Only the status line is read.
//! - **HTTPS**: the same over TLS (the runner's [`Tls`](super::tls::Tls)): the handshake — certificate and name
//!   verified unless `verify = false` — then the same request and status check.
//! - **UDP**: one datagram is sent from a connected socket and a reply arrives (starting
//!   with the expected bytes, if set). An ICMP port unreachable fails the probe at once.
//!
//! Every failure carries a short reason for logs and the API (`connection refused`,
//! `timed out after 1s`, `status 503`, `unexpected reply`,
//! `TLS handshake failed: invalid peer certificate: UnknownIssuer`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use stator_config::{HttpProbe, Probe, UdpProbe};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::tls::TlsClient;

/// Longest status line (and headers before it) read from an HTTP check.
const MAX_HTTP_HEAD: usize = 4096;

/// Runs one probe of `probe` against `address:port`, failing after `timeout`. An HTTPS
/// probe uses `tls` (the check's client, built when it started); without one it fails.
pub async fn run(
    address: IpAddr,
    port: u16,
    probe: &Probe,
    tls: Option<&dyn TlsClient>,
    timeout: Duration,
) -> Result<(), String> {
    let target = SocketAddr::new(address, port);
    run_via(target, target, probe, tls, timeout).await
}

/// Runs one probe of `probe` for the backend `target`, connecting to `connect` (the target
/// itself unless a [`ProbeRoutes`](super::ProbeRoutes) maps it elsewhere), failing after
/// `timeout`. The request still names the target (an HTTP check's `Host`, an HTTPS check's
/// certificate name).
pub async fn run_via(
    target: SocketAddr,
    connect: SocketAddr,
    probe: &Probe,
    tls: Option<&dyn TlsClient>,
    timeout: Duration,
) -> Result<(), String> {
    let attempt = async {
        match probe {
            Probe::Tcp => tcp(connect).await,
            Probe::Http(h) => http(target, connect, h).await,
            Probe::Https(h) => match tls {
                Some(tls) => https(target, connect, &h.http, tls).await,
                None => Err("no TLS client for an HTTPS check".into()),
            },
            Probe::Udp(u) => udp(connect, u).await,
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(format!("timed out after {}", fmt_duration(timeout))),
    }
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "connection reset".into(),
        _ => e.to_string(),
    }
}

async fn tcp(target: SocketAddr) -> Result<(), String> {
    TcpStream::connect(target)
        .await
        .map(drop)
        .map_err(|e| io_reason(&e))
}

/// The request of an HTTP check (`default_port`: 80 for HTTP, 443 for HTTPS, left out of
/// the `Host` header).
pub fn http_request(target: SocketAddr, h: &HttpProbe, default_port: u16) -> String {
    let host = h
        .host
        .clone()
        .unwrap_or_else(|| match (target.ip(), target.port()) {
            (IpAddr::V4(a), p) if p == default_port => a.to_string(),
            (IpAddr::V6(a), p) if p == default_port => format!("[{a}]"),
            (IpAddr::V4(a), p) => format!("{a}:{p}"),
            (IpAddr::V6(a), p) => format!("[{a}]:{p}"),
        });
    format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: stator-health/{}\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n",
        h.path,
        env!("CARGO_PKG_VERSION")
    )
}

/// The status of an HTTP/1.x status line (`HTTP/1.1 200 OK`).
pub fn parse_status_line(line: &[u8]) -> Option<u16> {
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split(' ');
    let version = words.next()?;
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return None;
    }
    let status = words.next()?;
    if status.len() != 3 || !status.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    status.parse().ok()
}

async fn http(target: SocketAddr, connect: SocketAddr, h: &HttpProbe) -> Result<(), String> {
    let stream = TcpStream::connect(connect)
        .await
        .map_err(|e| io_reason(&e))?;
    exchange(stream, &http_request(target, h, 80), h).await
}

async fn https(
    target: SocketAddr,
    connect: SocketAddr,
    h: &HttpProbe,
    tls: &dyn TlsClient,
) -> Result<(), String> {
    let stream = TcpStream::connect(connect)
        .await
        .map_err(|e| io_reason(&e))?;
    let stream = tls.connect(stream, target.ip()).await?;
    exchange(stream, &http_request(target, h, 443), h).await
}

/// Sends `request` and checks the status line of the answer.
async fn exchange(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    request: &str,
    h: &HttpProbe,
) -> Result<(), String> {
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| io_reason(&e))?;
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    let line = loop {
        if let Some(end) = head.windows(2).position(|w| w == b"\r\n") {
            break &head[..end];
        }
        if head.len() > MAX_HTTP_HEAD {
            return Err("no status line in the first 4 KiB".into());
        }
        let n = stream.read(&mut buf).await.map_err(|e| io_reason(&e))?;
        if n == 0 {
            return Err("connection closed before a status line".into());
        }
        head.extend_from_slice(&buf[..n]);
    };
    let status = parse_status_line(line).ok_or_else(|| {
        let shown: String = String::from_utf8_lossy(line).chars().take(40).collect();
        format!("not an HTTP status line: {shown:?}")
    })?;
    if h.expect_status.contains(status) {
        Ok(())
    } else {
        Err(format!(
            "status {status}, expected {}-{}",
            h.expect_status.first, h.expect_status.last
        ))
    }
}

async fn udp(target: SocketAddr, u: &UdpProbe) -> Result<(), String> {
    let local: SocketAddr = match target {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await.map_err(|e| io_reason(&e))?;
    socket.connect(target).await.map_err(|e| io_reason(&e))?;
    socket.send(&u.payload).await.map_err(|e| io_reason(&e))?;
    let mut buf = vec![0u8; 2048];
    let n = socket.recv(&mut buf).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "port unreachable".to_owned(),
        _ => io_reason(&e),
    })?;
    match &u.expect {
        Some(expect) if !buf[..n].starts_with(expect) => Err(format!(
            "unexpected reply ({n} bytes, not starting with the {} expected)",
            expect.len()
        )),
        _ => Ok(()),
    }
}

/// The discard port, where neighbour nudges go.
pub const DISCARD_PORT: u16 = 9;

/// Sends one datagram to `to` (a backend's discard port), so that the kernel resolves the
/// neighbour (or gateway) towards it. The result does not matter; errors are returned for
/// logging only.
pub async fn nudge(to: SocketAddr) -> std::io::Result<()> {
    let local: SocketAddr = match to {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await?;
    socket
        .send_to(b"stator neighbour nudge", to)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stator_config::StatusRange;

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK"), Some(200));
        assert_eq!(
            parse_status_line(b"HTTP/1.0 503 Service Unavailable"),
            Some(503)
        );
        assert_eq!(parse_status_line(b"HTTP/1.1 204"), Some(204));
        assert_eq!(parse_status_line(b"HTTP/2 200"), None);
        assert_eq!(parse_status_line(b"HTTP/1.1 20 OK"), None);
        assert_eq!(parse_status_line(b"HTTP/1.1 2x0 OK"), None);
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH"), None);
        assert_eq!(parse_status_line(&[0xff, 0xfe]), None);
    }

    #[test]
    fn requests_name_the_host() {
        let h = HttpProbe {
            path: "/healthz".into(),
            expect_status: StatusRange {
                first: 200,
                last: 399,
            },
            host: None,
        };
        let r = http_request("10.0.0.1:8080".parse().unwrap(), &h, 80);
        assert!(
            r.starts_with("GET /healthz HTTP/1.1\r\nHost: 10.0.0.1:8080\r\n"),
            "{r}"
        );
        assert!(r.ends_with("Connection: close\r\n\r\n"));
        let r = http_request("[2001:db8::1]:80".parse().unwrap(), &h, 80);
        assert!(r.contains("Host: [2001:db8::1]\r\n"), "{r}");
        let r = http_request("[2001:db8::1]:443".parse().unwrap(), &h, 443);
        assert!(r.contains("Host: [2001:db8::1]\r\n"), "{r}");
        let named = HttpProbe {
            host: Some("www.example.com".into()),
            ..h
        };
        let r = http_request("10.0.0.1:80".parse().unwrap(), &named, 80);
        assert!(r.contains("Host: www.example.com\r\n"), "{r}");
    }
}
