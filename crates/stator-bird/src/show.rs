//! `show protocols [all]`, parsed (pure).
//!
//! Each protocol is one `1002` row — name, protocol, table, state, since, info — in columns
//! padded with spaces; `show protocols all` adds `1006` detail lines after each row, ending
//! with an empty one. Names longer than their column push the rest of the row to the right,
//! so rows are split on whitespace, not on column positions. The "since" column is one field
//! in BIRD's default time format (`06:35:06.039`) and two in `iso long` formats
//! (`2026-11-21 06:35:06.039`).

use crate::reply::{Reply, ReplyCode};

/// The state column of a protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolState {
    /// `up`: running; a static protocol's routes are in its table.
    Up,
    /// `down`: stopped (for Stator's static protocols: disabled, its route withdrawn).
    Down,
    /// `start`: starting (a BGP session not yet established stays here).
    Start,
    /// `stop`: stopping.
    Stop,
    /// `flush`: stopped, its routes being flushed from its tables.
    Flush,
    /// Anything else BIRD may print.
    Other(String),
}

impl ProtocolState {
    fn parse(s: &str) -> Self {
        match s {
            "up" => Self::Up,
            "down" => Self::Down,
            "start" => Self::Start,
            "stop" => Self::Stop,
            "flush" => Self::Flush,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// One protocol as `show protocols [all]` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    /// Its name (`tor1`, `stator_vip4_192_0_2_10`).
    pub name: String,
    /// Its protocol type as BIRD prints it (`BGP`, `Static`, `Device`).
    pub kind: String,
    /// Its main table (`---` for BGP).
    pub table: String,
    /// Its state.
    pub state: ProtocolState,
    /// When the state last changed, in BIRD's `timeformat protocol`.
    pub since: String,
    /// The info column (for BGP: `Established`, `Active  Socket: Connection refused`, …).
    pub info: String,
    /// The detail lines of `show protocols all` (without the final empty one).
    pub details: Vec<String>,
}

impl Protocol {
    /// The value of a detail line `Key:   value` (the first such line), trimmed.
    pub fn detail(&self, key: &str) -> Option<&str> {
        self.details.iter().find_map(|d| {
            let (k, v) = d.trim_start().split_once(':')?;
            (k == key).then(|| v.trim())
        })
    }

    /// For BGP, the session state from `show protocols all` (`Established`, `Active`, …).
    pub fn bgp_state(&self) -> Option<&str> {
        self.detail("BGP state")
    }

    /// Routes currently exported, summed over the protocol's channels (`Routes: 0 imported,
    /// 2 exported, …`). `None` when no channel reports routes (the protocol is not up).
    pub fn exported_routes(&self) -> Option<u64> {
        let mut total = None;
        for d in &self.details {
            let Some(routes) = d.trim_start().strip_prefix("Routes:") else {
                continue;
            };
            for part in routes.split(',') {
                let mut words = part.split_whitespace();
                if let (Some(n), Some("exported")) = (words.next(), words.next())
                    && let Ok(n) = n.parse::<u64>()
                {
                    total = Some(total.unwrap_or(0) + n);
                }
            }
        }
        total
    }
}

/// Reads the protocols out of a `show protocols [all]` reply.
pub fn parse_protocols(reply: &Reply) -> Vec<Protocol> {
    let mut out: Vec<Protocol> = Vec::new();
    for line in &reply.lines {
        if line.code == ReplyCode::PROTOCOL_LIST {
            if let Some(p) = parse_row(&line.text) {
                out.push(p);
            }
        } else if line.code == ReplyCode::PROTOCOL_DETAILS
            && let Some(p) = out.last_mut()
            && !line.text.trim().is_empty()
        {
            p.details.push(line.text.clone());
        }
    }
    out
}

/// Splits off the first whitespace-separated word: `(word, rest)`.
fn word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

fn looks_like_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// One `1002` row: name, kind, table, state, since (one or two words), info (the rest).
fn parse_row(text: &str) -> Option<Protocol> {
    let (name, rest) = word(text)?;
    let (kind, rest) = word(rest)?;
    let (table, rest) = word(rest)?;
    let (state, rest) = word(rest)?;
    let (first, mut rest) = word(rest).unwrap_or(("", ""));
    let mut since = first.to_owned();
    if looks_like_date(first)
        && let Some((time, after)) = word(rest)
        && time.starts_with(|c: char| c.is_ascii_digit())
        && time.contains(':')
    {
        since = format!("{first} {time}");
        rest = after;
    }
    Some(Protocol {
        name: name.to_owned(),
        kind: kind.to_owned(),
        table: table.to_owned(),
        state: ProtocolState::parse(state),
        since,
        info: rest.trim().to_owned(),
        details: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::ReplyAssembler;

    fn reply(raw: &str) -> Reply {
        let mut a = ReplyAssembler::new();
        for line in raw.split_terminator('\n') {
            if let Some(r) = a.push(line).unwrap() {
                return r;
            }
        }
        panic!("no final line");
    }

    /// Recorded from BIRD 2.0.12 with its default time format.
    const SHOW_PROTOCOLS: &str = "2002-Name       Proto      Table      State  Since         Info
1002-device1    Device     ---        up     06:37:08.871  
 x          BGP        ---        start  06:37:08.871  Idle          
 y          BGP        ---        start  06:37:08.871  Active        Socket: Connection refused
 stator_vip4_192_0_2_10 Static     stator_v4  down   06:37:08.871  
0000 
";

    /// Recorded with `timeformat protocol iso long ms`.
    const SHOW_PROTOCOLS_ALL: &str =
        "2002-Name       Proto      Table      State  Since         Info
1002-stator_vip4_192_0_2_10 Static     stator_v4  up     2026-11-21 06:35:24.001  
1006-  Channel ipv4
     State:          UP
     Table:          stator_v4
     Preference:     200
     Input filter:   ACCEPT
     Output filter:  REJECT
     Routes:         1 imported, 0 exported, 1 preferred
 
1002-tor1       BGP        ---        up     2026-11-21 06:35:10.759  Established   
1006-  Description:    Stator VIPs to 10.0.0.1
   Router ID:      10.0.0.11
   BGP state:          Established
     Neighbor address: 10.0.0.1
     Neighbor AS:      65000
     Local AS:         65010
   Channel ipv4
     State:          UP
     Table:          stator_v4
     Routes:         0 imported, 2 exported, 0 preferred
     BGP Next hop:   10.0.0.11
 
1002-x          BGP        ---        start  2026-11-21 06:37:08.871  Idle          
1006-  BGP state:          Idle
     Neighbor address: 10.9.9.1
   Channel ipv4
     State:          DOWN
 
0000 
";

    #[test]
    fn rows_in_the_default_time_format() {
        let p = parse_protocols(&reply(SHOW_PROTOCOLS));
        let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["device1", "x", "y", "stator_vip4_192_0_2_10"]);
        assert_eq!(p[0].state, ProtocolState::Up);
        assert_eq!(p[0].since, "06:37:08.871");
        assert_eq!(p[0].info, "");
        assert_eq!(p[2].kind, "BGP");
        assert_eq!(p[2].state, ProtocolState::Start);
        assert_eq!(p[2].info, "Active        Socket: Connection refused");
        // A name wider than its column shifts the row; fields still come out right.
        assert_eq!(p[3].kind, "Static");
        assert_eq!(p[3].table, "stator_v4");
        assert_eq!(p[3].state, ProtocolState::Down);
        assert!(p.iter().all(|p| p.details.is_empty()));
    }

    #[test]
    fn details_with_iso_long_times() {
        let p = parse_protocols(&reply(SHOW_PROTOCOLS_ALL));
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].since, "2026-11-21 06:35:24.001");
        assert_eq!(p[0].exported_routes(), Some(0));
        assert_eq!(p[0].bgp_state(), None);
        assert_eq!(p[1].since, "2026-11-21 06:35:10.759");
        assert_eq!(p[1].info, "Established");
        assert_eq!(p[1].bgp_state(), Some("Established"));
        assert_eq!(p[1].detail("Neighbor address"), Some("10.0.0.1"));
        assert_eq!(p[1].exported_routes(), Some(2));
        assert_eq!(p[2].bgp_state(), Some("Idle"));
        assert_eq!(
            p[2].exported_routes(),
            None,
            "a channel that is down reports none"
        );
    }

    #[test]
    fn states_and_odd_rows() {
        for (s, want) in [
            ("stop", ProtocolState::Stop),
            ("flush", ProtocolState::Flush),
            ("weird", ProtocolState::Other("weird".into())),
        ] {
            let row = format!("p1 Static t {s} 10:00:00");
            assert_eq!(parse_row(&row).unwrap().state, want);
        }
        assert!(parse_row("too short").is_none());
        let no_since = parse_row("p1 Static t up").unwrap();
        assert_eq!((no_since.since.as_str(), no_since.info.as_str()), ("", ""));
        let filtered = Protocol {
            details: vec![
                "    Routes:         3 imported, 1 filtered, 5 exported, 2 preferred".into(),
            ],
            ..parse_row("p BGP --- up 10:00:00").unwrap()
        };
        assert_eq!(filtered.exported_routes(), Some(5));
    }
}
