//! The commit the `ibp` command was built from (`IBP_GIT_COMMIT`: `ibp
//! --version` and the benchmark results files name it), and the git files to
//! watch so that a new commit rebuilds the command.
//!
//! Q: why here and not in the library's build script?
//! A: only the command line prints the commit. In the library's build script
//! every commit re-ran the script and rebuilt the library (and everything
//! that depends on it) for a variable the library never read.
//!
//! Q: why ask git for the paths instead of naming `.git/HEAD`?
//! A: in a crate copy without git (a vendored or downloaded crate) a watched
//! path that does not exist makes cargo rerun this script, and rebuild the
//! crate, on every build; and in a git worktree `.git` is a file, so
//! `.git/HEAD` never exists there either. `git rev-parse --git-path` names
//! the real files, and only those that exist are watched.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // This package is the `cli/` folder of the ibp repository; a copy of it
    // inside another project's repository (vendored) must not report that
    // project's commit as its own.
    let repo_root = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .and_then(|m| m.parent().map(Path::to_path_buf));
    let top = git(&["rev-parse", "--show-toplevel"]).map(PathBuf::from);
    let ours = match (top, repo_root) {
        (Some(t), Some(r)) => t
            .canonicalize()
            .ok()
            .is_some_and(|t| r.canonicalize().ok() == Some(t)),
        _ => false,
    };
    if !ours {
        return;
    }
    if let Some(c) = git(&["rev-parse", "--short=12", "HEAD"]) {
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        println!(
            "cargo:rustc-env=IBP_GIT_COMMIT={c}{}",
            if dirty { "-dirty" } else { "" }
        );
    }
    // A new commit moves HEAD's ref (or HEAD itself when detached); the
    // index is left out on purpose (every `git add` would rebuild the crate).
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    for name in watch {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

/// `git ARGS` in the package directory: its trimmed stdout, or `None` when
/// git is missing or fails (no repository).
fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}
