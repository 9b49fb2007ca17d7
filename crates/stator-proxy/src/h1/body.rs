//! How a body is delimited (RFC 9112 §6.3), and the `chunked` coding read incrementally: the
//! decoder hands back where each piece of data lies in the bytes it is given, so that the
//! driver forwards them from its own buffer, each piece as a chunk of its own (chunk
//! boundaries carry no meaning, §7.1), and the framing it sends is always canonical — never the
//! client's bytes, whose oddities (extensions, whitespace) are where smuggling hides.

use super::head::{Line, RequestHead, ResponseHead};

/// How a message's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// There is none.
    None,
    /// Exactly this many bytes (more than 0).
    Length(u64),
    /// The `chunked` coding.
    Chunked,
    /// The connection's end (a response only).
    Close,
}

/// A request's body, for a head [`crate::rules::check`] let through (one coding, `chunked`,
/// or one `Content-Length` value, never both).
pub fn request(buf: &[u8], head: &RequestHead) -> Framing {
    let mut framing = Framing::None;
    for l in &head.lines {
        if l.is(buf, "transfer-encoding") {
            return Framing::Chunked;
        }
        if l.is(buf, "content-length") {
            framing = match decimal(l.value.of(buf)) {
                Some(0) | None => Framing::None,
                Some(n) => Framing::Length(n),
            };
        }
    }
    framing
}

/// Why a response head cannot be forwarded (the client gets `502`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadResponse {
    /// `Content-Length` lines that are not one number.
    Length,
    /// `101 Switching Protocols`: the proxy asked for no upgrade (it strips `Upgrade`).
    Upgrade,
}

/// A response's body, answering a request with method `HEAD` or not (RFC 9112 §6.3, in its
/// order); [`BadResponse::Length`] for `Content-Length` lines that are not one decimal number.
pub fn response(buf: &[u8], head: &ResponseHead, to_head: bool) -> Result<Framing, BadResponse> {
    if to_head || head.status < 200 || head.status == 204 || head.status == 304 {
        return Ok(Framing::None);
    }
    // the last coding of the last line is the last coding (§6.1)
    let mut te: Option<&Line> = None;
    let mut length = None;
    for l in &head.lines {
        if l.is(buf, "transfer-encoding") {
            te = Some(l);
        } else if l.is(buf, "content-length") {
            match (decimal(l.value.of(buf)), length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => return Err(BadResponse::Length),
            }
        }
    }
    // a transfer coding overrides any length (§6.3 3)
    Ok(match (te, length) {
        (Some(l), _) if last_coding_chunked(buf, l) => Framing::Chunked,
        (Some(_), _) => Framing::Close,
        (None, Some(0)) => Framing::None,
        (None, Some(n)) => Framing::Length(n),
        (None, None) => Framing::Close,
    })
}

/// Whether the last coding of a `Transfer-Encoding` line is `chunked`.
fn last_coding_chunked(buf: &[u8], l: &Line) -> bool {
    l.value
        .of(buf)
        .rsplit(|&b| b == b',')
        .map(trim)
        .find(|c| !c.is_empty())
        .is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"))
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let end = v.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
    match (start, end) {
        (Some(s), Some(e)) => &v[s..=e],
        _ => &[],
    }
}

/// A decimal `Content-Length` (digits only, at most 18 of them: no overflow).
pub fn decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Most bytes of one chunk's size and extensions, and of all trailer lines together: a client
/// cannot keep the decoder reading framing forever.
pub const MAX_FRAMING: u32 = 4096;

/// Why a `chunked` body is malformed (`400` from a client; a cut response from an upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A size that is not hexadecimal, or larger than 2^60.
    Size,
    /// A byte where CR LF had to be, or a bare LF.
    LineEnd,
    /// An extension or trailer with a control character.
    Field,
    /// More than [`MAX_FRAMING`] bytes of size line or trailers.
    TooLong,
}

/// What the decoder found next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Data: these bytes of the input (`start..end`) are the body's.
    Data(usize, usize),
    /// The input is used up: read more.
    Need,
    /// The body ended (the last chunk and the trailers are read; they are dropped).
    End,
}

/// The `chunked` coding, read incrementally (RFC 9112 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Chunked {
    state: State,
    /// The size being read, then the data bytes left of the current chunk.
    n: u64,
    /// Bytes of framing read in the current size line or the trailers.
    framing: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// The first hex digit of a size.
    #[default]
    SizeStart,
    /// More hex digits.
    Size,
    /// Whitespace after the size, before `;` or CR.
    SizeSpace,
    /// An extension, up to CR.
    Ext,
    /// The LF of the size line.
    SizeLf,
    /// Data.
    Data,
    /// The CR after data.
    DataCr,
    /// The LF after data.
    DataLf,
    /// The start of a trailer line, or the CR of the empty line ending the body.
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// The LF of a trailer line.
    TrailerLf,
    /// The LF of the empty line.
    EndLf,
    /// The body has ended.
    Done,
}

impl Chunked {
    /// Whether the body has ended.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads from `input[*pos..]`, moving `pos` past what it used.
    pub fn next(&mut self, input: &[u8], pos: &mut usize) -> Result<Decoded, ChunkError> {
        while *pos < input.len() {
            if self.state == State::Data {
                let start = *pos;
                let take = (input.len() - start).min(self.n.min(usize::MAX as u64) as usize);
                self.n -= take as u64;
                *pos += take;
                if self.n == 0 {
                    self.state = State::DataCr;
                }
                return Ok(Decoded::Data(start, start + take));
            }
            let b = input[*pos];
            *pos += 1;
            self.byte(b)?;
            if self.state == State::Done {
                return Ok(Decoded::End);
            }
        }
        Ok(if self.state == State::Done {
            Decoded::End
        } else {
            Decoded::Need
        })
    }

    fn byte(&mut self, b: u8) -> Result<(), ChunkError> {
        use State::*;
        match self.state {
            SizeStart | Size => {
                if let Some(d) = (b as char).to_digit(16) {
                    if self.n >> 60 != 0 {
                        return Err(ChunkError::Size);
                    }
                    self.n = self.n << 4 | u64::from(d);
                    self.state = Size;
                    self.count()?;
                } else if self.state == SizeStart {
                    return Err(ChunkError::Size);
                } else {
                    self.after_size(b)?;
                }
            }
            SizeSpace => self.after_size(b)?,
            Ext => match b {
                b'\r' => self.state = SizeLf,
                b'\t' | b' '..=b'~' | 0x80.. => self.count()?,
                _ => return Err(ChunkError::Field),
            },
            SizeLf => {
                if b != b'\n' {
                    return Err(ChunkError::LineEnd);
                }
                self.framing = 0;
                self.state = if self.n == 0 { TrailerStart } else { Data };
            }
            Data => unreachable!("data is taken in bulk by `next`"),
            DataCr if b == b'\r' => self.state = DataLf,
            DataLf if b == b'\n' => self.state = SizeStart,
            DataCr | DataLf => return Err(ChunkError::LineEnd),
            TrailerStart => match b {
                b'\r' => self.state = EndLf,
                b'\n' => return Err(ChunkError::LineEnd),
                _ => {
                    self.state = Trailer;
                    self.trailer_byte(b)?;
                }
            },
            Trailer => match b {
                b'\r' => self.state = TrailerLf,
                _ => self.trailer_byte(b)?,
            },
            TrailerLf | EndLf if b != b'\n' => return Err(ChunkError::LineEnd),
            TrailerLf => self.state = TrailerStart,
            EndLf => self.state = Done,
            Done => {}
        }
        Ok(())
    }

    /// After the size's digits: whitespace, an extension or the line's end.
    fn after_size(&mut self, b: u8) -> Result<(), ChunkError> {
        match b {
            b' ' | b'\t' => self.state = State::SizeSpace,
            b';' => self.state = State::Ext,
            b'\r' => self.state = State::SizeLf,
            b'\n' => return Err(ChunkError::LineEnd),
            _ => return Err(ChunkError::Size),
        }
        self.count()
    }

    fn trailer_byte(&mut self, b: u8) -> Result<(), ChunkError> {
        if !matches!(b, b'\t' | b' '..=b'~' | 0x80..) {
            return Err(if b == b'\n' {
                ChunkError::LineEnd
            } else {
                ChunkError::Field
            });
        }
        self.count()
    }

    fn count(&mut self) -> Result<(), ChunkError> {
        self.framing += 1;
        if self.framing > MAX_FRAMING {
            return Err(ChunkError::TooLong);
        }
        Ok(())
    }
}

/// Writes the framing of one chunk of `len` bytes before its data (the driver writes the data
/// and then [`CHUNK_END`]).
pub fn chunk_head(out: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        out.push(HEX[(len >> (i * 4)) & 0xf]);
    }
    out.extend_from_slice(b"\r\n");
}

/// What follows a chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";

/// The last chunk and the end of a `chunked` body (no trailers).
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::super::head::{Parse, RequestHead, ResponseHead};
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes; the data, or the error.
    fn decode(input: &[u8], step: usize) -> Result<(Vec<u8>, bool), ChunkError> {
        let mut c = Chunked::default();
        let mut data = Vec::new();
        for piece in input.chunks(step) {
            let mut pos = 0;
            loop {
                match c.next(piece, &mut pos)? {
                    Decoded::Data(s, e) => data.extend_from_slice(&piece[s..e]),
                    Decoded::Need => break,
                    Decoded::End => return Ok((data, pos == piece.len())),
                }
            }
        }
        Ok((data, false))
    }

    #[test]
    fn chunked_bodies_decode_whatever_the_reads() {
        let body = b"5\r\nhello\r\n1;ext=\"v\"\r\n \r\nA \r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
        for step in 1..body.len() {
            let (data, at_end) = decode(body, step).unwrap();
            assert_eq!(data, b"hello 0123456789", "step {step}");
            assert!(at_end, "the end is the last byte, step {step}");
        }
        let mut c = Chunked::default();
        let mut pos = 0;
        let two = b"0\r\n\r\nGET / HTTP/1.1\r\n";
        assert_eq!(c.next(two, &mut pos), Ok(Decoded::End));
        assert_eq!(pos, 5, "what follows the body is left: the next request");
        assert!(c.done());
    }

    #[test]
    fn malformed_chunked_bodies_are_refused() {
        for (bad, why) in [
            (&b"x\r\n"[..], ChunkError::Size),
            (b"\r\n", ChunkError::Size),
            (b"5\nhello\r\n", ChunkError::LineEnd),
            (b"5\r\nhelloXX", ChunkError::LineEnd),
            (b"5\r\nhello\n0\r\n\r\n", ChunkError::LineEnd),
            (b"1;a\nb\r\n", ChunkError::Field),
            (b"11111111111111111\r\n", ChunkError::Size),
            (b"5 x\r\n", ChunkError::Size),
            (b"0\r\nX: a\nb\r\n\r\n", ChunkError::LineEnd),
            (b"0\r\n\n", ChunkError::LineEnd),
        ] {
            assert_eq!(
                decode(bad, 64),
                Err(why),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut long = b"1;".to_vec();
        long.resize(MAX_FRAMING as usize + 10, b'a');
        assert_eq!(decode(&long, 64), Err(ChunkError::TooLong));
    }

    #[test]
    fn chunk_heads_are_lowercase_hex() {
        for (len, want) in [(0, "0"), (5, "5"), (255, "ff"), (4096, "1000")] {
            let mut out = Vec::new();
            chunk_head(&mut out, len);
            assert_eq!(out, format!("{want}\r\n").as_bytes());
        }
    }

    fn req(raw: &[u8]) -> Framing {
        let mut h = RequestHead::default();
        assert!(matches!(h.parse(raw, 4096), Ok(Parse::Complete(_))));
        request(raw, &h)
    }

    fn resp(raw: &[u8], to_head: bool) -> Result<Framing, BadResponse> {
        let mut h = ResponseHead::default();
        assert!(matches!(h.parse(raw, 4096), Ok(Parse::Complete(_))));
        response(raw, &h, to_head)
    }

    #[test]
    fn framing_of_requests_and_responses() {
        assert_eq!(req(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Framing::None);
        assert_eq!(
            req(b"POST / HTTP/1.1\r\ncontent-length: 0\r\n\r\n"),
            Framing::None
        );
        assert_eq!(
            req(b"POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n"),
            Framing::Length(12)
        );
        assert_eq!(
            req(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Framing::Chunked
        );
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(resp(ok, false), Ok(Framing::Length(3)));
        assert_eq!(resp(ok, true), Ok(Framing::None), "to HEAD");
        assert_eq!(resp(b"HTTP/1.1 204 No\r\n\r\n", false), Ok(Framing::None));
        assert_eq!(
            resp(b"HTTP/1.1 304 NM\r\nContent-Length: 9\r\n\r\n", false),
            Ok(Framing::None)
        );
        assert_eq!(resp(b"HTTP/1.1 200 OK\r\n\r\n", false), Ok(Framing::Close));
        assert_eq!(
            resp(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
                false
            ),
            Ok(Framing::Chunked),
            "a coding overrides the length"
        );
        assert_eq!(
            resp(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                false
            ),
            Ok(Framing::Close),
            "not chunked last: until the close"
        );
        assert_eq!(
            resp(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                false
            ),
            Err(BadResponse::Length)
        );
        assert_eq!(
            resp(b"HTTP/1.1 200 OK\r\nContent-Length: 3x\r\n\r\n", false),
            Err(BadResponse::Length)
        );
    }
}
