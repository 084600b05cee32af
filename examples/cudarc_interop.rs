//! ibp on cudarc's memory and streams: a gather from a cudarc index into a
//! cudarc buffer, ordered on a cudarc stream, and compression from a cudarc
//! buffer (docs/GPU.md, "Memory and streams from cudarc", shows the code
//! below this header; tests/gpu_cudarc.rs checks they agree).
//!
//! ```console
//! $ cargo run --features cudarc --example cudarc_interop
//! ```

use cudarc::driver::CudaContext;
use ibp::gpu::{Compressor, cudarc_interop as cr};
use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, Residency};
use ibp::layout::{Layout, LayoutOptions, compress_packed};
use ibp::{
    Rows,
    fit::{FitOptions, fit},
};

fn main() -> ibp::Result<()> {
    let values: Vec<f32> = (0..64_000).map(|i| 1.0 + (i % 97) as f32 / 128.0).collect();
    let rows = Rows::of(&values, 64)?;
    let fitted = fit(rows, &FitOptions::default())?;
    let packed = compress_packed(&fitted.codebook, rows, &LayoutOptions::default())?;

    // ibp and cudarc on device 0: both retain its primary context.
    let gpu = Gpu::new(0)?;
    let stream = CudaContext::new(0)?.new_stream()?;
    let ds = GpuDataset::upload_packed(&gpu, &fitted.codebook, &packed.view(), Residency::Device)?;
    let decoder = Decoder::new(&gpu, &ds, &DecodeOptions::default())?;
    let mut status = DecodeStatus::new()?;

    // A gather from a cudarc index into a cudarc buffer, enqueued on the
    // cudarc stream after the copies before it: no synchronisation.
    let index = stream.clone_htod(&[999u32, 0, 7, 7])?;
    let mut out = stream.alloc_zeros::<u8>(4 * rows.row_bytes())?;
    cr::gather_into(&decoder, &gpu, &index, &mut out, &status, &stream)?;
    let decoded = stream.clone_dtoh(&out)?; // ordered after the gather
    stream.synchronize()?; // the status is read after the stream's work
    status.check_blocking()?;
    assert_eq!(
        decoded[..rows.row_bytes()],
        rows.bytes()[999 * rows.row_bytes()..][..rows.row_bytes()]
    );

    // Compression from a cudarc buffer (blocks; synchronises the stream first).
    let src = stream.clone_htod(rows.bytes())?;
    let comp = Compressor::new(&gpu, &fitted.codebook)?;
    let on_gpu = cr::compress_blocking(&comp, &src, Layout::Packed, &stream)?;
    assert_eq!(on_gpu.to_packed_blocking()?, packed);
    Ok(())
}
