//! A seeded fuzzer for the GPU decoders (issue 38): random datasets and
//! mutated ones (flags, offsets, stored lengths, payload bits, cluster ids,
//! codebooks; truncated payloads; byte flips and truncations of whole
//! containers) through every decode path: the decoder's range and gather
//! (u32 and u64 indices, strided output) from pinned host memory
//! (zero-copy) and from device memory, the DMA range and gather, the
//! feature cache's gather, the KV store's gather, and the device API's
//! `decode_row` inside user kernels (the fused embedding-bag kernels of
//! `examples/fused-kernels`, and the tutorial crate's `row_sums` when
//! `user-kernels.ptx` is staged).
//!
//! The oracle is the CPU codec on the same (damaged) bytes, row by row:
//! every output row it decodes must come back from the GPU bit for bit;
//! every row it rejects must be zero-filled and reported through the
//! status (the right kind, the first failed output row); every index past
//! the rows likewise; and a dataset the CPU codec rejects as a whole must
//! be refused with a typed error. Outputs are poisoned first; odd cases
//! size them exactly (no slack, so a write past them is an out-of-bounds
//! write for `compute-sanitizer --tool memcheck`), even cases add poisoned
//! guard bytes that must stay untouched. Nothing on the host may panic: a
//! panic inside a case is recorded as a failure with the case's seed.
//!
//! Settings (environment):
//! - `IBP_FUZZ_CASES`: cases to run (default 200);
//! - `IBP_FUZZ_SEED`: the seed (decimal or 0x-hex; default fixed);
//! - `IBP_FUZZ_FIRST`: the first case number (to rerun one failing case:
//!   its number with `IBP_FUZZ_CASES=1`);
//! - `IBP_FUZZ_MAX_SECONDS`: stop starting cases after this long (the
//!   summary says how many ran; for runs under the sanitizer).
//!
//! The last line on stderr is the summary: cases, then for each path its
//! runs, how many decoded equal, how many reported corrupt rows as the
//! CPU did, how many ended in a typed error, and failures. Prints
//! `skipped: no CUDA device` without a GPU (a failure with
//! `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

#[path = "../common/mod.rs"]
mod common;
#[path = "../../examples/fused_host/mod.rs"]
mod fused_host;

/// Uploads `index` as u64 ids (`wide`) or as u32 ones, bound to `$d`;
/// settles; runs `$launch`; waits for the stream. (A macro: the launches
/// are generic over the id type.)
macro_rules! with_ids {
    ($fz:expr, $index:expr, $wide:expr, $what:expr, |$d:ident| $launch:expr) => {{
        if $wide {
            let $d = cu(DeviceBuffer::from_slice(&$index[..]), $what)?;
            $fz.settle()?;
            $launch;
        } else {
            let narrow: Vec<u32> = $index.iter().map(|&t| t as u32).collect();
            let $d = cu(DeviceBuffer::from_slice(&narrow), $what)?;
            $fz.settle()?;
            $launch;
        }
        $fz.sync()?;
    }};
}

mod cases;
mod device_api;
mod kv;
mod mutate;
mod oracle;
mod runner;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use common::{Rng, gpu_or_skip, notice};
use cust::memory::DeviceBuffer;
use cust::module::Module;
use cust::stream::{Stream, StreamFlags};
use fused_host::Kernels;
use fused_kernels::{BAD_INDEX, BagParams, CORRUPT, OK};
use ibp::cluster::{ClusterIds, compress_clustered_with_ids};
use ibp::codebook::{ChunkSize, Codebook};
use ibp::container::{GroupLayout, IbpFile};
use ibp::gpu::{
    CacheOptions, DecodeOptions, DecodeStatus, Decoder, DmaScratch, FeatureCache, Fetch, Gpu,
    GpuDataset, KvStore, KvStoreOptions, PageWrites, Residency, copy_to_host_blocking,
};
use ibp::io::{self, ParseOptions, SourceFormat};
use ibp::layout::{
    FixedStrideRef, Layout, LayoutOptions, PackedRef, compress_fixed, compress_packed,
    decompress_fixed_row, decompress_packed_row,
};
use ibp::pipeline::{Clustering, CompressOptions, compress_document};
use ibp::{ErrorKind, Rows};
use ibp_kernels::device::DatasetView;

use cases::*;
use mutate::*;
use oracle::*;
use runner::*;

const POISON: u8 = 0xA5;
const GUARD: usize = 128;

/// Tensor lengths the cases draw from: tiny and ragged ones, line sizes
/// and their neighbours, the real tables' (768, 1536, 5732), and lengths
/// past batch mode's 48 lines (streaming mode).
const LENGTHS: [usize; 34] = [
    1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 33, 64, 100, 127, 128, 129, 255, 256, 384, 512, 768, 1000,
    1024, 1100, 1531, 1536, 2048, 4096, 4099, 5732, 6144, 6200, 8192, 9000,
];

// ---------------------------------------------------------------------------
// Settings and bookkeeping

/// An environment number, decimal or 0x-hex.
fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        }
        Err(_) => default,
    }
}

/// splitmix64: the case number and the seed to a case's own generator
/// (never 0, which xorshift cannot leave).
fn case_rng(seed: u64, case: u64) -> Rng {
    let mut z = seed ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    Rng((z ^ (z >> 31)) | 1)
}

fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.next() % n.max(1)
}

fn chance(rng: &mut Rng, one_in: u64) -> bool {
    below(rng, one_in) == 0
}

/// How one run of one path ended, when it ended as it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Every row the CPU decodes came back equal (bad indices, if any,
    /// reported), and no row was corrupt.
    Equal,
    /// Some rows were corrupt for the CPU, and the GPU reported and zeroed
    /// them (the rest equal).
    Corrupt,
    /// A typed error, where the CPU codec rejects the input too (or a
    /// path that cannot take it says so).
    Typed,
}

/// How a run failed.
enum Fail {
    /// The GPU disagreed with the CPU codec (the case goes on).
    Mismatch(String),
    /// A CUDA error: the context may be lost, the fuzzer stops.
    Fatal(String),
}

type Run = std::result::Result<Outcome, Fail>;

/// A CUDA error (from cust) as a fatal failure.
fn cu<T>(r: Result<T, cust::error::CudaError>, what: &str) -> Result<T, Fail> {
    r.map_err(|e| Fail::Fatal(format!("{what}: {e}")))
}

/// An ibp error from a call that must not fail here: fatal for CUDA
/// errors, a mismatch otherwise.
fn must<T>(r: ibp::Result<T>, what: &str) -> Result<T, Fail> {
    r.map_err(|e| {
        if e.kind() == ErrorKind::Cuda {
            Fail::Fatal(format!("{what}: {e}"))
        } else {
            Fail::Mismatch(format!("{what}: unexpected error: {e}"))
        }
    })
}

#[derive(Clone, Copy, Default)]
struct Counts {
    runs: u64,
    equal: u64,
    corrupt: u64,
    typed: u64,
    failed: u64,
}

/// Random decode options: the defaults, a ring small enough for streaming
/// mode, fast paths off, fewer warps, a forced fetch, fewer SMs.
fn random_options(rng: &mut Rng) -> DecodeOptions {
    let mut o = DecodeOptions::default();
    if chance(rng, 2) {
        return o;
    }
    if chance(rng, 3) {
        o = o.with_ring_bytes([256, 512, 4096, 16384][below(rng, 4) as usize]);
    }
    if chance(rng, 3) {
        o = o.with_fast_paths(false);
    }
    if chance(rng, 3) {
        o = o.with_warps_per_block([1, 2, 4][below(rng, 3) as usize]);
    }
    if chance(rng, 3) {
        o = o.with_fetch(if chance(rng, 2) {
            Fetch::CpAsync
        } else {
            Fetch::LoadStore
        });
    }
    if chance(rng, 4) {
        o = o.with_max_sms(1 + below(rng, 4) as u32);
    }
    o
}

/// Indices for a gather over `n` rows: 1 to 700 of them, repeats, and one
/// in twelve out of range (past the rows, far past, the largest index).
fn random_index(rng: &mut Rng, n: u64, wide: bool) -> Vec<u64> {
    let len = 1 + below(rng, (2 * n + 8).min(700));
    let top = if wide { u64::MAX } else { u32::MAX as u64 };
    (0..len)
        .map(|_| {
            if chance(rng, 12) {
                match below(rng, 3) {
                    0 => n,
                    1 => n + 1 + below(rng, 1000),
                    _ => top,
                }
            } else {
                below(rng, n)
            }
        })
        .collect()
}

/// The tutorial crate's PTX (`row_sums`), as gpu_device_api finds it.
fn user_module() -> Option<Module> {
    let path = std::env::var_os("IBP_USER_PTX")
        .map(std::path::PathBuf::from)
        .or_else(|| common::data_file("user-kernels.ptx"))?;
    let ptx = std::fs::read_to_string(path).ok()?;
    Some(Module::from_ptx(&ptx, &[]).expect("user-kernels.ptx loads"))
}

#[test]
fn gpu_decoders_match_the_cpu_codec_on_random_and_damaged_datasets() {
    let name = "gpu_decoders_match_the_cpu_codec_on_random_and_damaged_datasets";
    let Some(gpu) = gpu_or_skip(name) else {
        return;
    };
    let cases = env_u64("IBP_FUZZ_CASES", 200);
    let seed = env_u64("IBP_FUZZ_SEED", 0x1b9_f022);
    let first = env_u64("IBP_FUZZ_FIRST", 0);
    let max_secs = std::env::var("IBP_FUZZ_MAX_SECONDS")
        .ok()
        .map(|v| v.parse::<f64>().expect("IBP_FUZZ_MAX_SECONDS is a number"));
    let user = user_module();
    if user.is_none() {
        assert!(
            !common::gpu_required(),
            "{name}: no user-kernels.ptx in IBP_DATA_DIR (scripts/stage-device.sh builds it)"
        );
        notice(&format!("{name}: row_sums skipped: no user-kernels.ptx"));
    }
    let mut fz = Fuzz {
        gpu: &gpu,
        stream: Stream::new(StreamFlags::NON_BLOCKING, None).expect("a stream"),
        bags: Kernels::load(&gpu).expect("the fused kernels load"),
        user,
        stats: BTreeMap::new(),
        failures: Vec::new(),
        tag: String::new(),
        exact: false,
    };
    let start = Instant::now();
    let mut ran = 0;
    let mut fatal = false;
    for c in first..first + cases {
        if max_secs.is_some_and(|s| start.elapsed().as_secs_f64() > s) {
            break;
        }
        let mut rng = case_rng(seed, c);
        fz.tag = format!("case {c} (IBP_FUZZ_SEED={seed:#x} IBP_FUZZ_FIRST={c} IBP_FUZZ_CASES=1)");
        fz.exact = c % 2 == 1;
        let r = catch_unwind(AssertUnwindSafe(|| fz.case(&mut rng)));
        ran += 1;
        match r {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                fatal = true;
                break;
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                fz.failures.push(format!("{}: PANIC: {msg}", fz.tag));
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    for f in fz.failures.iter().take(30) {
        notice(&format!("gpu_fuzz FAIL {f}"));
    }
    let paths: Vec<String> = fz
        .stats
        .iter()
        .map(|(p, c)| {
            format!(
                "{p} {} (equal {}, corrupt {}, typed {}, failed {})",
                c.runs, c.equal, c.corrupt, c.typed, c.failed
            )
        })
        .collect();
    notice(&format!(
        "gpu_fuzz summary: seed {seed:#x}, {ran} cases from {first} in {secs:.1} s on {}; {}; failures {}",
        gpu.info().name,
        paths.join("; "),
        fz.failures.len()
    ));
    assert!(!fatal, "gpu_fuzz stopped on a CUDA error (above)");
    assert!(
        fz.failures.is_empty(),
        "{} failures (the first ones above)",
        fz.failures.len()
    );
    assert!(ran > 0, "no case ran");
}

/// The generators and the CPU side of the oracle, without a GPU: cases
/// build, mutate and decode on the CPU without a panic; an undamaged case
/// is valid and decodes every row; the judge takes the CPU's own rows and
/// catches a changed byte and a stray write. Ignored by default (it takes
/// seconds in a debug build): `cargo test --features cuda --test
/// gpu_fuzz -- --ignored`.
#[test]
#[ignore]
fn fuzz_cases_build_and_the_oracle_judges_on_the_host() {
    let cases = env_u64("IBP_FUZZ_CASES", 300);
    let seed = env_u64("IBP_FUZZ_SEED", 0x1b9_f022);
    let (mut containers, mut damaged, mut corrupt_rows) = (0, 0, 0);
    for c in 0..cases {
        let mut rng = case_rng(seed, c);
        let mut case = if chance(&mut rng, 10) {
            containers += 1;
            match from_container(&mut rng) {
                Ok(case) => case,
                Err(NoCase::Refused(true, _)) => continue,
                Err(NoCase::Refused(false, m)) => panic!("case {c}: {m}"),
                // A codebook with nothing invariant leaves nothing to code.
                Err(NoCase::Raw(_)) => continue,
            }
        } else {
            generate(&mut rng)
        };
        if case.container.is_none() {
            assert!(case.valid(), "case {c}: {}: not valid", case.what);
            assert!(
                case.cpu_rows().iter().all(Option::is_some),
                "case {c}: {}: the CPU rejects an undamaged row",
                case.what
            );
            mutate(&mut rng, &mut case);
        }
        if !case.valid() {
            damaged += 1;
            continue;
        }
        let rows = case.cpu_rows();
        corrupt_rows += rows.iter().filter(|r| r.is_none()).count();
        let wide = chance(&mut rng, 2);
        let index = random_index(&mut rng, case.n as u64, wide);
        let want = wants(&rows, &index);
        let l = case.l;
        let mut host = vec![POISON; index.len() * l + GUARD];
        for (i, w) in want.iter().enumerate() {
            let row = &mut host[i * l..(i + 1) * l];
            match w {
                Want::Row(r) => row.copy_from_slice(r),
                _ => row.fill(0),
            }
        }
        if want.iter().all(|w| matches!(w, Want::Row(_))) {
            assert!(matches!(
                judge(&host, l, l, &want, Ok(())),
                Ok(Outcome::Equal)
            ));
            host[index.len() * l] ^= 1;
            assert!(matches!(
                judge(&host, l, l, &want, Ok(())),
                Err(Fail::Mismatch(_))
            ));
            host[index.len() * l] ^= 1;
            host[0] ^= 0x10;
            assert!(matches!(
                judge(&host, l, l, &want, Ok(())),
                Err(Fail::Mismatch(_))
            ));
        } else {
            assert!(matches!(
                judge(&host, l, l, &want, Ok(())),
                Err(Fail::Mismatch(_))
            ));
        }
    }
    println!(
        "{cases} cases: {containers} from containers, {damaged} refused as a whole, {corrupt_rows} corrupt rows"
    );
    assert!(corrupt_rows > 0 && damaged > 0);
}
