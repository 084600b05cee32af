//! `ibp bench --section float`: the float coding's GPU fit and compression
//! (`ibp::gpu::FloatEncoder`, issue 34's target: fit + compress on the
//! device at 600 GB/s or more) on MiniLM's word embeddings in bf16, f32,
//! f16 and FP8, each replicated to at least `--real-bytes`, with the CPU's
//! fit and compression alongside. Every configuration is first checked byte
//! for byte against the CPU (`float_code::fit`, `float_code::compress`).

#![cfg(feature = "cuda")]

use std::fmt::Write as _;
use std::time::Instant;

use cust::memory::DeviceBuffer;
use ibp::float_code::{FitOptions, FloatType, compress, fit};
use ibp::gpu::{FloatEncoder, Gpu};
use ibp::{Error, Result, Rows};

/// Median wall time of `reps` calls after one warm-up.
fn median(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[reps / 2])
}

/// MiniLM's f32 word embeddings cast to `t`.
fn cast(f32s: &[u8], t: FloatType) -> Vec<u8> {
    f32s.as_chunks::<4>()
        .0
        .iter()
        .flat_map(|b| {
            let x = f32::from_le_bytes(*b);
            match t {
                FloatType::F32 => x.to_le_bytes().to_vec(),
                FloatType::Bf16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
                FloatType::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
                FloatType::E4M3 => vec![ibp_testdata::fp8::E4M3.from_f32(x * 16.0)],
                FloatType::E5M2 => vec![ibp_testdata::fp8::E5M2.from_f32(x * 16.0)],
            }
        })
        .collect()
}

/// Append the float coding's fit and compression section to `md`, and the
/// decode's row-length sweep ([`super::float_sweep`]) unless `no_sweep`
/// (`sweep_only`: the sweep alone).
pub fn section(
    gpu: &Gpu,
    real_bytes: usize,
    sweep_only: bool,
    no_sweep: bool,
    md: &mut String,
) -> Result<()> {
    let Some((_, f32s, l)) = super::real_tables()?
        .into_iter()
        .find(|(name, _, _)| name == "MiniLM word embeddings f32")
    else {
        let _ = writeln!(
            md,
            "## Float coding: fit and compression\n\nMiniLM not found: skipped.\n"
        );
        return Ok(());
    };
    if !sweep_only {
        encode_table(gpu, real_bytes, &f32s, l, md)?;
    }
    if !no_sweep {
        super::float_sweep::section(gpu, &f32s, cast, md)?;
    }
    Ok(())
}

/// The fit and compression table: every type, replicated to at least
/// `real_bytes`, rows of `l / 4` values.
fn encode_table(
    gpu: &Gpu,
    real_bytes: usize,
    f32s: &[u8],
    l: usize,
    md: &mut String,
) -> Result<()> {
    let _ = writeln!(
        md,
        "## Float coding: fit and compression\n\nMiniLM's word embeddings cast to each type (FP8 scaled by 16), replicated to at least {real_bytes} bytes, default options (4 sub-streams for these 384-value rows). Wall-clock time of the blocking calls, median of 5 after a warm-up: *fit* is `FloatEncoder::fit` (histogram kernel, its read-back and the host's choice), *encode* `FloatEncoder::encode` (sizes, scan, read-back of the total, memset, encode kernel), the output left on the device; *CPU* is `float_code::fit` plus `compress` on this machine's CPU ({} threads), one run. Every configuration was first compared byte for byte with the CPU. Rates are input bytes per second.\n\n| data | bytes | ratio | fit ms | encode ms | **fit + encode GB/s** | CPU GB/s |\n| --- | --- | --- | --- | --- | --- | --- |",
        rayon::current_num_threads()
    );
    let n = l / 4;
    for t in [
        FloatType::Bf16,
        FloatType::F32,
        FloatType::F16,
        FloatType::E4M3,
        FloatType::E5M2,
    ] {
        let one = cast(f32s, t);
        let copies = real_bytes.div_ceil(one.len()).max(1);
        let data = one.repeat(copies);
        let row = n * t.bytes();
        let rows = Rows::new(&data, row)?;
        let opts = FitOptions::default();
        let s = Instant::now();
        let want = compress(&fit(t, rows, &opts)?, rows)?;
        let cpu = s.elapsed().as_secs_f64();
        let dev = DeviceBuffer::from_slice(&data)
            .map_err(|e| Error::cuda(format!("uploading the rows: {e}")))?;
        let mut enc = FloatEncoder::new(gpu, rows.rows(), data.len())?;
        let table = enc.fit(t, &dev, row, &opts)?;
        if enc.compress(&table, &dev, row)? != want {
            return Err(Error::corrupt(format!(
                "benchmark self-check failed: the GPU's float coding of MiniLM {t} differs from the CPU"
            )));
        }
        let fit_s = median(5, || enc.fit(t, &dev, row, &opts).map(|_| ()))?;
        let enc_s = median(5, || enc.encode(&table, &dev, row).map(|_| ()))?;
        let gb = |s: f64| data.len() as f64 / s / 1e9;
        let _ = writeln!(
            md,
            "| MiniLM {t} | {} | {:.3} | {:.3} | {:.3} | **{:.0}** | {:.2} |",
            data.len(),
            data.len() as f64 / want.stored_bytes() as f64,
            fit_s * 1e3,
            enc_s * 1e3,
            gb(fit_s + enc_s),
            gb(cpu)
        );
    }
    md.push('\n');
    Ok(())
}
