//! Kernel functions: the dynamic shared memory opt-in
//! (`cuFuncSetAttribute`) and occupancy
//! (`cuOccupancyMaxActiveBlocksPerMultiprocessor`).
#![allow(clippy::disallowed_methods)]

use cust::function::Function;
use cust::sys as cu;

use super::{check, check_with};
use crate::error::Result;

/// Dynamic shared memory a block may use without opting in (48 KiB).
pub const DEFAULT_MAX_DYNAMIC_SHARED: u32 = 48 * 1024;

/// Let `f` use up to `bytes` of dynamic shared memory a block: above
/// [`DEFAULT_MAX_DYNAMIC_SHARED`] a kernel must opt in
/// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`); at or below it this
/// does nothing. Beyond the device's opt-in limit
/// ([`DeviceInfo::max_shared_per_block`]) the driver refuses.
///
/// Q: why safe? A: `f` is a live function of a loaded module (its borrow),
/// and the attribute only bounds what later launches may ask for.
///
/// [`DeviceInfo::max_shared_per_block`]: crate::gpu::DeviceInfo::max_shared_per_block
pub fn set_max_dynamic_shared(f: &Function<'_>, bytes: u32) -> Result<()> {
    if bytes <= DEFAULT_MAX_DYNAMIC_SHARED {
        return Ok(());
    }
    let value = i32::try_from(bytes).map_err(|_| {
        crate::Error::invalid(format!(
            "{bytes} bytes of shared memory overflow the driver's int"
        ))
    })?;
    // SAFETY: `f` is a live function handle (borrowed from its module); the
    // attribute is a documented one and takes an int.
    let r = unsafe {
        cu::cuFuncSetAttribute(
            f.to_raw(),
            cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            value,
        )
    };
    check_with(r, || {
        format!("reserving {bytes} bytes of dynamic shared memory a block")
    })
}

/// Blocks of `block` threads with `shared` bytes of dynamic shared memory
/// each that one SM holds at once for `f` (0: it cannot run so).
pub fn max_active_blocks(f: &Function<'_>, block: u32, shared: usize) -> Result<u32> {
    let mut n: i32 = 0;
    let threads = i32::try_from(block)
        .map_err(|_| crate::Error::invalid(format!("a block of {block} threads")))?;
    // SAFETY: `n` is a valid out-pointer and `f` a live function handle.
    let r = unsafe {
        cu::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, f.to_raw(), threads, shared)
    };
    check(r, "querying occupancy")?;
    Ok(n.max(0) as u32)
}
