//! The heads the proxy sends: a request head for the upstream and a response head for the
//! client, each written from the head as received with the proxy's edits — hop-by-hop lines
//! left out (RFC 9110 §7.6.1, and those `Connection` names), the target and `Host` of
//! [`rules::check`], the forwarding lines of [`rules::forwarding_into`], the framing the proxy
//! itself sends — never rebuilt from a map. Every other line goes out as it came, name case
//! and order kept (as nginx and HAProxy do).

use std::net::IpAddr;

use super::body::{self, BadResponse, Framing};
use super::head::{Line, RequestHead, ResponseHead};
use crate::rules::{self, Forwarding, Rejection, Verdict, Version};
use crate::spec::HttpSpec;

/// Whether `name` is hop-by-hop by itself: RFC 9110 §7.6.1's and the pre-standard ones
/// proxies strip (`connection`, `te`, `trailer`, `transfer-encoding`, `upgrade`,
/// `proxy-authorization`, `keep-alive`, `proxy-connection`) — by length first, so that most
/// names are told apart without a comparison.
fn hop_by_hop(name: &[u8]) -> bool {
    let is = |h: &str| name.eq_ignore_ascii_case(h.as_bytes());
    match name.len() {
        2 => is("te"),
        7 => is("trailer") || is("upgrade"),
        10 => is("connection") || is("keep-alive"),
        16 => is("proxy-connection"),
        17 => is("transfer-encoding"),
        19 => is("proxy-authorization"),
        _ => false,
    }
}

/// What a forwarded request head says about its exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPlan {
    /// How its body ends.
    pub framing: Framing,
    /// The client waits for `100 Continue` before it sends the body (`Expect: 100-continue`,
    /// answered by the proxy when it starts to read the body; the line is not forwarded).
    pub expect_continue: bool,
    /// The client's connection stays open after this exchange (HTTP/1.1 without
    /// `Connection: close`, HTTP/1.0 with `Connection: keep-alive`).
    pub keep_alive: bool,
    /// The method is `HEAD` (a response without a body, whatever its head says).
    pub head: bool,
    /// The client's version.
    pub version: Version,
}

/// The `Connection` options and names of a head.
struct Connection {
    /// Some `Connection` line names a header (not only `close` / `keep-alive`).
    names: bool,
    close: bool,
    keep_alive: bool,
}

impl Connection {
    fn of(buf: &[u8], lines: &[Line]) -> Self {
        let mut c = Self {
            names: false,
            close: false,
            keep_alive: false,
        };
        for l in lines.iter().filter(|l| l.is(buf, "connection")) {
            for token in l.value.of(buf).split(|&b| b == b',') {
                let token = token.trim_ascii();
                let close = token.eq_ignore_ascii_case(b"close");
                let keep_alive = token.eq_ignore_ascii_case(b"keep-alive");
                c.close |= close;
                c.keep_alive |= keep_alive;
                c.names |= !(close || keep_alive || token.is_empty());
            }
        }
        c
    }

    /// Whether `name` is hop-by-hop: in the list, or named by a `Connection` line.
    fn hop(&self, buf: &[u8], lines: &[Line], name: &[u8]) -> bool {
        hop_by_hop(name)
            || (self.names
                && lines.iter().filter(|l| l.is(buf, "connection")).any(|l| {
                    l.value
                        .of(buf)
                        .split(|&b| b == b',')
                        .any(|t| t.trim_ascii().eq_ignore_ascii_case(name))
                }))
    }
}

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Checks a request head ([`rules::check`]) and writes what goes upstream into `out`: the
/// request line (origin form, HTTP/1.1), its lines with the edits, the proxy's forwarding
/// lines for `client` (believed from it when `trusted`), `Transfer-Encoding: chunked` for a
/// chunked body (it is re-framed, [`body::Chunked`]). `scratch` is the connection's, reused.
pub fn request(
    buf: &[u8],
    head: &RequestHead,
    client: IpAddr,
    trusted: bool,
    http: &HttpSpec,
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<RequestPlan, Rejection> {
    let lines = &head.lines;
    let method = head.method.str(buf);
    let target = head.target.str(buf);
    let edits = match rules::check(
        method,
        target,
        head.version,
        lines.iter().map(|l| (l.name.str(buf), l.value.of(buf))),
    ) {
        Verdict::Reject(r) => return Err(r),
        Verdict::Forward(e) => e,
    };
    let conn = Connection::of(buf, lines);
    // the forwarding lines' rewrites, their values side by side in `scratch`
    scratch.clear();
    let mut rewrite = [None; 2];
    let mut ends = [0; 2];
    for (i, (which, mode, name)) in [
        (
            Forwarding::XForwardedFor,
            http.forwarded_for,
            "x-forwarded-for",
        ),
        (Forwarding::Forwarded, http.forwarded, "forwarded"),
    ]
    .into_iter()
    .enumerate()
    {
        let sent = lines
            .iter()
            .filter(|l| l.is(buf, name))
            .map(|l| l.value.of(buf));
        rewrite[i] = rules::forwarding_into(which, mode, trusted, client, sent, scratch);
        ends[i] = scratch.len();
    }
    let framing = body::request(buf, head);
    let mut expect_continue = false;

    out.clear();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(edits.target.as_deref().unwrap_or(target).as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = edits.host {
        line(out, b"host", host.as_bytes());
    }
    for l in lines {
        let name = l.name.of(buf);
        if l.is(buf, "expect") {
            expect_continue |= l.value.of(buf).eq_ignore_ascii_case(b"100-continue");
            continue;
        }
        let skip = conn.hop(buf, lines, name)
            || (edits.host.is_some() && l.is(buf, "host"))
            || (rewrite[0].is_some() && l.is(buf, "x-forwarded-for"))
            || (rewrite[1].is_some() && l.is(buf, "forwarded"));
        if !skip {
            line(out, name, l.value.of(buf));
        }
    }
    if rewrite[0] == Some(true) {
        line(out, b"x-forwarded-for", &scratch[..ends[0]]);
    }
    if rewrite[1] == Some(true) {
        line(out, b"forwarded", &scratch[ends[0]..ends[1]]);
    }
    if framing == Framing::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(RequestPlan {
        framing,
        expect_continue: expect_continue && framing != Framing::None,
        keep_alive: match head.version {
            Version::Http11 => !conn.close,
            Version::Http10 => conn.keep_alive && !conn.close,
        },
        head: method == "HEAD",
        version: head.version,
    })
}

/// What a forwarded response head says about its exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePlan {
    /// How the upstream's body ends.
    pub upstream: Framing,
    /// How the body is sent to the client: as it came (`None`, `Length`), `Chunked` (a chunked
    /// body re-framed, or a body delimited by the upstream's close sent chunked to an
    /// HTTP/1.1 client), or `Close` (to an HTTP/1.0 client).
    pub client: Framing,
    /// The upstream connection can carry another request after this body.
    pub upstream_keep_alive: bool,
    /// The client connection stays open after this body.
    pub keep_alive: bool,
}

/// Writes the response head for the client into `out`: the status line (HTTP/1.1, the
/// upstream's status and reason), its lines but the hop-by-hop ones (and `Content-Length`
/// when a transfer coding overrides it), the proxy's framing and `Connection` lines, and
/// `X-Served-By` when given. Not for `1xx` heads but `101` (the driver skips interim ones).
pub fn response(
    buf: &[u8],
    head: &ResponseHead,
    req: &RequestPlan,
    served_by: Option<&[u8]>,
    out: &mut Vec<u8>,
) -> Result<ResponsePlan, BadResponse> {
    if head.status == 101 {
        return Err(BadResponse::Upgrade);
    }
    let lines = &head.lines;
    let upstream = body::response(buf, head, req.head)?;
    let conn = Connection::of(buf, lines);
    let coded = lines.iter().any(|l| l.is(buf, "transfer-encoding"));
    let client = match (upstream, req.version) {
        (Framing::Chunked | Framing::Close, Version::Http11) => Framing::Chunked,
        (Framing::Chunked | Framing::Close, Version::Http10) => Framing::Close,
        (f, _) => f,
    };
    let keep_alive = req.keep_alive && client != Framing::Close;
    let upstream_keep_alive = upstream != Framing::Close
        && match head.version {
            Version::Http11 => !conn.close,
            Version::Http10 => conn.keep_alive && !conn.close,
        };

    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, head.status);
    out.push(b' ');
    out.extend_from_slice(head.reason.of(buf));
    out.extend_from_slice(b"\r\n");
    for l in lines {
        let name = l.name.of(buf);
        let skip = conn.hop(buf, lines, name) || (coded && l.is(buf, "content-length"));
        if !skip {
            line(out, name, l.value.of(buf));
        }
    }
    if client == Framing::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if req.version == Version::Http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    if let Some(v) = served_by {
        line(out, b"x-served-by", v);
    }
    out.extend_from_slice(b"\r\n");
    Ok(ResponsePlan {
        upstream,
        client,
        upstream_keep_alive,
        keep_alive,
    })
}

fn push_status(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(&[
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ]);
}

/// What the proxy sends a client that asked for `100 Continue`, before it reads the body.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Writes an answer of the proxy's own into `out`, head and body: `text/plain`, its length,
/// `Retry-After: 1` with a `503`, `Connection: close` when the connection closes after it.
pub fn local(out: &mut Vec<u8>, status: u16, text: &str, close: bool, served_by: Option<&[u8]>) {
    use std::io::Write as _;
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, status);
    out.push(b' ');
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: text/plain; charset=utf-8\r\n");
    // writing to a Vec cannot fail
    let _ = write!(out, "content-length: {}\r\n", text.len());
    if status == 503 {
        out.extend_from_slice(b"retry-after: 1\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    if let Some(v) = served_by {
        line(out, b"x-served-by", v);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::super::head::Parse;
    use super::*;
    use crate::spec::ForwardedMode;

    const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

    fn spec() -> HttpSpec {
        HttpSpec::default()
    }

    fn forward(raw: &str, trusted: bool, http: &HttpSpec) -> Result<(String, RequestPlan), u16> {
        let mut h = RequestHead::default();
        let buf = raw.as_bytes();
        assert!(
            matches!(h.parse(buf, 8192), Ok(Parse::Complete(_))),
            "{raw}"
        );
        let (mut scratch, mut out) = (Vec::new(), Vec::new());
        request(buf, &h, CLIENT, trusted, http, &mut scratch, &mut out)
            .map(|p| (String::from_utf8(out).unwrap(), p))
            .map_err(|r| r.status)
    }

    #[test]
    fn a_plain_request_goes_out_as_it_came_with_the_clients_address() {
        let (out, plan) = forward(
            "GET /p?q HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\nX-Custom: Ab C\r\n\r\n",
            false,
            &spec(),
        )
        .unwrap();
        assert_eq!(
            out,
            "GET /p?q HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\nX-Custom: Ab C\r\n\
             x-forwarded-for: 192.0.2.7\r\n\r\n"
        );
        assert_eq!(
            plan,
            RequestPlan {
                framing: Framing::None,
                expect_continue: false,
                keep_alive: true,
                head: false,
                version: Version::Http11,
            }
        );
    }

    #[test]
    fn hop_by_hop_lines_and_those_connection_names_are_left_out() {
        let (out, plan) = forward(
            "POST / HTTP/1.1\r\nHost: a\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n\
             Keep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nProxy-Authorization: b\r\n\
             Transfer-Encoding: chunked\r\nExpect: 100-continue\r\nX-Kept: 2\r\n\r\n",
            false,
            &spec(),
        )
        .unwrap();
        assert_eq!(
            out,
            "POST / HTTP/1.1\r\nHost: a\r\nX-Kept: 2\r\nx-forwarded-for: 192.0.2.7\r\n\
             transfer-encoding: chunked\r\n\r\n"
        );
        assert_eq!(plan.framing, Framing::Chunked);
        assert!(plan.expect_continue);
        assert!(!plan.keep_alive, "the client said close");
    }

    #[test]
    fn an_absolute_target_goes_in_origin_form_with_its_authority_as_host() {
        let (out, _) = forward(
            "GET http://b.example:81/x HTTP/1.1\r\nHost: a\r\n\r\n",
            false,
            &spec(),
        )
        .unwrap();
        assert!(
            out.starts_with("GET /x HTTP/1.1\r\nhost: b.example:81\r\nx-forwarded-for"),
            "{out}"
        );
        assert!(!out.contains("Host: a\r\n"));
    }

    #[test]
    fn forwarding_lines_are_believed_only_from_a_trusted_client() {
        let mut http = spec();
        http.forwarded = ForwardedMode::Replace;
        let raw = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\n\
                   Forwarded: for=6.6.6.6\r\n\r\n";
        let (out, _) = forward(raw, false, &http).unwrap();
        assert!(!out.contains("6.6.6.6"), "{out}");
        assert!(out.contains("x-forwarded-for: 192.0.2.7\r\n"));
        assert!(out.contains("forwarded: for=192.0.2.7;proto=http\r\n"));
        let (out, _) = forward(raw, true, &http).unwrap();
        assert!(
            out.contains("x-forwarded-for: 6.6.6.6, 192.0.2.7\r\n"),
            "{out}"
        );
        assert!(
            out.contains("forwarded: for=192.0.2.7;proto=http\r\n"),
            "replace"
        );
    }

    #[test]
    fn refused_heads_are_the_rules_answers() {
        assert_eq!(
            forward("CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n", false, &spec()),
            Err(405)
        );
        assert_eq!(forward("GET / HTTP/1.1\r\n\r\n", false, &spec()), Err(400));
        let both =
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(forward(both, false, &spec()), Err(400));
    }

    #[test]
    fn http10_keeps_alive_only_when_asked() {
        let (_, p) = forward("GET / HTTP/1.0\r\n\r\n", false, &spec()).unwrap();
        assert!(!p.keep_alive);
        let (out, p) = forward(
            "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            false,
            &spec(),
        )
        .unwrap();
        assert!(p.keep_alive);
        assert!(
            out.starts_with("GET / HTTP/1.1\r\n") && !out.contains("onnection"),
            "{out}"
        );
    }

    fn answer(raw: &str, req: &RequestPlan) -> Result<(String, ResponsePlan), BadResponse> {
        let mut h = ResponseHead::default();
        let buf = raw.as_bytes();
        assert!(
            matches!(h.parse(buf, 8192), Ok(Parse::Complete(_))),
            "{raw}"
        );
        let mut out = Vec::new();
        response(buf, &h, req, Some(b"n/l/0"), &mut out)
            .map(|p| (String::from_utf8(out).unwrap(), p))
    }

    const GET11: RequestPlan = RequestPlan {
        framing: Framing::None,
        expect_continue: false,
        keep_alive: true,
        head: false,
        version: Version::Http11,
    };

    #[test]
    fn responses_are_forwarded_with_the_proxys_framing() {
        let (out, p) = answer(
            "HTTP/1.1 200 Fine\r\nContent-Length: 3\r\nConnection: X-H\r\nX-H: 1\r\nServer: b\r\n\r\n",
            &GET11,
        )
        .unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 200 Fine\r\nContent-Length: 3\r\nServer: b\r\nx-served-by: n/l/0\r\n\r\n"
        );
        assert_eq!(
            p,
            ResponsePlan {
                upstream: Framing::Length(3),
                client: Framing::Length(3),
                upstream_keep_alive: true,
                keep_alive: true,
            }
        );
        // a chunked response with a length: the length is not sent (smuggling material)
        let (out, p) = answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            &GET11,
        )
        .unwrap();
        assert!(!out.contains("Content-Length"), "{out}");
        assert!(out.contains("transfer-encoding: chunked\r\n"));
        assert_eq!((p.upstream, p.client), (Framing::Chunked, Framing::Chunked));
        // until the upstream closes: chunked to the client, which keeps its connection
        let (_, p) = answer("HTTP/1.0 200 OK\r\n\r\n", &GET11).unwrap();
        assert_eq!((p.upstream, p.client), (Framing::Close, Framing::Chunked));
        assert!(p.keep_alive && !p.upstream_keep_alive);
        // to an HTTP/1.0 client: until the close
        let get10 = RequestPlan {
            version: Version::Http10,
            ..GET11
        };
        let (out, p) = answer(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            &get10,
        )
        .unwrap();
        assert_eq!(p.client, Framing::Close);
        assert!(
            !p.keep_alive && out.contains("connection: close\r\n"),
            "{out}"
        );
        assert_eq!(
            answer("HTTP/1.1 101 Switching\r\nUpgrade: h2c\r\n\r\n", &GET11),
            Err(BadResponse::Upgrade)
        );
    }

    #[test]
    fn local_answers() {
        let mut out = Vec::new();
        local(&mut out, 503, "no usable upstream\n", false, None);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
             content-length: 19\r\nretry-after: 1\r\n\r\nno usable upstream\n"
        );
        local(&mut out, 400, "x\n", true, Some(b"n"));
        assert!(
            String::from_utf8(out)
                .unwrap()
                .contains("connection: close\r\nx-served-by: n\r\n\r\nx\n")
        );
    }
}
