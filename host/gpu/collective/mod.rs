//! Compressed collectives across the GPUs of this process, through NCCL
//! (feature `nccl`): all-gather, all-to-all and broadcast of compressed
//! rows, each row decoded on arrival straight into the destination buffer.
//!
//! - [`Communicator`]: one rank per GPU (`ncclCommInitAll`), the same code
//!   for 1 to N GPUs. Each rank has a stream ([`Communicator::stream`]) on
//!   which the collectives' decodes run and after which their NCCL work is
//!   ordered: put your own work on it, before or after, with no
//!   synchronisation in between.
//! - [`ShardedRows`]: a packed compressed dataset spread over the ranks by
//!   a [`Partition`]: rank `r` holds the payload of its rows; every rank
//!   holds the codebook, the flag bitmap and the offsets (the metadata,
//!   replicated once). Since every rank knows where every row's bytes sit,
//!   a collective moves payload only and exchanges no sizes.
//! - [`Communicator::all_gather`]: every rank ends with every row decoded,
//!   moved compressed or raw ([`GatherPath`]: by default chosen per call by
//!   [`choose_path`] from rates measured once,
//!   [`Communicator::calibrate_blocking`]);
//!   [`Communicator::broadcast`]: the same from one owner (a weight set);
//!   [`Communicator::all_to_all`]: each rank a mini-batch of rows by id
//!   ([`Exchange`]). [`RawRows`] and [`Communicator::all_gather_raw`] are
//!   the uncompressed baseline, moved the same way.
//! - [`Communicator::finish_blocking`]: wait for every rank and check
//!   every decode's status.
//!
//! ```no_run
//! # fn main() -> ibp::Result<()> {
//! use ibp::gpu::collective::{CollectiveOptions, Communicator, Partition, ShardedRows};
//! # let (cb, packed): (ibp::codebook::Codebook, ibp::layout::Packed) = todo!();
//! let mut comm = Communicator::all_gpus()?;
//! let part = Partition::even(packed.rows as u64, comm.ranks())?;
//! let rows = ShardedRows::upload(&comm, &cb, &packed.view(), part)?;
//! let mut out = comm.alloc_outputs(rows.rows() * rows.row_bytes())?;
//! comm.all_gather(&rows, &mut out, &CollectiveOptions::default())?;
//! comm.finish_blocking()?; // every rank's `out` holds every row
//! # Ok(()) }
//! ```
//!
//! NCCL is loaded at run time (cudarc's `nccl`, `libnccl.so` on the
//! loader's path); without it the constructors return an
//! [`crate::ErrorKind::Unsupported`] error. How the same code spans hosts:
//! docs/MULTI-HOST.md.

mod choice;
mod exchange;
mod launch;
mod paths;
mod plan;
mod rows;

pub use choice::{GatherPath, PathRates, PathSizes, choose_path, predict_paths};
pub use exchange::Exchange;
pub use plan::Partition;
pub use rows::{RawRows, ShardedRows};

use cust::memory::DeviceBuffer;
use cust::stream::Stream;

use super::driver::{self, Event, nccl};
use super::{DecodeOptions, DecodeStatus, Gpu};
use crate::error::{Error, Result};

/// Options of the collectives.
#[derive(Clone, Debug)]
pub struct CollectiveOptions {
    /// Bytes of each owner's rows moved per pipeline step (whole rows, at
    /// least one). The decode of step `k` overlaps the transfer of step
    /// `k + 1`. Default: 4 MiB.
    pub chunk_bytes: u64,
    /// The decoders' options.
    pub decode: DecodeOptions,
    /// How an all-gather or a broadcast moves the rows: compressed, raw
    /// (each owner decodes its own, NCCL moves the decoded rows), or
    /// chosen per call from measured rates (the default; see
    /// [`Communicator::all_gather`]). The all-to-all always moves
    /// compressed rows.
    pub path: GatherPath,
}

impl Default for CollectiveOptions {
    fn default() -> Self {
        Self {
            chunk_bytes: 4 << 20,
            decode: DecodeOptions::default(),
            path: GatherPath::Auto,
        }
    }
}

impl CollectiveOptions {
    /// Set the bytes per pipeline step.
    pub fn with_chunk_bytes(mut self, bytes: u64) -> Self {
        self.chunk_bytes = bytes.max(1);
        self
    }

    /// Set the decoders' options.
    pub fn with_decode(mut self, decode: DecodeOptions) -> Self {
        self.decode = decode;
        self
    }

    /// Force a way, or [`GatherPath::Auto`].
    pub fn with_path(mut self, path: GatherPath) -> Self {
        self.path = path;
        self
    }
}

/// One rank's GPU, streams and events. Field order is drop order: the
/// GPU (its context) last.
pub(crate) struct Rank {
    pub(crate) status: DecodeStatus,
    /// Recorded on `comm_stream` after a step's transfers; `stream` waits.
    pub(crate) arrived: Event,
    /// Recorded on `stream` before a collective; `comm_stream` waits.
    pub(crate) ready: Event,
    /// NCCL's stream.
    pub(crate) comm_stream: Stream,
    /// The rank's stream: decodes, and the caller's work.
    pub(crate) stream: Stream,
    pub(crate) gpu: Gpu,
}

/// NCCL communicators over GPUs of this process, one rank per GPU, driven
/// from one thread.
///
/// Q: why one thread for every rank, not a thread per GPU?
/// A: NCCL's single-process form (`ncclCommInitAll`, every call of every
/// rank inside one group) needs no out-of-band exchange and no thread
/// hand-off, and all the host does per step is enqueue. Across hosts each
/// process holds its own ranks the same way (docs/MULTI-HOST.md).
pub struct Communicator {
    comms: Vec<nccl::Comm>,
    ranks: Vec<Rank>,
    /// The link's measured bytes a second into a rank and seconds a step
    /// ([`Communicator::calibrate_blocking`]), once measured.
    link: Option<(f64, f64)>,
}

impl Communicator {
    /// A communicator over the devices `ordinals` (rank `i` on device
    /// `ordinals[i]`): opens each [`Gpu`], makes two streams, two events
    /// and a decode status on each, then the NCCL communicators.
    ///
    /// Errors: [`crate::ErrorKind::Cuda`] when there is no usable device
    /// ([`super::is_no_device`]) or NCCL fails;
    /// [`crate::ErrorKind::Unsupported`] when libnccl is not found;
    /// [`crate::ErrorKind::InvalidArgument`] for no devices or one named
    /// twice.
    pub fn new(ordinals: &[u32]) -> Result<Self> {
        if ordinals.is_empty() {
            return Err(Error::invalid("a communicator needs at least one GPU"));
        }
        for (i, o) in ordinals.iter().enumerate() {
            if ordinals[..i].contains(o) {
                return Err(Error::invalid(format!(
                    "GPU {o} is named twice; a communicator has one rank per GPU"
                )));
            }
        }
        let mut ranks = Vec::with_capacity(ordinals.len());
        for &o in ordinals {
            let gpu = Gpu::new(o)?;
            gpu.make_current()?;
            ranks.push(Rank {
                status: DecodeStatus::new()?,
                arrived: Event::new()?,
                ready: Event::new()?,
                comm_stream: driver::new_stream()?,
                stream: driver::new_stream()?,
                gpu,
            });
        }
        let list: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
        let comms = nccl::init_all(&list)?;
        Ok(Self {
            comms,
            ranks,
            link: None,
        })
    }

    /// A communicator over every GPU of this machine.
    pub fn all_gpus() -> Result<Self> {
        let n = Gpu::count();
        if n == 0 {
            // The driver's reason (no device, no driver).
            Gpu::first()?;
        }
        Self::new(&(0..n.max(1)).collect::<Vec<_>>())
    }

    /// The NCCL version found (e.g. 22703 for 2.27.3), or an
    /// [`crate::ErrorKind::Unsupported`] error when libnccl is not found.
    pub fn nccl_version() -> Result<i32> {
        nccl::version()
    }

    /// Number of ranks (GPUs).
    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    /// The devices of the ranks, in rank order.
    pub fn ordinals(&self) -> Vec<u32> {
        self.ranks.iter().map(|r| r.gpu.ordinal()).collect()
    }

    /// Rank `rank`'s GPU. Panics for a rank past the last.
    pub fn gpu(&self, rank: usize) -> &Gpu {
        &self.ranks[rank].gpu
    }

    /// Rank `rank`'s stream: the collectives' decodes run on it, and their
    /// NCCL transfers wait for the work enqueued on it before the call.
    /// Panics for a rank past the last.
    pub fn stream(&self, rank: usize) -> &Stream {
        &self.ranks[rank].stream
    }

    /// One zeroed device buffer of `bytes` bytes on each rank's GPU (the
    /// collectives' outputs). Allocates, and waits for the zeroing.
    pub fn alloc_outputs(&self, bytes: u64) -> Result<Vec<DeviceBuffer<u8>>> {
        let mut out = Vec::with_capacity(self.ranks());
        for r in &self.ranks {
            r.gpu.make_current()?;
            let len = usize::try_from(bytes)
                .map_err(|_| Error::invalid(format!("{bytes} bytes do not fit this machine")))?;
            out.push(
                DeviceBuffer::zeroed(len.max(1))
                    .map_err(super::cuda_err("allocating an output"))?,
            );
        }
        Ok(out)
    }

    /// Wait for every rank's stream, then read and clear every rank's
    /// decode status: the first corrupt row or bad index, named with its
    /// rank, is the error.
    pub fn finish_blocking(&mut self) -> Result<()> {
        for (i, r) in self.ranks.iter_mut().enumerate() {
            r.gpu.make_current()?;
            driver::sync(&r.stream, "waiting for a rank's stream")?;
            r.status
                .check_blocking()
                .map_err(|e| Error::new(e.kind(), format!("rank {i}: {e}")))?;
        }
        Ok(())
    }

    /// Before a collective: each rank's NCCL stream waits for the work
    /// enqueued on its stream so far.
    fn order_after_callers(&self) -> Result<()> {
        for r in &self.ranks {
            r.gpu.make_current()?;
            r.ready.record(&r.stream)?;
            r.ready.wait_on(&r.comm_stream)?;
        }
        Ok(())
    }

    /// After a step's transfers: rank `i`'s stream waits for them.
    fn order_arrival(&self, i: usize) -> Result<()> {
        let r = &self.ranks[i];
        r.gpu.make_current()?;
        r.arrived.record(&r.comm_stream)?;
        r.arrived.wait_on(&r.stream)
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // Q: why wait here? A: a communicator is destroyed with work in
        // flight only by a caller who never called `finish_blocking`; NCCL
        // must not free what its kernels still use.
        for r in &self.ranks {
            let _ = r.gpu.make_current();
            let _ = driver::sync(&r.comm_stream, "waiting for NCCL");
            let _ = driver::sync(&r.stream, "waiting for a rank's stream");
        }
        for &c in &self.comms {
            // SAFETY: each handle came from `init_all` and is destroyed
            // once, here, after its streams' work is done.
            unsafe { nccl::destroy(c) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_nccl_is_an_unsupported_error_not_a_panic() {
        // cudarc panics when a call finds no library; the probe must not.
        match Communicator::nccl_version() {
            Ok(v) => assert!(v > 0, "NCCL version {v}"),
            Err(e) => {
                assert_eq!(e.kind(), crate::ErrorKind::Unsupported, "{e}");
                assert!(e.to_string().contains("LD_LIBRARY_PATH"), "{e}");
                // Every entry point asks the probe first.
                let e = nccl::group_start().unwrap_err();
                assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
                let e = nccl::init_all(&[0]).unwrap_err();
                assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
            }
        }
    }

    #[test]
    fn options_keep_at_least_one_byte_a_step() {
        assert_eq!(CollectiveOptions::default().chunk_bytes, 4 << 20);
        assert_eq!(CollectiveOptions::default().path, GatherPath::Auto);
        assert_eq!(
            CollectiveOptions::default().with_path(GatherPath::Raw).path,
            GatherPath::Raw
        );
        assert_eq!(
            CollectiveOptions::default().with_chunk_bytes(0).chunk_bytes,
            1
        );
    }
}
