//! nvCOMP, the peer of `ibp bench --peers nvcomp`, through ibp's own loader
//! (`cli/src/cli/bench/peers/nvcomp.rs`, compiled in here):
//!
//! - a missing or wrong library is a typed error saying "nvCOMP not found"
//!   or what is wrong with the file (no nvCOMP or GPU needed);
//! - the library named by `IBP_NVCOMP` opens, every symbol ibp calls
//!   resolves and the version is 6.x (no GPU needed: nvCOMP finds the
//!   driver only when a call needs it);
//! - on a GPU, every codec configuration compresses and decompresses
//!   ragged buffers, with 64 KiB chunks and one chunk per odd-sized row,
//!   back to the same bytes.
//!
//! Without `IBP_NVCOMP` the last two print a visible `skipped` notice (a
//! failure with `IBP_REQUIRE_NVCOMP=1`, which `scripts/device-peers.sh`
//! sets); without a GPU the last prints `skipped: no CUDA device`.

#[path = "../../tests/common/mod.rs"]
mod common;

#[allow(dead_code)]
#[path = "../src/cli/bench/peers/nvcomp.rs"]
mod nvcomp;

use std::path::Path;

use common::{Rng, gpu_or_skip, notice};
use ibp::ErrorKind;
use ibp::gpu::cust::stream::{Stream, StreamFlags};
use nvcomp::{Codec, Nvcomp};

/// nvCOMP from `IBP_NVCOMP`, or `None` after a visible notice.
fn nvcomp_or_skip(test: &str) -> Option<Nvcomp> {
    if std::env::var_os(nvcomp::ENV).is_none_or(|v| v.is_empty()) {
        assert!(
            std::env::var("IBP_REQUIRE_NVCOMP").as_deref() != Ok("1"),
            "{test}: IBP_REQUIRE_NVCOMP=1 but IBP_NVCOMP is not set"
        );
        notice(&format!(
            "{test}: skipped: IBP_NVCOMP is not set (point it at libnvcomp.so.6)"
        ));
        return None;
    }
    Some(Nvcomp::find(None).unwrap_or_else(|e| panic!("{test}: IBP_NVCOMP does not load: {e}")))
}

#[test]
fn a_missing_library_is_a_typed_error() {
    let e = Nvcomp::locate(Some(Path::new("/nonexistent/libnvcomp.so.6"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains("nvCOMP not found"), "{e}");
    assert!(e.message().contains("IBP_NVCOMP"), "{e}");
    // A folder without the library (a new empty one: the temp folder itself
    // may hold a copy, as a device script's staging leaves one there).
    let dir = std::env::temp_dir().join(format!("ibp-no-nvcomp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = Nvcomp::locate(Some(&dir)).unwrap_err();
    let _ = std::fs::remove_dir(&dir);
    assert!(e.message().contains("nvCOMP not found"), "{e}");
}

#[test]
fn a_file_that_is_not_nvcomp_is_refused() {
    // Not a shared library at all.
    let e = Nvcomp::open(Path::new(file!()))
        .err()
        .expect("a source file is no library");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains("does not load"), "{e}");
    // A shared library without nvCOMP's symbols: the C library itself.
    let e = Nvcomp::open(Path::new("libc.so.6"))
        .err()
        .expect("libc is not nvCOMP");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(
        e.message().contains("has no symbol nvcompGetProperties"),
        "{e}"
    );
}

#[test]
fn every_symbol_resolves_and_the_version_is_6() {
    let Some(nv) = nvcomp_or_skip("every_symbol_resolves_and_the_version_is_6") else {
        return;
    };
    assert_eq!(nv.version().0, nvcomp::SUPPORTED_MAJOR);
    // `open` resolved each of these (it fails on the first one missing);
    // look them up once more by name so the list itself is checked.
    let handle = {
        let c = std::ffi::CString::new(nv.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a C string; the library is already loaded, so this only
        // takes another reference to it.
        unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }
    };
    assert!(!handle.is_null(), "the library is loaded");
    let names = nvcomp::symbol_names();
    assert_eq!(names.len(), 2 + 4 * 7);
    for name in names {
        let c = std::ffi::CString::new(name.as_str()).unwrap();
        // SAFETY: live handle, C string.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        assert!(!p.is_null(), "{name} is missing");
    }
}

/// Float-like rows: 4-byte little-endian values with shared exponents and a
/// few zero runs, so every codec has something to find.
fn floats(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let v = if i % 97 < 5 {
                0.0f32
            } else {
                1.0 + (rng.next() % 1000) as f32 / 1024.0
            };
            v.to_le_bytes()
        })
        .collect()
}

/// Compress `data` in `chunk`-byte chunks with `codec` and decode it on the
/// device into `stride`-spaced slots; the slots must hold `data` again.
fn round_trip(nv: &Nvcomp, codec: Codec, data: &[u8], chunk: usize, stream: &Stream) {
    let c = nv.compress(codec, data, chunk, stream).unwrap();
    assert_eq!(c.raw_bytes(), data.len() as u64);
    let stride = chunk.next_multiple_of(c.output_alignment);
    let input = nvcomp::upload(&c.data, "chunks").unwrap();
    let out = nvcomp::zeroed::<u8>(c.count() * stride, "output").unwrap();
    let ins: Vec<u64> = c
        .offsets
        .iter()
        .map(|&o| input.as_device_ptr().as_raw() + o)
        .collect();
    let outs: Vec<u64> = (0..c.count())
        .map(|i| out.as_device_ptr().as_raw() + (i * stride) as u64)
        .collect();
    let job = nv
        .decode_job(codec, &ins, &c.sizes, &outs, &c.raw, c.max_raw, stream)
        .unwrap();
    nv.decode(&job, 0..c.count(), stream).unwrap();
    stream.synchronize().unwrap();
    nv.check_job(&job).unwrap();
    let got = nvcomp::to_host(&out).unwrap();
    for (i, want) in data.chunks(chunk).enumerate() {
        assert!(
            &got[i * stride..i * stride + want.len()] == want,
            "{} chunk {i} of {chunk} B differs",
            codec.name()
        );
    }
}

#[test]
fn every_codec_round_trips_on_the_gpu() {
    let test = "every_codec_round_trips_on_the_gpu";
    let Some(nv) = nvcomp_or_skip(test) else {
        return;
    };
    let Some(gpu) = gpu_or_skip(test) else {
        return;
    };
    gpu.make_current().unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut rng = Rng(0x5eed);
    // 300 KiB plus a ragged 5732-byte tail (Cora's row length, not a
    // multiple of 16), cut into 64 KiB chunks and into rows.
    let data = floats(&mut rng, (300 * 1024 + 5732) / 4);
    let bf16: Vec<u8> = data
        .as_chunks::<4>()
        .0
        .iter()
        .flat_map(|b| [b[2], b[3]])
        .collect();
    let bytes = rng.bytes(100_003, 2);
    let cases: [(&[u8], usize, bool, usize); 3] = [
        (&data, 4, true, 5732),
        (&bf16, 2, true, 2866),
        (&bytes, 1, false, 1001),
    ];
    for (buf, elem, float, row) in cases {
        for codec in Codec::for_elements(elem, float) {
            let usable = buf.len() - buf.len() % elem;
            round_trip(&nv, codec, &buf[..usable], 64 << 10, &stream);
            round_trip(&nv, codec, &buf[..usable - usable % row], row, &stream);
        }
    }
}
