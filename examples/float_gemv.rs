//! Weight streaming with decode inside the GEMV, on the float coding
//! (`ibp::float_code`, docs/FORMAT.md §7): `y = W·x`, `W` = MiniLM's layer
//! weight matrices as bf16 rows of 384 elements, replicated to ≥ 1 GB,
//! float-coded with `S` sub-streams a row (`--sub-streams`, default 32;
//! 16 is the other fused size) and read zero-copy from pinned host memory.
//! The fused kernel (`examples/fused-kernels/src/float_gemv.rs`) decodes
//! each row in registers through `decode_float_row`, one warp a row.
//!
//! Measured side by side in one run: fused from pinned memory (the table's
//! main row); the same kernel with `W` in device memory; ibp's own fused
//! GEMV on the IBP coding of the same `W` (`gemv_fused_s2` of
//! `gemv_stream`), for the ratio gain; the float decode of all of `W`
//! into device memory, then the GEMV over it; the GEMV streaming the
//! uncompressed `W`; the ideal (the float-coded payload read sequentially
//! from pinned memory, nothing else).
//!
//! Checks: the fused kernels' `y` equal, bit for bit, a CPU GEMV of the
//! original bf16 `W` in the kernel's order (lane `k` sums elements
//! `k, k + S, …` in order, then a butterfly over the 32 lanes; `x` holds
//! bf16 values, so every product is exact in f32); the rows the fused API
//! decodes (`float_rows_u16`) and those the bulk decoder writes equal the
//! original `W` byte for byte; the other variants' `y` within
//! `n·2⁻²⁴·Σ|wₖxₖ|` of an f64 reference (their summation order differs).
//!
//! ```console
//! $ cargo run --release --features cuda --example float_gemv -- [--gb G] [--sub-streams S]
//! ```

#[path = "fused_host/mod.rs"]
mod fused_host;

use std::process::ExitCode;

use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use fused_host::{
    Kernels, Measured, Reference, Rng, arg, cu, exit_code, kernel_order_gemv, minilm_layer_rows,
    report, time_median, time_payload_read, time_read,
};
use fused_kernels::{FloatGemvParams, GemvParams, OK};
use ibp::float_code::{FitOptions, FloatType};
use ibp::gpu::{
    DecodeStatus, FloatDecoder, Gpu, GpuDataset, GpuReadable, PinnedBuffer, Residency,
    copy_to_host_blocking,
};
use ibp::layout::{LayoutOptions, compress_packed};
use ibp::{Error, Result, Rows};

/// Elements per row of `W` (MiniLM's hidden size).
const COLS: usize = 384;

fn main() -> ExitCode {
    exit_code("float_gemv", run())
}

/// Whether every `y` (replicas of the base rows) equals `want` bit for bit
/// and the status is OK; prints what is not.
fn exact(
    what: &str,
    want: &[u32],
    y: &DeviceBuffer<f32>,
    status: &DeviceBuffer<u32>,
) -> Result<bool> {
    let got = copy_to_host_blocking(y)?;
    let st = copy_to_host_blocking(status)?[0];
    let bad = got
        .iter()
        .enumerate()
        .filter(|&(r, v)| v.to_bits() != want[r % want.len()])
        .count();
    if bad != 0 || st != OK {
        eprintln!(
            "{what}: {bad} of {} outputs differ from the CPU's bits, status {st}",
            got.len()
        );
        return Ok(false);
    }
    Ok(true)
}

fn run() -> Result<()> {
    let gb = arg("--gb", 1.0);
    let s: u8 = arg("--sub-streams", 32);
    let gpu = Gpu::first()?;
    let (base, source) = minilm_layer_rows(COLS)?;
    let l = 2 * COLS;
    let base_rows = base.len() / l;
    let reps = ((gb * 1e9) as usize).div_ceil(base.len()).max(1);
    let rows = base_rows * reps;
    let k = Kernels::load(&gpu)?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cu)?;
    println!(
        "# Weight-streaming GEMV on the float coding, on {}: W = {base_rows} bf16 rows of {COLS} ({source}), {reps}× replicated = {rows} rows, {:.2} GB, S = {s}",
        gpu.info().name,
        (rows * l) as f64 / 1e9
    );
    let data = base.repeat(reps);
    // The float coding: table fitted on the base rows, every row coded.
    let opts = FitOptions::default().with_sub_streams(s);
    let table = ibp::float_code::fit(FloatType::Bf16, Rows::new(&base, l)?, &opts)?;
    let coded = ibp::float_code::compress(&table, Rows::new(&data, l)?)?;
    let staged = PinnedBuffer::from_slice(&FloatDecoder::staging_image(&coded))?;
    let fdec = FloatDecoder::new_staged(&gpu, &coded)?;
    let span = staged
        .span(0..staged.len())
        .ok_or_else(|| Error::invalid("the staging area's span"))?;
    let view = fdec.device_view_staged(&span)?;
    let fdev = FloatDecoder::new(&gpu, &coded)?;
    let view_dev = fdev.device_view()?;
    let payload = coded.payload().len() as u64;
    // The IBP coding of the same W, for its fused GEMV.
    let cb = ibp::fit::fit(Rows::new(&base, l)?, &Default::default())?.codebook;
    let packed = compress_packed(&cb, Rows::new(&data, l)?, &LayoutOptions::default())?;
    let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned)?;
    drop(packed);
    let ibp_view = ds.device_view()?;
    let plain_w = PinnedBuffer::from_slice(&data)?;
    println!(
        "float coding: {} of {rows} rows coded, payload {:.1} MB, with table and index {:.1} MB (ratio {:.3}); IBP: {:.1} MB (ratio {:.3})",
        coded.coded_rows(),
        payload as f64 / 1e6,
        coded.stored_bytes() as f64 / 1e6,
        (rows * l) as f64 / coded.stored_bytes() as f64,
        ds.stored_bytes() as f64 / 1e6,
        (rows * l) as f64 / ds.stored_bytes() as f64,
    );
    // x: bf16 values in ±[1, 2), so every product w·x is exact in f32.
    let mut rng = Rng(0x5eed_9e37);
    let x: Vec<f32> = (0..COLS)
        .map(|_| {
            let v = half::bf16::from_f32((1.0 + rng.unit()) as f32).to_f32();
            if rng.next() & 1 == 1 { -v } else { v }
        })
        .collect();
    let want = kernel_order_gemv(&base, COLS, usize::from(s), &x);
    let reference = Reference::of(&base, COLS, &x);
    let d_x = DeviceBuffer::from_slice(&x).map_err(cu)?;
    let y = DeviceBuffer::<f32>::zeroed(rows).map_err(cu)?;
    let status = DeviceBuffer::<u32>::zeroed(1).map_err(cu)?;
    let mut decoded = DeviceBuffer::<u8>::zeroed(rows * l).map_err(cu)?;
    let mut dstatus = DecodeStatus::new()?;
    let ws = view.workspace_bytes();
    let p = FloatGemvParams {
        view,
        x: d_x.as_device_ptr().as_raw(),
        y: y.as_device_ptr().as_raw(),
        status: status.as_device_ptr().as_raw(),
        out: decoded.as_device_ptr().as_raw(),
        cols: COLS as u32,
        ws_bytes: ws,
    };
    let p_dev = FloatGemvParams {
        view: view_dev,
        ..p
    };
    let fixed = view.table_bytes.next_multiple_of(16) + (4 * COLS as u32).next_multiple_of(16);
    let block = k.block_for("float_gemv_bf16", fixed, ws)?;
    let rows_block = k.block_for("float_rows_u16", fixed, ws)?;
    // The IBP and plain kernels of gemv_stream.
    let gp = GemvParams {
        view: ibp_view,
        plain: plain_w.device_addr(),
        x: p.x,
        y: p.y,
        status: p.status,
        cols: COLS as u32,
        book_smem: ibp_view.book_bytes,
        ws_bytes: ibp_view.workspace_bytes(),
        _pad: 0,
    };
    let ibp_shared = ibp_view.book_bytes.next_multiple_of(16) + 8 * ibp_view.workspace_bytes();
    let after = GemvParams {
        plain: decoded.as_device_ptr().as_raw(),
        ..gp
    };
    // The decoded W, both ways, byte for byte.
    let mut ok = true;
    // SAFETY: FloatGemvParams for float_rows_u16, its buffers live and
    // sized as it states (`decoded`: rows × l), its shared memory sized by
    // block_for.
    unsafe { k.launch_block("float_rows_u16", rows_block, &stream, p) }?;
    stream.synchronize().map_err(cu)?;
    let st = copy_to_host_blocking(&status)?[0];
    if st != OK || copy_to_host_blocking(&decoded)? != data {
        eprintln!("the fused API's decoded W differs from W (status {st})");
        ok = false;
    }
    fdec.range_staged(&gpu, 0, rows as u64, &span, &mut decoded, &dstatus, &stream)?;
    stream.synchronize().map_err(cu)?;
    dstatus.check_blocking()?;
    if copy_to_host_blocking(&decoded)? != data {
        eprintln!("the float decoder's W differs from W");
        ok = false;
    }
    drop(data);
    // SAFETY (every launch below): each parameter block is its kernel's
    // type; every address is a live buffer of the sizes its doc states (W
    // float-coded with its payload pinned or on the device, or IBP-coded
    // pinned, or plain pinned or decoded, x of COLS, y of rows, `decoded`
    // of rows × l); the shared memory is what the kernel's doc asks
    // (block_for sizes it from the same fixed and per-warp bytes).
    // SAFETY: as stated above.
    let run_fused = || unsafe { k.launch_block("float_gemv_bf16", block, &stream, p) };
    // SAFETY: as stated above.
    let run_dev = || unsafe { k.launch_block("float_gemv_bf16", block, &stream, p_dev) };
    // SAFETY: as stated above.
    let run_ibp = || unsafe { k.launch("gemv_fused_s2", ibp_shared, &stream, gp) };
    // SAFETY: as stated above.
    let run_plain = || unsafe { k.launch("gemv_plain_s2", 0, &stream, gp) };
    let mut run_decode_then = || -> Result<()> {
        fdec.range_staged(&gpu, 0, rows as u64, &span, &mut decoded, &dstatus, &stream)?;
        // SAFETY: as above.
        unsafe { k.launch("gemv_plain_s2", 0, &stream, after) }
    };
    let mut check_exact = |what: &str, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        f()?;
        stream.synchronize().map_err(cu)?;
        ok &= exact(what, &want, &y, &status)?;
        Ok(())
    };
    check_exact("fused", &mut || run_fused())?;
    check_exact("fused, W in device memory", &mut || run_dev())?;
    let mut check = |what: &str, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        f()?;
        stream.synchronize().map_err(cu)?;
        ok &= reference.holds(what, &y, &status)?;
        Ok(())
    };
    check("ibp's fused GEMV", &mut || run_ibp())?;
    check("uncompressed", &mut || run_plain())?;
    check("decode, then GEMV", &mut run_decode_then)?;
    let t_fused = time_median(&stream, 2, 9, run_fused)?;
    let t_dev = time_median(&stream, 2, 9, run_dev)?;
    let t_ibp = time_median(&stream, 2, 9, run_ibp)?;
    let t_dc = time_median(&stream, 2, 9, &mut run_decode_then)?;
    let t_plain = time_median(&stream, 2, 9, run_plain)?;
    let t_ideal = time_read(&k, &stream, staged.device_addr(), payload)?;
    let t_ibp_ideal = time_payload_read(&k, &stream, &ds)?;
    let m = Measured {
        compressed: payload,
        delivered: (rows * l) as u64,
        fused: t_fused,
        fused_other: vec![
            ("fused, W in device memory", t_dev),
            ("ibp's fused GEMV on the IBP coding (its own bytes)", t_ibp),
        ],
        decode_then: t_dc,
        uncompressed: t_plain,
        ideal: t_ideal,
        sequential_gbps: payload as f64 / t_ideal / 1e9,
    };
    let title = format!(
        "GEMV y = W·x, W {rows} × {COLS} bf16 float-coded (S = {s}), f32 accumulation{}",
        if ok {
            ", fused y bit-exact, decoded W byte-exact, others within n·2⁻²⁴·Σ|wx|"
        } else {
            ", RESULTS WRONG"
        }
    );
    println!("{}", report(&title, &m));
    let ratio_gain = ds.stored_bytes() as f64 / payload as f64;
    println!(
        "| float fused ÷ ibp fused (speed) | {:.2} | ≈ {ratio_gain:.2} (IBP bytes ÷ float bytes) | {} |\n\nIBP's ideal (its {:.1} MB read alone): {:.3} ms",
        t_ibp / t_fused,
        if t_ibp / t_fused >= 0.9 * ratio_gain {
            "met"
        } else {
            "missed"
        },
        ds.stored_bytes() as f64 / 1e6,
        t_ibp_ideal * 1e3
    );
    if !ok {
        return Err(Error::corrupt("a float GEMV result differs from the CPU's"));
    }
    Ok(())
}
