//! What the README's "Guarantees" section promises, checked through the real
//! binary: inputs that are not plain files, hostile names, inputs that
//! change under a run, output paths that are not plain files, interrupted
//! and concurrent runs, and containers that could restore the wrong bytes.
//! Each test is the regression test of a finding of issue 15 (or 13.9).
//! Memory bounds are in `cli_guarantees_memory.rs`.

#[path = "../../tests/common/mod.rs"]
mod common;
#[macro_use]
mod guarantees_harness;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ibp::container::{ContainerWriter, GroupData, GroupMeta};
use ibp::io::{DType, Segment};

use guarantees_harness::*;

/// `ibp ARGS` started with stdout and stderr piped.
fn start<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Child {
    bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// [`start`] with stdin piped too.
fn start_fed<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Child {
    bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// [`start`] with stdout discarded.
fn start_quiet<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Child {
    bin()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn piped_input_is_read_in_full() {
    let dir = Scratch::new("pipe");
    let data = features(512, 32, 1);
    let shape = "512,32";
    for input in ["/dev/stdin", "-"] {
        let out = dir.path("piped.ibp");
        let _ = std::fs::remove_file(&out);
        let mut child = start_fed(args![
            "compress", input, "--dtype", "f32", "--shape", shape, "-o", &out
        ]);
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
    let child = start(args![
        "compress", &fifo, "--dtype", "f32", "--shape", "256,16", "-o", &out
    ]);
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
    let child = start(compress_raw(&input, 1024, &out));
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
        // Issue 38.8: a changed input is no ibp bug, and says so once.
        assert!(!err.contains("ibp bug"), "{err}");
        assert_eq!(err.matches("nothing was written").count(), 1, "{err}");
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
    let mut child = start_fed(args!["decompress", "-", "-o", "-"]);
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
    let mut child = start_quiet(&args);
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
    let running = start_quiet(compress_raw(&input, 1024, &dir.path("live.ibp")));
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
            .map(|_| start_quiet(compress_raw(&input, 16, &out)))
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

// Issue 38, findings 2, 3, 7 and 8.

/// `sh -c` running ibp with `setup` (shell redirections, ulimits) first.
fn sh_ibp(setup: &str, args: &[OsString]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("{setup}; exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_ibp"))
        .args(args);
    c
}

/// Finding 2: `kv-data --text` and `plot` refused devices and bounded what
/// they read from a pipe (`/dev/zero` grew to 24 GB).
#[test]
fn text_inputs_refuse_devices_and_bound_pipes() {
    let dir = Scratch::new("text-inputs");
    let out = dir.path("kv.safetensors");
    for args in [
        args!["kv-data", "--text", "/dev/zero", "-o", &out].to_vec(),
        args!["plot", "/dev/zero", "-o", dir.path("p.svg")].to_vec(),
    ] {
        let child = start(&args);
        let o = finish(child, 30);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(EXIT_UNSUPPORTED), "{args:?}: {err}");
        assert!(err.contains("is a device"), "{err}");
    }
    // An endless pipe: read up to the bound, then refused.
    let mut child = start_fed(args!["plot", "/dev/stdin", "-o", dir.path("p.svg")]);
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let block = vec![b'|'; 1 << 16];
        // Stops when ibp closes the pipe.
        for _ in 0..(64 << 20) / block.len() {
            if stdin.write_all(&block).is_err() {
                break;
            }
        }
    });
    let o = finish(child, 60);
    feeder.join().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(EXIT_INVALID), "{err}");
    assert!(err.contains("larger than"), "{err}");
    assert_eq!(dir.listing(), Vec::<String>::new());
}

/// Finding 3: a results file holding 1.7e308 made `ibp plot` spin forever;
/// a 33 MB one made a 1.06 GB SVG.
#[test]
fn plot_bounds_values_and_output() {
    let dir = Scratch::new("plot-bounds");
    let head = "# ibp GPU benchmarks: X\n\n## Figure 7 grid\n\n| tensor | savings | packed GB/s | ideal (packed) GB/s |\n| --- | --- | --- | --- |\n";
    let huge = dir.write(
        "huge.md",
        format!("{head}| 256 B | 12.5% | 1.7e308 | 54.9 |\n").as_bytes(),
    );
    let svg = dir.path("huge.svg");
    let child = start(args!["plot", &huge, "-o", &svg]);
    let o = finish(child, 30);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(EXIT_CORRUPT), "{err}");
    assert!(err.contains("1.7e308"), "{err}");
    assert!(!svg.exists());
    // Many rows: refused, not drawn into a huge picture.
    let mut md = head.to_string();
    for i in 0..20_000u64 {
        md.push_str(&format!("| {} B | 50.0% | 10.0 | 20.0 |\n", 256 + i));
    }
    let many = dir.write("many.md", md.as_bytes());
    let svg = dir.path("many.svg");
    let err = fails(&args!["plot", &many, "-o", &svg], EXIT_INVALID);
    assert!(err.contains("rows"), "{err}");
    assert!(!svg.exists());
}

/// Finding 7: `decompress -o - >&-` exited 0 and said "verified".
#[test]
fn closed_stdout_is_an_io_error() {
    let dir = Scratch::new("closed-stdout");
    let input = dir.write("x.f32", &features(64, 16, 3));
    let packed = dir.path("x.ibp");
    ok(&compress_raw(&input, 16, &packed));
    for args in [
        args!["decompress", &packed, "-o", "-"].to_vec(),
        args![
            "compress", &input, "--dtype", "f32", "--shape", "64,16", "-o", "-"
        ]
        .to_vec(),
    ] {
        let o = sh_ibp("exec >&-", &args).output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(EXIT_IO), "{args:?}: {err}");
        assert!(
            err.contains("standard output") && err.contains("closed"),
            "{err}"
        );
        assert!(!err.contains("verified"), "{err}");
    }
    assert_eq!(dir.partials(), Vec::<String>::new());
}

/// Finding 8: a full `$TMPDIR` (here, a file size limit) is named in the
/// message, with what to do.
#[test]
fn a_full_spool_names_tmpdir() {
    let dir = Scratch::new("full-spool");
    let input = dir.write("x.f32", &features(1024, 256, 5));
    let spool = dir.path("tmp");
    std::fs::create_dir_all(&spool).unwrap();
    let o = sh_ibp(
        "trap '' XFSZ; ulimit -f 64",
        &args![
            "compress", &input, "--dtype", "f32", "--shape", "1024,256", "-o", "-"
        ],
    )
    .env("TMPDIR", &spool)
    .stdout(Stdio::null())
    .output()
    .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(EXIT_IO), "{err}");
    assert!(
        err.contains(&spool.display().to_string()) && err.contains("TMPDIR"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0, "spool left");
}

/// Finding 8: exit codes and wording of bad inputs and arguments.
#[test]
fn bad_inputs_have_the_right_kind_and_words() {
    let dir = Scratch::new("messages");
    let out = dir.path("out.ibp");
    // Invalid UTF-8 in a text input is bad data (4), not I/O (3).
    let bad = dir.write("bad.md", b"# ibp GPU benchmarks: \xff\n");
    let err = fails(&args!["plot", &bad, "-o", dir.path("b.svg")], EXIT_CORRUPT);
    assert!(err.contains("UTF-8"), "{err}");
    let err = fails(
        &args!["kv-data", "--text", &bad, "-o", dir.path("kv.st")],
        EXIT_CORRUPT,
    );
    assert!(err.contains("UTF-8"), "{err}");
    // --tensor on a one-tensor input is refused, not ignored.
    let raw = dir.write("x.f32", &features(64, 16, 3));
    let err = fails(
        &args![
            "compress", &raw, "--dtype", "f32", "--tensor", "w", "-o", &out
        ],
        EXIT_INVALID,
    );
    assert!(err.contains("\"w\"") && err.contains("one tensor"), "{err}");
    // A --shape whose element count overflows is a bad argument (2).
    let err = fails(
        &args![
            "compress",
            &raw,
            "--dtype",
            "f32",
            "--shape",
            "4294967296,4294967296,2",
            "-o",
            &out
        ],
        EXIT_INVALID,
    );
    assert!(err.contains("shape"), "{err}");
    // An npy of version 0 is damaged, not "newer".
    let mut npy = b"\x93NUMPY\x00\x00".to_vec();
    npy.extend(118u16.to_le_bytes());
    npy.extend(
        format!(
            "{:<117}\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
        )
        .as_bytes(),
    );
    npy.extend([0u8; 8]);
    let v0 = dir.write("v0.npy", &npy);
    let err = fails(&args!["compress", &v0, "-o", &out], EXIT_CORRUPT);
    assert!(!err.contains("newer"), "{err}");
    // Sizes print as numbers, not `Some(…)`.
    let header = r#"{"t":{"dtype":"F32","shape":[1040],"data_offsets":[0,16]}}"#;
    let mut st = (header.len() as u64).to_le_bytes().to_vec();
    st.extend(header.as_bytes());
    st.extend([0u8; 16]);
    let st = dir.write("short.safetensors", &st);
    let err = fails(&args!["compress", &st, "-o", &out], EXIT_CORRUPT);
    assert!(
        err.contains("needs 4160 bytes") && !err.contains("Some("),
        "{err}"
    );
    assert!(!out.exists());
}
