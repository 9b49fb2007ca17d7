//! BIRD's control-socket line protocol, parsed (pure: no I/O).
//!
//! A session starts with BIRD's greeting `0001 BIRD 2.0.12 ready.`; then each command is one
//! line, and its reply is a sequence of lines (`nest/cli.c`, `doc/reply_codes` in BIRD):
//!
//! ```text
//! 2002-Name       Proto      Table      State  Since         Info     <- code, '-': more follows
//! 1002-device1    Device     ---        up     06:35:06.039           <- a new code
//!  kernel1    Kernel     master4    up     06:35:06.039               <- ' ': same code as before
//! 0000                                                                <- code, ' ': last line
//! ```
//!
//! The first digit of a code says what the line is: `0` success, `1` table entry, `2` table
//! heading, `8` run-time error, `9` parse error. A line starting with `+` is a spontaneous
//! message (log echo, `configure timeout` undo notices), not part of any reply.

use std::fmt;

/// A four-digit reply code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplyCode(pub u16);

impl ReplyCode {
    /// `0000` OK: the end of a reply with nothing more to say.
    pub const OK: Self = Self(0);
    /// `0001` the greeting.
    pub const WELCOME: Self = Self(1);
    /// `0002` Reading configuration from FILE.
    pub const READING_CONFIG: Self = Self(2);
    /// `0003` Reconfigured.
    pub const RECONFIGURED: Self = Self(3);
    /// `0004` Reconfiguration in progress (protocols are still being restarted or stopped).
    pub const RECONFIG_IN_PROGRESS: Self = Self(4);
    /// `0005` Reconfiguration already in progress, queueing new config.
    pub const RECONFIG_QUEUED: Self = Self(5);
    /// `0006` Reconfiguration ignored, shutting down.
    pub const RECONFIG_IGNORED_SHUTDOWN: Self = Self(6);
    /// `0008` PROTOCOL: already disabled.
    pub const ALREADY_DISABLED: Self = Self(8);
    /// `0009` PROTOCOL: disabled.
    pub const DISABLED: Self = Self(9);
    /// `0010` PROTOCOL: already enabled.
    pub const ALREADY_ENABLED: Self = Self(10);
    /// `0011` PROTOCOL: enabled.
    pub const ENABLED: Self = Self(11);
    /// `0016` Access restricted (a `birdc -r` session).
    pub const ACCESS_RESTRICTED: Self = Self(16);
    /// `0017` Reconfiguration already in progress, removing queued config.
    pub const RECONFIG_UNQUEUED: Self = Self(17);
    /// `0018` Reconfiguration confirmed (`configure confirm`).
    pub const RECONFIG_CONFIRMED: Self = Self(18);
    /// `0019` Nothing to do (`configure confirm` / `undo` without a pending timeout).
    pub const NOTHING_TO_DO: Self = Self(19);
    /// `0020` Configuration OK (`configure check`).
    pub const CONFIG_OK: Self = Self(20);
    /// `1002` a row of `show protocols`.
    pub const PROTOCOL_LIST: Self = Self(1002);
    /// `1006` a detail line of `show protocols all`.
    pub const PROTOCOL_DETAILS: Self = Self(1006);
    /// `2002` the heading of `show protocols`.
    pub const PROTOCOL_HEADING: Self = Self(2002);
    /// `8002` Configuration file error.
    pub const CONFIG_ERROR: Self = Self(8002);
    /// `8003` No protocols match.
    pub const NO_PROTOCOLS_MATCH: Self = Self(8003);
    /// `9001` Parse error (an unknown command, or an unknown protocol name).
    pub const PARSE_ERROR: Self = Self(9001);

    /// What kind of line this code marks.
    pub fn class(self) -> ReplyClass {
        match self.0 / 1000 {
            0 => ReplyClass::Success,
            1 => ReplyClass::TableEntry,
            2 => ReplyClass::TableHeading,
            8 => ReplyClass::RuntimeError,
            9 => ReplyClass::ParseError,
            _ => ReplyClass::Unknown,
        }
    }

    /// True for `8xxx` and `9xxx`.
    pub fn is_error(self) -> bool {
        matches!(
            self.class(),
            ReplyClass::RuntimeError | ReplyClass::ParseError
        )
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}", self.0)
    }
}

/// The class of a reply code, from its first digit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyClass {
    /// `0xxx`: action successfully completed.
    Success,
    /// `1xxx`: table entry.
    TableEntry,
    /// `2xxx`: table heading.
    TableHeading,
    /// `8xxx`: run-time error.
    RuntimeError,
    /// `9xxx`: parse-time error.
    ParseError,
    /// Anything else (not defined by BIRD).
    Unknown,
}

/// One raw line of BIRD's output, classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// `NNNN-text`: a line with a code; more lines follow.
    Continues {
        /// The code.
        code: ReplyCode,
        /// The rest of the line.
        text: &'a str,
    },
    /// `NNNN text`: the last line of a reply.
    Final {
        /// The code.
        code: ReplyCode,
        /// The rest of the line.
        text: &'a str,
    },
    /// ` text`: a continuation with the same code as the line before.
    SameCode {
        /// The rest of the line.
        text: &'a str,
    },
    /// `+text`: a spontaneous message, outside any reply.
    Spontaneous {
        /// The rest of the line.
        text: &'a str,
    },
}

/// Classifies one line (without its `\n`). The error says what is wrong with it.
pub fn parse_line(line: &str) -> Result<Line<'_>, &'static str> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if let Some(text) = line.strip_prefix('+') {
        return Ok(Line::Spontaneous { text });
    }
    if let Some(text) = line.strip_prefix(' ') {
        return Ok(Line::SameCode { text });
    }
    let bytes = line.as_bytes();
    if bytes.len() < 4 || !bytes[..4].iter().all(u8::is_ascii_digit) {
        return Err("neither a four-digit code, a continuation nor a spontaneous message");
    }
    // Four ASCII digits: the slice boundaries below are character boundaries.
    let code = ReplyCode(line[..4].parse().map_err(|_| "bad reply code")?);
    match bytes.get(4) {
        Some(b'-') => Ok(Line::Continues {
            code,
            text: &line[5..],
        }),
        Some(b' ') => Ok(Line::Final {
            code,
            text: &line[5..],
        }),
        // BIRD always writes the separator; a bare code is read as a final line.
        None => Ok(Line::Final { code, text: "" }),
        Some(_) => Err("a reply code must be followed by '-' or ' '"),
    }
}

/// One line of a reply, with its code resolved (continuations inherit the code before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyLine {
    /// The line's code.
    pub code: ReplyCode,
    /// The text after the code and separator (after the single space of a continuation).
    pub text: String,
}

/// A complete reply: its lines in order; the last one carries the final code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Every line of the reply, the final one last.
    pub lines: Vec<ReplyLine>,
    /// Spontaneous messages (`+…`) that arrived while the reply was read.
    pub spontaneous: Vec<String>,
}

impl Reply {
    /// The final line (a reply always has one).
    pub fn last(&self) -> &ReplyLine {
        // Invariant: `ReplyAssembler` only builds replies that end with a final line.
        self.lines.last().expect("a reply has a final line")
    }

    /// The code of the final line.
    pub fn code(&self) -> ReplyCode {
        self.last().code
    }

    /// The first line with an error code (8xxx, 9xxx), if any.
    pub fn error(&self) -> Option<&ReplyLine> {
        self.lines.iter().find(|l| l.code.is_error())
    }

    /// The texts of the lines with `code`, in order.
    pub fn texts(&self, code: ReplyCode) -> impl Iterator<Item = &str> {
        self.lines
            .iter()
            .filter(move |l| l.code == code)
            .map(|l| l.text.as_str())
    }
}

/// Builds [`Reply`]s from lines, one line at a time (the client feeds it what it reads).
#[derive(Debug, Default)]
pub struct ReplyAssembler {
    lines: Vec<ReplyLine>,
    spontaneous: Vec<String>,
    last_code: Option<ReplyCode>,
}

impl ReplyAssembler {
    /// An assembler at the start of a reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lines buffered so far (for bounding a reply's size).
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// True before the first line of a reply.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Takes one line (without `\n`). Returns the reply once its final line arrived, after
    /// which the assembler is ready for the next reply.
    pub fn push(&mut self, line: &str) -> Result<Option<Reply>, &'static str> {
        let (code, text, done) = match parse_line(line)? {
            Line::Spontaneous { text } => {
                self.spontaneous.push(text.to_owned());
                return Ok(None);
            }
            Line::SameCode { text } => match self.last_code {
                Some(code) => (code, text, false),
                None => return Err("a continuation line before any line with a code"),
            },
            Line::Continues { code, text } => (code, text, false),
            Line::Final { code, text } => (code, text, true),
        };
        self.lines.push(ReplyLine {
            code,
            text: text.to_owned(),
        });
        self.last_code = Some(code);
        if !done {
            return Ok(None);
        }
        self.last_code = None;
        Ok(Some(Reply {
            lines: std::mem::take(&mut self.lines),
            spontaneous: std::mem::take(&mut self.spontaneous),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds recorded output (as BIRD 2.0.12 sent it) and returns the replies.
    fn replies(raw: &str) -> Vec<Reply> {
        let mut a = ReplyAssembler::new();
        let mut out = Vec::new();
        for line in raw.split_terminator('\n') {
            if let Some(r) = a.push(line).unwrap() {
                out.push(r);
            }
        }
        assert!(a.is_empty(), "a reply was left unfinished");
        out
    }

    #[test]
    fn greeting() {
        let r = replies("0001 BIRD 2.0.12 ready.\n");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].code(), ReplyCode::WELCOME);
        assert_eq!(r[0].last().text, "BIRD 2.0.12 ready.");
    }

    #[test]
    fn show_protocols_uses_same_code_continuations() {
        let r = replies(
            "2002-Name       Proto      Table      State  Since         Info\n\
             1002-device1    Device     ---        up     06:35:06.039  \n \
             kernel1    Kernel     master4    up     06:35:06.039  \n \
             stator_vip4_192_0_2_10 Static     stator_v4  down   06:35:16.830  \n\
             0000 \n",
        );
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!(r.code(), ReplyCode::OK);
        assert_eq!(r.texts(ReplyCode::PROTOCOL_HEADING).count(), 1);
        let rows: Vec<&str> = r.texts(ReplyCode::PROTOCOL_LIST).collect();
        assert_eq!(rows.len(), 3);
        assert!(rows[1].starts_with("kernel1    Kernel"), "{rows:?}");
        assert!(rows[2].starts_with("stator_vip4_192_0_2_10 Static"));
        assert!(r.error().is_none());
    }

    #[test]
    fn configure_replies() {
        let ok =
            replies("0002-Reading configuration from /etc/bird/bird.conf\n0003 Reconfigured\n");
        assert_eq!(ok[0].code(), ReplyCode::RECONFIGURED);
        assert_eq!(
            ok[0].lines[0].text,
            "Reading configuration from /etc/bird/bird.conf"
        );
        let busy = replies(
            "0002-Reading configuration from node-a.conf\n0004 Reconfiguration in progress\n",
        );
        assert_eq!(busy[0].code(), ReplyCode::RECONFIG_IN_PROGRESS);
        let bad = replies(
            "0002-Reading configuration from /nonexistent\n\
             8002 /nonexistent: No such file or directory\n",
        );
        assert_eq!(bad[0].code(), ReplyCode::CONFIG_ERROR);
        assert_eq!(
            bad[0].error().unwrap().text,
            "/nonexistent: No such file or directory"
        );
        let check = replies("0002-Reading configuration from q.conf\n0020 Configuration OK\n");
        assert_eq!(check[0].code(), ReplyCode::CONFIG_OK);
    }

    #[test]
    fn enable_disable_and_errors() {
        let r = replies(
            "0011-stator_vip4_192_0_2_10: enabled\n0000 \n\
             0010-stator_vip4_192_0_2_10: already enabled\n0000 \n\
             0009-stator_vip4_192_0_2_10: disabled\n0000 \n\
             9001 syntax error, unexpected CF_SYM_UNDEFINED, expecting CF_SYM_KNOWN or TEXT or ALL\n\
             8003 No protocols match\n",
        );
        let codes: Vec<u16> = r.iter().map(|r| r.lines[0].code.0).collect();
        assert_eq!(codes, [11, 10, 9, 9001, 8003]);
        assert_eq!(r[0].code(), ReplyCode::OK);
        assert_eq!(r[3].code().class(), ReplyClass::ParseError);
        assert_eq!(r[4].code().class(), ReplyClass::RuntimeError);
    }

    #[test]
    fn show_status_mixes_codes_and_continuations() {
        let r = replies(
            "1000-BIRD 2.0.12\n1011-Router ID is 10.0.0.11\n Hostname is vm\n \
             Current server time is 2026-11-21 06:35:19.233\n0013 Daemon is up and running\n",
        );
        let r = &r[0];
        assert_eq!(r.code().0, 13);
        let uptime: Vec<&str> = r.texts(ReplyCode(1011)).collect();
        assert_eq!(uptime[1], "Hostname is vm");
    }

    #[test]
    fn spontaneous_lines_are_kept_apart() {
        let r = replies("+Config timeout expired, starting undo\n0000 \n");
        assert_eq!(r[0].spontaneous, ["Config timeout expired, starting undo"]);
        assert_eq!(r[0].lines.len(), 1);
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(parse_line("hello").is_err());
        assert!(parse_line("12").is_err());
        assert!(parse_line("0000x").is_err());
        assert!(parse_line("１２３４ fullwidth digits").is_err());
        assert_eq!(
            parse_line("0000"),
            Ok(Line::Final {
                code: ReplyCode::OK,
                text: ""
            })
        );
        assert_eq!(
            parse_line("0003 Reconfigured\r"),
            Ok(Line::Final {
                code: ReplyCode::RECONFIGURED,
                text: "Reconfigured"
            })
        );
        let mut a = ReplyAssembler::new();
        assert!(a.push(" orphan continuation").is_err());
    }
}
