//! Text → [`RawConfig`], and paths → line and column.
//!
//! The text is parsed once into toml's spanned document (`DeTable`), which reports *every*
//! syntax error it can recover from; then serde fills [`RawConfig`] through
//! `serde_path_to_error`, so a schema error (unknown key, wrong type) carries its field path
//! as well as its position. Schema errors stop at the first one — serde cannot go on past a
//! value it could not read — which is why the raw types are permissive (see [`crate::raw`]) and
//! most checks happen in validation, where all errors are collected.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use crate::error::{ConfigError, Error, FieldPath, LineIndex, Location, Segment, bound_errors};
use crate::raw::RawConfig;

/// A parsed document: the raw configuration, plus what is needed to locate paths in the text.
pub(crate) struct Parsed<'a> {
    pub raw: RawConfig,
    pub doc: Doc<'a>,
}

/// The spanned document, for [`Doc::locate`].
pub(crate) struct Doc<'a> {
    lines: LineIndex<'a>,
    root: DeValue<'a>,
}

impl Doc<'_> {
    /// The line and column of `path`: of its value if present, else of the nearest enclosing
    /// table or array that is (a missing key points at its table).
    pub fn locate(&self, path: &FieldPath) -> Option<Location> {
        let mut span: Option<Range<usize>> = None;
        let mut value = &self.root;
        for segment in path.segments() {
            let next = match segment {
                Segment::Key(k) => value.get(k.as_str()),
                Segment::Index(i) => value.get(*i),
            };
            let Some(next) = next else { break };
            span = Some(next.span());
            value = next.get_ref();
        }
        span.map(|s| self.lines.locate(s.start))
    }

    /// Fills in the location of each error from its path (errors that have one keep it).
    pub fn locate_all(&self, errors: &mut [ConfigError]) {
        for e in errors {
            if e.location.is_none() {
                e.location = self.locate(&e.path);
            }
        }
    }
}

/// Parses TOML text into a [`RawConfig`]; on failure, every syntax error, or the first schema
/// error, located.
pub(crate) fn parse(text: &str) -> Result<Parsed<'_>, Vec<ConfigError>> {
    let (table, syntax_errors) = DeTable::parse_recoverable(text);
    let lines = LineIndex::new(text);
    if !syntax_errors.is_empty() {
        let mut errors: Vec<ConfigError> = syntax_errors
            .iter()
            .map(|e| ConfigError {
                path: FieldPath::root(),
                // the parser gives no place for its nesting limits (a dotted key or arrays
                // nested too deep): the most deeply nested line is the one to look at
                location: Some(
                    e.span()
                        .map_or_else(|| deepest_line(text), |s| lines.locate(s.start)),
                ),
                error: Error::Syntax {
                    message: match e.message().trim() {
                        "recursion limit" | "cannot recurse further; max recursion depth met" => {
                            "nested deeper than the parser allows (dotted keys, arrays or inline \
                             tables)"
                                .to_owned()
                        }
                        m => m.to_owned(),
                    },
                },
            })
            .collect();
        bound_errors(&mut errors);
        return Err(errors);
    }
    let doc = Doc {
        lines,
        root: DeValue::Table(table.get_ref().clone()),
    };
    let deserializer = toml::Deserializer::from(table);
    match serde_path_to_error::deserialize::<_, RawConfig>(deserializer) {
        Ok(raw) => Ok(Parsed { raw, doc }),
        Err(e) => {
            let path = field_path(e.path());
            let location = e
                .inner()
                .span()
                .map(|s| doc.lines.locate(s.start))
                .or_else(|| doc.locate(&path));
            Err(vec![ConfigError {
                path,
                location,
                error: Error::Schema {
                    message: toml_words(e.inner().message()),
                },
            }])
        }
    }
}

/// The start of the line with the most nesting — dots, brackets and braces, outside strings
/// and comments — where a syntax error comes without a place (found by the `config` fuzz
/// target: a dotted key past the parser's recursion limit).
fn deepest_line(text: &str) -> Location {
    let mut best = (0, 0);
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let (mut depth, mut quote) = (0usize, None);
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '.' | '[' | '{') => depth += 1,
                _ => {}
            }
        }
        if depth > best.0 {
            best = (depth, start);
        }
        start += line.len();
    }
    Location::of_offset(text, best.1)
}

/// serde_path_to_error's path in our terms.
fn field_path(path: &serde_path_to_error::Path) -> FieldPath {
    use serde_path_to_error::Segment as S;
    path.iter()
        .filter_map(|s| match s {
            S::Seq { index } => Some(Segment::Index(*index)),
            S::Map { key } => Some(Segment::Key(key.clone())),
            S::Enum { variant } => Some(Segment::Key(variant.clone())),
            S::Unknown => None,
        })
        .collect::<Vec<_>>()
        .into()
}

/// serde speaks of fields, variants, maps, sequences and Rust struct names; a TOML file has
/// keys, values, tables and arrays.
fn toml_words(message: &str) -> String {
    let mut out = message
        .trim()
        .replace("unknown field", "unknown key")
        .replace("missing field", "missing key")
        .replace("unknown variant", "unknown value")
        .replace("there are no fields", "this table has no keys")
        .replace("a sequence", "an array")
        .replace("type: sequence", "type: array")
        .replace("type: map", "type: table");
    // "expected struct RawNode" names a type of this crate; the user wrote TOML.
    while let Some(start) = out.find("struct Raw") {
        let end = out[start + 7..]
            .find(|c: char| !c.is_alphanumeric())
            .map_or(out.len(), |i| start + 7 + i);
        out.replace_range(start..end, "a table");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Doc<'_> {
        parse(text).ok().unwrap().doc
    }

    #[test]
    fn locates_values_tables_and_missing_keys() {
        let text = "[node]\nname = \"a\"\n\n[[vip]]\naddress = \"x\"\n\n[[vip]]\ntable_size = 9\n";
        let d = doc(text);
        let p = |s: &[Segment]| FieldPath::from(s.to_vec());
        let k = |s: &str| Segment::Key(s.into());
        let at = |line, column| Some(Location { line, column });
        assert_eq!(d.locate(&p(&[k("node"), k("name")])), at(2, 8));
        assert_eq!(
            d.locate(&p(&[k("vip"), Segment::Index(1), k("table_size")])),
            at(8, 14)
        );
        // A table: its header.
        assert_eq!(d.locate(&p(&[k("vip"), Segment::Index(1)])), at(7, 1));
        // A missing key: its table.
        assert_eq!(
            d.locate(&p(&[k("vip"), Segment::Index(0), k("port")])),
            at(4, 1)
        );
        assert_eq!(d.locate(&p(&[k("bgp")])), None);
    }

    #[test]
    fn all_syntax_errors_are_reported() {
        let errors = parse("a = \nb = 1\nb = 2\n").err().unwrap();
        assert!(errors.len() >= 2, "{errors:?}");
        assert!(errors.iter().all(|e| e.location.is_some()));
    }

    #[test]
    fn schema_messages_speak_toml() {
        let message = |text: &str| parse(text).err().unwrap()[0].error.to_string();
        assert_eq!(
            message("node = 1\n"),
            "invalid type: integer `1`, expected a table"
        );
        assert_eq!(
            message("[dataplane]\ninterfaces = \"eth0\"\n"),
            "invalid type: string \"eth0\", expected an array"
        );
        assert_eq!(
            message("[[vip]]\npools = { a = 1 }\n"),
            "invalid type: table, expected an array"
        );
    }

    #[test]
    fn schema_error_has_path_and_location() {
        let errors = parse("[[vip]]\naddress = \"x\"\n[[vip]]\nprot = 1\n")
            .err()
            .unwrap();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path.to_string(), "vip[1].prot");
        assert_eq!(errors[0].location, Some(Location { line: 4, column: 1 }));
        assert!(
            errors[0]
                .to_string()
                .starts_with("vip[1].prot: unknown key `prot`"),
            "{}",
            errors[0]
        );
    }
}
