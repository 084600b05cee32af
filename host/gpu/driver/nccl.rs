//! The NCCL calls ibp makes (feature `nccl`), one function each, through
//! cudarc's `nccl::result` layer (libnccl loaded at run time), with NCCL's
//! result mapped into ibp's [`Error`].
//!
//! Q: why not cudarc's safe `Comm`?
//! A: its collectives take cudarc buffers and record cudarc events around
//! each call; inside a group (`ncclGroupStart`..`ncclGroupEnd`), the form
//! one thread driving several GPUs must use, NCCL enqueues the work only
//! at the group's end, after those events were recorded, so cudarc's
//! tracking would order later work after nothing. ibp owns the buffers and
//! streams of its collectives and orders them itself.

use std::ffi::c_void;

use cudarc::nccl::result::{self as nr, NcclError};
use cudarc::nccl::sys;
use cust::stream::Stream;

use crate::error::{Error, Result};

/// A communicator handle (one rank's), as NCCL returns it.
pub(crate) type Comm = sys::ncclComm_t;

fn nccl_err(what: &str) -> impl FnOnce(NcclError) -> Error + '_ {
    move |e| Error::cuda(format!("NCCL: {what}: {:?}", e.0))
}

/// Whether libnccl can be loaded, and its version (e.g. 22703 for 2.27.3).
///
/// Errors with [`crate::ErrorKind::Unsupported`] when no `libnccl.so`
/// (or a name cudarc looks for) is on the loader's path.
pub(crate) fn version() -> Result<i32> {
    loaded()?;
    nr::get_nccl_version().map_err(nccl_err("reading the version"))
}

/// Whether libnccl can be loaded: asked once a process, before any call
/// into NCCL. cudarc's own calls would panic without it; every path into
/// NCCL here asks this first and returns an [`crate::ErrorKind::Unsupported`]
/// error instead.
fn loaded() -> Result<()> {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: loads a library by name (no call into it); the names are
    // cudarc's candidates for NCCL.
    if *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() }) {
        return Ok(());
    }
    Err(Error::unsupported(
        "NCCL not found: put a directory with libnccl.so on LD_LIBRARY_PATH \
         (a wheel's libnccl.so.2 needs a libnccl.so link beside it; \
         scripts/device-nccl.sh makes one)",
    ))
}

/// `ncclCommInitAll`: one communicator per device of `ordinals`, rank `i`
/// on device `ordinals[i]`, all driven by this process.
pub(crate) fn init_all(ordinals: &[i32]) -> Result<Vec<Comm>> {
    loaded()?;
    let mut comms = vec![std::ptr::null_mut(); ordinals.len()];
    // SAFETY: `comms` holds one handle per device of `ordinals`, both of
    // `ordinals.len()` elements; NCCL writes the handles.
    unsafe { nr::comm_init_all(comms.as_mut_ptr(), ordinals.len() as i32, ordinals.as_ptr()) }
        .map_err(nccl_err("creating the communicators (ncclCommInitAll)"))?;
    Ok(comms)
}

/// `ncclCommDestroy`, after the communicator's work is done.
///
/// # Safety
/// `comm` came from [`init_all`] and is not used again.
pub(crate) unsafe fn destroy(comm: Comm) {
    // SAFETY: the caller's obligation. Q: why drop the result? A: it runs
    // in `Drop`, where there is no one to tell.
    let _ = unsafe { nr::comm_destroy(comm) };
}

/// `ncclGroupStart`.
pub(crate) fn group_start() -> Result<()> {
    loaded()?;
    nr::group_start()
        .map(drop)
        .map_err(nccl_err("starting a group"))
}

/// `ncclGroupEnd`: enqueues the group's work on its streams.
pub(crate) fn group_end() -> Result<()> {
    nr::group_end()
        .map(drop)
        .map_err(nccl_err("ending a group"))
}

/// `ncclBroadcast` of `bytes` bytes at device address `addr`, in place:
/// the root's bytes there land at the same address on every rank.
///
/// # Safety
/// (1) `comm` is a live communicator (from [`init_all`]) whose device holds
/// `addr..addr + bytes` in its primary context, and `stream` belongs to that
/// context; (2) nothing else reads or writes those bytes until the work is
/// done, except reads of other bytes of the same lines; (3) every rank of
/// the communicator makes the same call, in the same order.
pub(crate) unsafe fn broadcast_in_place(
    addr: u64,
    bytes: usize,
    root: usize,
    comm: Comm,
    stream: &Stream,
) -> Result<()> {
    let p = addr as *mut c_void;
    // SAFETY: the caller's obligations; u8 elements, so a count of bytes.
    unsafe {
        nr::broadcast(
            p,
            p,
            bytes,
            sys::ncclDataType_t::ncclUint8,
            root as i32,
            comm,
            stream.as_inner() as sys::cudaStream_t,
        )
    }
    .map(drop)
    .map_err(nccl_err("enqueuing a broadcast"))
}

/// `ncclAllGather` in place: rank `rank`'s `bytes` bytes at
/// `base + rank · bytes` land at the same place on every rank, so that
/// every rank ends with `ranks · bytes` bytes at `base`.
///
/// # Safety
/// As [`broadcast_in_place`], for the `ranks · bytes` bytes at `base`.
pub(crate) unsafe fn all_gather_in_place(
    base: u64,
    bytes: usize,
    rank: usize,
    comm: Comm,
    stream: &Stream,
) -> Result<()> {
    let own = (base + (rank * bytes) as u64) as *const c_void;
    // SAFETY: the caller's obligations; NCCL's in-place form (the send
    // buffer is the rank's own slice of the receive buffer).
    unsafe {
        nr::all_gather(
            own,
            base as *mut c_void,
            bytes,
            sys::ncclDataType_t::ncclUint8,
            comm,
            stream.as_inner() as sys::cudaStream_t,
        )
    }
    .map(drop)
    .map_err(nccl_err("enqueuing an all-gather"))
}

/// `ncclSend` of `bytes` bytes from device address `addr` to rank `peer`.
///
/// # Safety
/// As [`broadcast_in_place`] (1) and (2); (3) `peer` makes the matching
/// [`recv`] of as many bytes, in the same group.
pub(crate) unsafe fn send(
    addr: u64,
    bytes: usize,
    peer: usize,
    comm: Comm,
    stream: &Stream,
) -> Result<()> {
    // SAFETY: the caller's obligations.
    unsafe {
        nr::send(
            addr as *const c_void,
            bytes,
            sys::ncclDataType_t::ncclUint8,
            peer as i32,
            comm,
            stream.as_inner() as sys::cudaStream_t,
        )
    }
    .map(drop)
    .map_err(nccl_err("enqueuing a send"))
}

/// `ncclRecv` of `bytes` bytes into device address `addr` from rank `peer`.
///
/// # Safety
/// As [`send`], with the matching send made by `peer`.
pub(crate) unsafe fn recv(
    addr: u64,
    bytes: usize,
    peer: usize,
    comm: Comm,
    stream: &Stream,
) -> Result<()> {
    // SAFETY: the caller's obligations.
    unsafe {
        nr::recv(
            addr as *mut c_void,
            bytes,
            sys::ncclDataType_t::ncclUint8,
            peer as i32,
            comm,
            stream.as_inner() as sys::cudaStream_t,
        )
    }
    .map(drop)
    .map_err(nccl_err("enqueuing a receive"))
}
