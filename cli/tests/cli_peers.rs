//! `ibp bench --peers`: the options and their errors, run as a user runs
//! them (no GPU or nvCOMP needed). Each case fails before any GPU work, so
//! the error is the one about the options or the library.

use std::process::{Command, Output};

/// `ibp bench ARGS` in an empty folder (so `.tools/nvcomp` is not found)
/// with `IBP_NVCOMP` removed.
fn bench(args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!("ibp-cli-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ibp"))
        .arg("bench")
        .args(args)
        .current_dir(&dir)
        .env_remove("IBP_NVCOMP")
        .output()
        .expect("running the ibp binary");
    assert!(o.stdout.is_empty(), "ibp bench {args:?} printed to stdout");
    o
}

/// Run, insist on exit `code` and no panic, return stderr.
fn fails(args: &[&str], code: i32) -> String {
    let o = bench(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "ibp bench {args:?}:\n{err}");
    assert!(
        !err.contains("panicked"),
        "ibp bench {args:?} panicked:\n{err}"
    );
    err
}

#[test]
fn an_unknown_peer_is_an_invalid_argument() {
    let err = fails(&["--peers", "zstd"], 2);
    assert!(err.contains("invalid value 'zstd'"), "{err}");
    assert!(err.contains("nvcomp"), "the valid names are listed:\n{err}");
}

#[test]
fn inconsistent_peer_options_are_invalid_arguments() {
    #[cfg(feature = "cuda")]
    {
        let err = fails(&["--nvcomp", "/x/libnvcomp.so.6"], 2);
        assert!(err.contains("add --peers nvcomp"), "{err}");
        let err = fails(&["--section", "peers"], 2);
        assert!(err.contains("add --peers nvcomp"), "{err}");
        let err = fails(&["--peers", "nvcomp", "--no-real"], 2);
        assert!(err.contains("real tables"), "{err}");
        let err = fails(&["--peers", "nvcomp", "--section", "compress"], 2);
        assert!(err.contains("--section all, decode or peers"), "{err}");
    }
    #[cfg(not(feature = "cuda"))]
    {
        let err = fails(&["--peers", "nvcomp"], 5);
        assert!(err.contains("--features cuda"), "{err}");
    }
}

#[cfg(feature = "cuda")]
#[test]
fn without_nvcomp_the_error_says_not_found_and_how_to_get_it() {
    let err = fails(&["--peers", "nvcomp"], 5);
    assert!(err.contains("nvCOMP not found"), "{err}");
    assert!(err.contains("IBP_NVCOMP"), "{err}");
    assert!(err.contains("nvidia-libnvcomp-cu13"), "{err}");
    let err = fails(&["--peers", "nvcomp", "--nvcomp", "/nonexistent/lib"], 5);
    assert!(
        err.contains("nvCOMP not found: /nonexistent/lib does not exist"),
        "{err}"
    );
    // A file that is not a library at all.
    let this = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli_peers.rs");
    let err = fails(&["--peers", "nvcomp", "--nvcomp", this], 5);
    assert!(err.contains("does not load"), "{err}");
}
