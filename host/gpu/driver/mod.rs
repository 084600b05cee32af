//! The driver layer: every raw call of the CUDA driver API that ibp makes
//! (`cust::sys`), one function each, and the safe plumbing built on them
//! (streams, buffers, copies, result checks). Nothing here knows about
//! tensors.
//!
//! Q: why a layer of its own?
//! A: so that each raw call has one place, one `# Safety` list and one
//! error check, in the manner of cudarc's `result` module. The modules
//! below hold the calls ([`copy`], [`event`], [`function`],
//! [`host_memory`], [`device`]); a function there is `unsafe` exactly when
//! its caller has an obligation the types cannot hold. The rest of the
//! crate calls these, never `cust::sys`: the root `clippy.toml` disallows
//! the raw calls everywhere but here (`#![allow]` in each call module),
//! and CI runs clippy with `-D warnings`.

pub(crate) mod copy;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod function;
pub(crate) mod host_memory;
#[cfg(feature = "nccl")]
pub(crate) mod nccl;

use cust::memory::{DeviceBuffer, DeviceCopy, DeviceSlice};
use cust::stream::{Stream, StreamFlags};
pub(crate) use cust::sys::CUresult;

use super::cuda_err;
use super::memory::PinnedBuffer;
use crate::error::{Error, Result};

pub use event::Event;

/// The driver's result codes that ibp branches on, as [`Error::cuda_result`]
/// reports them.
pub(crate) mod code {
    use super::CUresult;

    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    pub(crate) const OUT_OF_MEMORY: u32 = CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32;
    /// `CUDA_ERROR_NO_DEVICE`: no CUDA-capable device is detected.
    pub(crate) const NO_DEVICE: u32 = CUresult::CUDA_ERROR_NO_DEVICE as u32;
    /// `CUDA_ERROR_INSUFFICIENT_DRIVER` (35): no kernel driver, or one
    /// older than the library. Q: why a number? A: cust_raw 0.11's
    /// bindings predate the code and have no variant for it.
    pub(crate) const INSUFFICIENT_DRIVER: u32 = 35;
    /// `CUDA_ERROR_STUB_LIBRARY`: the build-time stub of libcuda was found
    /// at run time.
    pub(crate) const STUB_LIBRARY: u32 = CUresult::CUDA_ERROR_STUB_LIBRARY as u32;
}

/// `Ok` for `CUDA_SUCCESS`; otherwise an [`crate::ErrorKind::Cuda`] error
/// that says `what` was being done and keeps the code.
pub(crate) fn check(r: CUresult, what: &str) -> Result<()> {
    check_with(r, || what.to_owned())
}

/// [`check`] with the description made only on failure (hot paths).
pub(crate) fn check_with(r: CUresult, what: impl FnOnce() -> String) -> Result<()> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda_code(format!("{}: {r:?}", what()), r as u32))
    }
}

/// The first `len` elements of a device buffer, on the host (synchronous).
pub(crate) fn copy_prefix<T: DeviceCopy + bytemuck::Pod>(
    buf: &DeviceSlice<T>,
    len: usize,
) -> Result<Vec<T>> {
    if len > buf.len() {
        return Err(Error::invalid("copy larger than its buffer"));
    }
    let mut v = vec![T::zeroed(); len];
    if len == 0 {
        return Ok(v);
    }
    // SAFETY: `len` elements lie in both buffers; the copy is synchronous
    // and `v` is ours alone.
    unsafe {
        copy::dtoh(
            v.as_mut_ptr() as *mut u8,
            buf.as_device_ptr().as_raw(),
            len * size_of::<T>(),
            "copying to the host",
        )?
    };
    Ok(v)
}

/// Grow `buf` to at least `len` elements (contents not kept).
pub(crate) fn ensure<T: DeviceCopy>(
    buf: &mut DeviceBuffer<T>,
    len: usize,
    what: &str,
) -> Result<()> {
    if buf.len() < len {
        *buf = device_buffer(len, what)?;
    }
    Ok(())
}

/// Is this error the driver running out of device memory?
pub(crate) fn out_of_memory(e: &Error) -> bool {
    e.cuda_result() == Some(code::OUT_OF_MEMORY)
}

pub(crate) fn new_stream() -> Result<Stream> {
    Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cuda_err("creating a stream"))
}

pub(crate) fn sync(stream: &Stream, what: &str) -> Result<()> {
    stream.synchronize().map_err(cuda_err(what))
}

/// A device buffer of `len` elements (at least one allocated), not zeroed.
pub(crate) fn device_buffer<T: DeviceCopy>(len: usize, what: &str) -> Result<DeviceBuffer<T>> {
    // SAFETY: every element is written by a kernel or a memset before it is
    // read (the callers' pipelines), and T is plain data.
    unsafe { DeviceBuffer::uninitialized(len.max(1)) }.map_err(cuda_err(what))
}

/// Enqueue a zero fill of the first `bytes` bytes of `buf`.
pub(crate) fn zero_async(buf: &DeviceSlice<u8>, bytes: usize, stream: &Stream) -> Result<()> {
    zero_from_async(buf, 0, bytes, stream)
}

/// Enqueue zeroing bytes `from .. to` of `buf` (clamped to it) on `stream`.
pub(crate) fn zero_from_async(
    buf: &DeviceSlice<u8>,
    from: usize,
    to: usize,
    stream: &Stream,
) -> Result<()> {
    let to = to.min(buf.len());
    if from >= to {
        return Ok(());
    }
    // SAFETY: `from .. to` is within the buffer; the stream is valid; the
    // callers keep the buffer until the stream's work is done.
    unsafe {
        copy::memset_d8_async(
            buf.as_device_ptr().as_raw() + from as u64,
            0,
            to - from,
            stream,
            "zeroing device memory",
        )
    }
}

/// Enqueue a copy of `len` elements of `src` into `dst` (pinned).
pub(crate) fn copy_to_pinned<T: bytemuck::Pod + DeviceCopy>(
    src: &DeviceSlice<T>,
    dst: &mut PinnedBuffer<T>,
    len: usize,
    stream: &Stream,
) -> Result<()> {
    copy_elements(src, 0, dst, len, stream)
}

/// Enqueue a copy of elements `from .. from + len` of `src` to the start of
/// `dst` (pinned).
pub(crate) fn copy_elements<T: bytemuck::Pod + DeviceCopy>(
    src: &DeviceSlice<T>,
    from: usize,
    dst: &mut PinnedBuffer<T>,
    len: usize,
    stream: &Stream,
) -> Result<()> {
    let bytes = len * size_of::<T>();
    if from + len > src.len() || len > dst.len() {
        return Err(Error::invalid("copy larger than its buffers"));
    }
    // SAFETY: both ranges are inside their buffers; `dst` is pinned, so an
    // asynchronous copy is allowed; the caller synchronises before reading.
    unsafe {
        copy::dtoh_async(
            dst.as_mut_ptr() as *mut u8,
            src.as_device_ptr().as_raw() + (from * size_of::<T>()) as u64,
            bytes,
            stream,
            "copying to the host",
        )
    }
}

/// Make `stream` wait for `event`.
pub(crate) fn wait(stream: &Stream, event: &Event) -> Result<()> {
    event.wait_on(stream)
}

/// Copy a whole device buffer to a new host vector (synchronous).
pub fn copy_to_host_blocking<T: DeviceCopy + Default + Clone>(
    buf: &DeviceSlice<T>,
) -> Result<Vec<T>> {
    let mut v = vec![T::default(); buf.len()];
    cust::memory::CopyDestination::copy_to(buf, &mut v[..])
        .map_err(cuda_err("copying to the host"))?;
    Ok(v)
}
