//! Driver plumbing shared by the GPU half: streams, events, allocation,
//! copies and result checks. Nothing here knows about tensors.

use std::ffi::c_void;

use cust::memory::{DeviceBuffer, DeviceCopy, DeviceSlice};
use cust::stream::{Stream, StreamFlags};
use cust::sys as cu;

use super::cuda_err;
use super::memory::PinnedBuffer;
use crate::error::{Error, Result};

/// The first `len` elements of a device buffer, on the host (synchronous).
pub(crate) fn copy_prefix<T: cust::memory::DeviceCopy + bytemuck::Pod>(
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
    // SAFETY: `len` elements lie in both buffers; the copy is synchronous.
    let r = unsafe {
        cu::cuMemcpyDtoH_v2(
            v.as_mut_ptr() as *mut c_void,
            buf.as_device_ptr().as_raw(),
            len * size_of::<T>(),
        )
    };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(Error::cuda_code(
            format!("copying to the host: {r:?}"),
            r as u32,
        ));
    }
    Ok(v)
}

/// Grow `buf` to at least `len` elements (contents not kept).
pub(crate) fn ensure<T: cust::memory::DeviceCopy>(
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
    e.cuda_result() == Some(cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32)
}

pub(crate) fn new_stream() -> Result<Stream> {
    Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cuda_err("creating a stream"))
}

pub(crate) fn sync(stream: &Stream, what: &str) -> Result<()> {
    stream.synchronize().map_err(cuda_err(what))
}

/// A device buffer of `len` elements (at least one allocated), not zeroed.
pub(crate) fn device_buffer<T: cust::memory::DeviceCopy>(
    len: usize,
    what: &str,
) -> Result<DeviceBuffer<T>> {
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
    // SAFETY: `from .. to` is within the buffer; the stream is valid.
    let r = unsafe {
        cu::cuMemsetD8Async(
            buf.as_device_ptr().as_raw() + from as u64,
            0,
            to - from,
            stream.as_inner(),
        )
    };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(Error::cuda_code(
            format!("zeroing bytes {from}..{to}: {r:?}"),
            r as u32,
        ));
    }
    Ok(())
}

/// Enqueue a copy of `len` elements of `src` into `dst` (pinned).
pub(crate) fn copy_to_pinned<T: bytemuck::Pod + cust::memory::DeviceCopy>(
    src: &DeviceSlice<T>,
    dst: &mut PinnedBuffer<T>,
    len: usize,
    stream: &Stream,
) -> Result<()> {
    copy_elements(src, 0, dst, len, stream)
}

/// Enqueue a copy of elements `from .. from + len` of `src` to the start of
/// `dst` (pinned).
pub(crate) fn copy_elements<T: bytemuck::Pod + cust::memory::DeviceCopy>(
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
    let r = unsafe {
        cu::cuMemcpyDtoHAsync_v2(
            dst.as_mut_ptr() as *mut c_void,
            src.as_device_ptr().as_raw() + (from * size_of::<T>()) as u64,
            bytes,
            stream.as_inner(),
        )
    };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(Error::cuda_code(
            format!("copying {bytes} bytes to the host: {r:?}"),
            r as u32,
        ));
    }
    Ok(())
}

/// A CUDA event without timing, for ordering streams.
///
/// Q: why not cust's `Event`?
/// A: its `Stream::wait_event` takes the event by value (and destroys it),
/// and its raw handle is private; the DMA pipeline reuses its events.
pub(crate) struct Event(cust::sys::CUevent);

impl Event {
    /// A new event.
    pub(crate) fn new() -> Result<Self> {
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer; documented flag.
        let r = unsafe {
            cust::sys::cuEventCreate(
                &mut e,
                cust::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
            )
        };
        check(r, "creating an event").map(|()| Event(e))
    }

    /// Record on `stream`.
    pub(crate) fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live event and stream handles.
        check(
            unsafe { cust::sys::cuEventRecord(self.0, stream.as_inner()) },
            "recording an event",
        )
    }
}

impl Event {
    /// Block until the work recorded before the event is done.
    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: live event handle.
        check(
            unsafe { cust::sys::cuEventSynchronize(self.0) },
            "waiting for an event",
        )
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once.
        unsafe { cust::sys::cuEventDestroy_v2(self.0) };
    }
}

// SAFETY: CUDA event handles may be used from any thread.
unsafe impl Send for Event {}

pub(crate) fn check(r: cust::sys::CUresult, what: &str) -> Result<()> {
    if r == cust::sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda_code(format!("{what}: {r:?}"), r as u32))
    }
}

/// Make `stream` wait for `event`.
pub(crate) fn wait(stream: &Stream, event: &Event) -> Result<()> {
    // SAFETY: both handles are live for the call; the driver only records
    // the dependency.
    check(
        unsafe { cust::sys::cuStreamWaitEvent(stream.as_inner(), event.0, 0) },
        "ordering streams",
    )
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
