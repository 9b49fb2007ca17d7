//! Fuzz target: a raw HTTP/1.x request head, parsed by `httparse` (the parser hyper, the proxy's
//! engine, uses) and checked by `stator_proxy::rules` (the pure rules every head passes before
//! it is forwarded: docs/proxy.md's table), then the forwarding headers' rewrite.
//!
//! Input: byte 0 picks the client (bit 0: a trusted proxy; bits 1–2: the forwarding mode;
//! bit 3: IPv6), bytes 1–16 its address; the rest is the head as it arrives on the socket.
//! A head httparse refuses or has not seen the end of never reaches the rules (the engine
//! answers 400 or waits), so only complete heads are checked. Then the same bytes go through
//! the proxy's own engine core (`stator_proxy::h1`): its head parser, the head it writes for
//! the upstream, and its `chunked` decoder over what follows the head.
//!
//! Oracles: no panic; a rejection is 400, 405 or 501 with a one-line reason; a head the rules
//! forward has
//! - no `CONNECT`;
//! - exactly one `Host` line (none only in HTTP/1.0), whose value is `host[:port]`: no
//!   whitespace, `@`, `/`, `?`, `#` or `\`, and nothing after a closing `]`;
//! - transfer coding `chunked` and nothing else — one coding over all `Transfer-Encoding`
//!   lines, never with `Content-Length`, never in HTTP/1.0;
//! - `Content-Length` lines that are all the same decimal number;
//! - a target it sends in origin form (`/…`, or `*` for `OPTIONS`): an absolute-form target is
//!   rewritten to its path and query, and its authority becomes the `Host`;
//!
//! and an untrusted client's `X-Forwarded-For` / `Forwarded` lines never reach the backend:
//! what is sent is the node's own element (the client's address) or nothing.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use stator_proxy::ForwardedMode;
use stator_proxy::h1::body::{Chunked, Decoded, Framing};
use stator_proxy::h1::forward;
use stator_proxy::h1::head::{Parse, RequestHead};
use stator_proxy::rules::{Forwarding, Rewrite, Verdict, Version, check, forwarding};
use stator_proxy::HttpSpec;

fuzz_target!(|data: &[u8]| {
    let Some((&client_sel, rest)) = data.split_first() else {
        return;
    };
    let Some((addr, head)) = rest.split_first_chunk::<16>() else {
        return;
    };
    let client = if client_sel & 8 != 0 {
        IpAddr::V6(Ipv6Addr::from(*addr))
    } else {
        IpAddr::V4(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]))
    };
    let trusted = client_sel & 1 != 0;
    let mode = match (client_sel >> 1) & 3 {
        0 => ForwardedMode::Off,
        1 => ForwardedMode::Replace,
        _ => ForwardedMode::Append,
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = req.parse(head) else {
        return;
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return;
    };
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let lines: Vec<(&str, &[u8])> = req.headers.iter().map(|h| (h.name, h.value)).collect();
    let verdict = check(method, target, version, lines.iter().copied());
    engine(head, client, trusted, mode, &verdict);
    match verdict {
        Verdict::Reject(r) => {
            assert!(matches!(r.status, 400 | 405 | 501), "{r:?}");
            assert!(
                r.reason.ends_with('\n') && r.reason.lines().count() == 1,
                "{r:?}"
            );
        }
        Verdict::Forward(edits) => {
            assert_ne!(method, "CONNECT");
            let named =
                |n: &'static str| lines.iter().filter(move |(k, _)| k.eq_ignore_ascii_case(n));
            let hosts: Vec<&[u8]> = named("host").map(|(_, v)| *v).collect();
            match (hosts.as_slice(), version) {
                ([host], _) => assert!(authority_like(host), "Host {host:?}"),
                ([], Version::Http10) => {}
                (h, _) => panic!("forwarded with Host lines {h:?} in {version:?}"),
            }
            let codings: Vec<String> = named("transfer-encoding")
                .flat_map(|(_, v)| v.split(|&b| b == b','))
                .map(|c| {
                    String::from_utf8_lossy(c)
                        .trim_matches([' ', '\t'])
                        .to_owned()
                })
                .filter(|c| !c.is_empty())
                .collect();
            let te = named("transfer-encoding").next().is_some();
            let cls: Vec<&[u8]> = named("content-length").map(|(_, v)| *v).collect();
            if te {
                assert_eq!(version, Version::Http11, "Transfer-Encoding in HTTP/1.0");
                assert!(
                    codings.len() == 1 && codings[0].eq_ignore_ascii_case("chunked"),
                    "forwarded with codings {codings:?}"
                );
                assert!(cls.is_empty(), "Transfer-Encoding with Content-Length");
            }
            let lengths: Vec<Option<u64>> = cls.iter().map(|v| decimal(v)).collect();
            assert!(
                lengths.iter().all(|l| l.is_some() && *l == lengths[0]),
                "forwarded with Content-Length lines {cls:?}"
            );
            let sent = edits.target.as_deref().unwrap_or(target);
            assert!(
                sent.starts_with('/') || (sent == "*" && method == "OPTIONS"),
                "sent target {sent:?}"
            );
            match (edits.target.is_some(), edits.host) {
                (false, None) => assert!(target.starts_with('/') || target == "*"),
                (true, Some(authority)) => {
                    let (scheme, rest) = target.split_once("://").expect("absolute form");
                    assert!(
                        ["http", "https"]
                            .iter()
                            .any(|s| s.eq_ignore_ascii_case(scheme))
                    );
                    assert!(rest.starts_with(authority) && !authority.is_empty());
                    assert!(
                        authority_like(authority.as_bytes()),
                        "authority {authority:?}"
                    );
                }
                other => panic!("edits {other:?}"),
            }
        }
    }
    for which in [Forwarding::XForwardedFor, Forwarding::Forwarded] {
        let name = match which {
            Forwarding::XForwardedFor => "x-forwarded-for",
            Forwarding::Forwarded => "forwarded",
        };
        let sent: Vec<&[u8]> = lines
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .collect();
        let rewrite = forwarding(which, mode, trusted, client, sent.iter().copied());
        if trusted {
            continue;
        }
        let c = client.to_canonical();
        let own = match (which, c) {
            (Forwarding::XForwardedFor, c) => c.to_string(),
            (Forwarding::Forwarded, IpAddr::V4(a)) => format!("for={a};proto=http"),
            (Forwarding::Forwarded, IpAddr::V6(a)) => format!("for=\"[{a}]\";proto=http"),
        };
        match rewrite {
            Rewrite::Remove => assert!(mode == ForwardedMode::Off),
            Rewrite::Keep => assert!(sent.is_empty(), "an untrusted client's {name} kept"),
            Rewrite::Set(v) => assert_eq!(v, own.into_bytes(), "only our own {name}"),
        }
    }
});

/// The engine core on the same head: its parser agrees with httparse's, its verdict with the
/// rules', and the head it writes for the upstream is one the oracles above accept — parsed
/// again, it is complete, has one `Host` (HTTP/1.1), no hop-by-hop line but the
/// `Transfer-Encoding: chunked` of a chunked body, no `Content-Length` with it, no `Expect`,
/// and from an untrusted client no forwarding line but the node's own. What follows the head
/// is fed to the `chunked` decoder in small pieces: its data ranges stay inside each piece.
fn engine(raw: &[u8], client: IpAddr, trusted: bool, mode: ForwardedMode, verdict: &Verdict<'_>) {
    let mut h = RequestHead::default();
    let Ok(Parse::Complete(n)) = h.parse(raw, 1 << 20) else {
        return;
    };
    let http = HttpSpec {
        forwarded_for: mode,
        forwarded: mode,
        ..HttpSpec::default()
    };
    let (mut scratch, mut out) = (Vec::new(), Vec::new());
    let planned = forward::request(raw, &h, client, trusted, &http, &mut scratch, &mut out);
    let plan = match (planned, verdict) {
        (Err(r), Verdict::Reject(want)) => {
            assert_eq!(r.status, want.status);
            return;
        }
        (Ok(plan), Verdict::Forward(_)) => plan,
        (got, want) => panic!("engine {got:?}, rules {want:?}"),
    };
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut sent = httparse::Request::new(&mut headers);
    assert_eq!(
        sent.parse(&out).ok(),
        Some(httparse::Status::Complete(out.len())),
        "the head sent upstream: {:?}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(sent.version, Some(1));
    assert!(sent.path.is_some_and(|t| t.starts_with('/') || t == "*"));
    let count = |n: &str| sent.headers.iter().filter(|x| x.name.eq_ignore_ascii_case(n)).count();
    if h.version == Version::Http11 {
        assert_eq!(count("host"), 1);
    }
    for hop in ["connection", "te", "trailer", "upgrade", "keep-alive", "proxy-connection", "proxy-authorization", "expect"] {
        assert_eq!(count(hop), 0, "{hop} sent upstream");
    }
    let chunked = plan.framing == Framing::Chunked;
    assert_eq!(count("transfer-encoding"), usize::from(chunked));
    if chunked {
        assert_eq!(count("content-length"), 0);
    }
    if !trusted {
        let c = client.to_canonical();
        for (name, own) in [
            ("x-forwarded-for", c.to_string()),
            ("forwarded", match c {
                IpAddr::V4(a) => format!("for={a};proto=http"),
                IpAddr::V6(a) => format!("for=\"[{a}]\";proto=http"),
            }),
        ] {
            let values: Vec<&[u8]> = sent
                .headers
                .iter()
                .filter(|x| x.name.eq_ignore_ascii_case(name))
                .map(|x| x.value)
                .collect();
            let want: Vec<&[u8]> = if mode == ForwardedMode::Off { vec![] } else { vec![own.as_bytes()] };
            assert_eq!(values, want, "{name} from an untrusted client");
        }
    }
    // the body: in pieces of 7 bytes, as a slow client would send it
    let mut c = Chunked::default();
    for piece in raw[n..].chunks(7) {
        let mut pos = 0;
        loop {
            match c.next(piece, &mut pos) {
                Ok(Decoded::Data(s, e)) => assert!(s < e && e <= piece.len() && pos == e),
                Ok(Decoded::Need) => {
                    assert_eq!(pos, piece.len());
                    break;
                }
                Ok(Decoded::End) | Err(_) => return,
            }
        }
    }
}

/// What the rules may forward as `host[:port]`: no whitespace, userinfo, path, query,
/// fragment or backslash, nothing after an IP literal's `]` but a port.
fn authority_like(a: &[u8]) -> bool {
    let forbidden = |b: &u8| b.is_ascii_whitespace() || b"@/?#\\\"<>{}|^`".contains(b) || *b < 0x20;
    if a.iter().any(forbidden) {
        return false;
    }
    match a.iter().position(|&b| b == b']') {
        Some(close) => match &a[close + 1..] {
            [] => true,
            [b':', port @ ..] => port.iter().all(u8::is_ascii_digit),
            _ => false,
        },
        None => true,
    }
}

/// One decimal number, optional whitespace around it.
fn decimal(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?.trim_matches([' ', '\t']);
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}
