//! Weight streaming (FlexGen-style offloading) with decode inside the
//! GEMV: `y = W·x` in bf16 with f32 accumulation, `W` = MiniLM's layer
//! weight matrices as bf16 rows of 384 elements, replicated to ≥ 1 GB,
//! compressed by ibp in pinned host memory. The fused kernel
//! (`examples/fused-kernels/src/gemv.rs`) decodes each row in registers
//! through ibp's device API, one warp per row, and multiplies it with `x`
//! held in registers.
//!
//! Measured side by side in one run: fused; ibp's decode of all of `W`
//! into device memory, then the GEMV over it; the GEMV streaming the
//! uncompressed `W` from pinned host memory; the ideal (the compressed
//! bytes read sequentially, nothing else).
//!
//! Every variant's `y` is checked against a CPU reference in f64: each
//! element within `n·2⁻²⁴·Σ|wₖxₖ|` (`n` = 384: the error bound of any f32
//! summation order of `n` products, fused multiply-adds included).
//!
//! `W`: every 2-D `encoder.layer.*.weight` of `model.safetensors` in
//! `IBP_DATA_DIR` (all six layers, rounded to bf16), or, when
//! `minilm-layers-bf16.safetensors` is there instead (what
//! scripts/stage-device.sh carries to the GPU machine: a row sample of the
//! same matrices, every layer, already bf16), that file.
//!
//! ```console
//! $ cargo run --release --features cuda --example gemv_stream -- [--gb G]
//! ```

#[path = "fused_host/mod.rs"]
mod fused_host;

use std::process::ExitCode;

use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use fused_host::{
    Kernels, Measured, Rng, arg, bf16_of_f32, cu, data_dir, exit_code, report, time_median,
    time_payload_read,
};
use fused_kernels::{GemvParams, OK};
use ibp::gpu::{
    DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, GpuReadable, PinnedBuffer, Residency,
    copy_to_host_blocking,
};
use ibp::layout::{LayoutOptions, compress_packed};
use ibp::{Error, Result, Rows};

/// Elements per row of `W` (MiniLM's hidden size).
const COLS: usize = 384;

fn main() -> ExitCode {
    exit_code("gemv_stream", run())
}

/// MiniLM's layer matrices as bf16 rows of [`COLS`] elements, and where
/// they came from.
fn layer_rows() -> Result<(Vec<u8>, String)> {
    let dir = data_dir();
    let sample = dir.join("minilm-layers-bf16.safetensors");
    let full = dir.join("model.safetensors");
    let is_layer = |n: &str| n.starts_with("encoder.layer.") && n.ends_with(".weight");
    if full.is_file() {
        let f = ibp::io::InputFile::open(&full)?;
        let doc = ibp::io::parse(
            f.bytes(),
            ibp::io::SourceFormat::Safetensors,
            &Default::default(),
        )?;
        let mut out = Vec::new();
        let mut n = 0;
        for g in doc.groups.iter().filter(|g| is_layer(&g.name)) {
            // 2-D f32 matrices only (LayerNorm weights are vectors); each
            // has 384 × k elements, read as rows of 384.
            if g.shape.len() != 2 || g.dtype.size() != 4 || g.data.len() % (4 * COLS) != 0 {
                continue;
            }
            n += 1;
            out.extend(bf16_of_f32(&g.data));
        }
        if n > 0 {
            return Ok((out, format!("{n} layer matrices of {}", full.display())));
        }
    }
    if sample.is_file() {
        let f = ibp::io::InputFile::open(&sample)?;
        let doc = ibp::io::parse(
            f.bytes(),
            ibp::io::SourceFormat::Safetensors,
            &Default::default(),
        )?;
        let g = &doc.groups[0];
        return Ok((
            g.data.to_vec(),
            format!("the row sample {}", sample.display()),
        ));
    }
    Err(Error::invalid(format!(
        "no MiniLM layer weights in {} (model.safetensors or minilm-layers-bf16.safetensors; scripts/setup.sh downloads the model)",
        dir.display()
    )))
}

fn run() -> Result<()> {
    let gb = arg("--gb", 1.0);
    let gpu = Gpu::first()?;
    let (base, source) = layer_rows()?;
    let l = 2 * COLS;
    let base_rows = base.len() / l;
    let reps = ((gb * 1e9) as usize).div_ceil(base.len()).max(1);
    let rows = base_rows * reps;
    let k = Kernels::load(&gpu)?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cu)?;
    println!(
        "# Weight-streaming GEMV on {}: W = {base_rows} bf16 rows of {COLS} ({source}), {reps}× replicated = {rows} rows, {:.2} GB",
        gpu.info().name,
        (rows * l) as f64 / 1e9
    );
    let data = base.repeat(reps);
    let cb = ibp::fit::fit(Rows::new(&base, l)?, &Default::default())?.codebook;
    let packed = compress_packed(&cb, Rows::new(&data, l)?, &LayoutOptions::default())?;
    let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned)?;
    drop(packed);
    let view = ds.device_view()?;
    let plain_w = PinnedBuffer::from_slice(&data)?;
    drop(data);
    if view.book_bytes % 4 != 0 {
        return Err(Error::invalid("decode book not a whole number of words"));
    }
    let mut rng = Rng(0x5eed_9e37);
    let x: Vec<f32> = (0..COLS).map(|_| (2.0 * rng.unit() - 1.0) as f32).collect();
    let reference = Reference::of(&base, &x);
    let d_x = DeviceBuffer::from_slice(&x).map_err(cu)?;
    let y = DeviceBuffer::<f32>::zeroed(rows).map_err(cu)?;
    let status = DeviceBuffer::<u32>::zeroed(1).map_err(cu)?;
    let mut decoded = DeviceBuffer::<u8>::zeroed(rows * l).map_err(cu)?;
    let ws = view.workspace_bytes();
    let p = GemvParams {
        view,
        plain: plain_w.device_addr(),
        x: d_x.as_device_ptr().as_raw(),
        y: y.as_device_ptr().as_raw(),
        status: status.as_device_ptr().as_raw(),
        cols: COLS as u32,
        book_smem: view.book_bytes,
        ws_bytes: ws,
        _pad: 0,
    };
    let fused_shared = view.book_bytes.next_multiple_of(16) + 8 * ws;
    let after = GemvParams {
        plain: decoded.as_device_ptr().as_raw(),
        ..p
    };
    let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default())?;
    let dstatus = DecodeStatus::new()?;
    // SAFETY (every launch below): each parameter block is its kernel's
    // type; every address is a live buffer of the sizes GemvParams states
    // (W of `rows` rows pinned or decoded, x of COLS, y of rows); the
    // shared memory is what the kernel's doc asks.
    // SAFETY: as stated above.
    let run_fused = || unsafe { k.launch("gemv_fused_s2", fused_shared, &stream, p) };
    // SAFETY: as stated above.
    let run_one = || unsafe { k.launch("gemv_fused_one_s2", fused_shared, &stream, p) };
    // SAFETY: as stated above.
    let run_plain = || unsafe { k.launch("gemv_plain_s2", 0, &stream, p) };
    let mut run_decode_then = || -> Result<()> {
        dec.range(&gpu, 0, rows as u64, &mut decoded, &dstatus, &stream)?;
        // SAFETY: as above.
        unsafe { k.launch("gemv_plain_s2", 0, &stream, after) }
    };
    let mut ok = true;
    let mut check = |what: &str, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        f()?;
        stream.synchronize().map_err(cu)?;
        ok &= reference.holds(what, &y, &status)?;
        Ok(())
    };
    check("fused", &mut || run_fused())?;
    check("fused, one row at a time", &mut || run_one())?;
    check("uncompressed", &mut || run_plain())?;
    check("decode, then GEMV", &mut run_decode_then)?;
    let t_fused = time_median(&stream, 2, 9, run_fused)?;
    let t_one = time_median(&stream, 2, 9, run_one)?;
    let t_dc = time_median(&stream, 2, 9, &mut run_decode_then)?;
    let t_plain = time_median(&stream, 2, 9, run_plain)?;
    let t_ideal = time_payload_read(&k, &stream, &ds)?;
    let m = Measured {
        compressed: ds.stored_bytes(),
        delivered: (rows * l) as u64,
        fused: t_fused,
        fused_other: vec![("fused, one row at a time (no fetch ahead)", t_one)],
        decode_then: t_dc,
        uncompressed: t_plain,
        ideal: t_ideal,
        sequential_gbps: ds.stored_bytes() as f64 / t_ideal / 1e9,
    };
    let title = format!(
        "GEMV y = W·x, W {rows} × {COLS} bf16, f32 accumulation{}",
        if ok {
            ", every y within n·2⁻²⁴·Σ|wx| of the f64 reference"
        } else {
            ", RESULTS OUTSIDE THE BOUND"
        }
    );
    println!("{}", report(&title, &m));
    if !ok {
        return Err(Error::corrupt("a GEMV result is outside the bound"));
    }
    Ok(())
}

/// The CPU's GEMV of the base rows, in f64: each row's sum and the bound
/// on its f32 error (Σ|w·x|).
struct Reference {
    want: Vec<f64>,
    bound: Vec<f64>,
}

impl Reference {
    fn of(base: &[u8], x: &[f32]) -> Reference {
        let (want, bound) = base
            .chunks(2 * COLS)
            .map(|row| {
                let (mut s, mut b) = (0f64, 0f64);
                for (e, xe) in x.iter().enumerate() {
                    let w = half::bf16::from_le_bytes([row[2 * e], row[2 * e + 1]]).to_f32() as f64;
                    s += w * *xe as f64;
                    b += (w * *xe as f64).abs();
                }
                (s, b)
            })
            .unzip();
        Reference { want, bound }
    }

    /// Whether every `y` (replicas of the base rows) is within
    /// n·2⁻²⁴·Σ|wx| of the reference and the status is OK; prints what is
    /// not.
    fn holds(&self, what: &str, y: &DeviceBuffer<f32>, status: &DeviceBuffer<u32>) -> Result<bool> {
        let tol = COLS as f64 * (-24f64).exp2();
        let got = copy_to_host_blocking(y)?;
        let st = copy_to_host_blocking(status)?[0];
        let base_rows = self.want.len();
        let bad = got
            .iter()
            .enumerate()
            .filter(|&(r, &v)| {
                let b = r % base_rows;
                (v as f64 - self.want[b]).abs() > tol * self.bound[b] + f64::MIN_POSITIVE
            })
            .count();
        if bad != 0 || st != OK {
            let rows = got.len();
            eprintln!("{what}: {bad} of {rows} outputs outside the bound, status {st}");
            return Ok(false);
        }
        Ok(true)
    }
}
