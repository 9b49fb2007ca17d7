//! Human durations: `"500ms"`, `"2s"`, `"1m30s"`, `"1.5s"`, `"15m"`, `"1h"`.
//!
//! Grammar: one or more `<number><unit>` parts, optionally separated by spaces; `<number>` is
//! decimal digits with an optional fraction (`1.5`), `<unit>` one of `ns`, `us` (or `µs`), `ms`,
//! `s`, `m`, `h`, `d`. The parts add up. A bare number is rejected: configuration files in this
//! field disagree on whether `5` means seconds or milliseconds (keepalived vs HAProxy), so Stator
//! asks for the unit. Written here rather than taken from `humantime` so that the grammar and its
//! error messages are exactly what `docs/config.md` says, and months and years (which have no
//! fixed length) are not accepted.

use std::time::Duration;

const UNITS: [(&str, u128); 9] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
    // "min" is common enough in other tools to deserve a precise answer rather than "unknown".
    ("min", 60_000_000_000),
];

/// Parses a human duration; the error says why the text is not one.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("it is empty".into());
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        rest = rest[number_len..].trim_start();
        if number.is_empty() && !rest.starts_with(char::is_alphabetic) {
            let c = rest.chars().next().unwrap_or(' ');
            return Err(format!("unexpected character {c:?}"));
        }
        let unit_len = rest
            .find(|c: char| !(c.is_alphabetic()))
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = rest[unit_len..].trim_start();
        if number.is_empty() {
            return Err(format!("expected a number before {unit:?}"));
        }
        if unit.is_empty() {
            return Err(format!("{number} has no unit"));
        }
        let Some(&(_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(format!("unknown unit {unit:?}"));
        };
        total = total
            .checked_add(scaled(number, scale)?)
            .ok_or_else(|| "it is too long".to_string())?;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| "it is too long".to_string())?;
    // The remainder of a division by 10^9 always fits in u32.
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

/// `number` (digits with an optional fraction) times `scale` nanoseconds, exactly.
fn scaled(number: &str, scale: u128) -> Result<u128, String> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() || frac.contains('.') || (number.contains('.') && frac.is_empty()) {
        return Err(format!("{number:?} is not a number"));
    }
    let too_long = || "it is too long".to_string();
    let int: u128 = int.parse().map_err(|_| too_long())?;
    let mut value = int.checked_mul(scale).ok_or_else(too_long)?;
    if !frac.is_empty() {
        if frac.len() > 18 {
            return Err(format!("{number} has too many decimals"));
        }
        let denominator = 10u128.pow(frac.len() as u32);
        let frac: u128 = frac.parse().map_err(|_| too_long())?;
        let nanos = frac * scale;
        if !nanos.is_multiple_of(denominator) {
            return Err(format!("{number} is finer than a nanosecond"));
        }
        value = value
            .checked_add(nanos / denominator)
            .ok_or_else(too_long)?;
    }
    Ok(value)
}

/// Formats a duration in the same grammar, largest units first: `1m30s`, `1.5s`, `250ms`,
/// `0s`. Above a second, whole milliseconds are written as a fraction of the seconds.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    let mut out = String::new();
    let mut part = |value: u64, unit: &str| {
        if value != 0 {
            out.push_str(&format!("{value}{unit}"));
        }
    };
    part(secs / 86_400, "d");
    part(secs % 86_400 / 3_600, "h");
    part(secs % 3_600 / 60, "m");
    let s = secs % 60;
    if secs > 0 && nanos.is_multiple_of(1_000_000) {
        if nanos == 0 {
            part(s, "s");
        } else {
            let frac = format!("{:03}", nanos / 1_000_000);
            out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
        }
        return out;
    }
    part(s, "s");
    part(u64::from(nanos / 1_000_000), "ms");
    part(u64::from(nanos / 1_000 % 1_000), "us");
    part(u64::from(nanos % 1_000), "ns");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_units_and_sums() {
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("2s"), Ok(ms(2000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1m 30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration(" 15m "), Ok(ms(900_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("1d"), Ok(ms(86_400_000)));
        assert_eq!(parse_duration("2min"), Ok(ms(120_000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("0.25s"), Ok(ms(250)));
        assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("10µs"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_with_reasons() {
        assert_eq!(parse_duration("900"), Err("900 has no unit".into()));
        assert_eq!(parse_duration(""), Err("it is empty".into()));
        assert_eq!(
            parse_duration("5 years"),
            Err("unknown unit \"years\"".into())
        );
        assert_eq!(
            parse_duration("s"),
            Err("expected a number before \"s\"".into())
        );
        assert_eq!(
            parse_duration("1.2.3s"),
            Err("\"1.2.3\" is not a number".into())
        );
        assert_eq!(parse_duration("1.s"), Err("\"1.\" is not a number".into()));
        assert_eq!(
            parse_duration("0.5ns"),
            Err("0.5 is finer than a nanosecond".into())
        );
        assert_eq!(
            parse_duration("99999999999999999999999999999999999999d"),
            Err("it is too long".into())
        );
        assert_eq!(
            parse_duration("-5s"),
            Err("unexpected character '-'".into())
        );
        assert_eq!(parse_duration("5 s"), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn formats_round_trip() {
        for text in [
            "0s",
            "250ms",
            "1m30s",
            "15m",
            "2h",
            "1.5s",
            "1m0.25s",
            "1d1h1m1s1ms1us1ns",
        ] {
            let d = parse_duration(text).unwrap();
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
