//! The streams ibp's launches are ordered on: cust's own [`Stream`], or a
//! stream another library created and still owns ([`ForeignStream`]).

use std::ffi::c_void;
use std::marker::PhantomData;

use cust::stream::Stream;

/// A stream ibp can enqueue its kernels on: cust's [`Stream`] or a
/// [`ForeignStream`]. Sealed: the launch path trusts the handle it gets.
pub trait GpuStream: sealed::RawStream {}

pub(crate) mod sealed {
    /// The raw handle (crate-internal, so no caller can hand the launch
    /// path a made-up one through a safe impl).
    pub trait RawStream {
        fn raw_stream(&self) -> cust::sys::CUstream;
    }
}

impl sealed::RawStream for Stream {
    fn raw_stream(&self) -> cust::sys::CUstream {
        self.as_inner()
    }
}
impl GpuStream for Stream {}

/// A borrowed stream of another library (cudarc's `CudaStream`, a raw
/// `CUstream` from C): ibp's launches are enqueued on it and ordered with
/// the owner's own work, and nothing is synchronised. Dropping it does not
/// destroy the stream.
///
/// Q: why not a cust [`Stream`]? A: cust 0.3 has no constructor from a raw
/// handle, and its `Drop` destroys the stream it holds; the launch takes
/// the raw handle instead (`driver::function::launch_kernel`).
#[derive(Clone, Copy, Debug)]
pub struct ForeignStream<'a> {
    raw: cust::sys::CUstream,
    _owner: PhantomData<&'a ()>,
}

impl<'a> ForeignStream<'a> {
    /// Borrow the stream handle `raw` (a `CUstream`, as a pointer) for `'a`.
    ///
    /// # Safety
    /// 1. `raw` is a stream of the device's primary context (the context
    ///    [`crate::gpu::Gpu`] uses; cudarc's `CudaContext` retains the same
    ///    one), or null for the legacy default stream.
    /// 2. The stream is not destroyed during `'a` (work enqueued before a
    ///    destroy still runs to its end: the driver releases the stream
    ///    after it).
    ///
    /// The memory the launches touch has contracts of its own
    /// ([`crate::gpu::Span::from_raw_parts`],
    /// [`crate::gpu::SpanMut::from_raw_parts`]).
    pub unsafe fn from_raw(raw: *mut c_void) -> Self {
        Self {
            raw: raw as cust::sys::CUstream,
            _owner: PhantomData,
        }
    }

    /// The raw handle, as given.
    pub fn as_raw(&self) -> *mut c_void {
        self.raw as *mut c_void
    }
}

// SAFETY: a CUstream handle may be used from any thread of the process (the
// driver API is thread-safe); the borrow keeps it alive.
unsafe impl Send for ForeignStream<'_> {}
// SAFETY: as above; the handle is only read.
unsafe impl Sync for ForeignStream<'_> {}

impl sealed::RawStream for ForeignStream<'_> {
    fn raw_stream(&self) -> cust::sys::CUstream {
        self.raw
    }
}
impl GpuStream for ForeignStream<'_> {}

// `&stream` where `stream: &Stream` works as it did when launches took
// `&Stream`.
impl<S: GpuStream + ?Sized> sealed::RawStream for &S {
    fn raw_stream(&self) -> cust::sys::CUstream {
        (**self).raw_stream()
    }
}
impl<S: GpuStream + ?Sized> GpuStream for &S {}
