//! A small blocking client of the admin API, for the CLI (`stator status`, `apply`, …) and
//! tests: HTTP/1.1 over one connection per request (`Connection: close`) to the Unix socket
//! or the TCP endpoint (with a bearer token), timeouts, JSON errors turned into
//! [`ControlError::Api`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use stator_control::ControlError;

/// Largest response accepted (a `/metrics` of a large node fits).
const MAX_RESPONSE: usize = 64 << 20;

/// An answer of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// Body (de-chunked).
    pub body: Vec<u8>,
}

impl Response {
    /// A header's value (name in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<Value, ControlError> {
        serde_json::from_slice(&self.body).map_err(|e| ControlError::Protocol {
            reason: format!("status {} with a body that is not JSON: {e}", self.status),
        })
    }

    /// `Ok(self)` for a 2xx answer, else its error.
    pub fn ok(self) -> Result<Self, ControlError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let (message, field) = match serde_json::from_slice::<Value>(&self.body) {
            Ok(v) => (
                v["error"]
                    .as_str()
                    .map_or_else(|| self.text(), str::to_owned),
                v["field"].as_str().map(str::to_owned),
            ),
            Err(_) => (self.text(), None),
        };
        Err(ControlError::Api {
            status: self.status,
            message,
            field,
        })
    }
}

/// Where the API is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The TCP endpoint (`Host` sent as given).
    Tcp {
        /// The address connected to.
        addr: SocketAddr,
        /// As given (the `Host` header).
        host: String,
    },
    /// The Unix socket.
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp { addr, .. } => write!(f, "{addr}"),
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The client.
#[derive(Debug, Clone)]
pub struct ApiClient {
    endpoint: Endpoint,
    token: Option<String>,
    timeout: Duration,
}

/// A connection to either endpoint.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

impl ApiClient {
    /// A client of the API's Unix socket at `path` (no token: the socket checks who calls).
    pub fn unix(path: impl Into<PathBuf>) -> Self {
        Self {
            endpoint: Endpoint::Unix(path.into()),
            token: None,
            timeout: Duration::from_secs(30),
        }
    }

    /// A client of the API's TCP endpoint at `addr` (`127.0.0.1:9180`, `http://[::1]:9180`,
    /// `localhost:9180`), with a bearer token.
    pub fn new(addr: &str, token: Option<String>) -> Result<Self, ControlError> {
        let host = addr
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let resolved = host
            .to_socket_addrs()
            .map_err(|e| ControlError::io(format!("resolving the API address {host:?}"), e))?
            .next()
            .ok_or_else(|| {
                ControlError::bad_request(format!("no address for {host:?}"), Some("api"))
            })?;
        Ok(Self {
            endpoint: Endpoint::Tcp {
                addr: resolved,
                host,
            },
            token,
            timeout: Duration::from_secs(30),
        })
    }

    /// The same endpoint with another bearer token (or none).
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// Sets the time allowed for connecting, sending and each read.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Where the API is.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The TCP endpoint's address (`None` for the Unix socket).
    pub fn addr(&self) -> Option<SocketAddr> {
        match &self.endpoint {
            Endpoint::Tcp { addr, .. } => Some(*addr),
            Endpoint::Unix(_) => None,
        }
    }

    /// The Unix socket's path (`None` for the TCP endpoint).
    pub fn socket(&self) -> Option<&Path> {
        match &self.endpoint {
            Endpoint::Tcp { .. } => None,
            Endpoint::Unix(p) => Some(p),
        }
    }

    /// Sends one request and reads the whole answer (any status).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, ControlError> {
        let io = |what: &str, e| {
            ControlError::io(
                format!("{what} {} (is `stator run` running?)", self.endpoint),
                e,
            )
        };
        let (mut stream, host): (Box<dyn Stream>, &str) = match &self.endpoint {
            Endpoint::Tcp { addr, host } => {
                let s = TcpStream::connect_timeout(addr, self.timeout)
                    .map_err(|e| io("connecting to", e))?;
                s.set_read_timeout(Some(self.timeout))
                    .and_then(|()| s.set_write_timeout(Some(self.timeout)))
                    .map_err(|e| io("configuring the connection to", e))?;
                (Box::new(s), host)
            }
            Endpoint::Unix(path) => {
                let s = UnixStream::connect(path).map_err(|e| io("connecting to", e))?;
                s.set_read_timeout(Some(self.timeout))
                    .and_then(|()| s.set_write_timeout(Some(self.timeout)))
                    .map_err(|e| io("configuring the connection to", e))?;
                (Box::new(s), "localhost")
            }
        };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: stator-cli/{}\r\nAccept: */*\r\n\
             Connection: close\r\nContent-Length: {}\r\n",
            env!("CARGO_PKG_VERSION"),
            body.len()
        );
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body))
            .map_err(|e| io("sending to", e))?;
        let mut raw = Vec::new();
        Read::by_ref(&mut stream)
            .take(MAX_RESPONSE as u64 + 1)
            .read_to_end(&mut raw)
            .map_err(|e| io("reading from", e))?;
        parse_response(&raw)
    }

    /// `GET path`, expecting 2xx JSON.
    pub fn get_json(&self, path: &str) -> Result<Value, ControlError> {
        self.request("GET", path, &[], &[])?.ok()?.json()
    }

    /// `POST path` with a JSON body (or none), expecting 2xx JSON.
    pub fn post_json(&self, path: &str, body: Option<&Value>) -> Result<Value, ControlError> {
        let bytes = body.map(Value::to_string).unwrap_or_default();
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            bytes.as_bytes(),
        )?
        .ok()?
        .json()
    }

    /// `PUT /v1/config` with TOML text, optionally `If-Match`.
    pub fn put_config(&self, toml: &str, if_match: Option<u64>) -> Result<Value, ControlError> {
        let tag = if_match.map(|g| format!("\"{g}\""));
        let mut headers = vec![("Content-Type", "application/toml")];
        if let Some(t) = &tag {
            headers.push(("If-Match", t));
        }
        self.request("PUT", "/v1/config", &headers, toml.as_bytes())?
            .ok()?
            .json()
    }
}

fn protocol(reason: &str) -> ControlError {
    ControlError::Protocol {
        reason: reason.to_owned(),
    }
}

/// Parses a complete HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> Result<Response, ControlError> {
    if raw.len() > MAX_RESPONSE {
        return Err(protocol("response larger than 64 MiB"));
    }
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| protocol("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| protocol("headers are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else {
        match headers.iter().find(|(k, _)| k == "content-length") {
            Some((_, n)) => {
                let n: usize = n.parse().map_err(|_| protocol("bad Content-Length"))?;
                rest.get(..n)
                    .ok_or_else(|| protocol("body shorter than Content-Length"))?
                    .to_vec()
            }
            None => rest.to_vec(),
        }
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, ControlError> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| protocol("truncated chunk size"))?;
        let size_text =
            std::str::from_utf8(&data[..line_end]).map_err(|_| protocol("bad chunk size"))?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| protocol("bad chunk size"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = data
            .get(..size)
            .ok_or_else(|| protocol("truncated chunk"))?;
        out.extend_from_slice(chunk);
        data = data
            .get(size + 2..)
            .ok_or_else(|| protocol("truncated chunk"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_answers() {
        let r = parse_response(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 13\r\n\r\n{\"error\":\"x\"}").unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.header("content-type"), Some("application/json"));
        let e = r.ok().unwrap_err();
        assert!(
            matches!(e, ControlError::Api { status: 404, ref message, .. } if message == "x"),
            "{e}"
        );
        let r = parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").unwrap();
        assert_eq!(r.body, b"hello world");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"garbage\r\n\r\n").is_err());
    }
}
