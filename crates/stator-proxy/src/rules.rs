//! What a request head must be before the proxy forwards it, and what is changed on the way:
//! pure functions over a head as any HTTP/1.1 engine parses it — the method, the target, the
//! version and the header lines in order, as text — with no I/O, no clock and no type of
//! hyper's, so that an engine of our own reuses them unchanged.
//!
//! The engine has already applied RFC 9112's grammar (tokens, field values without CR, LF or
//! NUL, no obs-fold, a valid request line); these rules are what a head can get right by the
//! grammar and still get wrong, each answered the way docs/proxy.md's table says:
//!
//! | rule | answer |
//! |---|---|
//! | `CONNECT` (the proxy offers no tunnels) | 405 |
//! | `Transfer-Encoding` other than exactly one coding, `chunked` (RFC 9112 §6.1: `gzip, chunked` would lose its `gzip`, two lines or unknown codings are smuggling material) | 501 |
//! | `Transfer-Encoding` in an HTTP/1.0 request (§6.1) | 400 |
//! | `Content-Length` not one decimal number, or lines that disagree (§6.3) | 400 |
//! | `Transfer-Encoding` and `Content-Length` together (§6.3: "ought to be handled as an error") | 400 |
//! | more than one `Host` line, or a `Host` that is not `host[:port]` (§3.2) | 400 |
//! | no `Host` in HTTP/1.1 (§3.2) | 400 |
//! | a target in absolute form (`http://a.example/p`): sent in origin form (`/p`), `Host` set to its authority, whatever `Host` said (§3.2.2) | forward |
//! | a target in absolute form of another scheme, with userinfo (`http://u@a/`) or an empty host | 400 |
//! | a target in authority form (`a.example:22`, without `CONNECT`), or `*` with another method than `OPTIONS` (§3.2.3–4) | 400 |
//!
//! hyper, the engine today, answers some of these before the rules see the head (it refuses
//! `Transfer-Encoding` in HTTP/1.0, a bad or conflicting `Content-Length`, and a last coding
//! other than `chunked`; of `Transfer-Encoding` with `Content-Length` it keeps the first and
//! closes the connection after the response); the rules check them all the same.
//!
//! [`forwarding`] decides what becomes of the `X-Forwarded-For` and `Forwarded` lines a client
//! sent: every line, never only the first, is kept (merged into one) only when the client is
//! a trusted proxy; an untrusted client's lines never reach the backend.

use std::borrow::Cow;
use std::net::IpAddr;

use crate::spec::ForwardedMode;

/// The version on the request line (HTTP/0.9 has no head: the engine refuses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1.
    #[default]
    Http11,
}

/// What to do with a request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Forward it, with these edits.
    Forward(Edits<'a>),
    /// Answer with this and close the connection; nothing is forwarded.
    Reject(Rejection),
}

/// The edits of a forwarded head (none for nearly every request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edits<'a> {
    /// The target to send instead of the one received: an absolute-form target's path and
    /// query, in origin form.
    pub target: Option<Cow<'a, str>>,
    /// The `Host` to send instead of the lines received: an absolute-form target's authority.
    pub host: Option<&'a str>,
}

/// A request that is not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    /// The status answered: 400, 405 or 501.
    pub status: u16,
    /// Why, one line (the body of the answer).
    pub reason: &'static str,
}

impl Rejection {
    /// A well-formed request the proxy does not offer (`CONNECT`, a transfer coding), rather
    /// than a malformed one.
    pub fn is_unsupported(&self) -> bool {
        matches!(self.status, 405 | 501)
    }
}

const fn reject(status: u16, reason: &'static str) -> Verdict<'static> {
    Verdict::Reject(Rejection { status, reason })
}

/// Checks a request head: `method` and `target` as on the request line, `lines` the header
/// lines in the order received (a name in any case, a value as bytes).
pub fn check<'a, I>(method: &str, target: &'a str, version: Version, lines: I) -> Verdict<'a>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    if method == "CONNECT" {
        return reject(405, "CONNECT is not offered: this proxy opens no tunnels\n");
    }
    let mut hosts = 0u32;
    let mut host_ok = true;
    let mut te = false;
    let mut te_codings = 0u32;
    let mut te_chunked_only = true;
    let mut cl: Option<u64> = None;
    let mut cl_ok = true;
    for (name, value) in lines {
        match name.len() {
            4 if name.eq_ignore_ascii_case("host") => {
                hosts += 1;
                host_ok &= valid_authority(value, true);
            }
            14 if name.eq_ignore_ascii_case("content-length") => match (decimal(value), cl) {
                (Some(n), None) => cl = Some(n),
                (Some(n), Some(first)) if n == first => {}
                _ => cl_ok = false,
            },
            17 if name.eq_ignore_ascii_case("transfer-encoding") => {
                te = true;
                for coding in value.split(|&b| b == b',') {
                    let coding = trim_ows(coding);
                    if coding.is_empty() {
                        continue; // an empty list element (RFC 9110 §5.6.1)
                    }
                    te_codings += 1;
                    te_chunked_only &= coding.eq_ignore_ascii_case(b"chunked");
                }
            }
            _ => {}
        }
    }
    if te && version == Version::Http10 {
        return reject(400, "Transfer-Encoding in an HTTP/1.0 request\n");
    }
    if te && !(te_codings == 1 && te_chunked_only) {
        return reject(
            501,
            "Transfer-Encoding other than \"chunked\" alone is not supported\n",
        );
    }
    if !cl_ok {
        return reject(400, "a Content-Length that is not one decimal number\n");
    }
    if te && cl.is_some() {
        return reject(400, "both Transfer-Encoding and Content-Length\n");
    }
    if hosts > 1 {
        return reject(400, "more than one Host line\n");
    }
    if !host_ok {
        return reject(400, "a Host that is not host[:port]\n");
    }
    if hosts == 0 && version == Version::Http11 {
        return reject(400, "an HTTP/1.1 request without Host\n");
    }
    self::target(method, target)
}

/// The target's form and the edits it needs.
fn target<'a>(method: &str, target: &'a str) -> Verdict<'a> {
    if target.starts_with('/') {
        return Verdict::Forward(Edits::default());
    }
    if target == "*" {
        return if method == "OPTIONS" {
            Verdict::Forward(Edits::default())
        } else {
            reject(400, "the target * belongs to OPTIONS only\n")
        };
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return reject(
            400,
            "a target must be a path or an absolute http URI (authority form is CONNECT's)\n",
        );
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return reject(400, "a target of another scheme than http\n");
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return reject(400, "userinfo in the target\n");
    }
    if !valid_authority(authority.as_bytes(), false) {
        return reject(400, "a target whose authority is not host[:port]\n");
    }
    let path = path.split('#').next().unwrap_or_default();
    let origin = match path.as_bytes().first() {
        None => Cow::Borrowed("/"),
        Some(b'?') => Cow::Owned(format!("/{path}")),
        Some(_) => Cow::Borrowed(path),
    };
    Verdict::Forward(Edits {
        target: Some(origin),
        host: Some(authority),
    })
}

/// `host[:port]` (RFC 9110 §7.2, RFC 3986 §3.2): a bracketed IP literal or a reg-name / IPv4
/// address, then an optional port of digits. An empty host is allowed in `Host` (a target
/// without authority), not in an http URI.
fn valid_authority(a: &[u8], empty_host_ok: bool) -> bool {
    let (host, port) = if a.first() == Some(&b'[') {
        let Some(close) = a.iter().position(|&b| b == b']') else {
            return false;
        };
        let inside = &a[1..close];
        let literal = !inside.is_empty()
            && inside
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.' | b'v' | b'V'));
        if !literal {
            return false;
        }
        return match &a[close + 1..] {
            [] => true,
            [b':', port @ ..] => port.iter().all(u8::is_ascii_digit),
            _ => false,
        };
    } else {
        match a.iter().rposition(|&b| b == b':') {
            Some(i) => (&a[..i], &a[i + 1..]),
            None => (a, &[][..]),
        }
    };
    let host_ok = host.iter().all(|&b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            )
    });
    host_ok && (empty_host_ok || !host.is_empty()) && port.iter().all(u8::is_ascii_digit)
}

/// A `Content-Length` value: 1*DIGIT that fits 64 bits.
fn decimal(v: &[u8]) -> Option<u64> {
    let v = trim_ows(v);
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

fn trim_ows(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t');
    let end = v.iter().rposition(|&b| b != b' ' && b != b'\t');
    match (start, end) {
        (Some(s), Some(e)) => &v[s..=e],
        _ => &[],
    }
}

/// Which forwarding header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarding {
    /// `X-Forwarded-For: <client>`.
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=<client>;proto=http` (an IPv6 client quoted in brackets).
    Forwarded,
}

/// What becomes of the lines of one forwarding header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// Sent as received (a trusted client's, with the header off; or none were there).
    Keep,
    /// Every line removed.
    Remove,
    /// Every line replaced by this one.
    Set(Vec<u8>),
}

/// What to send for header `which`, given the lines the client sent (all of them, in order),
/// the mode, and whether the client is a trusted proxy.
pub fn forwarding<'v>(
    which: Forwarding,
    mode: ForwardedMode,
    trusted: bool,
    client: IpAddr,
    lines: impl IntoIterator<Item = &'v [u8]>,
) -> Rewrite {
    let mut value = Vec::new();
    match forwarding_into(which, mode, trusted, client, lines, &mut value) {
        Some(true) => Rewrite::Set(value),
        Some(false) => Rewrite::Remove,
        None => Rewrite::Keep,
    }
}

/// [`forwarding`] without an allocation: `None` to keep the lines, `Some(false)` to remove
/// them, `Some(true)` to replace them by one line whose value it appended to `value` (a
/// connection's buffer, reused).
pub fn forwarding_into<'v>(
    which: Forwarding,
    mode: ForwardedMode,
    trusted: bool,
    client: IpAddr,
    lines: impl IntoIterator<Item = &'v [u8]>,
    value: &mut Vec<u8>,
) -> Option<bool> {
    use std::io::Write as _;
    let mut lines = lines.into_iter().peekable();
    let any = lines.peek().is_some();
    let element = |out: &mut Vec<u8>| {
        // writing to a Vec cannot fail
        let _ = match (which, client.to_canonical()) {
            (Forwarding::XForwardedFor, c) => write!(out, "{c}"),
            (Forwarding::Forwarded, IpAddr::V4(a)) => write!(out, "for={a};proto=http"),
            (Forwarding::Forwarded, IpAddr::V6(a)) => write!(out, "for=\"[{a}]\";proto=http"),
        };
    };
    match mode {
        ForwardedMode::Off if trusted || !any => None,
        ForwardedMode::Off => Some(false),
        ForwardedMode::Append if trusted && any => {
            for line in lines {
                let line = trim_ows(line);
                if !line.is_empty() {
                    value.extend_from_slice(line);
                    value.extend_from_slice(b", ");
                }
            }
            element(value);
            Some(true)
        }
        ForwardedMode::Append | ForwardedMode::Replace => {
            element(value);
            Some(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict<'a>(method: &str, target: &'a str, lines: &'a [(&'a str, &'a str)]) -> Verdict<'a> {
        check(
            method,
            target,
            Version::Http11,
            lines.iter().map(|(n, v)| (*n, v.as_bytes())),
        )
    }

    fn status(v: &Verdict<'_>) -> u16 {
        match v {
            Verdict::Forward(_) => 200,
            Verdict::Reject(r) => r.status,
        }
    }

    #[test]
    fn plain_requests_pass_unchanged() {
        let h = [("Host", "a.example"), ("Accept", "*/*")];
        assert_eq!(
            verdict("GET", "/p?q=1", &h),
            Verdict::Forward(Edits::default())
        );
        assert_eq!(status(&verdict("OPTIONS", "*", &h)), 200);
        let chunked = [("host", "a"), ("transfer-encoding", " Chunked\t")];
        assert_eq!(status(&verdict("POST", "/", &chunked)), 200);
        let cl = [
            ("host", "a:8080"),
            ("content-length", "5"),
            ("Content-Length", "5"),
        ];
        assert_eq!(status(&verdict("POST", "/", &cl)), 200, "equal lengths");
        let v6 = [("host", "[2001:db8::1]:80")];
        assert_eq!(status(&verdict("GET", "/", &v6)), 200);
        // HTTP/1.0 needs no Host.
        assert_eq!(
            check("GET", "/", Version::Http10, std::iter::empty()),
            Verdict::Forward(Edits::default())
        );
    }

    #[test]
    fn each_rule_rejects_with_its_status() {
        /// method, target, header lines, the status expected
        type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], u16);
        let cases: &[Case<'_>] = &[
            ("CONNECT", "a.example:22", &[("host", "a.example:22")], 405),
            (
                "POST",
                "/",
                &[("host", "a"), ("transfer-encoding", "gzip, chunked")],
                501,
            ),
            (
                "POST",
                "/",
                &[("host", "a"), ("transfer-encoding", "chunked, chunked")],
                501,
            ),
            (
                "POST",
                "/",
                &[("host", "a"), ("transfer-encoding", "chunked;x=1")],
                501,
            ),
            (
                "POST",
                "/",
                &[("host", "a"), ("transfer-encoding", "xchunked")],
                501,
            ),
            (
                "POST",
                "/",
                &[
                    ("host", "a"),
                    ("transfer-encoding", "gzip"),
                    ("transfer-encoding", "chunked"),
                ],
                501,
            ),
            (
                "POST",
                "/",
                &[
                    ("host", "a"),
                    ("transfer-encoding", "chunked"),
                    ("content-length", "3"),
                ],
                400,
            ),
            ("POST", "/", &[("host", "a"), ("content-length", "-1")], 400),
            (
                "POST",
                "/",
                &[("host", "a"), ("content-length", "99999999999999999999")],
                400,
            ),
            (
                "POST",
                "/",
                &[
                    ("host", "a"),
                    ("content-length", "3"),
                    ("content-length", "4"),
                ],
                400,
            ),
            (
                "POST",
                "/",
                &[("host", "a"), ("content-length", "3, 3")],
                400,
            ),
            ("GET", "/", &[("host", "a"), ("host", "a")], 400),
            ("GET", "/", &[("host", "a b")], 400),
            ("GET", "/", &[("host", "a:80:80")], 400),
            ("GET", "/", &[("host", "u@a")], 400),
            ("GET", "/", &[], 400),
            ("GET", "a.example:80", &[("host", "a")], 400),
            ("GET", "*", &[("host", "a")], 400),
            ("GET", "ftp://a/", &[("host", "a")], 400),
            ("GET", "http://u:p@a/", &[("host", "a")], 400),
            ("GET", "http:///p", &[("host", "a")], 400),
        ];
        for (method, target, lines, want) in cases {
            let v = verdict(method, target, lines);
            assert_eq!(status(&v), *want, "{method} {target} {lines:?}: {v:?}");
        }
        let te10 = check(
            "POST",
            "/",
            Version::Http10,
            [("transfer-encoding", &b"chunked"[..])],
        );
        assert_eq!(status(&te10), 400);
    }

    #[test]
    fn absolute_form_goes_out_in_origin_form_with_its_authority_as_host() {
        let h = [("Host", "other.example")];
        let want = |target: &'static str, host: &'static str| {
            Verdict::Forward(Edits {
                target: Some(Cow::Borrowed(target)),
                host: Some(host),
            })
        };
        assert_eq!(
            verdict("GET", "http://a.example:8080/p?q", &h),
            want("/p?q", "a.example:8080")
        );
        assert_eq!(
            verdict("GET", "HTTP://a.example", &h),
            want("/", "a.example")
        );
        assert_eq!(
            verdict("GET", "https://[::1]/x#frag", &h),
            want("/x", "[::1]")
        );
        let Verdict::Forward(e) = verdict("GET", "http://a?x=1", &h) else {
            panic!("forwarded");
        };
        assert_eq!(e.target.as_deref(), Some("/?x=1"));
    }

    fn rewrite(mode: ForwardedMode, trusted: bool, lines: &[&str]) -> Rewrite {
        forwarding(
            Forwarding::XForwardedFor,
            mode,
            trusted,
            "192.0.2.7".parse().unwrap(),
            lines.iter().map(|l| l.as_bytes()),
        )
    }

    fn set(s: &str) -> Rewrite {
        Rewrite::Set(s.as_bytes().to_vec())
    }

    #[test]
    fn only_a_trusted_client_keeps_its_forwarding_lines_every_one_of_them() {
        use ForwardedMode::{Append, Off, Replace};
        let forged = ["10.9.9.9", "10.8.8.8, 10.7.7.7"];
        assert_eq!(rewrite(Append, false, &forged), set("192.0.2.7"));
        assert_eq!(
            rewrite(Append, true, &forged),
            set("10.9.9.9, 10.8.8.8, 10.7.7.7, 192.0.2.7")
        );
        assert_eq!(rewrite(Append, true, &[]), set("192.0.2.7"));
        assert_eq!(rewrite(Replace, true, &forged), set("192.0.2.7"));
        assert_eq!(rewrite(Off, false, &forged), Rewrite::Remove);
        assert_eq!(rewrite(Off, true, &forged), Rewrite::Keep);
        assert_eq!(rewrite(Off, false, &[]), Rewrite::Keep);
        let v6 = forwarding(
            Forwarding::Forwarded,
            Append,
            false,
            "::ffff:192.0.2.7".parse().unwrap(),
            [&b"for=1.1.1.1"[..]],
        );
        assert_eq!(
            v6,
            set("for=192.0.2.7;proto=http"),
            "mapped address as IPv4"
        );
        let v6 = forwarding(
            Forwarding::Forwarded,
            Append,
            true,
            "2001:db8::1".parse().unwrap(),
            [&b"for=1.1.1.1"[..]],
        );
        assert_eq!(v6, set("for=1.1.1.1, for=\"[2001:db8::1]\";proto=http"));
    }
}
