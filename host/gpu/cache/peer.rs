//! Peer access between the GPUs of one host: which GPU can read which
//! other's memory, and turning that on.

use cust::sys as cu;

use super::super::Gpu;
use super::super::driver::check;
use crate::error::Result;

/// `reach[i][j]`: GPU `i` of `gpus` can read GPU `j`'s memory (always for
/// `i == j`). Peer access is enabled for every pair the driver allows
/// (`cuDeviceCanAccessPeer`), from `i`'s context; a pair enabled before
/// (by this process) counts as reachable.
///
/// Leaves the last GPU's context current.
pub(crate) fn enable_all(gpus: &[&Gpu]) -> Result<Vec<Vec<bool>>> {
    let n = gpus.len();
    let mut reach = vec![vec![false; n]; n];
    for i in 0..n {
        gpus[i].make_current()?;
        for j in 0..n {
            if i == j {
                reach[i][j] = true;
                continue;
            }
            if gpus[i].ordinal() == gpus[j].ordinal() {
                // The same device twice: its memory is its own.
                reach[i][j] = true;
                continue;
            }
            let mut can = 0;
            let (a, b) = (gpus[i].device_raw(), gpus[j].device_raw());
            // SAFETY: valid out-pointer and device handles.
            let r = unsafe { cu::cuDeviceCanAccessPeer(&mut can, a, b) };
            check(r, "asking whether two GPUs can reach each other")?;
            if can == 0 {
                continue;
            }
            // SAFETY: the peer's context is live (`gpus[j]`); flags must be 0.
            let r = unsafe { cu::cuCtxEnablePeerAccess(gpus[j].context_raw(), 0) };
            reach[i][j] = matches!(
                r,
                cu::CUresult::CUDA_SUCCESS | cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            );
            if !reach[i][j] {
                check(r, "enabling peer access")?;
            }
        }
    }
    Ok(reach)
}
