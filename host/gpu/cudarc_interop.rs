//! ibp's GPU API on cudarc's memory and streams (feature `cudarc`): decode
//! and gather into a `CudaSlice<u8>` or `CudaViewMut<u8>`, with the index in
//! a `CudaSlice<u32>`/`CudaSlice<u64>`, and compress from a `CudaSlice<u8>`
//! or `CudaView<u8>`, ordered on a cudarc [`CudaStream`].
//!
//! cudarc's `CudaContext::new(n)` and [`Gpu::new`]`(n)` both retain device
//! `n`'s primary context, so the two libraries share one address space and
//! one set of streams: nothing is copied and nothing is synchronised.
//!
//! - The decodes are enqueued on the cudarc stream and return at once. The
//!   addresses come from cudarc's [`DevicePtr`]/[`DevicePtrMut`], so
//!   cudarc's own event tracking stays right: the stream first waits for
//!   earlier work of other streams on the buffers, and the buffers record
//!   ibp's launch as their last access.
//! - The status works as with cust's streams: synchronise the cudarc stream
//!   (or an event after the decode), then [`DecodeStatus::check_blocking`].
//!   Q: why synchronise first? A: cudarc's streams are non-blocking, so the
//!   status read (a copy on the legacy stream) does not wait for them.
//! - [`compress_blocking`] blocks, as [`Compressor::compress_blocking`] does,
//!   and synchronises the cudarc stream before it reads (see there).
//!
//! A complete program: `examples/cudarc_interop.rs`, shown in the GPU
//! guide (docs/GPU.md, "Memory and streams from cudarc").

use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, DriverError,
};

use super::{
    Compressor, DecodeStatus, Decoder, DeviceCompressed, ForeignStream, GatherIndex, Gpu, Request,
    Span, SpanMut,
};
use crate::error::{Error, Result};
use crate::layout::Layout;

/// cudarc's own buffers that ibp reads: `CudaSlice<T>`, `CudaView<T>`,
/// `CudaViewMut<T>`.
///
/// Q: why not any `DevicePtr`? A: that trait is safe to implement, so a
/// type of anyone's could hand over any address and length, and ibp's
/// kernels would read or write there; cudarc's own types hold a live
/// allocation of their length. Sealed.
pub trait CudarcSource<T>: DevicePtr<T> + sealed::Sealed {}
impl<T> CudarcSource<T> for CudaSlice<T> {}
impl<T> CudarcSource<T> for CudaView<'_, T> {}
impl<T> CudarcSource<T> for CudaViewMut<'_, T> {}

/// cudarc's own buffers that ibp's decode writes: `CudaSlice<u8>`,
/// `CudaViewMut<u8>`. Sealed, as [`CudarcSource`].
pub trait CudarcDest: DevicePtrMut<u8> + sealed::Sealed {}
impl CudarcDest for CudaSlice<u8> {}
impl CudarcDest for CudaViewMut<'_, u8> {}

mod sealed {
    use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
    pub trait Sealed {}
    impl<T> Sealed for CudaSlice<T> {}
    impl<T> Sealed for CudaView<'_, T> {}
    impl<T> Sealed for CudaViewMut<'_, T> {}
}

/// A cudarc error as ibp's ([`crate::ErrorKind::Cuda`], with the driver's
/// code), so that `?` mixes cudarc and ibp calls in one function returning
/// [`crate::Result`].
impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::cuda_code(format!("cudarc: {e:?}"), e.0 as u32)
    }
}

/// `stream` as a stream ibp's launches take, after checking that it belongs
/// to the device `gpu` runs on.
pub fn foreign_stream<'a>(gpu: &Gpu, stream: &'a CudaStream) -> Result<ForeignStream<'a>> {
    let ordinal = stream.context().ordinal();
    if ordinal != gpu.ordinal() as usize {
        return Err(Error::invalid(format!(
            "a cudarc stream of device {ordinal} given to ibp's GPU on device {}",
            gpu.ordinal()
        )));
    }
    // SAFETY: (1) a cudarc context is its device's primary context (it
    // retains it in `CudaContext::new`), the one `Gpu` made current, and the
    // device was checked above; (2) the borrow of `stream` keeps the stream
    // alive for 'a, and the driver lets work enqueued before a destroy run
    // to its end.
    Ok(unsafe { ForeignStream::from_raw(stream.cu_stream() as *mut std::ffi::c_void) })
}

/// Enqueue `req` of `dec` into `out` on `stream`: [`Decoder::enqueue`] with
/// cudarc's output and stream. No synchronisation, no allocation; the same
/// host-side checks (an output too short for the rows is an
/// [`crate::ErrorKind::InvalidArgument`] error, and nothing is enqueued);
/// corrupt rows and bad indices are reported in `status`.
pub fn decode_into<O: CudarcDest>(
    dec: &Decoder<'_>,
    gpu: &Gpu,
    req: &Request<'_>,
    out: &mut O,
    status: &DecodeStatus,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    let on = foreign_stream(gpu, stream)?;
    let len = out.num_bytes();
    // The guard records ibp's launch as the buffer's last write when it
    // drops (after the launch, at the end of this function), and the stream
    // has waited for the buffer's earlier accesses on other streams.
    let (addr, _record) = out.device_ptr_mut(stream);
    // SAFETY: (1) a cudarc allocation (`CudarcDest` is sealed to cudarc's
    // types, which hold a live allocation of their length) of `len` bytes in the primary context
    // of this device (the stream's, checked above), kept alive by the `&mut`
    // borrow for this call and by cudarc's free, which is ordered after the
    // stream's work (it frees on the stream, or after syncing it); (2)
    // `device_ptr_mut` ordered earlier accesses before `stream`, and the
    // guard orders later ones after this launch; (3) `&mut out` excludes
    // other writers through cudarc.
    let mut span = unsafe { SpanMut::from_raw_parts(addr, len) };
    dec.enqueue(gpu, req, &mut span, status, &on)
}

/// Enqueue a gather on `stream`: output row `i` of `out` (`index.len()` rows
/// of the dataset's row length) receives row `index[i]`, indices `u32` or
/// `u64` in a cudarc buffer. [`decode_into`] with
/// [`Request::gather_span`]; no synchronisation.
pub fn gather_into<I, X, O>(
    dec: &Decoder<'_>,
    gpu: &Gpu,
    index: &X,
    out: &mut O,
    status: &DecodeStatus,
    stream: &Arc<CudaStream>,
) -> Result<()>
where
    I: GatherIndex + DeviceRepr,
    X: CudarcSource<I>,
    O: CudarcDest,
{
    let bytes = index.num_bytes();
    // The stream waits for the index's last write; the guard records this
    // launch as a read when it drops, after the launch.
    let (addr, _record) = index.device_ptr(stream);
    // SAFETY: (1) a cudarc allocation of `bytes` bytes, borrowed for this
    // call and freed by cudarc only after the stream's work; (2) its last
    // write is ordered before `stream` by `device_ptr`, and `&index`
    // excludes writers through cudarc meanwhile; (3) a cudarc buffer of `I`
    // holds initialised `I`s (cudarc's allocations are typed, `DeviceRepr`).
    let span = unsafe { Span::from_raw_parts(addr, bytes) };
    let req = Request::gather_span::<I>(&span)?;
    decode_into(dec, gpu, &req, out, status, stream)
}

/// [`Compressor::compress_blocking`] from rows in a cudarc buffer
/// (`CudaSlice<u8>`, `CudaView<u8>`): the rows of `comp`'s codebook, back to
/// back. Blocks until done.
///
/// Ordering: the compressor runs on a stream of its own, so this first
/// synchronises `stream` (after making it wait for `src`'s last write
/// elsewhere): every write to `src` enqueued before the call is complete
/// when the compressor reads. That synchronisation is the call's, stated
/// here; the compression itself blocks anyway.
pub fn compress_blocking<X: CudarcSource<u8>>(
    comp: &Compressor<'_>,
    src: &X,
    layout: Layout,
    stream: &Arc<CudaStream>,
) -> Result<DeviceCompressed> {
    foreign_stream(comp.gpu(), stream)?;
    let bytes = src.num_bytes();
    let (addr, _record) = src.device_ptr(stream);
    stream.synchronize().map_err(Error::from)?;
    // SAFETY: (1) a cudarc allocation of `bytes` bytes on this device
    // (checked above), borrowed for this call, which returns only after the
    // compressor's work is done; (2) every write enqueued before is complete
    // (`device_ptr` ordered it before `stream`, which was synchronised), and
    // `&src` excludes writers through cudarc until this returns.
    let span = unsafe { Span::from_raw_parts(addr, bytes) };
    comp.compress_blocking(&span, layout)
}
