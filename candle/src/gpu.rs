//! The GPU path (feature `cuda`): a [`CompressedEmbedding`]'s table on the
//! GPU and its gather, launched by ibp on candle's stream into the output
//! tensor's own allocation.
//!
//! candle's CUDA backend and ibp's both run on the device's primary
//! context (cudarc's `CudaContext::new` and cust's `Context::new` retain
//! it), so one's allocations and streams are the other's. ibp is built on
//! cust, candle on cudarc: they meet through raw addresses and a raw
//! `CUstream` ([`Span::from_raw_parts`], [`SpanMut::from_raw_parts`],
//! [`ForeignStream::from_raw`]), so the two cudarc versions need not match.

use std::sync::Mutex;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut};
use candle_core::cuda_backend::{CudaDType, CudaDevice};
use candle_core::{CudaStorage, DType, Layout, Result};
use ibp::gpu::{
    DecodeOptions, DecodeStatus, Decoder, ForeignStream, Gpu, GpuDataset, Request, Residency, Span,
    SpanMut,
};

use crate::embedding::{CompressedEmbedding, bad_ids, not_contiguous};
use crate::wrap;

/// A table placed for ibp's GPU decoder: its compressed rows (device or
/// pinned host memory), the decode status, and candle's device it serves.
pub struct GpuTable {
    gpu: Gpu,
    ds: GpuDataset,
    /// The decoder's status word; a gather reports a bad index or a
    /// corrupt row here ([`CompressedEmbedding::check_blocking`]).
    status: Mutex<DecodeStatus>,
    device: CudaDevice,
}

impl GpuTable {
    /// The compressed bytes the table holds on the GPU side (device or
    /// pinned host memory).
    pub fn stored_bytes(&self) -> u64 {
        self.ds.stored_bytes()
    }
}

impl CompressedEmbedding {
    /// Place the table for candle's CUDA device `device`: its compressed
    /// rows in device memory ([`Residency::Device`]) or in pinned host
    /// memory that the decoder reads over PCIe ([`Residency::Pinned`]).
    /// From then on a forward pass on that device is one ibp gather.
    ///
    /// Errors for a table stored raw (nothing to decode).
    pub fn to_gpu(&mut self, device: &CudaDevice, residency: Residency) -> Result<()> {
        let ordinal = device.cuda_stream().context().ordinal();
        let gpu = Gpu::new(ordinal as u32).map_err(wrap)?;
        let g = self.group_view().map_err(wrap)?;
        let ds = GpuDataset::upload_group(&gpu, &g, residency).map_err(wrap)?;
        self.gpu = Some(GpuTable {
            gpu,
            ds,
            status: Mutex::new(DecodeStatus::new().map_err(wrap)?),
            device: device.clone(),
        });
        Ok(())
    }

    /// The table's GPU side, after [`CompressedEmbedding::to_gpu`].
    pub fn gpu_table(&self) -> Option<&GpuTable> {
        self.gpu.as_ref()
    }

    /// Wait for candle's stream, then read and clear the decode status:
    /// an error names an id out of range (its output row was zero-filled)
    /// or a corrupt row. The forward pass itself never synchronises.
    pub fn check_blocking(&self) -> Result<()> {
        let Some(t) = &self.gpu else { return Ok(()) };
        t.device
            .cuda_stream()
            .synchronize()
            .map_err(|e| candle_core::Error::Cuda(Box::new(e)))?;
        let mut status = t.status.lock().unwrap_or_else(|p| p.into_inner());
        status.check_blocking().map_err(wrap)
    }
}

fn gpu_err(msg: String) -> candle_core::Error {
    candle_core::Error::Cuda(msg.into()).bt()
}

/// The forward pass on the GPU: a new allocation of `ids × hidden` values
/// on candle's device, written by one ibp gather enqueued on candle's
/// stream. No synchronisation, no copy.
pub(crate) fn gather(
    emb: &CompressedEmbedding,
    ids: &CudaStorage,
    layout: &Layout,
) -> Result<CudaStorage> {
    let t = emb.gpu.as_ref().ok_or_else(|| {
        gpu_err("this compressed embedding is not on the GPU; call to_gpu first".into())
    })?;
    let dev = &ids.device;
    let stream = dev.cuda_stream();
    if stream.context().ordinal() != t.gpu.ordinal() as usize {
        return Err(gpu_err(format!(
            "ids on device {} for a table placed on device {}",
            stream.context().ordinal(),
            t.gpu.ordinal()
        )));
    }
    let (start, end) = layout.contiguous_offsets().ok_or_else(not_contiguous)?;
    let n = end - start;
    let elems = n * emb.hidden_size();

    macro_rules! typed {
        ($t:ty) => {{
            // SAFETY: every element is written by the gather below before
            // anything reads the tensor (it is ordered on the same stream);
            // an index out of range zero-fills its row. Q: why at least one
            // element? A: the driver refuses an allocation of 0 bytes; the
            // tensor's shape says 0 rows, so that element is never read.
            let mut out = unsafe { dev.alloc::<$t>(elems.max(1))? };
            if n > 0 {
                launch(t, ids, start, end, &mut out, &stream)?;
            }
            Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
        }};
    }
    match emb.dtype() {
        DType::U8 => typed!(u8),
        DType::U32 => typed!(u32),
        DType::I16 => typed!(i16),
        DType::I32 => typed!(i32),
        DType::I64 => typed!(i64),
        DType::BF16 => typed!(half::bf16),
        DType::F16 => typed!(half::f16),
        DType::F32 => typed!(f32),
        DType::F64 => typed!(f64),
        other => Err(gpu_err(format!(
            "a compressed embedding of {other:?} is not supported"
        ))),
    }
}

/// Enqueue the gather of ids `start..end` of `ids` into `out` on `stream`.
fn launch<T: CudaDType + candle_core::cuda_backend::cudarc::driver::DeviceRepr>(
    t: &GpuTable,
    ids: &CudaStorage,
    start: usize,
    end: usize,
    out: &mut candle_core::cuda_backend::cudarc::driver::CudaSlice<T>,
    stream: &std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaStream>,
) -> Result<()> {
    let out_bytes = out.num_bytes();
    // The guards record this launch on the buffers when they drop (after
    // the launch, at the end of this function); taking them made the
    // stream wait for the buffers' earlier accesses on other streams.
    let (out_addr, _w) = out.device_ptr_mut(stream);
    let (idx_addr, idx_bytes, wide, _r) = match ids.dtype() {
        DType::U32 => {
            let (a, r) = ids.as_cuda_slice::<u32>()?.device_ptr(stream);
            (a + 4 * start as u64, (end - start) * 4, false, r)
        }
        // Q: why read i64 ids as u64? A: the bits of a valid id are the
        // same; a negative one becomes a huge index, which the decoder
        // reports as out of range.
        DType::I64 => {
            let (a, r) = ids.as_cuda_slice::<i64>()?.device_ptr(stream);
            (a + 8 * start as u64, (end - start) * 8, true, r)
        }
        other => return Err(bad_ids(other)),
    };
    // SAFETY: (1) a cudarc allocation of candle's holding ids `start..end`
    // (the layout's contiguous range, inside the storage), `idx_bytes`
    // bytes from `idx_addr`, on the device
    // the table's `Gpu` runs on (checked by the caller), borrowed for this
    // call, and freed by cudarc only after the stream's work; (2) its last
    // write is ordered before `stream` by `device_ptr`; (3) it holds
    // initialised u32 or i64 values.
    let idx = unsafe { Span::from_raw_parts(idx_addr, idx_bytes) };
    let req = if wide {
        Request::gather_span::<u64>(&idx)
    } else {
        Request::gather_span::<u32>(&idx)
    }
    .map_err(wrap)?;
    // SAFETY: (1) `out` is a cudarc allocation of `out_bytes` bytes on this
    // device, borrowed mutably for this call and freed only after the
    // stream's work; (2) `device_ptr_mut` ordered its earlier accesses
    // before `stream` and the guard orders later ones after the launch;
    // (3) `&mut out` excludes other writers.
    let mut dst = unsafe { SpanMut::from_raw_parts(out_addr, out_bytes) };
    // SAFETY: (1) candle's stream belongs to the device's primary context,
    // the one `Gpu::new` made current (same ordinal, checked by the
    // caller); (2) `stream` is borrowed for this call, and the launch is
    // enqueued before it returns.
    let on = unsafe { ForeignStream::from_raw(stream.cu_stream() as *mut std::ffi::c_void) };
    let dec = Decoder::new(&t.gpu, &t.ds, &DecodeOptions::default()).map_err(wrap)?;
    let status = t.status.lock().unwrap_or_else(|p| p.into_inner());
    dec.enqueue(&t.gpu, &req, &mut dst, &status, &on)
        .map_err(wrap)
}
