//! The GPU path (feature `cuda`): device discovery, the embedded PTX module,
//! memory the kernels can read, and (in the private `launch` module) every
//! kernel launch.
//!
//! The kernels are Rust (`gpu-kernels/`), compiled to PTX by `build.rs` with
//! rustc's NVPTX backend and loaded once per [`Gpu`].
//!
//! # Example
//!
//! Rows compressed on the CPU, placed in pinned host memory (read by the
//! kernels over PCIe, zero-copy) and gathered on the device in any order.
//! [`Decoder::gather`] only enqueues work on the stream; corrupt input is
//! reported by [`DecodeStatus::check_blocking`]. cust's errors convert into
//! [`Error`], so `?` works on the stream and the buffers too.
//!
//! ```no_run
//! use ibp::gpu::cust::memory::DeviceBuffer;
//! use ibp::gpu::cust::stream::{Stream, StreamFlags};
//! use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, Residency};
//! use ibp::gpu::copy_to_host_blocking;
//! use ibp::{Rows, fit::{FitOptions, fit}, layout::{LayoutOptions, compress_packed}};
//!
//! fn main() -> Result<(), ibp::Error> {
//!     let values: Vec<f32> = (0..64_000).map(|i| 1.0 + (i % 97) as f32 / 128.0).collect();
//!     let rows = Rows::of(&values, 64)?;
//!     let fitted = fit(rows, &FitOptions::default())?;
//!     let packed = compress_packed(&fitted.codebook, rows, &LayoutOptions::default())?;
//!
//!     let gpu = Gpu::first()?;
//!     let ds = GpuDataset::upload_packed(&gpu, &fitted.codebook, &packed.view(), Residency::Pinned)?;
//!     // The decoder borrows its dataset: it is sized for it.
//!     let decoder = Decoder::new(&gpu, &ds, &DecodeOptions::default())?;
//!     let mut status = DecodeStatus::new()?;
//!     let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
//!     let index = DeviceBuffer::from_slice(&[999u64, 0, 7])?; // any rows, repeats allowed
//!     let mut out = DeviceBuffer::<u8>::zeroed(3 * rows.row_bytes())?;
//!     decoder.gather(&gpu, &index, &mut out, &status, &stream)?;
//!     stream.synchronize()?;
//!     status.check_blocking()?;
//!     assert_eq!(copy_to_host_blocking(&out)?[..rows.row_bytes()], *rows.row(999));
//!     Ok(())
//! }
//! ```
//!
//! # Calls that wait and calls that enqueue
//!
//! The rule for GPU calls: a call that takes a stream only enqueues work
//! on it, into caller-owned buffers, and allocates nothing
//! ([`Decoder::gather`], [`Decoder::gather_strided`], [`Decoder::range`],
//! [`Decoder::range_dma`], [`Decoder::range_auto`] (but for its first call
//! with a scratch, which times both range paths once and waits for them:
//! see its docs), [`Fitter::count_bits`],
//! [`FeatureCache::gather`], [`KvStore::append`], [`KvStore::gather`],
//! [`FloatDecoder::range`], [`FloatDecoder::gather`],
//! [`FloatDecoder::range_dma`], [`FloatFeatureCache::gather`],
//! [`FloatKvStore::append`], [`FloatKvStore::gather`]). A call that allocates or waits for the GPU
//! ends in `_blocking` and says what it does in its first lines: fit and
//! compression of a whole dataset ([`Fitter::fit_blocking`],
//! [`Compressor::size_query_blocking`], [`Compressor::compress_blocking`],
//! [`Compressor::compress_into_blocking`],
//! [`Compressor::compress_host_blocking`] and its `_packed`/`_fixed` forms,
//! [`HostCompressor::compress_blocking`]), copies
//! back to the host ([`DeviceCompressed::to_packed_blocking`],
//! [`DeviceCompressed::to_fixed_blocking`], [`copy_to_host_blocking`],
//! [`DecodeStatus::check_blocking`]), and [`Fitter::count_bits_blocking`],
//! [`Decoder::gather_dma_blocking`], [`Decoder::calibrate_range_blocking`],
//! [`FeatureCache::refill_blocking`], [`FloatKvStore::check_blocking`].
//! Constructors allocate by nature and say so in their docs: [`Gpu::new`],
//! [`GpuDataset::upload_packed`], [`GpuDataset::upload_fixed`] and
//! [`GpuDataset::with_length_table`] (device or pinned memory and a copy),
//! [`GpuDataset::from_device_compressed`] (one stream synchronisation),
//! [`DecodeStatus::new`], [`DmaScratch::new`],
//! [`PinnedBuffer::zeroed`], [`Registered::new`], [`Compressor::new`],
//! [`DeviceCompressed::empty`], [`HostCompressor::new`], [`GpuGroups::new`]
//! [`FeatureCache::new`], [`FloatDecoder::new`], [`PinnedFloatRows::new`]
//! and [`FloatFeatureCache::new`] (pinned and device memory, copies, one
//! wait), and [`FloatKvStore::create`] (a fit and a size pass, waited for).
//! With feature `nccl`, the collectives (`collective::Communicator`'s
//! `all_gather`, `broadcast`, `all_to_all` and their `_raw` baselines)
//! enqueue on the ranks' streams; `finish_blocking`,
//! `Exchange::new_blocking` and the uploads wait.
//!
//! # Memory and streams of other libraries
//!
//! The decode writes into any [`GpuWritable`] (cust's device memory, or a
//! [`SpanMut`]) and enqueues on any [`GpuStream`] (cust's `Stream`, or a
//! [`ForeignStream`]); sources and gather indices may be a [`Span`]
//! ([`Request::gather_span`]). [`Span::from_raw_parts`],
//! [`Span::from_pinned_host`], [`SpanMut::from_raw_parts`] and
//! [`ForeignStream::from_raw`] borrow memory and streams that another
//! library owns: `unsafe`, each with its numbered safety list. With
//! feature `cudarc`, `cudarc_interop` does it safely for cudarc's
//! `CudaSlice`/`CudaView`/`CudaViewMut` and `CudaStream` (docs/GPU.md,
//! "Memory and streams from cudarc").

// Q: why is `bench` public but hidden from the docs, and behind a feature?
// A: it is the benchmark harness's hook into the GPU path's internals (the
// decoder's ideal-read mode, the compressor's stages one by one, driver
// copies), for `ibp bench` (cli/), its criterion benches and
// cli/examples/gpu_decode.rs; those are other crates, so it must be `pub`,
// but it is no part of the library's API, and a host app's build (feature
// `cuda` alone) compiles none of it.
#[cfg(feature = "bench-hooks")]
#[doc(hidden)]
pub mod bench;
mod book;
mod cache;
#[cfg(feature = "nccl")]
pub mod collective;
mod compress;
#[cfg(feature = "cudarc")]
pub mod cudarc_interop;
mod dataset;
mod decode;
pub(crate) mod driver;
mod fit;
pub(crate) mod float_cache;
mod float_decode;
pub(crate) mod float_dma;
mod float_encode;
mod float_kv;
mod groups;
mod host_batches;
mod kernels;
mod kv_store;
mod launch;
mod memory;
mod rows_view;
mod staging;
mod stream;
#[cfg(feature = "testing")]
pub mod testing;

use cust::context::Context;
use cust::device::{Device, DeviceAttribute};
use cust::module::Module;

use crate::error::{Error, Result};

pub use book::DeviceBook;
pub use cache::{
    CacheOptions, CacheStats, FeatureCache, HOST_READ_RATE, LOCAL_READ_RATE, PEER_READ_RATE,
    Placement, ReadRates, ShareLane, access_counts, balanced_shares, replicated_rows,
    top_k_by_score,
};
pub use compress::{Compressor, DeviceCompressed, MAX_ROW_BYTES};
pub use dataset::{GpuDataset, Payload, Residency};
pub use decode::{
    DEFAULT_DMA_PIECE_BYTES, DecodeOptions, DecodeStatus, Decoder, DmaScratch, GatherIndex, Mode,
    RangeCalibration, RangePath, Request, STAGING_ALIGN, dma_range_piece_bytes,
};
pub use driver::copy_to_host_blocking;
pub use driver::function::{DEFAULT_MAX_DYNAMIC_SHARED, set_max_dynamic_shared};
pub use fit::Fitter;
pub use float_cache::{FloatCacheStats, FloatFeatureCache};
pub use float_decode::FloatDecoder;
pub use float_dma::PinnedFloatRows;
pub use float_encode::FloatEncoder;
pub use float_kv::{FloatKvOptions, FloatKvStats, FloatKvStore};
pub use groups::GpuGroups;
pub use host_batches::{CompressedBatch, HostCompressor, HostOptions, HostRead};
pub use kv_store::{KvStore, KvStoreOptions, PageWrites, SegmentInfo};
pub use memory::{GpuReadable, GpuWritable, PinnedBuffer, Registered, Span, SpanMut};
pub use rows_view::Fetch;
pub use stream::{ForeignStream, GpuStream};

/// PTX for the `sm_80` baseline (A100, H100/H200 and later through the
/// driver's JIT), embedded at build time: the shipped
/// `gpu-kernels/ptx/ibp_kernels_sm_80.ptx`, or with `IBP_BUILD_KERNELS=1`
/// the PTX that build.rs compiled from `gpu-kernels/`.
pub(crate) const PTX_SM80: &str = include_str!(env!("IBP_KERNELS_PTX_SM_80"));

/// Register cap given to the driver's JIT for every kernel.
///
/// Q: why cap registers at all?
/// A: occupancy. At 128 or fewer registers two blocks of eight warps stay
/// resident per SM; a change that pushes a kernel past it would halve that
/// silently. With the cap the JIT must fit in 128, and CI runs
/// `ptxas --maxrregcount 128 --warn-on-spills` so a spill fails the build.
/// (A structure-of-arrays table variant that needed 144 registers was
/// measured slower and dropped.)
pub const JIT_MAX_REGISTERS: u32 = 128;

/// The register cap: [`JIT_MAX_REGISTERS`], or `IBP_JIT_MAX_REGISTERS` from
/// the environment (a tuning knob; values outside 32..=255 are ignored).
/// The examples' kernels are loaded under it too.
pub fn jit_max_registers() -> u32 {
    std::env::var("IBP_JIT_MAX_REGISTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| (32..=255).contains(r))
        .unwrap_or(JIT_MAX_REGISTERS)
}

/// Every embedded PTX image as `(arch, text)`.
pub const EMBEDDED_PTX: &[(&str, &str)] = &[("sm_80", PTX_SM80)];

/// Convert a cust error into ours, saying what was being done.
/// The driver's result code is kept ([`Error::cuda_result`]).
pub(crate) fn cuda_err(what: &str) -> impl FnOnce(cust::error::CudaError) -> Error + '_ {
    move |e| Error::cuda_code(format!("{what}: {e}"), e as u32)
}

/// The CUDA crate ibp's GPU types come from (device buffers, streams), so a
/// host app uses the very version ibp was built with.
pub use cust;

/// Properties of the device that launch configurations are derived from.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Device name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Largest dynamic shared memory a block may opt in to, in bytes.
    pub max_shared_per_block: u32,
    /// Shared memory per multiprocessor, in bytes.
    pub shared_per_sm: u32,
    /// Driver API version, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    /// Total device memory in bytes.
    pub total_memory: usize,
}

/// A CUDA device with ibp's kernels loaded.
///
/// Holds the device's primary context; the context is made current on the
/// thread that creates the `Gpu`. To use it from another thread, call
/// [`Gpu::make_current`] there first.
pub struct Gpu {
    // Field order matters for drop order: the module before the context.
    module: Module,
    /// [`Gpu::blocks_per_sm`]'s answers, by kernel name, block and shared
    /// bytes (see there).
    occupancy: std::sync::Mutex<std::collections::HashMap<(&'static str, u32, usize), u32>>,
    info: DeviceInfo,
    ordinal: u32,
    device: Device,
    context: Context,
}

impl Gpu {
    /// Open device `ordinal`, make its primary context current and load the
    /// kernels (the driver allocates the module).
    ///
    /// Fails with [`crate::ErrorKind::Cuda`] when there is no driver, no
    /// device (the message then contains "no CUDA-capable device"), or the
    /// PTX does not load.
    pub fn new(ordinal: u32) -> Result<Self> {
        cust::init(cust::CudaFlags::empty()).map_err(|e| {
            Error::cuda_code(
                format!("no CUDA-capable device is usable (cuInit failed: {e})"),
                e as u32,
            )
        })?;
        let count = Device::num_devices().map_err(cuda_err("counting devices"))?;
        if count == 0 {
            return Err(Error::cuda_code(
                "no CUDA-capable device is detected",
                driver::code::NO_DEVICE,
            ));
        }
        if ordinal >= count {
            return Err(Error::invalid(format!(
                "device {ordinal} requested but only {count} exist"
            )));
        }
        let device = Device::get_device(ordinal).map_err(cuda_err("opening the device"))?;
        let context = Context::new(device).map_err(cuda_err("creating the primary context"))?;
        let info = device_info(device)?;
        if info.compute_capability.0 < 8 {
            return Err(Error::unsupported(format!(
                "{} has compute capability {}.{}; ibp's kernels need 8.0 or newer (cp.async)",
                info.name, info.compute_capability.0, info.compute_capability.1
            )));
        }
        let module = Module::from_ptx(
            PTX_SM80,
            &[cust::module::ModuleJitOption::MaxRegisters(
                jit_max_registers(),
            )],
        )
        .map_err(cuda_err("loading ibp's PTX"))?;
        Ok(Self {
            module,
            occupancy: Default::default(),
            info,
            ordinal,
            device,
            context,
        })
    }

    /// Device 0, or `None` (with the reason) when no CUDA device is usable.
    pub fn first() -> Result<Self> {
        Self::new(0)
    }

    /// Make this device's context current on the calling thread.
    pub fn make_current(&self) -> Result<()> {
        cust::context::CurrentContext::set_current(&self.context)
            .map_err(cuda_err("setting the current context"))
    }

    /// The device's ordinal (what [`Gpu::new`] was given).
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Number of CUDA devices (0 when there is no driver).
    pub fn count() -> u32 {
        if cust::init(cust::CudaFlags::empty()).is_err() {
            return 0;
        }
        Device::num_devices().unwrap_or(0)
    }

    /// The device's properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

fn device_info(device: Device) -> Result<DeviceInfo> {
    let attr = |a: DeviceAttribute| {
        device
            .get_attribute(a)
            .map_err(cuda_err("reading a device attribute"))
    };
    // Q: why not cust's DeviceAttribute for this one? A: cust 0.3 has no
    // variant for the opt-in limit.
    let opt_in =
        driver::device::DeviceAttribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
    Ok(DeviceInfo {
        name: device.name().map_err(cuda_err("reading the device name"))?,
        compute_capability: (
            attr(DeviceAttribute::ComputeCapabilityMajor)?,
            attr(DeviceAttribute::ComputeCapabilityMinor)?,
        ),
        sm_count: attr(DeviceAttribute::MultiprocessorCount)? as u32,
        max_shared_per_block: driver::device::attribute(&device, opt_in)? as u32,
        shared_per_sm: attr(DeviceAttribute::MaxSharedMemoryPerMultiprocessor)? as u32,
        driver_version: driver::device::driver_version()?,
        total_memory: device
            .total_memory()
            .map_err(cuda_err("reading the memory size"))?,
    })
}

/// Whether an error means "there is no usable CUDA device here" (as opposed
/// to a failure on a device that exists). Tests use it to skip visibly.
///
/// Q: which driver codes mean that?
/// A: `CUDA_ERROR_NO_DEVICE`, `CUDA_ERROR_INSUFFICIENT_DRIVER` (no kernel
/// driver, or an older one) and `CUDA_ERROR_STUB_LIBRARY` (the build-time
/// stub of libcuda was found at run time).
pub fn is_no_device(err: &Error) -> bool {
    use driver::code::{INSUFFICIENT_DRIVER, NO_DEVICE, STUB_LIBRARY};
    err.kind() == crate::ErrorKind::Cuda
        && matches!(
            err.cuda_result(),
            Some(NO_DEVICE | INSUFFICIENT_DRIVER | STUB_LIBRARY)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_module_names_the_drivers_no_device_code() {
        // error.rs builds without cust, so it spells the number itself.
        assert_eq!(crate::error::CUDA_ERROR_NO_DEVICE, driver::code::NO_DEVICE);
        assert_eq!(driver::code::NO_DEVICE, 100);
        assert_eq!(driver::code::INSUFFICIENT_DRIVER, 35);
        assert_eq!(driver::code::STUB_LIBRARY, 34);
    }

    #[test]
    fn no_device_is_told_by_the_driver_code_not_the_message() {
        assert!(is_no_device(&Error::cuda_code("anything", 100)));
        assert!(is_no_device(&Error::cuda_code("anything", 35)));
        assert!(!is_no_device(&Error::cuda_code(
            "no CUDA-capable device, says the text",
            2
        )));
        assert!(!is_no_device(&Error::cuda("no CUDA-capable device")));
        assert_eq!(Error::cuda_code("oom", 2).cuda_result(), Some(2));
        assert_eq!(Error::invalid("x").cuda_result(), None);
    }
}
