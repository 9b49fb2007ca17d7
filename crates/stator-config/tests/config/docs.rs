//! `docs/config.md` documents every key of every table, and nothing else: its tables are
//! compared with the keys the schema accepts, which the schema itself lists when it rejects an
//! unknown key.

use std::collections::BTreeSet;

use stator_config::check_str;

/// For each table heading of the docs, a document that puts an unknown key in that table.
const TABLES: &[(&str, &str)] = &[
    ("[node]", "[node]\nzz_unknown = 1\n"),
    ("[dataplane]", "[dataplane]\nzz_unknown = 1\n"),
    ("[dataplane.afxdp]", "[dataplane.afxdp]\nzz_unknown = 1\n"),
    ("[encap]", "[encap]\nzz_unknown = 1\n"),
    ("[bgp]", "[bgp]\nzz_unknown = 1\n"),
    ("[[bgp.neighbor]]", "[[bgp.neighbor]]\nzz_unknown = 1\n"),
    ("[api]", "[api]\nzz_unknown = 1\n"),
    ("[log]", "[log]\nzz_unknown = 1\n"),
    ("[upgrade]", "[upgrade]\nzz_unknown = 1\n"),
    ("[[pool]]", "[[pool]]\nzz_unknown = 1\n"),
    ("[pool.health]", "[[pool]]\n[pool.health]\nzz_unknown = 1\n"),
    (
        "[[pool.backend]]",
        "[[pool]]\n[[pool.backend]]\nzz_unknown = 1\n",
    ),
    ("[[vip]]", "[[vip]]\nzz_unknown = 1\n"),
    ("[[listener]]", "[[listener]]\nzz_unknown = 1\n"),
    (
        "[listener.timeouts]",
        "[[listener]]\n[listener.timeouts]\nzz_unknown = 1\n",
    ),
    (
        "[listener.http]",
        "[[listener]]\n[listener.http]\nzz_unknown = 1\n",
    ),
    (
        "[listener.udp]",
        "[[listener]]\n[listener.udp]\nzz_unknown = 1\n",
    ),
    ("[[vip_class]]", "[[vip_class]]\nzz_unknown = 1\n"),
    ("[fragments]", "[fragments]\nzz_unknown = 1\n"),
    ("[tracer]", "[tracer]\nzz_unknown = 1\n"),
    ("[access_log]", "[access_log]\nzz_unknown = 1\n"),
    ("[receive_steering]", "[receive_steering]\nzz_unknown = 1\n"),
];

/// The keys the schema accepts in a table, from its "unknown key" message.
fn schema_keys(toml: &str) -> BTreeSet<String> {
    let report = check_str("t.toml", toml);
    let message = &report.errors[0].message;
    assert!(message.starts_with("unknown key `zz_unknown`"), "{message}");
    message
        .split('`')
        .skip(3)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// The keys in the first column of each documented table, by section heading.
fn documented_keys(doc: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in doc.lines() {
        if line.starts_with('#') {
            if let Some(section) = line.split('`').nth(1).filter(|s| s.starts_with('[')) {
                out.push((section.to_string(), BTreeSet::new()));
            }
        } else if let (Some(cell), Some((_, keys))) = (line.strip_prefix("| `"), out.last_mut()) {
            let cell = cell.split(" |").next().unwrap_or_default();
            keys.extend(
                format!("`{cell}")
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(String::from),
            );
        }
    }
    out
}

#[test]
fn every_key_is_documented_and_every_documented_key_exists() {
    let doc = include_str!("../../../../docs/config.md");
    let documented = documented_keys(doc);
    for (section, toml) in TABLES {
        let Some((_, keys)) = documented.iter().find(|(s, _)| s == section) else {
            panic!("docs/config.md has no section for {section}");
        };
        assert_eq!(keys, &schema_keys(toml), "keys of {section}");
    }
    let sections: Vec<&str> = documented.iter().map(|(s, _)| s.as_str()).collect();
    let expected: Vec<&str> = TABLES.iter().map(|(s, _)| *s).collect();
    assert_eq!(sections, expected, "documented sections, in order");
}
