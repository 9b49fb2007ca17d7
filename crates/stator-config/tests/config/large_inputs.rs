//! Texts with many errors: a report lists at most `MAX_REPORTED` of them and counts the rest,
//! every listed error keeps its place, and `stator check`'s path (`check_str`) and the loader's
//! (`from_toml_str`) still agree. Before the bound and the line index, a 300 KB file of bad
//! lines took 3 minutes to check and listed 200,000 errors (the admin API accepts 16 MiB).

use stator_config::{CheckReport, Error, MAX_REPORTED, check_str, from_toml_str};

const HEADER: &str = "[node]
name = \"lb1\"
address_v4 = \"10.0.0.10\"

[dataplane]
interfaces = [\"eth0\"]
";

fn both(text: &str) -> CheckReport {
    let report = check_str("t.toml", text);
    let errors = from_toml_str("t.toml", text).expect_err("the text is invalid");
    assert_eq!(report.errors.len(), errors.errors.len());
    for (d, e) in report.errors.iter().zip(&errors.errors) {
        assert_eq!((&d.path, d.location), (&e.path, e.location));
    }
    if let Some(last) = errors.errors.last() {
        assert!(
            matches!(last.error, Error::NotShown { .. }) == (errors.errors.len() > MAX_REPORTED),
            "the last error counts what is not shown exactly when the list is cut: {last}"
        );
    }
    report
}

#[test]
fn many_syntax_errors_are_listed_up_to_the_bound_then_counted() {
    // every line a key of its own without a value: one syntax error per line
    let lines = 5_000;
    let text: String = (0..lines).map(|i| format!("k{i} =\n")).collect();
    let report = both(&text);
    assert_eq!(report.errors.len(), MAX_REPORTED + 1, "{report}");
    let errors: usize = report.to_string().matches(": error: ").count();
    assert_eq!(errors, MAX_REPORTED + 1, "{report}");
    for (i, e) in report.errors[..MAX_REPORTED].iter().enumerate() {
        let place = e.location.expect("a syntax error has a place");
        assert_eq!(place.line, i + 1, "error {i}: {e}");
    }
    let last = report.errors.last().unwrap();
    let shown = MAX_REPORTED;
    let place = last
        .location
        .expect("the count is placed at the first error left out");
    assert_eq!(place.line, shown + 1);
    // the parser reports each line once at least; how many more is its business
    let not_shown: usize = last
        .message
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count first: {}", last.message));
    assert!(not_shown >= lines - shown, "{}", last.message);
    assert!(
        last.message.contains("more errors not shown"),
        "{}",
        last.message
    );
}

#[test]
fn many_validation_errors_are_listed_up_to_the_bound_then_counted() {
    let backends = 300;
    let mut text = format!("{HEADER}\n[[pool]]\nname = \"web\"\n");
    for i in 0..backends {
        text.push_str(&format!(
            "[[pool.backend]]\naddress = \"not-an-address-{i}\"\nport = 80\n"
        ));
    }
    let report = both(&text);
    assert_eq!(report.errors.len(), MAX_REPORTED + 1, "{report}");
    for (i, e) in report.errors[..MAX_REPORTED].iter().enumerate() {
        assert_eq!(
            e.path.to_string(),
            format!("pool[0].backend[{i}].address"),
            "{e}"
        );
    }
    let last = report.errors.last().unwrap();
    // placed at the first error left out: its path, its line
    assert_eq!(
        last.path.to_string(),
        format!("pool[0].backend[{MAX_REPORTED}].address")
    );
    assert!(last.location.is_some());
    assert!(
        last.message.starts_with(&format!(
            "{} more errors not shown",
            backends - MAX_REPORTED
        )),
        "{}",
        last.message
    );
}

#[test]
fn a_report_at_the_bound_is_not_cut() {
    let mut text = format!("{HEADER}\n[[pool]]\nname = \"web\"\n");
    for i in 0..MAX_REPORTED {
        text.push_str(&format!(
            "[[pool.backend]]\naddress = \"bad-{i}\"\nport = 80\n"
        ));
    }
    let report = both(&text);
    assert_eq!(report.errors.len(), MAX_REPORTED, "{report}");
    assert!(!report.to_string().contains("not shown"));
}
