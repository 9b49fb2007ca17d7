//! What can be wrong with a configuration, and where.
//!
//! Every problem is a [`ConfigError`]: a [`FieldPath`] in TOML terms (`vip[2].table_size`), an
//! [`Error`] saying what is wrong (and, where useful, what would be valid), and — when the text
//! of the file is known — a [`Location`] (line and column). [`Error`] is the crate's one error
//! enum. Things that are legal but probably not meant are [`Warning`]s; they never reject a
//! configuration.

use std::fmt;

use serde::Serialize;

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A key of a table: `vip`, `table_size`.
    Key(String),
    /// An index into an array (of tables): the `2` of `vip[2]`.
    Index(usize),
}

/// Where a value sits in the TOML document, written as `pool[0].backend[3].address`: keys
/// joined by `.`, array indices (counting from 0, in file order) in brackets. Keys that are not
/// TOML bare keys are quoted. The root path is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(Vec<Segment>);

impl FieldPath {
    /// The empty path (the whole document).
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// This path followed by `key`.
    pub fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Key(key.to_owned()));
        Self(segments)
    }

    /// This path followed by `[index]`.
    pub fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Index(index));
        Self(segments)
    }

    /// The steps of the path, outermost first.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// Whether this is the root (empty) path.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<Segment>> for FieldPath {
    fn from(segments: Vec<Segment>) -> Self {
        Self(segments)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Index(index) => write!(f, "[{index}]")?,
                Segment::Key(key) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    let bare = !key.is_empty()
                        && key
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    if bare {
                        f.write_str(key)?;
                    } else {
                        write!(f, "{key:?}")?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Serialize for FieldPath {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A position in the configuration text: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1, counted in characters.
    pub column: usize,
}

impl Location {
    /// The location of byte `offset` in `text` (clamped to the text's end and to a character
    /// boundary).
    pub fn of_offset(text: &str, offset: usize) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Self { line, column }
    }
}

/// The start of every line of a text, so that each of many offsets is located by a binary
/// search rather than a scan of the text before it. [`Location::of_offset`] for every error
/// made checking quadratic: a 300 KB file with 200,000 syntax errors took 3 minutes in
/// `stator check` (found through the `config` fuzz target's speed).
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    /// Byte offset of each line's first character; `starts[0] == 0`.
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self { text, starts }
    }

    /// The same as [`Location::of_offset`]`(text, offset)`.
    pub(crate) fn locate(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        // the last line starting at or before `offset`
        let line = self.starts.partition_point(|&s| s <= offset);
        let line_start = self.starts[line - 1];
        let column = self.text[line_start..offset].chars().count() + 1;
        Location { line, column }
    }
}

/// The most errors one report lists; the rest are counted in a last error
/// ([`Error::NotShown`]). A report is read by a person, and the admin API returns it: without
/// a bound, a body of 16 MiB of bad lines answered with millions of errors.
pub const MAX_REPORTED: usize = 100;

/// Keeps the first [`MAX_REPORTED`] errors and replaces the rest with one that counts them,
/// placed at the first one left out (its path and location).
pub(crate) fn bound_errors(errors: &mut Vec<ConfigError>) {
    if errors.len() <= MAX_REPORTED {
        return;
    }
    let count = errors.len() - MAX_REPORTED;
    let first = errors.swap_remove(MAX_REPORTED);
    errors.truncate(MAX_REPORTED);
    errors.push(ConfigError {
        path: first.path,
        location: first.location,
        error: Error::NotShown { count },
    });
}

/// What is wrong with a configuration value. The message never repeats the path; a
/// [`ConfigError`] puts the two together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read {file}: {reason}")]
    Read {
        /// The file.
        file: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The text is not valid TOML.
    #[error("TOML syntax: {message}")]
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// More errors than a report lists ([`MAX_REPORTED`]): how many were left out.
    #[error("{count} more errors not shown (fix the ones above first)")]
    NotShown {
        /// How many.
        count: usize,
    },
    /// The TOML does not fit the schema: unknown key, wrong type, unknown enum value.
    #[error("{message}")]
    Schema {
        /// What serde found, in TOML words.
        message: String,
    },
    /// A required key is absent.
    #[error("missing: {hint}")]
    Missing {
        /// What to write.
        hint: String,
    },
    /// A list that must have entries is empty.
    #[error("must not be empty{hint}")]
    Empty {
        /// More detail, starting with "; " (or empty).
        hint: String,
    },
    /// A value outside its allowed range.
    #[error("{value} is out of range: must be between {min} and {max}{hint}")]
    OutOfRange {
        /// The value as written.
        value: String,
        /// Smallest valid value.
        min: String,
        /// Largest valid value.
        max: String,
        /// More detail, starting with "; " (or empty).
        hint: String,
    },
    /// A value that does not have the required form.
    #[error("{value} is not {expected}")]
    Invalid {
        /// The value as written (quoted when it was a string).
        value: String,
        /// What it should be, e.g. "an IP address" or "a prime number (try 65537)".
        expected: String,
    },
    /// A duration that cannot be read.
    #[error(
        "{value} is not a duration: {reason}; write e.g. \"500ms\", \"2s\" or \"1m30s\" \
         (units: ns, us, ms, s, m, h, d)"
    )]
    Duration {
        /// The value as written (quoted when it was a string).
        value: String,
        /// Why not.
        reason: String,
    },
    /// An address of the wrong family for this key.
    #[error("{address} is an {actual} address; {expected}")]
    WrongFamily {
        /// The address.
        address: String,
        /// "IPv4" or "IPv6".
        actual: &'static str,
        /// What is expected, e.g. "node.address_v4 must be IPv4 (use node.address_v6)".
        expected: String,
    },
    /// A well-formed address that cannot serve here.
    #[error("{address} cannot be used here: it is {reason}")]
    UnusableAddress {
        /// The address.
        address: String,
        /// e.g. "multicast".
        reason: String,
    },
    /// A backend of a family the node has no source address for.
    #[error(
        "{address} is an {family} backend, but node.{key} (the outer source address for \
         encapsulating to {family} backends) is not set"
    )]
    NoNodeAddress {
        /// The backend address.
        address: String,
        /// "IPv4" or "IPv6".
        family: &'static str,
        /// "address_v4" or "address_v6".
        key: &'static str,
    },
    /// Two keys that exclude each other are both set.
    #[error("set either {first} or {second}, not both")]
    Exclusive {
        /// One key.
        first: &'static str,
        /// The other key.
        second: &'static str,
    },
    /// A setting that would leave the node open to its users or clients, or make it attack
    /// itself.
    #[error("{reason}")]
    Unsafe {
        /// What would happen, and what to do instead.
        reason: String,
    },
    /// A key that has no meaning in this context.
    #[error("{reason}")]
    NotApplicable {
        /// Why it does not apply.
        reason: String,
    },
    /// A value that must be unique appears again.
    #[error("duplicate {what} {value} (first at {first})")]
    Duplicate {
        /// What kind of thing, e.g. "pool name".
        what: &'static str,
        /// The value.
        value: String,
        /// Where it appeared first.
        first: FieldPath,
    },
    /// A name that refers to no pool.
    #[error("no pool is named {name:?}{hint}")]
    UnknownPool {
        /// The reference.
        name: String,
        /// A suggestion or the list of pools, starting with "; ".
        hint: String,
    },
    /// Pools that include each other.
    #[error("include cycle {cycle}")]
    IncludeCycle {
        /// The cycle, e.g. "web -> canary -> web".
        cycle: String,
    },
    /// A pool with no backend, even through its includes.
    #[error("pool {name:?} has no backends (none of its own and none through include)")]
    EmptyPool {
        /// The pool.
        name: String,
    },
    /// Two backend entries that are the same backend disagree.
    #[error("{backend} is configured differently at {other}: {detail}")]
    BackendConflict {
        /// The backend (address and port).
        backend: String,
        /// The other entry.
        other: FieldPath,
        /// What differs.
        detail: String,
    },
    /// A backend a VIP reaches through several pools with different weights.
    #[error(
        "backend {backend:?} reaches this VIP with weight {first_weight} through pool \
         {first_pool:?} and weight {second_weight} through pool {second_pool:?}; give it one \
         weight for this VIP"
    )]
    WeightConflict {
        /// The backend's stable name.
        backend: String,
        /// Weight through the first pool.
        first_weight: u32,
        /// The first pool.
        first_pool: String,
        /// Weight through the second pool.
        second_weight: u32,
        /// The second pool.
        second_pool: String,
    },
    /// A Maglev table size that is not prime.
    #[error("{value} is not prime{hint}")]
    NotPrime {
        /// The size.
        value: u32,
        /// The nearest primes, starting with "; ".
        hint: String,
    },
    /// A Maglev table with fewer slots than backends.
    #[error(
        "{table_size} is smaller than the VIP's {backends} backends: table_size must be at least \
         the number of backends (and 100 times it for even shares)"
    )]
    TableTooSmall {
        /// The table size.
        table_size: u32,
        /// How many backends the VIP has.
        backends: usize,
    },
    /// A VIP whose backends all have weight 0.
    #[error(
        "the VIP's total weight is 0 ({backends}, all with weight 0, which means draining): \
         at least one backend needs a weight > 0"
    )]
    ZeroTotalWeight {
        /// How many backends the VIP has, e.g. "3 backends".
        backends: String,
    },
    /// A health-check parameter that does not make sense.
    #[error("{reason}")]
    Health {
        /// What is wrong.
        reason: String,
    },
    /// More of something than the compiled data plane can hold.
    #[error("{what}: {count} exceeds {limit_name} = {limit}{hint}")]
    Limit {
        /// What was counted.
        what: String,
        /// How many the configuration needs.
        count: u64,
        /// The name of the limit, e.g. "STATOR_MAX_VIPS".
        limit_name: &'static str,
        /// The limit.
        limit: u64,
        /// More detail, starting with "; " (or empty).
        hint: String,
    },
    /// Two prefixes (or group VIPs) that a packet could match both ways.
    #[error("{value} overlaps {other} (at {first})")]
    Overlap {
        /// This one.
        value: String,
        /// The other one.
        other: String,
        /// Where the other one is.
        first: FieldPath,
    },
    /// Something valid in the schema that this build does not do yet.
    #[error("{what} is not supported yet{hint}")]
    Unsupported {
        /// What.
        what: String,
        /// What to use instead, starting with "; " (or empty).
        hint: String,
    },
    /// A JSON form of the configuration ([`crate::json`]) that is not a document of the
    /// configuration's structure.
    #[error("{message}")]
    Json {
        /// What is wrong, e.g. "invalid JSON at line 1 column 9: EOF while parsing a value".
        message: String,
    },
}

/// One problem with a configuration: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where, in TOML terms.
    pub path: FieldPath,
    /// Line and column, when the configuration text is known.
    pub location: Option<Location>,
    /// What is wrong.
    pub error: Error,
}

impl ConfigError {
    /// An error at `path` (location unknown until [`crate::check`] resolves it).
    pub fn new(path: FieldPath, error: Error) -> Self {
        Self {
            path,
            location: None,
            error,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_root() {
            write!(f, "{}", self.error)
        } else {
            write!(f, "{}: {}", self.path, self.error)
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Every problem found in one configuration, in document order where known. This is what a
/// caller gets instead of a [`crate::Config`]; nothing of the configuration may be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file name the text came from, for messages (`"<input>"` if none).
    pub file: String,
    /// The problems (never empty).
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write_line(f, &self.file, error.location, "error", error)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Writes `file:line:column: severity: message` (or `file: severity: message`).
pub(crate) fn write_line(
    f: &mut fmt::Formatter<'_>,
    file: &str,
    location: Option<Location>,
    severity: &str,
    message: &dyn fmt::Display,
) -> fmt::Result {
    match location {
        Some(Location { line, column }) => {
            write!(f, "{file}:{line}:{column}: {severity}: {message}")
        }
        None => write!(f, "{file}: {severity}: {message}"),
    }
}

/// What is probably not meant, though valid.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarningKind {
    /// A Maglev table too small to keep weight shares within 1%.
    SmallTable {
        /// The table size.
        table_size: u32,
        /// The VIP's backends.
        backends: usize,
    },
    /// A pool no VIP uses, directly or through include.
    UnusedPool {
        /// The pool.
        name: String,
    },
    /// A backend port that differs from the VIP's port (Stator does not rewrite ports).
    PortNotRewritten {
        /// The backend.
        backend: String,
        /// The VIP's port.
        vip_port: u16,
    },
    /// One address behind a VIP as several backends (different ports): it gets several shares.
    SharedAddress {
        /// The address.
        address: String,
        /// The backends' stable names.
        backends: Vec<String>,
    },
    /// VIPs of a family that no BGP neighbour of that family can announce.
    NotAnnounced {
        /// "IPv4" or "IPv6".
        family: &'static str,
    },
    /// The worst case of descriptors does not fit the host's limit.
    Descriptors {
        /// The worst case.
        need: u64,
        /// The host's limit.
        limit: u64,
        /// What the listeners get.
        budget: u64,
        /// The least the listeners need to serve at all (one client per worker).
        min_traffic: u64,
        /// The plan, part by part, with field paths.
        parts: String,
    },
}

impl fmt::Display for WarningKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SmallTable {
                table_size,
                backends,
            } => write!(
                f,
                "table_size {table_size} is less than 100 x {backends} backends: Maglev keeps \
                 weight shares within 1% only when table_size >= 100 x backends"
            ),
            Self::UnusedPool { name } => {
                write!(f, "pool {name:?} is not used by any VIP or listener")
            }
            Self::PortNotRewritten { backend, vip_port } => write!(
                f,
                "backend {backend} has a port different from the VIP's port {vip_port}: Stator \
                 does not rewrite ports (direct server return), the backend receives port \
                 {vip_port}; the backend port only sets the health-check port and the stable name"
            ),
            Self::SharedAddress { address, backends } => write!(
                f,
                "{address} is behind this VIP as {} backends ({}): packets are forwarded by \
                 address (ports are not rewritten), so it receives {} shares",
                backends.len(),
                backends.join(", "),
                backends.len()
            ),
            Self::NotAnnounced { family } => write!(
                f,
                "no {family} BGP neighbor: {family} VIPs will not be announced (a neighbor \
                 announces the VIPs of its own address family)"
            ),
            Self::Descriptors {
                need,
                limit,
                budget,
                min_traffic,
                parts,
            } if budget < min_traffic => write!(
                f,
                "the descriptor limit here ({limit}, the hard RLIMIT_NOFILE that stator run \
                 raises to) leaves the listeners {budget} descriptors once health checks, the \
                 admin API and the process have theirs: fewer than one client per worker needs \
                 ({min_traffic}), so stator run refuses to start. Worst case {need}: {parts}. \
                 Raise the limit (LimitNOFILE= in the systemd unit) or reserve less"
            ),
            Self::Descriptors {
                need,
                limit,
                budget,
                parts,
                ..
            } => write!(
                f,
                "the worst case needs {need} descriptors, more than the limit here ({limit}, the \
                 hard RLIMIT_NOFILE that stator run raises to): the listeners get {budget} and \
                 refuse what is beyond them (counted as `descriptors`) while health checks and \
                 the admin API keep theirs. {parts}. Lower these settings, or raise the limit \
                 (LimitNOFILE= in the systemd unit)"
            ),
        }
    }
}

/// Something valid that is probably not meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Where, in TOML terms.
    pub path: FieldPath,
    /// Line and column, when the configuration text is known.
    pub location: Option<Location>,
    /// What.
    pub kind: WarningKind,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_root() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}: {}", self.path, self.kind)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_display() {
        let p = FieldPath::root()
            .key("pool")
            .index(0)
            .key("backend")
            .index(3)
            .key("address");
        assert_eq!(p.to_string(), "pool[0].backend[3].address");
        assert_eq!(
            FieldPath::root().key("a b").key("c").to_string(),
            "\"a b\".c"
        );
        assert_eq!(FieldPath::root().to_string(), "");
    }

    #[test]
    fn location_of_offset() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(
            Location::of_offset(text, 0),
            Location { line: 1, column: 1 }
        );
        assert_eq!(
            Location::of_offset(text, 6),
            Location { line: 2, column: 1 }
        );
        // 'é' is two bytes; the '=' after it is column 4.
        assert_eq!(
            Location::of_offset(text, 10),
            Location { line: 2, column: 4 }
        );
        assert_eq!(Location::of_offset(text, 999).line, 3);
    }

    #[test]
    fn line_index_agrees_with_of_offset_everywhere() {
        for text in [
            "",
            "\n",
            "a = 1\nbé = 2\n",
            "x\n\n€y\nz",
            "no newline at all",
        ] {
            let index = LineIndex::new(text);
            for offset in 0..=text.len() + 2 {
                assert_eq!(
                    index.locate(offset),
                    Location::of_offset(text, offset),
                    "offset {offset} of {text:?}"
                );
            }
        }
    }
}
