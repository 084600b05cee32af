//! What every command-line test harness shares (`cli_harness`,
//! `guarantees_harness`): the real `ibp` binary, its exit codes, argument
//! lists, a scratch folder per test, and the failure check.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Exit codes of `ibp::ErrorKind::exit_code`, written out so that a change
/// there shows up here.
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_IO: i32 = 3;
pub const EXIT_CORRUPT: i32 = 4;
pub const EXIT_UNSUPPORTED: i32 = 5;

/// Command-line arguments, as an array: anything an `OsString` can be made
/// from (`&str`, `&Path`, `PathBuf`).
#[allow(unused_macros)]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$(std::ffi::OsString::from($a)),*]
    };
}

/// An empty folder for one test, under cargo's scratch space for tests and
/// named for the test binary and the test; removed again when the test
/// passes.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}-{test}", env!("CARGO_CRATE_NAME")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Every file name in the folder, sorted (hidden ones included).
    pub fn listing(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Names in the folder that look like ibp's temporary files.
    pub fn partials(&self) -> Vec<String> {
        self.listing()
            .into_iter()
            .filter(|n| n.contains(".partial"))
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The `ibp` binary of this build, as a command to add arguments to.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ibp"))
}

pub fn ibp(args: &[OsString]) -> Output {
    bin().args(args).output().expect("running the ibp binary")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn stderr(o: &Output) -> String {
    text(&o.stderr)
}

/// Run `ibp args`, insist that it fails with `code`, an `ibp: ` message on
/// stderr, nothing on stdout and no panic, and return the message.
pub fn fails(args: &[OsString], code: i32) -> String {
    let o = ibp(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "ibp {args:?}:\n{err}");
    assert!(err.contains("ibp: "), "ibp {args:?}: {err}");
    assert!(
        o.stdout.is_empty(),
        "ibp {args:?} printed to stdout on failure"
    );
    assert!(!err.contains("panicked"), "ibp {args:?} panicked:\n{err}");
    err
}
