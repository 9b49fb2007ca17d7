//! The commit a build names (`STATOR_VERSION_LINE`, `STATOR_COMMIT`), and what Cargo must
//! watch so that a commit, a checkout or `git gc` rebuilds the binary while an unchanged tree
//! does not: only paths that exist are watched (Cargo reruns a build script whose watched path
//! is missing on every build — which made every `cargo build` of a repository without
//! `packed-refs` re-link the whole binary). `crates/stator/build.rs` runs it, and
//! `crates/stator/tests/stator_cli/build_loop.rs` builds a scratch package with it twice.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// `git rev-parse --git-path` of `path`, if it exists.
fn existing_git_path(path: &str) -> Option<String> {
    git(&["rev-parse", "--git-path", path]).filter(|p| Path::new(p).exists())
}

/// Prints what to watch: HEAD (a checkout or a detached commit); the branch's loose ref when
/// there is one (`git gc` removing it reruns the script once, which then watches what follows);
/// else `packed-refs`, where `git gc` put it, and the directory the next commit writes the
/// loose ref into.
fn watch_git() {
    let mut watched = Vec::new();
    watched.extend(existing_git_path("HEAD"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        match existing_git_path(&branch) {
            Some(p) => watched.push(p),
            None => {
                watched.extend(existing_git_path("packed-refs"));
                if let Some((dir, _)) = branch.rsplit_once('/') {
                    watched.extend(existing_git_path(dir));
                }
            }
        }
    }
    for p in watched {
        println!("cargo:rerun-if-changed={p}");
    }
}

pub fn main() {
    println!("cargo:rerun-if-env-changed=STATOR_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    let from_env = std::env::var("STATOR_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty());
    let commit = from_env
        .clone()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    if from_env.is_none() {
        watch_git();
    }
    let date = commit
        .as_ref()
        .and(from_env.is_none().then_some(()))
        .and_then(|()| git(&["show", "-s", "--format=%cs", "HEAD"]));
    let version = env!("CARGO_PKG_VERSION");
    let line = match (&commit, date) {
        (Some(c), Some(d)) => format!("{version} (commit {c}, {d})"),
        (Some(c), None) => format!("{version} (commit {c})"),
        (None, _) => format!("{version} (commit unknown: built outside a git checkout)"),
    };
    println!("cargo:rustc-env=STATOR_VERSION_LINE={line}");
    println!(
        "cargo:rustc-env=STATOR_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
