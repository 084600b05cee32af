//! What the README's "Guarantees" section promises, checked through the real
//! binary: inputs that are not plain files, hostile names, inputs that
//! change under a run, output paths that are not plain files, interrupted
//! and concurrent runs, and containers that could restore the wrong bytes.
//! Each test is the regression test of a finding of issue 15 (or 13.9).

mod common;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ibp::container::{ContainerWriter, GroupData, GroupMeta};
use ibp::io::{DType, Segment};

const EXIT_INVALID: i32 = 2;
const EXIT_IO: i32 = 3;
const EXIT_CORRUPT: i32 = 4;
const EXIT_UNSUPPORTED: i32 = 5;

macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$(OsString::from($a)),*]
    };
}

/// An empty folder for one test, removed again when the test passes.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("guarantees-{test}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Names in the folder that look like ibp's temporary files.
    fn partials(&self) -> Vec<String> {
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

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ibp"))
}

fn ibp(args: &[OsString]) -> Output {
    bin().args(args).output().expect("running the ibp binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run `ibp args` and insist on success.
fn ok(args: &[OsString]) -> Output {
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
fn fails(args: &[OsString], code: i32) -> String {
    let o = ibp(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "ibp {args:?}:\n{err}");
    assert!(err.contains("ibp: "), "ibp {args:?}: {err}");
    assert!(!err.contains("panicked"), "ibp {args:?} panicked:\n{err}");
    err
}

/// f32 features with invariant high bits: `rows × cols`, deterministic.
fn features(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = common::Rng(seed | 1);
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
fn compress_raw(input: &Path, cols: usize, out: &Path) -> Vec<OsString> {
    let bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0) as usize;
    let shape = format!("{},{cols}", bytes / 4 / cols);
    args![
        "compress", input, "--dtype", "f32", "--shape", &shape, "-o", out
    ]
    .to_vec()
}

/// Wait until `cond` holds, at most `secs` seconds.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
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
fn finish(mut child: Child, secs: u64) -> Output {
    if !wait_for(secs, || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
        panic!("ibp did not finish within {secs} s");
    }
    child.wait_with_output().unwrap()
}

fn restores_to(dir: &Scratch, container: &Path, want: &[u8]) {
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

#[test]
fn piped_input_is_read_in_full() {
    let dir = Scratch::new("pipe");
    let data = features(512, 32, 1);
    let shape = "512,32";
    for input in ["/dev/stdin", "-"] {
        let out = dir.path("piped.ibp");
        let _ = std::fs::remove_file(&out);
        let mut child = bin()
            .args(args![
                "compress", input, "--dtype", "f32", "--shape", shape, "-o", &out
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feed = data.clone();
        let writer = std::thread::spawn(move || stdin.write_all(&feed));
        let o = finish(child, 60);
        writer.join().unwrap().unwrap();
        assert!(o.status.success(), "{input}: {}", text(&o.stderr));
        restores_to(&dir, &out, &data);
    }
}

#[test]
fn fifo_input_is_read_in_full() {
    let dir = Scratch::new("fifo-in");
    let data = features(256, 16, 2);
    let fifo = dir.path("in.fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = dir.path("fifo.ibp");
    let child = bin()
        .args(args![
            "compress", &fifo, "--dtype", "f32", "--shape", "256,16", "-o", &out
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let feed = data.clone();
    let path = fifo.clone();
    let writer = std::thread::spawn(move || std::fs::write(path, feed));
    let o = finish(child, 60);
    writer.join().unwrap().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    restores_to(&dir, &out, &data);
}

#[test]
fn device_input_is_refused() {
    let dir = Scratch::new("dev-in");
    let out = dir.path("zero.ibp");
    let err = fails(
        &args!["compress", "/dev/zero", "--dtype", "u8", "-o", &out],
        EXIT_UNSUPPORTED,
    );
    assert!(err.contains("device"), "{err}");
    assert!(!out.exists());
}

// Finding 2: strings longer than 65,535 characters.

#[test]
fn very_long_names_do_not_panic() {
    let dir = Scratch::new("long-name");
    let name = "n".repeat(70_000);
    let data = features(64, 8, 3);
    let header = format!(
        r#"{{"{name}":{{"dtype":"F32","shape":[64,8],"data_offsets":[0,{}]}}}}"#,
        data.len()
    );
    let mut header = header.into_bytes();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(&header);
    file.extend(&data);
    let input = dir.write("long.safetensors", &file);
    let out = dir.path("long.ibp");
    let o = ok(&args!["compress", &input, "-o", &out]);
    assert!(text(&o.stdout).contains(&name));
    ok(&args!["inspect", &out]);
    let o = ok(&args!["analyze", &input]);
    assert!(text(&o.stdout).contains(&name));
    restores_to(&dir, &out, &file);
}

// Finding 3: the input changes while it is compressed.

/// A 16 MiB raw input and a compress of it, started; returns once the
/// temporary output exists (the input has been read and hashed).
fn start_slow_compress(dir: &Scratch) -> (PathBuf, PathBuf, Child) {
    let input = dir.write("big.f32", &features(4096, 1024, 4));
    let out = dir.path("big.ibp");
    let child = bin()
        .args(compress_raw(&input, 1024, &out))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_for(30, || !dir.partials().is_empty()),
        "no temporary output appeared"
    );
    (input, out, child)
}

#[test]
fn input_changed_during_compress_is_refused() {
    let dir = Scratch::new("changed");
    let (input, out, child) = start_slow_compress(&dir);
    // Rewrite the file in place, as a program still saving it would.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&input)
        .unwrap();
    // (Seeds are made odd: 4 and 8 give different data.)
    f.write_all(&features(4096, 1024, 8)).unwrap();
    drop(f);
    let o = finish(child, 120);
    let err = text(&o.stderr);
    assert!(o.status.signal().is_none(), "killed by a signal: {err}");
    if o.status.success() {
        // Only acceptable if the container really restores what it claims.
        let r = ibp(&args!["decompress", &out, "-o", dir.path("back")]);
        assert!(
            r.status.success(),
            "exit 0 but the container does not restore: {}",
            text(&r.stderr)
        );
    } else {
        assert_eq!(o.status.code(), Some(EXIT_IO), "{err}");
        assert!(err.contains("changed while ibp read it"), "{err}");
        assert!(!out.exists());
    }
    assert_eq!(dir.partials(), Vec::<String>::new());
}

#[test]
fn input_truncated_during_compress_is_an_io_error() {
    let dir = Scratch::new("truncated");
    let (input, out, child) = start_slow_compress(&dir);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&input)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let o = finish(child, 120);
    let err = text(&o.stderr);
    assert_eq!(o.status.signal(), None, "killed by a signal: {err}");
    assert_eq!(o.status.code(), Some(EXIT_IO), "{err}");
    assert!(err.contains("SIGBUS"), "{err}");
    assert!(!out.exists());
    assert_eq!(dir.partials(), Vec::<String>::new());
}

// Finding 5 and issue 13.9: output paths that are not plain files.

#[test]
fn output_to_stdout_is_the_container() {
    let dir = Scratch::new("stdout");
    let input = dir.write("x.f32", &features(256, 16, 6));
    let file = dir.path("x.ibp");
    ok(&compress_raw(&input, 16, &file));
    // Run in the scratch folder, so that an ibp that makes a file called
    // "-" makes it there.
    let o = bin()
        .args(compress_raw(&input, 16, Path::new("-")))
        .current_dir(&dir.0)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stdout == std::fs::read(&file).unwrap());
    // The report went to stderr, and no file called "-" was made.
    assert!(text(&o.stderr).contains("groups:"));
    assert!(!dir.path("-").exists());
    // And back: container on stdin, restored file on stdout.
    let mut child = bin()
        .args(args!["decompress", "-", "-o", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let container = o.stdout.clone();
    let feed = std::thread::spawn(move || stdin.write_all(&container));
    let back = finish(child, 60);
    feed.join().unwrap().unwrap();
    assert!(back.status.success(), "{}", text(&back.stderr));
    assert!(back.stdout == std::fs::read(&input).unwrap());
}

#[test]
fn dev_stdout_is_standard_output() {
    // Issue 13.9: `-o /dev/stdout --force` as root replaced the symlink
    // /dev/stdout with a file. It is standard output, whatever that is open
    // on: a pipe, or a file the shell opened (`>` or `>>`). No --force here:
    // an ibp that replaces nodes must not get the chance.
    let dir = Scratch::new("dev-stdout");
    let input = dir.write("x.f32", &features(256, 16, 14));
    let file = dir.path("x.ibp");
    ok(&compress_raw(&input, 16, &file));
    let want = std::fs::read(&file).unwrap();
    let o = ibp(&compress_raw(&input, 16, Path::new("/dev/stdout")));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stdout == want, "the pipe did not carry the container");
    assert!(text(&o.stderr).contains("groups:"));
    // Appended to a file the caller opened.
    let appended = dir.write("appended", b"HEAD");
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(&appended)
        .unwrap();
    let o = bin()
        .args(compress_raw(&input, 16, Path::new("/dev/stdout")))
        .stdout(f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let got = std::fs::read(&appended).unwrap();
    assert!(got[..4] == *b"HEAD" && got[4..] == want[..]);
    assert!(
        std::fs::symlink_metadata("/dev/stdout")
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(dir.partials(), Vec::<String>::new());
}

#[test]
fn output_to_a_character_device_is_written_not_replaced() {
    let dir = Scratch::new("devnull");
    let input = dir.write("x.f32", &features(64, 16, 7));
    // No --force needed: nothing is replaced. (Never run with --force on
    // an ibp that replaces nodes: as root it would replace /dev/null.)
    ok(&compress_raw(&input, 16, Path::new("/dev/null")));
    let m = std::fs::metadata("/dev/null").unwrap();
    assert!(m.file_type().is_char_device());
}

#[test]
fn output_to_a_fifo_is_written_not_replaced() {
    let dir = Scratch::new("fifo-out");
    let input = dir.write("x.f32", &features(512, 64, 8));
    let fifo = dir.path("out.fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Open the reading end without blocking, so that an ibp that replaces
    // the FIFO instead of writing to it cannot hang the test.
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut args = compress_raw(&input, 64, &fifo);
    args.push("--force".into());
    let mut child = bin()
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < end, "ibp did not finish");
        match reader.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            Ok(_) | Err(_) => {
                if child.try_wait().unwrap().is_some() {
                    // Drain what is left after the writer closed.
                    while let Ok(n) = reader.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        got.extend_from_slice(&buf[..n]);
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO was replaced"
    );
    let file = dir.path("x.ibp");
    ok(&compress_raw(&input, 64, &file));
    assert!(
        got == std::fs::read(&file).unwrap(),
        "the FIFO did not carry the container"
    );
}

#[test]
fn symlinked_output_is_written_through() {
    let dir = Scratch::new("symlink");
    let input = dir.write("x.f32", &features(128, 16, 9));
    let target = dir.write("target.ibp", b"old contents");
    let link = dir.path("link.ibp");
    std::os::unix::fs::symlink("target.ibp", &link).unwrap();
    fails(&compress_raw(&input, 16, &link), EXIT_INVALID);
    let mut args = compress_raw(&input, 16, &link);
    args.push("--force".into());
    ok(&args);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced"
    );
    restores_to(&dir, &target, &std::fs::read(&input).unwrap());
    // A dangling link names the file to create.
    let dangling = dir.path("dangling.ibp");
    std::os::unix::fs::symlink("new.ibp", &dangling).unwrap();
    ok(&compress_raw(&input, 16, &dangling));
    assert!(dir.path("new.ibp").is_file());
    assert!(
        std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(dir.partials(), Vec::<String>::new());
}

#[test]
fn interrupted_runs_leave_no_partial_file() {
    for (sig, name) in [(libc::SIGINT, "sigint"), (libc::SIGTERM, "sigterm")] {
        let dir = Scratch::new(name);
        let (_, out, child) = start_slow_compress(&dir);
        // SAFETY: kill with a valid pid and signal.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
        let o = finish(child, 60);
        assert_eq!(o.status.signal(), Some(sig), "{name}: {}", text(&o.stderr));
        assert_eq!(dir.partials(), Vec::<String>::new(), "{name}");
        assert!(!out.exists());
    }
}

#[test]
fn stale_partial_files_are_removed_by_the_next_run() {
    let dir = Scratch::new("stale");
    // A run killed outright (SIGKILL cannot be caught) leaves its file.
    let (input, out, mut child) = start_slow_compress(&dir);
    child.kill().unwrap();
    child.wait().unwrap();
    let left = dir.partials();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(".big.ibp.ibp-"), "{left:?}");
    // A process that has ended: its pid is free. Files of ibp 0.1's naming
    // from it go too; another machine's (on a shared disk) and another
    // output's stay.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let old_style = dir.write(&format!(".big.ibp.{dead}.partial"), b"left by ibp 0.1");
    let elsewhere = dir.write(
        &format!(".big.ibp.ibp-otherhost-{dead}.partial"),
        b"another machine's run",
    );
    let other = dir.write(&format!(".y.ibp.{dead}.partial"), b"another output");
    // A run still going keeps its file while the next run goes ahead.
    let running = bin()
        .args(compress_raw(&input, 1024, &dir.path("live.ibp")))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let live_partial = || dir.partials().iter().any(|p| p.starts_with(".live.ibp."));
    assert!(wait_for(30, live_partial));
    let small = dir.write("small.f32", &features(64, 16, 10));
    // Same output name as the killed run, and as the live one.
    for name in [&out, &dir.path("live.ibp")] {
        let o = bin()
            .args(compress_raw(&small, 16, name))
            .args(["--force"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let now = dir.partials();
    assert!(!now.contains(&left[0]), "{now:?}");
    assert!(!old_style.exists());
    assert!(elsewhere.exists() && other.exists());
    assert!(live_partial(), "the live run's file was removed: {now:?}");
    // The live run then finds its output written meanwhile (by the --force
    // run above) and, without --force itself, leaves it alone, and its own
    // file goes.
    let live = finish(running, 120);
    assert_eq!(live.status.code(), Some(EXIT_INVALID));
    assert!(!live_partial());
}

#[test]
fn concurrent_runs_without_force_one_wins() {
    let dir = Scratch::new("race");
    let input = dir.write("x.f32", &features(64, 16, 11));
    let out = dir.path("x.ibp");
    for round in 0..8 {
        let _ = std::fs::remove_file(&out);
        let children: Vec<Child> = (0..8)
            .map(|_| {
                bin()
                    .args(compress_raw(&input, 16, &out))
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let codes: Vec<Option<i32>> = children
            .into_iter()
            .map(|c| finish(c, 60).status.code())
            .collect();
        let wins = codes.iter().filter(|c| **c == Some(0)).count();
        assert_eq!(wins, 1, "round {round}: exit codes {codes:?}");
        assert!(codes.iter().all(|c| matches!(c, Some(0 | EXIT_INVALID))));
        restores_to(&dir, &out, &std::fs::read(&input).unwrap());
        assert_eq!(dir.partials(), Vec::<String>::new());
    }
}

// Finding 6: a container whose restore nothing could check.

#[test]
fn container_without_the_original_fingerprint_does_not_restore() {
    let dir = Scratch::new("no-source");
    // Group data inside a deflate segment: the group's hash checks the data
    // but not the level, which shapes the restored bytes.
    let data = b"tensor bytes".to_vec();
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let g = w
        .add_group(
            GroupMeta::new("t", DType::U8, vec![12], 1, 12, &data),
            GroupData::Raw(&data),
        )
        .unwrap();
    let (bytes, _) = w
        .finish(&[Segment::Deflate {
            level: 1,
            inner: vec![Segment::Group(g as usize)],
        }])
        .unwrap();
    let container = dir.write("nosource.ibp", &bytes);
    let out = dir.path("out");
    let err = fails(&args!["decompress", &container, "-o", &out], EXIT_CORRUPT);
    assert!(err.contains("records no length and hash"), "{err}");
    assert!(!out.exists());
    assert_eq!(dir.partials(), Vec::<String>::new());
}

// Finding 4: memory bounded by design.

/// Run `ibp args` to the end and return its exit code and peak anonymous
/// memory in KiB: the largest `RssAnon` read from `/proc/PID/status` while
/// it runs, polled every millisecond.
///
/// Q: why anonymous memory? A: it is what ibp allocates; mapped input and
/// output files are page cache the kernel can drop, and reading a larger
/// container back would otherwise look like a larger peak.
///
/// Q: why not `ru_maxrss` from `wait4`? A: Linux carries the spawning
/// process's peak over into the child's at `exec`, so the child would be
/// charged for whatever this test process (and the tests running beside it)
/// held at that moment. The allocations measured here live for hundreds of
/// milliseconds, far longer than the polling interval.
fn peak_kib(args: &[OsString]) -> (Option<i32>, i64) {
    let mut child = bin()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0i64;
    let end = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(s) = std::fs::read_to_string(&status)
            && let Some(line) = s.lines().find(|l| l.starts_with("RssAnon:"))
        {
            let kib: i64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            peak = peak.max(kib);
        }
        if let Some(st) = child.try_wait().unwrap() {
            return (st.code(), peak);
        }
        assert!(Instant::now() < end, "ibp did not finish");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Peak anonymous memory of compressing a tiny file: the binary's own.
fn baseline_kib(dir: &Scratch) -> i64 {
    let tiny = dir.write("tiny.u8", &[7u8; 64]);
    let (code, kib) = peak_kib(&args![
        "compress",
        &tiny,
        "--dtype",
        "u8",
        "--shape",
        "32,2",
        "-o",
        dir.path("tiny.ibp")
    ]);
    assert_eq!(code, Some(0));
    kib
}

#[test]
fn fit_memory_does_not_grow_with_row_length() {
    // Two rows of 512 KiB. The fit used to need about 130 bytes per byte of
    // row length (68 MB here); now its counters cover a block of columns at
    // a time.
    let dir = Scratch::new("long-rows");
    let base = baseline_kib(&dir);
    let input = dir.write("long.f32", &features(2, 1 << 17, 12));
    let (code, kib) = peak_kib(&args![
        "compress",
        &input,
        "--dtype",
        "f32",
        "--shape",
        "2,131072",
        "-o",
        dir.path("long.ibp")
    ]);
    assert_eq!(code, Some(0));
    let extra_mib = (kib - base) / 1024;
    assert!(
        extra_mib < 16,
        "compressing 1 MiB of 512 KiB rows took {extra_mib} MiB more than a tiny file"
    );
}

#[test]
fn long_rows_fit_under_a_memory_limit() {
    // Under a 64 MiB address-space limit the fit of two 512 KiB rows used
    // to abort (SIGABRT: "memory allocation failed"); it needs a few MiB
    // now. One arena and two threads keep the binary's own reservations
    // small on machines with many cores.
    use std::os::unix::process::CommandExt;
    let dir = Scratch::new("memory-limit");
    let input = dir.write("long.f32", &features(2, 1 << 17, 13));
    let out = dir.path("long.ibp");
    let mut cmd = bin();
    cmd.args(compress_raw(&input, 1 << 17, &out))
        .env("MALLOC_ARENA_MAX", "2")
        .env("RAYON_NUM_THREADS", "2");
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 64 << 20,
                rlim_max: 64 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    assert_eq!(o.status.signal(), None, "{}", text(&o.stderr));
    assert!(o.status.success(), "{}", text(&o.stderr));
    restores_to(&dir, &out, &std::fs::read(&input).unwrap());
}

#[test]
fn short_rows_do_not_multiply_memory() {
    // Rows of 2 bytes: the packed form (8 bytes of offset a row) can never
    // be smaller, and is no longer built only to be thrown away (it cost
    // 8× the input).
    let dir = Scratch::new("short-rows");
    let base = baseline_kib(&dir);
    let n = 1 << 21;
    let data: Vec<u8> = (0..2 * n).map(|i| (i % 3) as u8).collect();
    let input = dir.write("two.u8", &data);
    let shape = format!("{n},2");
    let out = dir.path("two.ibp");
    let (code, kib) = peak_kib(&args![
        "compress", &input, "--dtype", "u8", "--shape", &shape, "-o", &out
    ]);
    assert_eq!(code, Some(0));
    let extra = (kib - base) * 1024;
    assert!(
        extra < data.len() as i64,
        "compressing {} bytes of 2-byte rows took {extra} bytes more than a tiny file",
        data.len()
    );
    restores_to(&dir, &out, &data);
}

/// An npz as `numpy.savez_compressed` writes one: each member an npy file,
/// raw-deflated at level 6.
fn npz(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let crc = |d: &[u8]| {
        let mut c = flate2::Crc::new();
        c.update(d);
        c.sum()
    };
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
        e.write_all(data).unwrap();
        let comp = e.finish().unwrap();
        let fields = |v: &mut Vec<u8>| {
            v.extend([20, 0, 0, 0, 8, 0, 0, 0, 0, 0]);
            v.extend(crc(data).to_le_bytes());
            v.extend((comp.len() as u32).to_le_bytes());
            v.extend((data.len() as u32).to_le_bytes());
            v.extend((name.len() as u16).to_le_bytes());
            v.extend([0, 0]);
        };
        central.extend(0x0201_4b50u32.to_le_bytes());
        central.extend([20, 3]);
        fields(&mut central);
        central.extend([0u8; 8]);
        central.extend([0u8; 2]);
        central.extend((out.len() as u32).to_le_bytes());
        central.extend(name.as_bytes());
        out.extend(0x0403_4b50u32.to_le_bytes());
        fields(&mut out);
        out.extend(name.as_bytes());
        out.extend(&comp);
    }
    let cd = out.len() as u32;
    out.extend(&central);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0, 0, 0, 0]);
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend(cd.to_le_bytes());
    out.extend([0, 0]);
    out
}

/// A version-1.0 npy file of little-endian f32 `rows × cols`.
fn npy_f32(rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    let mut dict =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    while !(10 + dict.len() + 1).is_multiple_of(64) {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((dict.len() as u16).to_le_bytes());
    out.extend(dict.as_bytes());
    out.extend(data);
    out
}

#[test]
fn npz_members_are_inflated_one_at_a_time() {
    // Twelve deflated members of 2 MiB: all of them used to be inflated
    // before the first was compressed.
    let dir = Scratch::new("npz-members");
    let base = baseline_kib(&dir);
    let (rows, cols) = (512, 1024);
    let members: Vec<(String, Vec<u8>)> = (0..12)
        .map(|m| {
            let data: Vec<u8> = (0..rows * cols)
                .flat_map(|i| (((i * 7 + m) % 5) as f32).to_le_bytes())
                .collect();
            (format!("m{m}.npy"), npy_f32(rows, cols, &data))
        })
        .collect();
    let borrowed: Vec<(&str, Vec<u8>)> = members
        .iter()
        .map(|(n, d)| (n.as_str(), d.clone()))
        .collect();
    let file = npz(&borrowed);
    let input = dir.write("twelve.npz", &file);
    let out = dir.path("twelve.ibp");
    let (code, kib) = peak_kib(&args!["compress", &input, "-o", &out]);
    assert_eq!(code, Some(0));
    let extra_mib = (kib - base) / 1024;
    let member_mib = (rows * cols * 4) >> 20;
    assert!(
        extra_mib < 6 * member_mib as i64,
        "compressing 12 members of {member_mib} MiB took {extra_mib} MiB more than a tiny file"
    );
    restores_to(&dir, &out, &file);
    let o = ok(&args!["analyze", &input]);
    assert!(text(&o.stdout).contains("m11"));
}

#[test]
fn inspecting_a_container_of_many_small_parts_is_bounded() {
    // What a crafted container can hold most of for its size: empty groups
    // (a directory entry and a manifest entry each), empty pieces, and
    // notes. Opening and inspecting it must stay within a small multiple of
    // its size.
    let dir = Scratch::new("many-parts");
    let base = baseline_kib(&dir);
    let n = 40_000;
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let mut env = Vec::new();
    for i in 0..n {
        let g = w
            .add_group(
                GroupMeta::new(format!("g{i}"), DType::U8, vec![0], 0, 0, b""),
                GroupData::Raw(b""),
            )
            .unwrap();
        env.push(Segment::Group(g as usize));
        env.push(Segment::Raw(w.add_piece(b"").unwrap()));
        w.add_note("");
    }
    w.set_source(Some(ibp::container::SourceInfo::new(
        ibp::io::SourceFormat::Raw,
        ibp::io::Fingerprint::of(b""),
    )));
    let (bytes, _) = w.finish(&env).unwrap();
    let container = dir.write("many.ibp", &bytes);
    for args in [
        args!["inspect", &container].to_vec(),
        args!["inspect", &container, "--json"].to_vec(),
        args!["decompress", &container, "-o", dir.path("out")].to_vec(),
    ] {
        let (code, kib) = peak_kib(&args);
        assert_eq!(code, Some(0), "{args:?}");
        let extra = (kib - base) * 1024;
        eprintln!(
            "{args:?}: {} bytes of container, {extra} bytes",
            bytes.len()
        );
        assert!(
            extra < 8 * bytes.len() as i64,
            "{args:?}: {} bytes of container took {extra} bytes",
            bytes.len()
        );
    }
}
