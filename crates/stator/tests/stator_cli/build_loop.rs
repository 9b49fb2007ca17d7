//! The build loop: the binary's build script (`crates/stator/build/commit.rs`, which names the
//! commit) reruns when a commit, a checkout or `git gc` changes what it names, and never for
//! nothing. A scratch package with the same build script, in a scratch repository made with
//! `git init` and commits (no `packed-refs` yet, as many repositories before their first
//! `git gc`), is built again and again; `cargo build -v --message-format=json` says whether the
//! script ran (`Running …/build-script-build`) and whether the library was rebuilt (its
//! `compiler-artifact` is not `fresh`). Before the fix, every build of such a repository reran
//! the script and re-linked the binary (minutes of LTO each time). Unprivileged.

use std::path::Path;
use std::process::Command;

use stator_testkit::scratch::TempDir;

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(repo)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One build: (the build script ran, the library was rebuilt).
fn build(pkg: &Path, target: &Path) -> (bool, bool) {
    let out = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "-v", "--offline", "--message-format=json"])
        .current_dir(pkg)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RUSTFLAGS")
        .env_remove("STATOR_COMMIT")
        .output()
        .expect("cargo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo build: {stderr}");
    let ran = stderr
        .lines()
        .any(|l| l.contains("Running") && l.contains("build-script-build"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lib = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|m| {
            m["reason"] == "compiler-artifact"
                && m["target"]["name"] == "scratch"
                && m["target"]["kind"][0] == "lib"
        })
        .expect("the library's artifact message");
    (ran, lib["fresh"] == false)
}

#[test]
fn the_commit_build_script_reruns_only_when_the_commit_changes() {
    let dir = TempDir::new("stator-build-loop");
    let repo = dir.path();
    git(repo, &["init", "-q", "-b", "main"]);
    let pkg = repo.join("pkg");
    std::fs::create_dir_all(pkg.join("src")).unwrap();
    std::fs::write(
        pkg.join("Cargo.toml"),
        "[package]\nname = \"scratch\"\nversion = \"0.1.0\"\nedition = \"2024\"\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        pkg.join("src/lib.rs"),
        "pub fn version() -> &'static str { env!(\"STATOR_VERSION_LINE\") }\n",
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("build/commit.rs");
    std::fs::write(
        pkg.join("build.rs"),
        format!(
            "#[path = {:?}]\nmod commit;\nfn main() {{ commit::main() }}\n",
            script.display().to_string()
        ),
    )
    .unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "one"]);
    assert!(
        !repo.join(".git/packed-refs").exists(),
        "a repository before its first git gc"
    );
    let target = dir.join("target");
    let mut steps = Vec::new();
    let mut step = |what: &str, expect: (bool, bool)| {
        let got = build(&pkg, &target);
        steps.push(format!(
            "{what}: script {}, library {}",
            if got.0 { "ran" } else { "did not run" },
            if got.1 { "rebuilt" } else { "fresh" }
        ));
        assert_eq!(got, expect, "{what}\n{}", steps.join("\n"));
    };
    step("first build", (true, true));
    step("no change", (false, false));
    step("no change again", (false, false));
    git(repo, &["commit", "-q", "--allow-empty", "-m", "two"]);
    step("after a commit", (true, true));
    step("no change", (false, false));
    git(repo, &["gc", "-q"]);
    assert!(
        repo.join(".git/packed-refs").exists(),
        "git gc packed the refs"
    );
    // Once: the watched loose ref is gone, so the script reruns and now watches packed-refs
    // (Cargo rebuilds after any rerun, even with the same output).
    step("after git gc (the loose ref is gone)", (true, true));
    step("no change after git gc", (false, false));
    git(repo, &["commit", "-q", "--allow-empty", "-m", "three"]);
    step("a commit after git gc", (true, true));
    step("no change", (false, false));
    git(repo, &["checkout", "-q", "-b", "other", "HEAD~1"]);
    step("a checkout", (true, true));
    step("no change", (false, false));
    println!("{}", steps.join("\n"));
}
