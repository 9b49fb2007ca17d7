//! Fuzz target: the admin API's request bodies, what an operator (or a script acting as one)
//! sends to `PUT /v1/config`, `POST /v1/config:validate` and `POST /v1/backends/{id}/drain`.
//!
//! Byte 0 picks the body; the rest is its text (non-UTF-8 bytes replaced, as for `config`: the
//! handler refuses a body that is not UTF-8 before any of this runs).
//!
//! - **even: a JSON configuration** (`Content-Type: application/json`). The handler turns it
//!   into TOML with `stator_config::toml_from_json`, then treats it as a TOML body. Oracles: no
//!   panic; an `Ok` text is TOML whose value is the JSON's, key for key and value for value (an
//!   integer stays an integer, a number outside `i64` becomes the float JSON reads, strings
//!   byte for byte) — "the same document as TOML's structure" (docs/api.md) — and a JSON
//!   document containing `null` anywhere is refused; an `Err` names the `null` it found by its
//!   field path (the value there is `null`), or is a root error for text that is not a JSON
//!   object (located when it is not JSON at all). The TOML then goes through the `config`
//!   target's oracle (`common/config_oracle.rs`), as `PUT /v1/config` sends it to the loader.
//!   (A TOML body is the `config` target.)
//! - **odd: a drain timeout** (`{"timeout": "30s"}`): the string goes to
//!   `stator_config::duration::parse_duration`, as the handler does. Oracles: no panic, and a
//!   duration that parses prints (`format_duration`, what the API and `stator status` show) as
//!   text that parses back to the same duration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use stator_config::duration::{format_duration, parse_duration};
use stator_config::{Error, FieldPath, Segment, toml_from_json};

#[path = "common/config_oracle.rs"]
mod config_oracle;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(body);
    if which % 2 == 0 {
        json_config(&text);
    } else {
        drain_timeout(&text);
    }
});

fn json_config(text: &str) {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    match toml_from_json(text) {
        Ok(toml_text) => {
            let Some(Value::Object(json)) = &parsed else {
                panic!("converted text that is not a JSON object: {text:?}");
            };
            let table: toml::Table = toml::from_str(&toml_text).unwrap_or_else(|e| {
                panic!("the conversion wrote TOML that does not parse: {e}\n{toml_text}")
            });
            same_table(json, &table, &FieldPath::root());
            config_oracle::check_text("<admin API, JSON>", &toml_text);
        }
        Err(e) => match (&e.error, &parsed) {
            (Error::Invalid { value, .. }, Some(json)) => {
                assert_eq!(value, "null");
                assert!(!e.path.is_root(), "a null names its path");
                assert_eq!(
                    at(json, &e.path),
                    Some(&Value::Null),
                    "{} is not null",
                    e.path
                );
                assert!(has_null(json));
            }
            (Error::Json { message }, None) => {
                assert!(e.path.is_root() && e.location.is_some(), "{message}");
                assert!(message.starts_with("invalid JSON at line "), "{message}");
            }
            (Error::Json { message }, Some(json)) => {
                // TOML holds every JSON object without null (mixed arrays, any key, any
                // string): the only JSON refused as such is one that is not an object
                assert!(e.path.is_root() && !json.is_object(), "{message}: {json}");
            }
            (other, _) => panic!("unexpected error {other:?} at {}", e.path),
        },
    }
}

/// The JSON value at a field path.
fn at<'a>(mut v: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    for s in path.segments() {
        v = match s {
            Segment::Key(k) => v.as_object()?.get(k)?,
            Segment::Index(i) => v.as_array()?.get(*i)?,
        };
    }
    Some(v)
}

fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.iter().any(has_null),
        Value::Object(m) => m.values().any(has_null),
        _ => false,
    }
}

fn same_table(json: &serde_json::Map<String, Value>, toml: &toml::Table, at: &FieldPath) {
    assert_eq!(json.len(), toml.len(), "{at}: the same keys");
    for (k, v) in json {
        let t = toml
            .get(k)
            .unwrap_or_else(|| panic!("{at}: key {k:?} lost"));
        same_value(v, t, &at.key(k));
    }
}

fn same_value(json: &Value, toml: &toml::Value, at: &FieldPath) {
    match (json, toml) {
        (Value::Bool(a), toml::Value::Boolean(b)) => assert_eq!(a, b, "{at}"),
        (Value::String(a), toml::Value::String(b)) => assert_eq!(a, b, "{at}"),
        (Value::Number(n), toml::Value::Integer(i)) => assert_eq!(n.as_i64(), Some(*i), "{at}"),
        (Value::Number(n), toml::Value::Float(f)) => {
            assert!(n.as_i64().is_none(), "{at}: integer {n} became a float");
            let want = n.as_f64().unwrap_or(f64::NAN);
            assert!(want.to_bits() == f.to_bits(), "{at}: {n} became {f}");
        }
        (Value::Array(a), toml::Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{at}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                same_value(x, y, &at.index(i));
            }
        }
        (Value::Object(a), toml::Value::Table(b)) => same_table(a, b, at),
        (j, t) => panic!("{at}: JSON {j} became TOML {t}"),
    }
}

fn drain_timeout(text: &str) {
    let Ok(d) = parse_duration(text) else {
        return;
    };
    let shown = format_duration(d);
    assert_eq!(
        parse_duration(&shown),
        Ok(d),
        "{text:?} parsed as {d:?}, shown as {shown:?}"
    );
}
