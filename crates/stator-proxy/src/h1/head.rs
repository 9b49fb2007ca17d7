//! Request and response heads, parsed in place: `httparse` reads the bytes where they arrived,
//! and the head is kept as byte ranges ([`Span`]s) into that buffer — no copy of a name or a
//! value, and the `Vec` of lines is the connection's, reused from one request to the next.

use std::mem::MaybeUninit;

use crate::rules::Version;

/// Most header lines in one head (hyper's limit, which docs/proxy.md's table names: `431`
/// above it, as above `http.max_header_size`).
pub const MAX_HEADERS: usize = 100;

/// A byte range of the buffer a head was parsed from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    /// The range of `part`, a slice of `buf` (an empty part: an empty range).
    fn within(buf: &[u8], part: &[u8]) -> Self {
        if part.is_empty() {
            return Self::default();
        }
        let start = part.as_ptr() as usize - buf.as_ptr() as usize;
        // heads are bounded by `max_header_size` (a few KiB, never 4 GiB): a u32 holds them
        Self {
            start: start as u32,
            end: (start + part.len()) as u32,
        }
    }

    /// Its bytes in `buf`.
    pub fn of<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        &buf[self.start as usize..self.end as usize]
    }

    /// Its bytes in `buf` as text (a method, a target or a name: `httparse` let only tokens and
    /// visible ASCII through).
    pub fn str<'b>(&self, buf: &'b [u8]) -> &'b str {
        std::str::from_utf8(self.of(buf)).unwrap_or("")
    }
}

/// One header line: its name and its value (without the surrounding whitespace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Line {
    /// The name as received (any case).
    pub name: Span,
    /// The value.
    pub value: Span,
}

impl Line {
    /// Whether its name is `name` (lowercase), in any case.
    pub fn is(&self, buf: &[u8], name: &str) -> bool {
        self.name.of(buf).eq_ignore_ascii_case(name.as_bytes())
    }
}

/// Why a head was not parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Larger than the limit, or more than [`MAX_HEADERS`] lines: `431` (a request), `502` (a
    /// response).
    TooLarge,
    /// Not HTTP/1.x grammar: `400` (a request), `502` (a response).
    Malformed,
}

/// Where a parse got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    /// The head is not complete yet: read more.
    Partial,
    /// The head is complete: this many bytes of the buffer are the head (the body or the next
    /// request follows).
    Complete(usize),
}

/// What `httparse` said, with the size limit applied.
fn outcome(r: httparse::Result<usize>, buf: &[u8], max: usize) -> Result<Parse, HeadError> {
    match r {
        Ok(httparse::Status::Complete(n)) if n > max => Err(HeadError::TooLarge),
        Ok(httparse::Status::Complete(n)) => Ok(Parse::Complete(n)),
        Ok(httparse::Status::Partial) if buf.len() > max => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(Parse::Partial),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(_) => Err(HeadError::Malformed),
    }
}

/// The header lines `httparse` found, as ranges of `buf`, into `lines` (reused).
fn lines_of(buf: &[u8], headers: &[httparse::Header<'_>], lines: &mut Vec<Line>) {
    lines.clear();
    lines.extend(headers.iter().map(|h| Line {
        name: Span::within(buf, h.name.as_bytes()),
        value: Span::within(buf, h.value),
    }));
}

/// A request head.
#[derive(Debug, Clone, Default)]
pub struct RequestHead {
    /// The method.
    pub method: Span,
    /// The target as received.
    pub target: Span,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The header lines in order.
    pub lines: Vec<Line>,
}

impl RequestHead {
    /// Parses the head at the start of `buf`, no larger than `max` bytes. Leaves `self` as
    /// the head on [`Parse::Complete`]; in any other state otherwise.
    pub fn parse(&mut self, buf: &[u8], max: usize) -> Result<Parse, HeadError> {
        // uninitialised: not 3 KiB of empty headers written before every parse
        let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        let n = match outcome(req.parse_with_uninit_headers(buf, &mut headers), buf, max)? {
            Parse::Complete(n) => n,
            partial => return Ok(partial),
        };
        let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version)
        else {
            return Err(HeadError::Malformed);
        };
        self.method = Span::within(buf, method.as_bytes());
        self.target = Span::within(buf, target.as_bytes());
        self.version = if version == 0 {
            Version::Http10
        } else {
            Version::Http11
        };
        lines_of(buf, req.headers, &mut self.lines);
        Ok(Parse::Complete(n))
    }
}

/// A response head.
#[derive(Debug, Clone, Default)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// The reason phrase as received (may be empty).
    pub reason: Span,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The header lines in order.
    pub lines: Vec<Line>,
}

impl ResponseHead {
    /// Parses the head at the start of `buf`, no larger than `max` bytes (as
    /// [`RequestHead::parse`]).
    pub fn parse(&mut self, buf: &[u8], max: usize) -> Result<Parse, HeadError> {
        let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut resp,
            buf,
            &mut headers,
        );
        let n = match outcome(parsed, buf, max)? {
            Parse::Complete(n) => n,
            partial => return Ok(partial),
        };
        let (Some(status), Some(version)) = (resp.code, resp.version) else {
            return Err(HeadError::Malformed);
        };
        if !(100..=999).contains(&status) {
            return Err(HeadError::Malformed);
        }
        self.status = status;
        self.reason = Span::within(buf, resp.reason.unwrap_or("").as_bytes());
        self.version = if version == 0 {
            Version::Http10
        } else {
            Version::Http11
        };
        lines_of(buf, resp.headers, &mut self.lines);
        Ok(Parse::Complete(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_is_ranges_of_its_buffer() {
        let buf = b"GET /p?q=1 HTTP/1.1\r\nHost: a.example\r\nX-A:  b \r\n\r\nBODY";
        let mut h = RequestHead::default();
        assert_eq!(h.parse(buf, 1024), Ok(Parse::Complete(buf.len() - 4)));
        assert_eq!(h.method.str(buf), "GET");
        assert_eq!(h.target.str(buf), "/p?q=1");
        assert_eq!(h.version, Version::Http11);
        assert_eq!(h.lines.len(), 2);
        assert!(h.lines[0].is(buf, "host"));
        assert_eq!(h.lines[0].value.of(buf), b"a.example");
        assert_eq!(
            h.lines[1].value.of(buf),
            b"b",
            "whitespace around a value is not its"
        );
    }

    #[test]
    fn partial_until_the_blank_line_and_too_large_past_the_limit() {
        let mut h = RequestHead::default();
        let buf = b"GET / HTTP/1.1\r\nHost: a\r\n";
        assert_eq!(h.parse(buf, 1024), Ok(Parse::Partial));
        assert_eq!(
            h.parse(buf, 10),
            Err(HeadError::TooLarge),
            "partial past the limit"
        );
        let whole = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(
            h.parse(whole, 20),
            Err(HeadError::TooLarge),
            "complete past it"
        );
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(h.parse(&many, 1 << 20), Err(HeadError::TooLarge));
    }

    #[test]
    fn grammar_errors_are_malformed() {
        let mut h = RequestHead::default();
        for bad in [
            &b"GET / HTTP/2.0\r\n\r\n"[..],
            b"GET  / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: v\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n",
            b"GET / HTTP/1.1\r\n folded\r\n\r\n",
        ] {
            assert_eq!(
                h.parse(bad, 1024),
                Err(HeadError::Malformed),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_response_head() {
        let buf = b"HTTP/1.0 404 Not Here\r\nContent-Length: 3\r\n\r\nabc";
        let mut h = ResponseHead::default();
        assert_eq!(h.parse(buf, 1024), Ok(Parse::Complete(buf.len() - 3)));
        assert_eq!(h.status, 404);
        assert_eq!(h.reason.of(buf), b"Not Here");
        assert_eq!(h.version, Version::Http10);
        assert!(h.lines[0].is(buf, "content-length"));
        let bare = b"HTTP/1.1 204\r\n\r\n";
        assert_eq!(h.parse(bare, 1024), Ok(Parse::Complete(bare.len())));
        assert!(h.reason.of(bare).is_empty());
        assert_eq!(
            h.parse(b"HTTP/1.1 20x OK\r\n\r\n", 1024),
            Err(HeadError::Malformed)
        );
    }
}
