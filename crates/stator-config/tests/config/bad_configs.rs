//! One bad configuration per check, each with the exact lines `stator check` prints for it.
//!
//! The cases live in `bad_configs.txt`:
//!
//! ```text
//! ### case_name
//! <TOML; a first line "@" stands for HEADER below, a valid [node] and [dataplane]>
//! --- expect
//! <every error line, exactly, in order>
//! ```
//!
//! All errors of a file are compared, not just the first, so a check that starts reporting a
//! consequence twice, or stops reporting something, fails here. After an intended change of
//! messages, `BLESS=1 cargo test -p stator-config --test config -- bad_configs::` rewrites the expectations
//! — then read the diff line by line before committing it.

use stator_config::check_str;

/// Six lines: a body after "@" starts at line 7.
const HEADER: &str = "[node]
name = \"lb1\"
address_v4 = \"10.0.0.10\"

[dataplane]
interfaces = [\"eth0\"]";

struct Case {
    name: String,
    toml: String,
    expect: Vec<String>,
}

fn cases(text: &str) -> Vec<Case> {
    let mut out = Vec::new();
    for chunk in text.split("\n### ").skip(1) {
        let (name, rest) = chunk.split_once('\n').unwrap_or((chunk, ""));
        let (toml, expect) = rest.split_once("--- expect\n").unwrap_or((rest, ""));
        let toml = match toml.strip_prefix("@\n") {
            Some(body) => format!("{HEADER}\n{body}"),
            None => toml.to_string(),
        };
        out.push(Case {
            name: name.trim().to_string(),
            toml,
            expect: expect
                .lines()
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect(),
        });
    }
    out
}

fn actual(case: &Case) -> Vec<String> {
    let report = check_str("t.toml", &case.toml);
    assert!(!report.is_ok(), "{}: expected errors, got none", case.name);
    assert_eq!(report.exit_code(), 1);
    report
        .to_string()
        .lines()
        .filter(|l| l.contains(": error: "))
        .map(String::from)
        .collect()
}

#[test]
fn every_bad_config_gives_exactly_its_errors() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/bad_configs.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let cases = cases(&text);
    assert!(cases.len() > 40, "only {} cases parsed", cases.len());
    if std::env::var_os("BLESS").is_some() {
        let (preamble, _) = text.split_once("\n### ").unwrap();
        let mut out = format!("{preamble}\n");
        for chunk in text.split("\n### ").skip(1).zip(&cases) {
            let (raw, case) = chunk;
            let toml = raw.split_once('\n').map_or("", |x| x.1);
            let toml = toml.split_once("--- expect\n").map_or(toml, |x| x.0);
            out.push_str(&format!(
                "### {}\n{}\n--- expect\n",
                case.name,
                toml.trim_end()
            ));
            for line in actual(case) {
                out.push_str(&line);
                out.push('\n');
            }
            out.push('\n');
        }
        std::fs::write(path, out.trim_end().to_string() + "\n").unwrap();
        return;
    }
    let mut failures = Vec::new();
    for case in &cases {
        let got = actual(case);
        if got != case.expect {
            failures.push(format!(
                "### {}\nexpected:\n  {}\ngot:\n  {}",
                case.name,
                case.expect.join("\n  "),
                got.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}
