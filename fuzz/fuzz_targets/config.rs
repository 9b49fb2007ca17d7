//! Fuzz target: configuration text through `stator check`'s path (`stator_config::check_str`)
//! and the loader's (`stator_config::from_toml_str`), with the oracle of
//! `common/config_oracle.rs`: no panic, the two paths agree, every error has a non-root field
//! path or a line and column inside the text.
//!
//! Input: the text. Bytes that are not UTF-8 are replaced (U+FFFD) rather than skipped: both
//! callers only ever see a `String` (`stator check` and the admin API refuse other bytes before
//! parsing), and the replacement keeps the mutation useful. Seeds: `examples/*.toml`; the
//! dictionary (`fuzz/dicts/config.dict`) holds the schema's tables, keys and values, so that
//! mutations stay in the vocabulary validation understands.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/config_oracle.rs"]
mod config_oracle;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    config_oracle::check_text("stator.toml", &text);
});
