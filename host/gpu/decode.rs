//! GPU decompression: a compressed dataset placed where the kernels can read
//! it, a decoder sized once, and a status word for corrupt input.
//!
//! ```text
//! let ds = GpuDataset::upload_packed(&gpu, &codebook, &packed.view(), Residency::Pinned)?;
//! let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default())?;
//! let status = DecodeStatus::new()?;
//! dec.gather(&gpu, &index, &mut out, &status, &stream)?;   // enqueued, no sync
//! stream.synchronize()?; status.check_blocking()?;
//! ```

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::{STATUS_BAD_INDEX, STATUS_CORRUPT, workspace_bytes};

use super::memory::{GpuReadable, PinnedBuffer};
use super::{Gpu, cuda_err};
use crate::codebook::Codebook;
use crate::error::{Error, Result};
use crate::layout::{FixedStrideRef, Layout, PackedRef};

/// Where the compressed bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// Pinned host memory, read by the kernel zero-copy over PCIe: the main
    /// case (datasets larger than the GPU, fetched by index).
    Pinned,
    /// Device memory: a compressed cache on the GPU.
    Device,
}

/// The compressed bytes of a [`GpuDataset`].
pub enum Payload {
    /// In pinned, mapped host memory.
    Pinned(PinnedBuffer<u8>),
    /// In device memory.
    Device(DeviceBuffer<u8>),
}

impl Payload {
    fn new(bytes: &[u8], residency: Residency) -> Result<Self> {
        // Keep at least one byte so the device address is valid.
        let padded;
        let bytes = if bytes.is_empty() {
            padded = [0u8];
            &padded[..]
        } else {
            bytes
        };
        Ok(match residency {
            Residency::Pinned => Payload::Pinned(PinnedBuffer::from_slice(bytes)?),
            Residency::Device => Payload::Device(
                DeviceBuffer::from_slice(bytes).map_err(cuda_err("uploading the payload"))?,
            ),
        })
    }

    /// Device address of byte 0.
    pub fn device_addr(&self) -> u64 {
        match self {
            Payload::Pinned(p) => p.device_addr(),
            Payload::Device(d) => d.device_addr(),
        }
    }
}

use crate::kernel_tables::decode_book;
use crate::kernel_tables::decoder_table;

/// A compressed dataset on the GPU side: codebook table, flag bitmap and
/// (packed layout) offsets in device memory; the compressed bytes pinned on
/// the host or on the device.
pub struct GpuDataset {
    pub(crate) table: DeviceBuffer<u8>,
    /// The batch decoder's book (`ibp_kernels::book`).
    pub(crate) book: DeviceBuffer<u8>,
    pub(crate) book_bytes: usize,
    pub(crate) flags: DeviceBuffer<u8>,
    pub(crate) offsets: Option<DeviceBuffer<u64>>,
    pub(crate) lengths: Option<DeviceBuffer<u32>>,
    pub(crate) payload: Payload,
    pub(crate) rows: u64,
    pub(crate) row_bytes: u64,
    pub(crate) chunk: u32,
    pub(crate) stored_bytes: u64,
    /// The largest stored tensor whose length the kernel reads from a table
    /// (packed offsets, fixed-stride lengths); `row_bytes` where lengths come
    /// from participation bits or are not known on the host. Batch mode sizes
    /// its half rings by it: Cora's 5.7 KB rows store at most a few hundred
    /// bytes, and halves sized for 5.7 KB left one block per SM.
    pub(crate) max_stored: u64,
    /// Packed layout: the offsets, also on the host (the DMA paths plan
    /// their copies from them).
    pub(crate) host_offsets: Option<Vec<u64>>,
    /// Fixed-stride with a length table: the lengths, also on the host (a
    /// feature cache packs its slabs and counts its misses' lines by them).
    pub(crate) host_lengths: Option<Vec<u32>>,
    /// What the dataset holds, hashed when a feature cache first asks
    /// (`super::cache`).
    pub(crate) fingerprint: std::sync::OnceLock<u64>,
    /// Packed layout: the flag bitmap, also on the host (the DMA gather
    /// copies each requested tensor's bit into its piece).
    pub(crate) host_flags: Option<Vec<u8>>,
    /// A clustered dataset's cluster ids ([`GpuDataset::upload_clustered`]);
    /// `book` and `table` then hold every cluster's, back to back.
    pub(crate) clusters: Option<GpuClusters>,
}

/// The cluster ids of a clustered [`GpuDataset`], on the device.
pub(crate) struct GpuClusters {
    /// The ids as the container stores them (`docs/FORMAT.md` §6.8), then 8
    /// zero bytes (the kernel reads two words at the last id's).
    pub(crate) ids: DeviceBuffer<u8>,
    /// Bits per id.
    pub(crate) bits: u32,
    /// Clusters (`k`).
    pub(crate) k: u32,
    /// The ids on the host too (the DMA gather stages each requested
    /// row's id into its piece).
    pub(crate) host: crate::cluster::ClusterIds,
}

impl GpuDataset {
    /// Place a packed dataset (validated first: a corrupt offsets table is
    /// rejected here, so the kernel can trust slot boundaries). Allocates
    /// its memory (device or pinned host, per `residency`) and copies the
    /// data into it.
    pub fn upload_packed(
        _gpu: &Gpu,
        cb: &Codebook,
        packed: &PackedRef<'_>,
        residency: Residency,
    ) -> Result<Self> {
        check_codebook(cb, packed.row_bytes())?;
        packed.validate()?;
        let table = decoder_table(cb);
        let book = decode_book(cb);
        Ok(GpuDataset {
            table: DeviceBuffer::from_slice(&table).map_err(cuda_err("uploading the codebook"))?,
            book_bytes: book.len(),
            book: DeviceBuffer::from_slice(&book).map_err(cuda_err("uploading the codebook"))?,
            flags: upload_flags(packed.flags())?,
            offsets: Some(
                DeviceBuffer::from_slice(packed.offsets())
                    .map_err(cuda_err("uploading offsets"))?,
            ),
            host_offsets: Some(packed.offsets().to_vec()),
            host_flags: Some(packed.flags().to_vec()),
            host_lengths: None,
            lengths: None,
            payload: Payload::new(packed.payload(), residency)?,
            rows: packed.rows() as u64,
            row_bytes: packed.row_bytes() as u64,
            chunk: cb.chunk().bytes(),
            stored_bytes: packed.payload().len() as u64,
            fingerprint: Default::default(),
            clusters: None,
            max_stored: packed
                .offsets()
                .windows(2)
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or(0),
        })
    }

    /// Place a clustered dataset (`docs/FORMAT.md` §6.8): a packed dataset
    /// whose tensor `i` was encoded with `codebooks[ids[i]]`, as
    /// [`crate::cluster::compress_clustered`] writes it and a clustered
    /// group of an `.ibp` file holds it. Range and gather decodes (zero-copy
    /// and device-resident, [`Decoder::range_dma`] and
    /// [`Decoder::gather_dma_blocking`]) then give each
    /// tensor its own codebook; the books are read through L1, so the
    /// decoder needs no shared memory for them whatever `k`.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for no codebooks,
    /// codebooks of different tensor lengths or chunk sizes, or ids not one
    /// per tensor; with [`crate::ErrorKind::Corrupt`] for an id `≥ k` or an
    /// inconsistent packed layout; with [`crate::ErrorKind::Unsupported`]
    /// when the `k` books would pass 4 GiB.
    pub fn upload_clustered(
        _gpu: &Gpu,
        codebooks: &[Codebook],
        ids: &crate::cluster::ClusterIds,
        packed: &PackedRef<'_>,
        residency: Residency,
    ) -> Result<Self> {
        let first = codebooks
            .first()
            .ok_or_else(|| Error::invalid("no codebooks; a clustering has at least one"))?;
        for (i, cb) in codebooks.iter().enumerate() {
            check_codebook(cb, packed.row_bytes())?;
            if cb.chunk() != first.chunk() {
                return Err(Error::invalid(format!(
                    "codebook {i} has {}-byte chunks and codebook 0 {}-byte ones; a clustered dataset's codebooks share one chunk size",
                    cb.chunk().bytes(),
                    first.chunk().bytes()
                )));
            }
        }
        if ids.len() != packed.rows() {
            return Err(Error::invalid(format!(
                "{} cluster ids for {} tensors; give one per tensor",
                ids.len(),
                packed.rows()
            )));
        }
        let k = codebooks.len();
        if let Some(i) = (0..ids.len()).find(|&i| ids.get(i).is_none_or(|c| c as usize >= k)) {
            return Err(Error::corrupt(format!(
                "tensor {i} has cluster id {:?}; there are {k} codebooks",
                ids.get(i)
            )));
        }
        let mut ds = GpuDataset::upload_packed(_gpu, first, packed, residency)?;
        let book: Vec<u8> = codebooks.iter().flat_map(decode_book).collect();
        let table: Vec<u8> = codebooks.iter().flat_map(decoder_table).collect();
        if u32::try_from(book.len()).is_err() || u32::try_from(table.len()).is_err() {
            return Err(Error::unsupported(format!(
                "{k} codebooks of {}-byte tensors need {} bytes of decode books; the GPU decoder addresses 4 GiB",
                packed.row_bytes(),
                book.len()
            )));
        }
        let mut id_bytes = ids.as_bytes().to_vec();
        id_bytes.extend([0u8; 8]);
        ds.book_bytes = book.len() / k;
        ds.book = DeviceBuffer::from_slice(&book).map_err(cuda_err("uploading the codebooks"))?;
        ds.table = DeviceBuffer::from_slice(&table).map_err(cuda_err("uploading the codebooks"))?;
        ds.clusters = Some(GpuClusters {
            ids: DeviceBuffer::from_slice(&id_bytes).map_err(cuda_err("uploading cluster ids"))?,
            bits: ids.bits(),
            k: k as u32,
            host: ids.clone(),
        });
        Ok(ds)
    }

    /// Place group `g` of an `.ibp` file ([`crate::container::IbpFile`]),
    /// whatever its layout: packed, fixed-stride or clustered
    /// ([`GpuDataset::upload_packed`], [`GpuDataset::upload_fixed`],
    /// [`GpuDataset::upload_clustered`]).
    ///
    /// Errors with [`crate::ErrorKind::Unsupported`] for a group stored raw
    /// (nothing to decode: copy its bytes).
    pub fn upload_group(
        gpu: &Gpu,
        g: &crate::container::GroupView<'_>,
        residency: Residency,
    ) -> Result<Self> {
        let raw = || {
            Error::unsupported(format!(
                "group {:?} is stored raw; copy its bytes to the GPU, there is nothing to decode",
                g.name()
            ))
        };
        if let Some((books, ids)) = g.clusters() {
            let packed = g.packed().ok_or_else(raw)?;
            return GpuDataset::upload_clustered(gpu, books, ids, &packed, residency);
        }
        let cb = g.codebook().ok_or_else(raw)?;
        match (g.packed(), g.fixed()) {
            (Some(p), _) => GpuDataset::upload_packed(gpu, cb, &p, residency),
            (None, Some(f)) => GpuDataset::upload_fixed(gpu, cb, &f, residency),
            (None, None) => Err(raw()),
        }
    }

    /// Whether tensors decode with their cluster's codebook
    /// ([`GpuDataset::upload_clustered`]).
    pub fn is_clustered(&self) -> bool {
        self.clusters.is_some()
    }

    /// The number of clusters (codebooks) of a clustered dataset; `None`
    /// for a dataset of one codebook.
    pub fn clusters(&self) -> Option<usize> {
        self.clusters.as_ref().map(|c| c.k as usize)
    }

    /// Place a fixed-stride dataset: slots of `L` bytes, each tensor's
    /// stored form a prefix of its slot. Allocates its memory (device or
    /// pinned host, per `residency`) and copies the data into it.
    pub fn upload_fixed(
        _gpu: &Gpu,
        cb: &Codebook,
        fixed: &FixedStrideRef<'_>,
        residency: Residency,
    ) -> Result<Self> {
        check_codebook(cb, fixed.row_bytes())?;
        let table = decoder_table(cb);
        let lengths = fixed_lengths(cb, fixed);
        let stored = lengths.iter().map(|&n| n as u64).sum();
        let book = decode_book(cb);
        Ok(GpuDataset {
            table: DeviceBuffer::from_slice(&table).map_err(cuda_err("uploading the codebook"))?,
            book_bytes: book.len(),
            book: DeviceBuffer::from_slice(&book).map_err(cuda_err("uploading the codebook"))?,
            flags: upload_flags(fixed.flags())?,
            offsets: None,
            lengths: None,
            host_offsets: None,
            host_flags: None,
            host_lengths: None,
            payload: Payload::new(fixed.slots(), residency)?,
            rows: fixed.rows() as u64,
            row_bytes: fixed.row_bytes() as u64,
            chunk: cb.chunk().bytes(),
            stored_bytes: stored,
            // Lengths derived from participation bits: up to L - 1 bytes.
            max_stored: fixed.row_bytes() as u64,
            fingerprint: Default::default(),
            clusters: None,
        })
    }

    /// The codebook tables of `cb` alone, for launches that bring their own
    /// payload, flags, lengths and row count through [`LaunchVia`] (a KV
    /// store's segments, `super::kv_store`). The placeholder payload is
    /// pinned, so a decoder sized for it fetches as it does from pinned
    /// host memory.
    pub(crate) fn codebook_only(cb: &Codebook) -> Result<Self> {
        let table = decoder_table(cb);
        let book = decode_book(cb);
        let l = cb.row_bytes() as u64;
        Ok(GpuDataset {
            table: DeviceBuffer::from_slice(&table).map_err(cuda_err("uploading the codebook"))?,
            book_bytes: book.len(),
            book: DeviceBuffer::from_slice(&book).map_err(cuda_err("uploading the codebook"))?,
            flags: upload_flags(&[])?,
            offsets: None,
            lengths: None,
            host_offsets: None,
            host_flags: None,
            host_lengths: None,
            payload: Payload::new(&[], Residency::Pinned)?,
            rows: 0,
            row_bytes: l,
            chunk: cb.chunk().bytes(),
            stored_bytes: 0,
            max_stored: l,
            fingerprint: Default::default(),
            clusters: None,
        })
    }

    /// Fixed-stride only: also keep every tensor's stored length on the GPU
    /// (4 bytes per tensor, against the 1 bit of the flag bitmap). The
    /// decoder then fetches each tensor in one round trip instead of two
    /// (participation bits first, then the rest), and packs more tensors
    /// into a batch. Without it the lengths come from the participation bits.
    /// Allocates the table in device memory and copies it there.
    pub fn with_length_table(mut self, cb: &Codebook, fixed: &FixedStrideRef<'_>) -> Result<Self> {
        if self.offsets.is_some() {
            return Err(Error::invalid(
                "a length table is for the fixed-stride layout; packed offsets already give lengths",
            ));
        }
        let lengths = fixed_lengths(cb, fixed);
        self.max_stored = lengths.iter().map(|&n| n as u64).max().unwrap_or(0);
        self.lengths =
            Some(DeviceBuffer::from_slice(&lengths).map_err(cuda_err("uploading lengths"))?);
        self.host_lengths = Some(lengths);
        // The lengths are part of what the dataset holds: hash them too.
        self.fingerprint = Default::default();
        Ok(self)
    }

    /// A dataset over the GPU compressor's own output, left where it is in
    /// device memory: its buffers move into the dataset, with no copy and
    /// no trip through the host. Waits for the compression to finish (one
    /// stream synchronisation), which is why it takes `gpu`'s context.
    ///
    /// `cb` must be the codebook the data was compressed with: another
    /// codebook of the same tensor length decodes wrong bytes or reports
    /// corruption, and never reads or writes out of bounds.
    pub fn from_device_compressed(
        _gpu: &Gpu,
        cb: &Codebook,
        dc: super::DeviceCompressed,
    ) -> Result<Self> {
        let super::compress::CompressedParts {
            layout,
            rows,
            row_bytes,
            data,
            data_len,
            offsets,
            flags,
        } = dc.into_parts()?;
        check_codebook(cb, row_bytes)?;
        let table = decoder_table(cb);
        let book = decode_book(cb);
        let packed = layout == Layout::Packed;
        Ok(GpuDataset {
            table: DeviceBuffer::from_slice(&table).map_err(cuda_err("uploading the codebook"))?,
            book_bytes: book.len(),
            book: DeviceBuffer::from_slice(&book).map_err(cuda_err("uploading the codebook"))?,
            flags,
            offsets: packed.then_some(offsets),
            lengths: None,
            // Device-resident: the DMA path, which needs host offsets, does
            // not apply.
            host_offsets: None,
            host_flags: None,
            host_lengths: None,
            payload: Payload::Device(data),
            rows: rows as u64,
            row_bytes: row_bytes as u64,
            chunk: cb.chunk().bytes(),
            // Fixed-stride: the slots' size (an upper bound of what a full
            // decode reads; the stored lengths stay on the device).
            stored_bytes: data_len as u64,
            // The offsets stay on the device: the bound.
            max_stored: row_bytes as u64,
            fingerprint: Default::default(),
            clusters: None,
        })
    }

    /// The dataset as a user kernel reads it, for
    /// `ibp_kernels::device::decode_row` (decode inside your own kernel).
    /// The addresses stay valid while the dataset lives.
    ///
    /// Errors with [`crate::ErrorKind::Unsupported`] for a clustered
    /// dataset: the device API decodes with one codebook (decode clustered
    /// datasets with [`Decoder`]).
    pub fn device_view(&self) -> Result<ibp_kernels::device::DatasetView> {
        if self.is_clustered() {
            return Err(Error::unsupported(
                "the device API decodes datasets of one codebook; this one is clustered (decode it with ibp::gpu::Decoder, or compress it with --clusters off)",
            ));
        }
        Ok(self.view())
    }

    /// [`GpuDataset::device_view`] without the check, for callers that
    /// refused clustered datasets themselves.
    pub(crate) fn view(&self) -> ibp_kernels::device::DatasetView {
        ibp_kernels::device::DatasetView {
            src: self.payload.device_addr(),
            offsets: self
                .offsets
                .as_ref()
                .map_or(0, |o| o.as_device_ptr().as_raw()),
            lengths: self
                .lengths
                .as_ref()
                .map_or(0, |b| b.as_device_ptr().as_raw()),
            flags: self.flags.as_device_ptr().as_raw(),
            book: self.book.as_device_ptr().as_raw(),
            entries: self.table.as_device_ptr().as_raw(),
            rows: self.rows,
            row_bytes: self.row_bytes,
            book_bytes: self.book_bytes as u32,
            chunk: self.chunk,
        }
    }

    /// Number of tensors.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes per decoded tensor.
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Sum of the stored lengths (what a full decode reads).
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// The compressed bytes.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }
}

/// Stored length of every tensor of a fixed-stride dataset (a damaged
/// tensor counts as its whole slot; the kernel reports it). In parallel:
/// each length sums the participation of every chunk (Cora's 5.7 KB rows
/// have over a thousand), for millions of rows.
fn fixed_lengths(cb: &Codebook, fixed: &FixedStrideRef<'_>) -> Vec<u32> {
    use rayon::prelude::*;
    (0..fixed.rows())
        .into_par_iter()
        .map(|i| match fixed.slot(i) {
            Ok((true, s)) => crate::encode::stream_len(cb, s).unwrap_or(s.len()) as u32,
            Ok((false, s)) => s.len() as u32,
            Err(_) => fixed.row_bytes() as u32,
        })
        .collect()
}

fn check_codebook(cb: &Codebook, row_bytes: usize) -> Result<()> {
    if cb.row_bytes() != row_bytes {
        return Err(Error::invalid(format!(
            "codebook is for {}-byte tensors, the dataset has {row_bytes}-byte tensors",
            cb.row_bytes()
        )));
    }
    Ok(())
}

fn upload_flags(flags: &[u8]) -> Result<DeviceBuffer<u8>> {
    let padded;
    let flags = if flags.is_empty() {
        padded = [0u8];
        &padded[..]
    } else {
        flags
    };
    DeviceBuffer::from_slice(flags).map_err(cuda_err("uploading flags"))
}

/// Options of a [`Decoder`].
#[derive(Clone, Debug, Default)]
pub struct DecodeOptions {
    /// Use at most this many SMs (the paper left 64 of an A100's 108 to the
    /// model's own kernels). `None`: all.
    pub max_sms: Option<u32>,
    /// Bytes of each warp's line ring (rounded to a power of two of 128-byte
    /// lines). `None`: sized from the tensor length.
    pub ring_bytes: Option<u32>,
    /// Warps per block. `None`: 8.
    pub warps_per_block: Option<u32>,
    /// How lines reach shared memory. `None`: by residency (see
    /// [`Fetch`]).
    pub fetch: Option<Fetch>,
    /// Turn the batch decoder's fast paths off (every step expanded by move
    /// masks, every step scanned): for tests and for measuring what the fast
    /// paths are worth. Output is identical either way.
    pub no_fast_paths: bool,
}

/// How the decoder moves source lines into shared memory.
///
/// Q: why not always `cp.async`, as the paper does?
/// A: measured on an H200 (driver 580.159.04, PCIe Gen5): `cp.async.cg`
/// reading mapped pinned host memory tops out at 29.5 GB/s, while 16-byte
/// loads plus shared stores reach the link's 51 GB/s (the same kernel
/// otherwise). From device memory `cp.async` is faster (its copies overlap
/// the decode of the previous batch): 623 against 577 GB/s decoded for 4 KB
/// tensors at 50% savings. So the default picks by residency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// `cp.async.cg`, 16 bytes per lane (default for device memory).
    CpAsync,
    /// 16-byte loads and shared-memory stores (default for pinned host
    /// memory).
    LoadStore,
}

impl DecodeOptions {
    /// Cap the SMs used.
    pub fn with_max_sms(mut self, sms: u32) -> Self {
        self.max_sms = Some(sms);
        self
    }

    /// Set the ring size per warp.
    pub fn with_ring_bytes(mut self, bytes: u32) -> Self {
        self.ring_bytes = Some(bytes);
        self
    }

    /// Set the warps per block.
    pub fn with_warps_per_block(mut self, warps: u32) -> Self {
        self.warps_per_block = Some(warps);
        self
    }

    /// Choose how lines are fetched.
    pub fn with_fetch(mut self, fetch: Fetch) -> Self {
        self.fetch = Some(fetch);
        self
    }

    /// Turn the fast paths on (the default) or off.
    pub fn with_fast_paths(mut self, on: bool) -> Self {
        self.no_fast_paths = !on;
        self
    }
}

/// Errors found by a decode, reported through device memory so that the
/// launch itself needs no synchronisation. One per stream in flight.
pub struct DecodeStatus {
    pub(crate) words: DeviceBuffer<u64>,
}

impl DecodeStatus {
    /// A cleared status, in two words of device memory it allocates.
    pub fn new() -> Result<Self> {
        let words = DeviceBuffer::from_slice(&[0u64, u64::MAX])
            .map_err(cuda_err("allocating the status"))?;
        Ok(Self { words })
    }

    /// Read (synchronously) and clear. Errors with
    /// [`crate::ErrorKind::Corrupt`] naming the first failed output row, or
    /// [`crate::ErrorKind::InvalidArgument`] for an index out of range.
    pub fn check_blocking(&mut self) -> Result<()> {
        let v = super::driver::copy_to_host_blocking(&self.words)?;
        cust::memory::CopyDestination::copy_from(&mut *self.words, &[0u64, u64::MAX][..])
            .map_err(cuda_err("clearing the status"))?;
        if v[0] & STATUS_BAD_INDEX != 0 {
            return Err(Error::invalid(format!(
                "index out of range for output row {} (and possibly others); that row was zero-filled",
                v[1]
            )));
        }
        if v[0] & STATUS_CORRUPT != 0 {
            return Err(Error::corrupt(format!(
                "the tensor for output row {} (and possibly others) is corrupt: its bits disagree with its stored length or padding; the row was zero-filled",
                v[1]
            )));
        }
        Ok(())
    }
}

/// A decoder for one dataset: launch geometry computed once, and the
/// dataset itself, borrowed.
///
/// Q: why does the decoder borrow its dataset instead of taking one per
/// call?
/// A: its shared-memory carving and tables are sized from that dataset; a
/// call with another dataset (longer tensors, another codebook) would let
/// the kernel read past the workspace or the book. Borrowing makes the
/// mismatch impossible to write: no call takes a dataset, and the decoder
/// cannot outlive the one it was sized for.
///
/// ```compile_fail,E0505
/// # use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset};
/// # fn f(gpu: &Gpu, ds: GpuDataset, out: &mut cust::memory::DeviceSlice<u8>,
/// #      st: &DecodeStatus, s: &cust::stream::Stream) -> ibp::Result<()> {
/// let dec = Decoder::new(gpu, &ds, &DecodeOptions::default())?;
/// drop(ds); // error[E0505]: cannot move out of `ds` because it is borrowed
/// dec.range(gpu, 0, 1, out, st, s)?;
/// # Ok(()) }
/// ```
pub struct Decoder<'ds> {
    pub(crate) ds: &'ds GpuDataset,
    pub(crate) flags: u32,
    pub(crate) book_smem_bytes: u32,
    pub(crate) grid: u32,
    pub(crate) block: u32,
    pub(crate) shared_bytes: u32,
    pub(crate) ring_lines: u32,
    pub(crate) pbuf_words: u32,
    pub(crate) batch: bool,
    pub(crate) load_store: bool,
}

/// Largest tensor span, in lines, that batch mode takes (half a ring).
const BATCH_MAX_LINES: u64 = 48;

impl<'ds> Decoder<'ds> {
    /// Size shared memory and the grid for `ds` on `gpu`. Allocates
    /// nothing.
    pub fn new(gpu: &Gpu, ds: &'ds GpuDataset, opts: &DecodeOptions) -> Result<Self> {
        let info = gpu.info();
        let l = ds.row_bytes;
        let k = l.div_ceil(ds.chunk as u64);
        let pbytes = k.div_ceil(8);
        // Lines a tensor of L bytes, and the largest stored tensor, can
        // touch at the worst alignment.
        let span_l = (l + 127).div_ceil(128);
        let span_max = (ds.max_stored.min(l).max(1) + 127).div_ceil(128);
        // Q: batch or streaming mode?
        // A: batch mode keeps whole tensors in half a ring, so it pays while
        // a tensor is a few KB; beyond that one tensor is enough work to
        // hide a round trip and streaming through a small ring saves shared
        // memory (more warps per SM).
        // Batch mode also needs its decode book in shared memory beside at
        // least one warp's workspace (always so for tensors of a few KB).
        let budget = info.max_shared_per_block as u64;
        // The book that batch mode copies into shared memory: a clustered
        // dataset's are all its clusters' (batch mode only when they fit;
        // streaming mode reads them through L1).
        let clustered = ds.clusters.is_some();
        let book = ds.book_bytes as u64 * ds.clusters.as_ref().map_or(1, |c| c.k as u64);
        let batch = span_l <= BATCH_MAX_LINES
            && opts
                .ring_bytes
                .is_none_or(|b| b as u64 >= 2 * span_max * 128)
            && book + 2 * span_max.max(16) * 128 + 16 <= budget;
        let (ring_lines, pbuf_words) = if batch {
            // At most 128 lines a half: the kernel keeps line counts in a
            // byte of each batch item.
            let half = match opts.ring_bytes {
                Some(b) => (b as u64 / 256).max(span_max).min(128),
                // Q: why do pinned tensors get smaller halves?
                // A: measured on the H200: halves for four tensors made
                // device-resident MiniLM f32 8% faster, and zero-copy reads
                // slower (Cora 875 -> 798 GB/s, 256 B rows at 50% savings
                // 0.94 -> 0.88 of ideal): larger batches spread the warps
                // over more host memory at once, and the IOMMU's cached
                // translations cover less of it (see `Window` in the
                // kernel).
                None if matches!(ds.payload, Payload::Pinned(_)) => span_max.max(16),
                None => {
                    // Two blocks per SM (what the kernel's registers allow
                    // at 8 warps a block): each gets half the SM's shared
                    // memory, less the 1 KB the driver reserves per block.
                    let warps = opts.warps_per_block.unwrap_or(8).clamp(1, 32) as u64;
                    let per_warp =
                        (info.shared_per_sm as u64 / 2).saturating_sub(1024 + book) / warps;
                    crate::kernel_tables::batch_half_lines(
                        span_max,
                        per_warp.saturating_sub(16) / 256,
                    )
                }
            };
            ((2 * half) as u32, 0u32)
        } else {
            // Participation buffer: whole u32 words, a multiple of 16 bytes.
            let pbuf_words = (k.div_ceil(32)).next_multiple_of(4) as u32;
            // The ring must hold the participation bytes plus two lines of
            // slack (phase 1 reads them in one go).
            let min_lines = (pbytes.div_ceil(128) + 2).next_power_of_two();
            let want = match opts.ring_bytes {
                Some(b) => (b as u64).div_ceil(128).next_power_of_two(),
                None => 32,
            };
            // At least 8 lines: one step of the decoder spans up to 512
            // payload bytes (five lines at the worst alignment), all
            // resident at once.
            (want.max(min_lines).max(8) as u32, pbuf_words)
        };
        let warp_bytes = workspace_bytes(pbuf_words, ring_lines) as u64;
        let mut warps = opts.warps_per_block.unwrap_or(8).clamp(1, 32) as u64;
        // Q: where is the decode book?
        // A: batch mode copies it into shared memory once per block (it is
        // at most 7 bytes per tensor byte for tensors of a few KB);
        // streaming mode, for long tensors, reads it through L1 and keeps
        // shared memory for the rings. The entry table that only the rare
        // general steps read stays in global memory in both modes.
        let table_smem = if batch { book } else { 0 };
        while warps > 1 && table_smem + warps * warp_bytes > budget {
            warps /= 2;
        }
        let shared = table_smem + warps * warp_bytes;
        if shared > budget {
            return Err(Error::unsupported(format!(
                "tensors of {l} bytes with {}-byte chunks need {shared} bytes of shared memory per warp; this GPU allows {budget}",
                ds.chunk
            )));
        }
        let block = (warps * 32) as u32;
        let per_sm = gpu.decode_blocks_per_sm(batch, clustered, block, shared as usize)?;
        let sms = opts
            .max_sms
            .unwrap_or(info.sm_count)
            .clamp(1, info.sm_count);
        Ok(Decoder {
            ds,
            flags: if opts.no_fast_paths {
                ibp_kernels::params::DECODE_FLAG_NO_CLASSES
                    | ibp_kernels::params::DECODE_FLAG_NO_PREFIX
            } else {
                0
            },
            book_smem_bytes: if batch { book as u32 } else { 0 },
            grid: per_sm * sms,
            block,
            shared_bytes: shared as u32,
            ring_lines,
            pbuf_words,
            batch,
            load_store: match opts.fetch {
                Some(f) => f == Fetch::LoadStore,
                None => matches!(ds.payload, Payload::Pinned(_)),
            },
        })
    }

    /// Threads per block, blocks in the grid and dynamic shared memory per
    /// block (for reports).
    pub fn geometry(&self) -> (u32, u32, u32) {
        (self.block, self.grid, self.shared_bytes)
    }

    /// Whether this decoder uses batch mode (whole tensors per half ring)
    /// rather than streaming mode.
    pub fn is_batch_mode(&self) -> bool {
        self.batch
    }

    /// Enqueue: output row `i` of `out` (`index.len()` rows of `L` bytes)
    /// receives tensor `index[i]`. Any order, repeats allowed; indices are
    /// `u32` or `u64`. No host synchronisation, no allocation.
    pub fn gather<I: GatherIndex>(
        &self,
        gpu: &Gpu,
        index: &DeviceSlice<I>,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        let row = self.ds.row_bytes as usize;
        self.gather_strided(gpu, index, out, row, status, stream)
    }

    /// [`Decoder::gather`] into rows `out_stride` bytes apart (`≥ L`): row
    /// `i` is `out[i·out_stride ..][..L]`, and the bytes between rows are
    /// left as they are (a column of a wider table, padded rows).
    pub fn gather_strided<I: GatherIndex>(
        &self,
        gpu: &Gpu,
        index: &DeviceSlice<I>,
        out: &mut DeviceSlice<u8>,
        out_stride: usize,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        let target = Target::Index {
            addr: index.as_device_ptr().as_raw(),
            len: index.len() as u64,
            wide: I::WIDE,
        };
        let via = LaunchVia {
            out_stride: Some(out_stride as u64),
            ..LaunchVia::default()
        };
        gpu.launch_decode(self, self.ds, target, out, status, false, via, stream)
    }

    /// Enqueue: output row `i` receives tensor `first + i`, for `count` rows.
    #[allow(clippy::too_many_arguments)]
    pub fn range(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        gpu.launch_decode(
            self,
            self.ds,
            Target::Range(first, count),
            out,
            status,
            false,
            LaunchVia::default(),
            stream,
        )
    }

    /// Benchmark baseline for [`Decoder::range`]: read exactly the stored
    /// bytes with the same aligned line copies, write `L` bytes per row,
    /// decode nothing (it needs the stored lengths: the packed layout, or a
    /// fixed-stride dataset with a length table).
    #[allow(clippy::too_many_arguments)]
    pub fn ideal_range(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        gpu.launch_decode(
            self,
            self.ds,
            Target::Range(first, count),
            out,
            status,
            true,
            LaunchVia::default(),
            stream,
        )
    }
}

/// Per-launch overrides used by the DMA paths.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LaunchVia {
    /// Read stored bytes from here instead of the dataset's payload.
    pub src: Option<u64>,
    /// Device address of the offsets table to use instead of the dataset's
    /// (a DMA gather piece's own, rebased).
    pub offsets: Option<u64>,
    /// Device address of the flag bitmap to use instead of the dataset's.
    pub flags: Option<u64>,
    /// Tensors behind `offsets` and `flags` (instead of the dataset's).
    pub rows: Option<u64>,
    /// Subtracted from every packed offset (`src` holds the payload from it).
    pub offset_base: u64,
    /// Output rows to skip (the piece's first row within the call); failures
    /// are reported as rows of the call (`DecodeParams::row_base`).
    pub out_skip_rows: u64,
    /// Force the fetch mode.
    pub load_store: Option<bool>,
    /// Bytes between output rows (default `L`).
    pub out_stride: Option<u64>,
    /// Device address of the fixed-stride length table to use instead of
    /// the dataset's (a KV store segment's, inside the store's table).
    pub lengths: Option<u64>,
    /// A clustered dataset's cluster ids to use instead of its own, and
    /// their bits (a DMA gather piece's, one u32 a row).
    pub clusters: Option<(u64, u32)>,
}

/// Which tensors a launch decodes.
pub(crate) enum Target {
    /// `len` indices at device address `addr`, u64 when `wide`, else u32.
    Index {
        addr: u64,
        len: u64,
        wide: bool,
    },
    Range(u64, u64),
}

/// The integer types a gather takes its row numbers in.
pub trait GatherIndex: cust::memory::DeviceCopy + sealed::Sealed {
    /// 8 bytes (else 4).
    const WIDE: bool;
}

impl GatherIndex for u32 {
    const WIDE: bool = false;
}

impl GatherIndex for u64 {
    const WIDE: bool = true;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}
