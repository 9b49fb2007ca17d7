//! Property tests: no input panics the parser or the validator, errors always come with a
//! message, and whatever is accepted satisfies the invariants a `Config` promises.
//!
//! Random text rarely gets past the TOML parser, so besides arbitrary strings the inputs are
//! built from the schema's own vocabulary (section headers, keys, edge-case values), and from
//! mutations of the shipped example, which reach deep into validation.

use proptest::prelude::*;
use stator_config::{Config, check_str, from_toml_str};

/// Each table of the schema with its keys and the kind of value each takes: `s` string,
/// `i` integer, `b` boolean, `a` array of strings, `x` any scalar, `e` one of the key's enum
/// values (or a wrong one), `f` an array of flags.
const TABLES: &[(&str, &[(&str, char)])] = &[
    (
        "[node]",
        &[("name", 's'), ("address_v4", 's'), ("address_v6", 's')],
    ),
    (
        "[dataplane]",
        &[
            ("mode", 'e'),
            ("interfaces", 'a'),
            ("xdp_mode", 'e'),
            ("pin_path", 's'),
            ("conntrack", 'e'),
            ("conntrack_entries", 'i'),
            ("slots_per_generation", 'i'),
            ("tcp_timeout", 'x'),
            ("udp_timeout", 'x'),
            ("flood_new_per_sec", 'i'),
            ("next_hop_cache", 'x'),
            ("icmp_echo", 'b'),
            ("on_exit", 'e'),
            ("stale_after", 'x'),
        ],
    ),
    (
        "[encap]",
        &[("default", 'e'), ("gue_port", 'i'), ("outer_ttl", 'i')],
    ),
    (
        "[bgp]",
        &[
            ("enabled", 'b'),
            ("bird_socket", 's'),
            ("bird_config", 's'),
            ("local_as", 'i'),
            ("router_id", 's'),
            ("communities", 'a'),
            ("bfd_interval", 'x'),
            ("bfd_multiplier", 'i'),
        ],
    ),
    (
        "[[bgp.neighbor]]",
        &[
            ("name", 's'),
            ("address", 's'),
            ("remote_as", 'i'),
            ("source_address", 's'),
            ("hold_time", 'x'),
            ("keepalive", 'x'),
            ("connect_retry", 'x'),
            ("error_wait", 'x'),
            ("bfd", 'b'),
            ("multihop", 'i'),
            ("next_hop_self", 'b'),
        ],
    ),
    (
        "[api]",
        &[("listen", 's'), ("token", 's'), ("token_file", 's')],
    ),
    ("[log]", &[("format", 'e'), ("level", 'e')]),
    ("[[pool]]", &[("name", 's'), ("include", 'a')]),
    (
        "[pool.health]",
        &[
            ("method", 'e'),
            ("port", 'i'),
            ("interval", 'x'),
            ("timeout", 'x'),
            ("rise", 'i'),
            ("fall", 'i'),
            ("jitter", 'x'),
            ("path", 's'),
            ("expect_status", 'x'),
            ("host", 's'),
            ("sni", 's'),
            ("verify", 'b'),
            ("ca_file", 's'),
            ("payload", 's'),
            ("payload_hex", 's'),
            ("expect", 's'),
            ("expect_hex", 's'),
        ],
    ),
    (
        "[[pool.backend]]",
        &[
            ("address", 's'),
            ("port", 'i'),
            ("weight", 'i'),
            ("id", 's'),
        ],
    ),
    (
        "[[vip]]",
        &[
            ("name", 's'),
            ("address", 's'),
            ("port", 'x'),
            ("protocol", 'e'),
            ("pools", 'a'),
            ("encap", 'e'),
            ("table_size", 'i'),
            ("flags", 'f'),
        ],
    ),
];

const STRINGS: &[&str] = &[
    "\"\"",
    "\"any\"",
    "\"web\"",
    "\"canary\"",
    "\"rack1\"",
    "\"a b\"",
    "\"eth0\"",
    "\"10.0.0.1\"",
    "\"10.0.0.10\"",
    "\"10.1.1.1\"",
    "\"10.1.1.2\"",
    "\"192.0.2.10\"",
    "\"2001:db8::1\"",
    "\"2001:db8::10\"",
    "\"::ffff:1.2.3.4\"",
    "\"fe80::1\"",
    "\"0.0.0.0\"",
    "\"255.255.255.255\"",
    "\"1s\"",
    "\"900\"",
    "\"1.5s\"",
    "\"0.5ns\"",
    "\"200ms\"",
    "\"99999999999999999999999d\"",
    "\"tcp\"",
    "\"udp\"",
    "\"http\"",
    "\"none\"",
    "\"gre\"",
    "\"ipip\"",
    "\"gue\"",
    "\"xdp\"",
    "\"afxdp\"",
    "\"/sys/fs/bpf/x\"",
    "\"relative\"",
    "\"200-399\"",
    "\"599-100\"",
    "\"0d0a\"",
    "\"0d0\"",
    "\"65000:1\"",
    "\"127.0.0.1:9180\"",
    "\"[::1]:0\"",
    "\"µs\"",
    "\"no_conntrack\"",
    "\"/healthz\"",
];
const INTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "7",
    "53",
    "80",
    "100",
    "65535",
    "65536",
    "65537",
    "23456",
    "1048573",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
];
const OTHER: &[&str] = &[
    "0.1",
    "0.75",
    "-0.0",
    "nan",
    "inf",
    "true",
    "false",
    "[]",
    "{}",
    "[1, \"a\"]",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
];

/// Values of the keys that take one of a few words.
fn enum_values(key: &str) -> &'static [&'static str] {
    match key {
        "mode" => &["\"xdp\"", "\"afxdp\""],
        "xdp_mode" => &["\"auto\"", "\"native\"", "\"generic\""],
        "conntrack" => &["\"percpu\"", "\"shared\""],
        "on_exit" => &["\"detach\"", "\"keep\""],
        "threading" => &["\"steered\"", "\"run_to_completion\""],
        "default" | "encap" => &["\"gre\"", "\"ipip\"", "\"gue\""],
        "format" => &["\"human\"", "\"json\""],
        "level" => &["\"info\"", "\"debug\""],
        "method" => &["\"tcp\"", "\"http\"", "\"https\"", "\"udp\"", "\"none\""],
        "protocol" => &["\"tcp\"", "\"udp\""],
        _ => &["\"bogus\""],
    }
}

fn value(key: &'static str, kind: char) -> BoxedStrategy<String> {
    let pick = |values: &'static [&'static str]| {
        prop::sample::select(values).prop_map(String::from).boxed()
    };
    let typed = match kind {
        'e' => pick(enum_values(key)),
        'f' => pick(&[
            "[]",
            "[\"no_conntrack\"]",
            "[\"no_conntrack\", \"no_conntrack\"]",
        ]),
        's' => pick(STRINGS),
        'i' => pick(INTS),
        'b' => pick(&["true", "false"]),
        'a' => prop::collection::vec(prop::sample::select(STRINGS), 0..4)
            .prop_map(|v| format!("[{}]", v.join(", ")))
            .boxed(),
        _ => prop_oneof![
            pick(STRINGS),
            pick(INTS),
            pick(&["0.1", "0.75", "-0.0", "nan"])
        ]
        .boxed(),
    };
    // Mostly the right type, sometimes anything at all.
    prop_oneof![40 => typed, 1 => pick(OTHER)].boxed()
}

/// A table with a random subset of its keys (each once, so the TOML stays well-formed).
fn section(index: usize) -> BoxedStrategy<String> {
    let (header, keys) = TABLES[index];
    prop::sample::subsequence(keys, 0..=keys.len())
        .prop_flat_map(|chosen| {
            chosen
                .into_iter()
                .map(|(key, kind)| value(key, kind).prop_map(move |v| format!("{key} = {v}")))
                .collect::<Vec<_>>()
        })
        .prop_map(move |lines| format!("{header}\n{}\n", lines.join("\n")))
        .boxed()
}

fn maybe(s: BoxedStrategy<String>) -> BoxedStrategy<String> {
    prop::option::weighted(0.9, s)
        .prop_map(Option::unwrap_or_default)
        .boxed()
}

fn many(s: BoxedStrategy<String>, n: usize) -> BoxedStrategy<String> {
    prop::collection::vec(s, 0..n)
        .prop_map(|v| v.concat())
        .boxed()
}

/// Well-formed documents built from the schema's tables, keys and edge-case values: they get
/// past the TOML parser and serde, into validation.
fn schema_text() -> impl Strategy<Value = String> {
    let pool = (section(7), maybe(section(8)), many(section(9), 4))
        .prop_map(|(pool, health, backends)| format!("{pool}{health}{backends}"))
        .boxed();
    (
        maybe(section(0)),
        maybe(section(1)),
        maybe(section(2)),
        maybe(section(3)),
        many(section(4), 3),
        maybe(section(5)),
        maybe(section(6)),
        many(pool, 5),
        many(section(10), 4),
    )
        .prop_map(|(a, b, c, d, e, f, g, h, i)| [a, b, c, d, e, f, g, h, i].concat())
}

const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "7",
    "65536",
    "65537",
    "4294967296",
    "0.1",
    "true",
    "\"\"",
    "\"any\"",
    "\"web\"",
    "\"10.0.0.10\"",
    "\"2001:db8::1\"",
    "\"900\"",
    "\"1.5s\"",
    "\"udp\"",
    "\"none\"",
    "\"gue\"",
    "[]",
    "[\"web\"]",
    "[\"eth0\", \"eth0\"]",
    "{}",
];

/// The shipped example with random lines deleted, duplicated or given another value.
fn mutated_example() -> impl Strategy<Value = String> {
    let example = include_str!("../../../../examples/stator.toml");
    let lines: Vec<String> = example.lines().map(String::from).collect();
    let n = lines.len();
    prop::collection::vec((0..n, 0..3u8, prop::sample::select(VALUES)), 1..8).prop_map(move |ops| {
        let mut lines = lines.clone();
        for (i, op, value) in ops {
            let i = i % lines.len().max(1);
            match op {
                0 => {
                    lines.remove(i);
                }
                1 => {
                    let l = lines[i].clone();
                    lines.insert(i, l);
                }
                _ => {
                    if let Some((key, _)) = lines[i].split_once(" = ") {
                        lines[i] = format!("{key} = {value}");
                    }
                }
            }
            if lines.is_empty() {
                break;
            }
        }
        lines.join("\n")
    })
}

/// What every accepted configuration must satisfy.
fn assert_invariants(config: &Config) {
    for vip in &config.vips {
        assert!(!vip.backends.is_empty());
        assert!(vip.total_weight() > 0);
        assert!(vip.table_size as usize >= vip.backends.len());
        assert!((2..vip.table_size).all(|d| vip.table_size % d != 0 || d * d > vip.table_size));
        let names: Vec<&str> = config.maglev_backends(vip).iter().map(|b| b.0).collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
    }
    assert!(config.slots() <= u64::from(config.dataplane.slots_per_generation));
    let plan = config.health_plan();
    for check in &plan.checks {
        assert!(check.timing.timeout < check.timing.interval);
        assert!(!check.backends.is_empty());
    }
}

fn check(text: &str) {
    let report = check_str("p.toml", text);
    assert_eq!(report.is_ok(), report.errors.is_empty());
    assert!(report.errors.iter().all(|e| !e.message.is_empty()));
    let _ = report.to_string();
    match from_toml_str("p.toml", text) {
        Ok(config) => {
            assert!(report.is_ok());
            assert_invariants(&config);
            let _ = config.warnings();
            // Deterministic: the same text gives the same configuration.
            assert_eq!(from_toml_str("p.toml", text).ok(), Some(config));
        }
        Err(e) => {
            assert!(!report.is_ok());
            assert!(!e.errors.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn schema_shaped_text_never_panics(text in schema_text()) {
        check(&text);
    }

    #[test]
    fn mutated_example_never_panics(text in mutated_example()) {
        check(&text);
    }
}
