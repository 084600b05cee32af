//! The harness of the README's "Guarantees" tests (`cli_guarantees.rs`,
//! `cli_guarantees_memory.rs`): the real `ibp` binary in a scratch folder,
//! exit codes, child processes to interrupt, and test data.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

pub const EXIT_INVALID: i32 = 2;
pub const EXIT_IO: i32 = 3;
pub const EXIT_CORRUPT: i32 = 4;
pub const EXIT_UNSUPPORTED: i32 = 5;

#[allow(unused_macros)]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$(OsString::from($a)),*]
    };
}

/// An empty folder for one test, removed again when the test passes.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("guarantees-{test}"));
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

    /// Names in the folder that look like ibp's temporary files.
    pub fn partials(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
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

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ibp"))
}

pub fn ibp(args: &[OsString]) -> Output {
    bin().args(args).output().expect("running the ibp binary")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run `ibp args` and insist on success.
pub fn ok(args: &[OsString]) -> Output {
    let o = ibp(args);
    assert!(
        o.status.success(),
        "ibp {args:?} failed ({}):\n{}",
        o.status,
        text(&o.stderr)
    );
    o
}

/// Run `ibp args`, insist on exit code `code` with an `ibp:` message and no
/// panic, and return the message.
pub fn fails(args: &[OsString], code: i32) -> String {
    let o = ibp(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "ibp {args:?}:\n{err}");
    assert!(err.contains("ibp: "), "ibp {args:?}: {err}");
    assert!(!err.contains("panicked"), "ibp {args:?} panicked:\n{err}");
    err
}

/// f32 features with invariant high bits: `rows × cols`, deterministic.
pub fn features(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = crate::common::Rng(seed | 1);
    (0..rows * cols)
        .flat_map(|i| {
            let r = rng.next();
            let v = if r.is_multiple_of(8) {
                0.0
            } else {
                (1.0 + (r >> 40) as f32 / (1u64 << 24) as f32) * (1 + i % cols % 3) as f32
            };
            v.to_le_bytes()
        })
        .collect()
}

/// Compress `input` (raw f32 of `cols` columns) to `out`: the arguments.
pub fn compress_raw(input: &Path, cols: usize, out: &Path) -> Vec<OsString> {
    let bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0) as usize;
    let shape = format!("{},{cols}", bytes / 4 / cols);
    args![
        "compress", input, "--dtype", "f32", "--shape", &shape, "-o", out
    ]
    .to_vec()
}

/// Wait until `cond` holds, at most `secs` seconds.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Wait for `child` to end, killing it after `secs` seconds.
pub fn finish(mut child: Child, secs: u64) -> Output {
    if !wait_for(secs, || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
        panic!("ibp did not finish within {secs} s");
    }
    child.wait_with_output().unwrap()
}

pub fn restores_to(dir: &Scratch, container: &Path, want: &[u8]) {
    let back = dir.path("restored");
    let _ = std::fs::remove_file(&back);
    ok(&args!["decompress", container, "-o", &back]);
    let got = std::fs::read(&back).unwrap();
    assert!(
        got == want,
        "restored {} bytes, wanted {}",
        got.len(),
        want.len()
    );
}

// Finding 1: inputs that are not regular files.
