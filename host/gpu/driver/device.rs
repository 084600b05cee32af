//! Devices and contexts: attributes (`cuDeviceGetAttribute`), the driver's
//! version (`cuDriverGetVersion`), peer access (`cuDeviceCanAccessPeer`,
//! `cuCtxEnablePeerAccess`) and where a pointer lives
//! (`cuPointerGetAttribute`).
//!
//! These calls have no caller obligation beyond live handles, which cust's
//! types guarantee: they are safe functions.
#![allow(clippy::disallowed_methods)]

use std::ffi::c_int;

use cust::context::Context;
use cust::device::Device;
use cust::sys as cu;

use super::{CUresult, check};
use crate::error::Result;

pub(crate) use cu::CUdevice_attribute as DeviceAttribute;

/// Attribute `attr` of `device`.
pub(crate) fn attribute(device: &Device, attr: DeviceAttribute) -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer and `device` a valid handle.
    let r = unsafe { cu::cuDeviceGetAttribute(&mut v, attr, device.as_raw()) };
    check(r, &format!("reading device attribute {attr:?}"))?;
    Ok(v)
}

/// The driver API's version, e.g. 13000 for CUDA 13.0.
pub(crate) fn driver_version() -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer.
    let r = unsafe { cu::cuDriverGetVersion(&mut v) };
    check(r, "reading the driver's version")?;
    Ok(v)
}

/// Can `device` read `peer`'s memory (once peer access is enabled)?
pub(crate) fn can_access_peer(device: &Device, peer: &Device) -> Result<bool> {
    let mut can: c_int = 0;
    // SAFETY: valid out-pointer and device handles.
    let r = unsafe { cu::cuDeviceCanAccessPeer(&mut can, device.as_raw(), peer.as_raw()) };
    check(r, "asking whether two GPUs can reach each other")?;
    Ok(can != 0)
}

/// Let the current context read `peer`'s memory (done also when it
/// already could: `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`).
pub(crate) fn enable_peer_access(peer: &Context) -> Result<()> {
    // SAFETY: `peer` is a live context (its borrow); flags must be 0.
    let r = unsafe { cu::cuCtxEnablePeerAccess(peer.as_raw(), 0) };
    match r {
        CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
        r => check(r, "enabling peer access"),
    }
}

/// The ordinal of the device whose memory holds device address `ptr`.
///
/// Q: why safe, for any address? A: the driver only looks the address up;
/// an address it does not know is an error (`CUDA_ERROR_INVALID_VALUE`).
pub(crate) fn pointer_device_ordinal(ptr: u64) -> Result<i32> {
    let mut ordinal: c_int = -1;
    let attr = cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
    // SAFETY: a valid out-pointer of the attribute's type (int).
    let r = unsafe {
        cu::cuPointerGetAttribute(
            &mut ordinal as *mut c_int as *mut std::ffi::c_void,
            attr,
            ptr,
        )
    };
    check(r, "asking where a buffer lives")?;
    Ok(ordinal)
}
