//! Copies and fills: the driver's `cuMemcpy*` and `cuMemsetD8Async`.
//!
//! Every function is one driver call. Addresses are device addresses
//! (`CUdeviceptr`) in the unified address space: device memory, or pinned
//! host memory mapped into the device.
#![allow(clippy::disallowed_methods)]

use std::ffi::c_void;

use cust::stream::Stream;
use cust::sys as cu;

use super::check;
use crate::error::Result;

/// Enqueue a copy of `bytes` bytes from host memory `src` to device address
/// `dst` on `stream`.
///
/// # Safety
/// 1. `src` is valid for reads of `bytes` bytes until the copy is done
///    (pinned memory: until an event recorded after it completes; pageable
///    memory: the driver stages it before returning).
/// 2. Nothing writes `src`'s bytes before the copy has read them.
/// 3. `dst .. dst + bytes` is device memory of the current context that
///    stays allocated, and that no other work reads or writes unordered
///    with the copy, until the copy is done.
pub(crate) unsafe fn htod_async(
    dst: u64,
    src: *const u8,
    bytes: usize,
    stream: &Stream,
    what: &str,
) -> Result<()> {
    // SAFETY: the caller's obligations 1–3; `stream` is a live handle.
    check(
        unsafe { cu::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, bytes, stream.as_inner()) },
        what,
    )
}

/// Copy `bytes` bytes from device address `src` to host memory `dst`;
/// returns when the copy is done (after the legacy stream's earlier work,
/// not after the work of non-blocking streams).
///
/// # Safety
/// 1. `dst` is valid for writes of `bytes` bytes and not read or written
///    elsewhere during the call.
/// 2. `src .. src + bytes` is device memory of the current context.
pub(crate) unsafe fn dtoh(dst: *mut u8, src: u64, bytes: usize, what: &str) -> Result<()> {
    // SAFETY: the caller's obligations 1–2.
    check(
        unsafe { cu::cuMemcpyDtoH_v2(dst as *mut c_void, src, bytes) },
        what,
    )
}

/// Enqueue a copy of `bytes` bytes from device address `src` to host memory
/// `dst` on `stream`.
///
/// # Safety
/// 1. `dst` is pinned host memory, valid for writes of `bytes` bytes until
///    the copy is done, and nothing reads or writes it before then.
/// 2. `src .. src + bytes` is device memory of the current context that
///    stays allocated, and that nothing writes unordered with the copy,
///    until the copy is done.
pub(crate) unsafe fn dtoh_async(
    dst: *mut u8,
    src: u64,
    bytes: usize,
    stream: &Stream,
    what: &str,
) -> Result<()> {
    // SAFETY: the caller's obligations 1–2; `stream` is a live handle.
    check(
        unsafe { cu::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, bytes, stream.as_inner()) },
        what,
    )
}

/// Enqueue a device-to-device copy of `bytes` bytes on `stream`.
///
/// # Safety
/// 1. `src .. src + bytes` and `dst .. dst + bytes` are device memory of
///    the current context that stays allocated until the copy is done, and
///    they do not overlap.
/// 2. No other work writes `src` or touches `dst` unordered with the copy.
// Only the benchmark harness copies device to device (`gpu::bench`).
#[cfg(feature = "bench-hooks")]
pub(crate) unsafe fn dtod_async(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: &Stream,
    what: &str,
) -> Result<()> {
    // SAFETY: the caller's obligations 1–2; `stream` is a live handle.
    check(
        unsafe { cu::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream.as_inner()) },
        what,
    )
}

/// Enqueue a copy of `bytes` bytes between two addresses of the unified
/// address space (device memory or mapped pinned host memory, either way)
/// on `stream`.
///
/// # Safety
/// The obligations of [`dtod_async`], for addresses that may also name
/// mapped pinned host memory (which must stay allocated, and unwritten
/// when it is the source, until the copy is done).
pub(crate) unsafe fn unified_async(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: &Stream,
    what: &str,
) -> Result<()> {
    // SAFETY: the caller's obligations; `stream` is a live handle.
    check(
        unsafe { cu::cuMemcpyAsync(dst, src, bytes, stream.as_inner()) },
        what,
    )
}

/// Enqueue setting `bytes` bytes at device address `dst` to `value` on
/// `stream`.
///
/// # Safety
/// `dst .. dst + bytes` is device memory of the current context that stays
/// allocated, and that no other work reads or writes unordered with the
/// fill, until the fill is done.
pub(crate) unsafe fn memset_d8_async(
    dst: u64,
    value: u8,
    bytes: usize,
    stream: &Stream,
    what: &str,
) -> Result<()> {
    // SAFETY: the caller's obligation; `stream` is a live handle.
    check(
        unsafe { cu::cuMemsetD8Async(dst, value, bytes, stream.as_inner()) },
        what,
    )
}
