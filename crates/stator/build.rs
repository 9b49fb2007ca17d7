//! Names the commit the binary is built from, for `stator --version`, `/v1/status` and
//! `stator_build_info`: `STATOR_COMMIT` when set (a packager building from a tarball), else
//! `git rev-parse` in the source tree, else `unknown` — then `--version` says the build was
//! made outside a git checkout. Only HEAD and the branch it points to are watched (and only
//! where they exist: `build/commit.rs`), so a commit, a checkout or `git gc` rebuilds the
//! binary and editing files does not (a build from a modified tree names the commit it
//! started from).

#[path = "build/commit.rs"]
mod commit;

fn main() {
    println!("cargo:rerun-if-changed=build/commit.rs");
    commit::main();
}
