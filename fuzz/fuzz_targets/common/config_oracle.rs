//! The oracle of configuration text, shared by the `config` and `api_body` targets: what
//! `stator check FILE` (`check_str`), the loader (`from_toml_str`, which `stator run` and
//! `PUT /v1/config` use) and the admin API's `POST /v1/config:validate` promise for any text.
//!
//! Checked, for every text:
//! - neither function panics, nor does writing the report (`Display`);
//! - the two agree: `check_str` says `ok` exactly when `from_toml_str` returns a `Config`, and
//!   otherwise both list the same errors (path, location, message), in the same order;
//! - a report with errors has no summary and no warnings; a valid one has a summary;
//! - every error says where: a non-root field path, or — for what has no path (a TOML syntax
//!   error, a schema error of the document as a whole) — a line and column. The only errors
//!   allowed neither are the ones no part of the text can be blamed for: none today (validation
//!   promises "never an empty list", and its internal fallback error would be one, at the root
//!   without a location: this oracle calls it a bug);
//! - every location lies in the text: line 1 up to the number of lines (+1 for a position at
//!   the very end), column at least 1;
//! - every message is non-empty.
//!
//! Not checked: that a message names the right cause (the unit and `bad_configs` tests do),
//! or that the location of a path-bearing error is the value's (a missing key points at its
//! table, by design).

use stator_config::{CheckReport, Diagnostic, check_str, from_toml_str};

/// Runs text through both paths and checks their promises; returns the report.
pub fn check_text(file: &str, text: &str) -> CheckReport {
    let report = check_str(file, text);
    let _ = report.to_string();
    let loaded = from_toml_str(file, text);
    let lines = text.matches('\n').count() + 1;
    match &loaded {
        Ok(config) => {
            assert!(
                report.ok,
                "check_str fails what from_toml_str loads: {report}"
            );
            assert!(report.errors.is_empty() && report.summary.is_some());
            // what the controller does next with a loaded Config
            let _ = config.health_plan();
            let _ = config.warnings();
        }
        Err(errors) => {
            assert!(
                !report.ok,
                "check_str passes what from_toml_str refuses: {errors}"
            );
            assert!(report.summary.is_none() && report.warnings.is_empty());
            assert!(!errors.errors.is_empty(), "an error list is never empty");
            let _ = errors.to_string();
            let diagnostics: Vec<Diagnostic> = errors.errors.iter().map(Into::into).collect();
            assert_eq!(
                report.errors, diagnostics,
                "the two paths report the same errors"
            );
        }
    }
    for e in &report.errors {
        assert!(
            !e.message.is_empty(),
            "an error without a message at {}",
            e.path
        );
        assert!(
            !e.path.is_root() || e.location.is_some(),
            "an error that says neither path nor place: {e} ({report})"
        );
        if let Some(l) = e.location {
            assert!(
                (1..=lines).contains(&l.line) && l.column >= 1,
                "location {}:{} outside the text ({lines} lines): {e}",
                l.line,
                l.column
            );
        }
    }
    report
}
