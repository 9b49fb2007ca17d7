//! Names the commit the binary is built from, for `stator --version`, `/v1/status` and
//! `stator_build_info`: `STATOR_COMMIT` when set (a packager building from a tarball), else
//! `git rev-parse` in the source tree, else `unknown` — then `--version` says the build was
//! made outside a git checkout. Only HEAD and the branch it points to are watched, so a commit
//! or a checkout rebuilds the binary and editing files does not (a build from a modified tree
//! names the commit it started from).

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

fn main() {
    println!("cargo:rerun-if-env-changed=STATOR_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    let from_env = std::env::var("STATOR_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty());
    let commit = from_env
        .clone()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    if from_env.is_none() {
        for path in ["HEAD", "packed-refs"] {
            if let Some(p) = git(&["rev-parse", "--git-path", path]) {
                println!("cargo:rerun-if-changed={p}");
            }
        }
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
            && let Some(p) = git(&["rev-parse", "--git-path", &branch])
        {
            println!("cargo:rerun-if-changed={p}");
        }
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
