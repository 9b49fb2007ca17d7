//! The configuration as JSON — the admin API's `application/json` body for `PUT /v1/config` and
//! `POST /v1/config:validate` (docs/api.md "Bodies"): the same document as the TOML file, tables
//! as objects and arrays as arrays, `null` not allowed. [`toml_from_json`] turns it into TOML
//! text of the same keys and structure, which then goes through [`crate::check_str`] and
//! [`crate::from_toml_str`] like a file, so that a JSON body's errors carry the field paths and
//! messages a file's would.
//!
//! Pure: text in, text out, no I/O, so that it is called (and fuzzed, `fuzz/`) without the API.

use serde_json::Value;

use crate::error::{ConfigError, Error, FieldPath, Location};

/// The TOML text of a JSON configuration document: the same keys and structure, a JSON
/// integer as a TOML integer (a number outside `i64` as a float), every other value as its
/// TOML counterpart.
///
/// # Errors
/// One [`ConfigError`]: [`Error::Json`] at the root for text that is not JSON (located) or
/// not an object, or for a document TOML cannot represent; [`Error::Invalid`] at the value's
/// path for a `null`.
pub fn toml_from_json(text: &str) -> Result<String, Box<ConfigError>> {
    let json = |message: String, location: Option<Location>| {
        Box::new(ConfigError {
            path: FieldPath::root(),
            location,
            error: Error::Json { message },
        })
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        json(
            format!(
                "invalid JSON at line {} column {}: {e}",
                e.line(),
                e.column()
            ),
            Some(Location {
                line: e.line(),
                column: e.column(),
            }),
        )
    })?;
    let Value::Object(map) = value else {
        return Err(json("the JSON body must be an object".into(), None));
    };
    let mut table = toml::Table::new();
    for (k, v) in map {
        let path = FieldPath::root().key(&k);
        table.insert(k, to_toml(v, &path)?);
    }
    toml::to_string(&table)
        .map_err(|e| json(format!("cannot represent the JSON as TOML: {e}"), None))
}

fn to_toml(v: Value, path: &FieldPath) -> Result<toml::Value, Box<ConfigError>> {
    Ok(match v {
        Value::Null => {
            return Err(Box::new(ConfigError::new(
                path.clone(),
                Error::Invalid {
                    value: "null".into(),
                    expected: "a value (leave the key out for its default)".into(),
                },
            )));
        }
        Value::Bool(b) => toml::Value::Boolean(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            // Without serde_json's arbitrary precision every number is an i64, u64 or f64.
            None => toml::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => toml::Value::String(s),
        Value::Array(a) => toml::Value::Array(
            a.into_iter()
                .enumerate()
                .map(|(i, v)| to_toml(v, &path.index(i)))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(m) => {
            let mut t = toml::Table::new();
            for (k, v) in m {
                let p = path.key(&k);
                t.insert(k, to_toml(v, &p)?);
            }
            toml::Value::Table(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_keys_and_structure() {
        let text = toml_from_json(
            r#"{"node": {"name": "a", "address_v4": "10.0.0.1"},
                "vip": [{"port": 80, "pools": ["web"], "w": 1.5}]}"#,
        )
        .unwrap();
        let back: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(back["node"]["name"].as_str(), Some("a"));
        assert_eq!(back["vip"][0]["port"].as_integer(), Some(80));
        assert_eq!(back["vip"][0]["pools"][0].as_str(), Some("web"));
        assert_eq!(back["vip"][0]["w"].as_float(), Some(1.5));
    }

    #[test]
    fn errors_say_where() {
        let e = toml_from_json(r#"{"node": {"name": null}}"#).unwrap_err();
        assert_eq!(e.path.to_string(), "node.name");
        assert_eq!(
            e.error.to_string(),
            "null is not a value (leave the key out for its default)"
        );
        let e = toml_from_json(r#"{"vip": [{}, {"port": null}]}"#).unwrap_err();
        assert_eq!(e.path.to_string(), "vip[1].port");
        let e = toml_from_json("{\"node\": ").unwrap_err();
        assert!(e.error.to_string().starts_with("invalid JSON at line 1"));
        assert_eq!(e.location.map(|l| l.line), Some(1));
        let e = toml_from_json("[1]").unwrap_err();
        assert_eq!(e.error.to_string(), "the JSON body must be an object");
    }
}
