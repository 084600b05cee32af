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

/// Enqueue `f` on the raw stream `stream` (`cuLaunchKernel`): a grid of
/// `grid` blocks of `block` threads with `shared` bytes of dynamic shared
/// memory, its parameters in `args` (one pointer per kernel parameter);
/// `name` for the error.
///
/// Q: why not cust's `Stream::launch`? A: that needs a cust `Stream`, and
/// cust 0.3 cannot borrow a handle it did not create (no `from_raw`; its
/// `Drop` destroys the stream). Launching on the raw handle lets a stream
/// of another library ([`crate::gpu::ForeignStream`]) order ibp's kernels.
///
/// # Safety
/// 1. `stream` is a live stream of the current context (or null, the
///    legacy default stream), and stays so until this returns.
/// 2. `args` holds one pointer per parameter of `f`, each to a value of
///    that parameter's type; the driver copies them during the call.
/// 3. Every address the parameters carry is valid for what the kernel
///    does with it until the work completes, ordered on `stream`.
pub unsafe fn launch_kernel(
    f: &Function<'_>,
    name: &str,
    grid: u32,
    block: u32,
    shared: u32,
    stream: cu::CUstream,
    args: &mut [*mut std::ffi::c_void],
) -> Result<()> {
    // SAFETY: `f` is a live function (its borrow); the caller guarantees
    // the stream (1), the parameters (2) and their addresses (3); no extra
    // (`extra` null).
    let r = unsafe {
        cu::cuLaunchKernel(
            f.to_raw(),
            grid,
            1,
            1,
            block,
            1,
            1,
            shared,
            stream,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    check_with(r, || format!("launching {name}"))
}
