//! Host memory the device reads: pinned allocations (`cuMemHostAlloc`,
//! `cuMemFreeHost`), registration of the caller's memory
//! (`cuMemHostRegister`, `cuMemHostUnregister`), and their device addresses
//! (`cuMemHostGetDevicePointer`).
#![allow(clippy::disallowed_methods)]

use std::ffi::c_void;

use cust::sys as cu;

use super::check;
use crate::error::Result;

/// `cuMemHostRegister` flags: mapped into the device, and read-only for
/// it (the caller's bytes may be a read-only mapping).
pub(crate) const REGISTER_MAPPED_READ_ONLY: u32 =
    cu::CU_MEMHOSTREGISTER_DEVICEMAP | cu::CU_MEMHOSTREGISTER_READ_ONLY;

/// `cuMemHostRegister` flags: mapped into the device.
pub(crate) const REGISTER_MAPPED: u32 = cu::CU_MEMHOSTREGISTER_DEVICEMAP;

/// `bytes` (at least 1) of pinned host memory, mapped into the device's
/// address space and usable from every context (`DEVICEMAP | PORTABLE`),
/// not initialised.
///
/// # Safety
/// The allocation must be freed with [`free_host`] exactly once, after the
/// last device access to it is done.
pub(crate) unsafe fn alloc_host_mapped(bytes: usize) -> Result<*mut u8> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the flags are documented constants.
    let r = unsafe {
        cu::cuMemHostAlloc(
            &mut p,
            bytes,
            cu::CU_MEMHOSTALLOC_DEVICEMAP | cu::CU_MEMHOSTALLOC_PORTABLE,
        )
    };
    check(
        r,
        &format!("allocating {bytes} bytes of pinned host memory"),
    )?;
    if p.is_null() {
        return Err(crate::Error::cuda(format!(
            "allocating {bytes} bytes of pinned host memory: the driver returned no address"
        )));
    }
    Ok(p as *mut u8)
}

/// Free pinned host memory.
///
/// # Safety
/// `p` came from [`alloc_host_mapped`], is freed once, and no host or
/// device access to it follows (or is still in flight).
pub(crate) unsafe fn free_host(p: *mut u8) {
    // SAFETY: the caller's obligation. The result is dropped: this runs in
    // Drop and on error paths, where nothing better can be done.
    let _ = unsafe { cu::cuMemFreeHost(p as *mut c_void) };
}

/// The device address of pinned or registered host memory at `p`.
///
/// # Safety
/// `p` lies in memory from [`alloc_host_mapped`] or registered with
/// [`register_host`] with a mapped flag, and still allocated or registered.
pub(crate) unsafe fn host_device_address(p: *mut u8) -> Result<u64> {
    let mut d: cu::CUdeviceptr = 0;
    // SAFETY: valid out-pointer; `p` mapped (the caller's obligation);
    // flags must be 0.
    let r = unsafe { cu::cuMemHostGetDevicePointer_v2(&mut d, p as *mut c_void, 0) };
    check(r, "mapping host memory into the device")?;
    Ok(d)
}

/// Page-lock `bytes` bytes at `p` and map them into the device, with
/// `flags` ([`REGISTER_MAPPED_READ_ONLY`] or [`REGISTER_MAPPED`]).
///
/// # Safety
/// 1. `p .. p + bytes` is host memory that stays allocated until
///    [`unregister_host`] is called on `p`, exactly once.
/// 2. With [`REGISTER_MAPPED`], the device may write it: no Rust reference
///    that forbids that may be alive while it does.
pub(crate) unsafe fn register_host(p: *const u8, bytes: usize, flags: u32) -> Result<()> {
    // SAFETY: the caller's obligations.
    let r = unsafe { cu::cuMemHostRegister_v2(p as *mut c_void, bytes, flags) };
    check(r, &format!("registering {bytes} bytes of host memory"))
}

/// Unregister memory registered with [`register_host`].
///
/// # Safety
/// `p` was registered by [`register_host`], is unregistered once, and no
/// device access to it is in flight or follows.
pub(crate) unsafe fn unregister_host(p: *const u8) {
    // SAFETY: the caller's obligation. The result is dropped (Drop and
    // error paths).
    let _ = unsafe { cu::cuMemHostUnregister(p as *mut c_void) };
}
