//! Peer access between the GPUs of one host: which GPU can read which
//! other's memory, and turning that on.

use super::super::Gpu;
use super::super::driver::device;
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
            if !device::can_access_peer(&gpus[i].device, &gpus[j].device)? {
                continue;
            }
            device::enable_peer_access(&gpus[j].context)?;
            reach[i][j] = true;
        }
    }
    Ok(reach)
}
