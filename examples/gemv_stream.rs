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
    Kernels, Measured, Reference, Rng, arg, cu, exit_code, minilm_layer_rows, report, time_median,
    time_payload_read,
};
use fused_kernels::GemvParams;
use ibp::gpu::{
    DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, GpuReadable, PinnedBuffer, Residency,
};
use ibp::layout::{LayoutOptions, compress_packed};
use ibp::{Error, Result, Rows};

/// Elements per row of `W` (MiniLM's hidden size).
const COLS: usize = 384;

fn main() -> ExitCode {
    exit_code("gemv_stream", run())
}

fn run() -> Result<()> {
    let gb = arg("--gb", 1.0);
    let gpu = Gpu::first()?;
    let (base, source) = minilm_layer_rows(COLS)?;
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
    let reference = Reference::of(&base, COLS, &x);
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
