//! A compressed dataset placed where the kernels can read it: where its
//! bytes live ([`Residency`], [`Payload`]) and its tables in device memory
//! ([`GpuDataset`]).

use cust::memory::DeviceBuffer;

use super::book::DeviceBook;
use super::memory::{GpuReadable, PinnedBuffer};
use super::rows_view::RowsView;
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
        // Q: why pad the payload?
        // A: the decoder reads whole 128-byte lines (`ibp_kernels::detail::decode`),
        // so the buffer covers the last one, zeroed; and it keeps at least
        // one line so the device address is valid.
        // The bytes go straight into the padded buffer: no padded copy on
        // the host (a payload can be most of the machine's memory).
        let n = bytes.len();
        let padded = n.max(1).next_multiple_of(128);
        Ok(match residency {
            Residency::Pinned => {
                let mut p = PinnedBuffer::zeroed(padded)?;
                p[..n].copy_from_slice(bytes);
                Payload::Pinned(p)
            }
            Residency::Device => {
                use cust::memory::CopyDestination;
                let d = super::driver::device_buffer::<u8>(padded, "allocating the payload")?;
                if n > 0 {
                    d.index(..n)
                        .copy_from(bytes)
                        .map_err(cuda_err("uploading the payload"))?;
                }
                if padded > n {
                    d.index(n..)
                        .copy_from(&[0u8; 128][..padded - n])
                        .map_err(cuda_err("zeroing the payload's last line"))?;
                }
                Payload::Device(d)
            }
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

/// A compressed dataset on the GPU side: codebook table, flag bitmap and
/// (packed layout) offsets in device memory; the compressed bytes pinned on
/// the host or on the device.
pub struct GpuDataset {
    /// The codebook's tables (a clustered dataset's: every cluster's).
    pub(crate) book: DeviceBook,
    pub(crate) flags: DeviceBuffer<u8>,
    pub(crate) offsets: Option<DeviceBuffer<u64>>,
    pub(crate) lengths: Option<DeviceBuffer<u32>>,
    pub(crate) payload: Payload,
    pub(crate) rows: u64,
    pub(crate) row_bytes: u64,
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
    /// `book` then holds every cluster's tables, back to back.
    pub(crate) clusters: Option<GpuClusters>,
}

/// The cluster ids of a clustered [`GpuDataset`], on the device.
pub(crate) struct GpuClusters {
    /// The ids as the container stores them (`docs/FORMAT.md` §6.8), then 8
    /// zero bytes (the kernel reads two words at the last id's).
    pub(crate) ids: DeviceBuffer<u8>,
    /// Bits per id.
    pub(crate) bits: u32,
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
        Self::packed_with(DeviceBook::new(cb)?, packed, residency)
    }

    /// A packed dataset decoded with `book` (validated first).
    fn packed_with(book: DeviceBook, packed: &PackedRef<'_>, residency: Residency) -> Result<Self> {
        packed.validate()?;
        Ok(GpuDataset {
            book,
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
    ///
    /// [`Decoder::range_dma`]: super::Decoder::range_dma
    /// [`Decoder::gather_dma_blocking`]: super::Decoder::gather_dma_blocking
    pub fn upload_clustered(
        _gpu: &Gpu,
        codebooks: &[Codebook],
        ids: &crate::cluster::ClusterIds,
        packed: &PackedRef<'_>,
        residency: Residency,
    ) -> Result<Self> {
        // The codebooks first (none, or of mixed shapes: InvalidArgument),
        // then the ids against them (one per tensor, each below k).
        check_codebook(DeviceBook::check(codebooks)?, packed.row_bytes())?;
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
        let mut ds = Self::packed_with(DeviceBook::clustered(codebooks)?, packed, residency)?;
        let mut id_bytes = ids.as_bytes().to_vec();
        id_bytes.extend([0u8; 8]);
        ds.clusters = Some(GpuClusters {
            ids: DeviceBuffer::from_slice(&id_bytes).map_err(cuda_err("uploading cluster ids"))?,
            bits: ids.bits(),
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
        self.clusters.as_ref().map(|_| self.book.codebooks())
    }

    /// The codebook tables the dataset decodes with.
    pub fn book(&self) -> &DeviceBook {
        &self.book
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
        let lengths = fixed_lengths(cb, fixed);
        let stored = lengths.iter().map(|&n| n as u64).sum();
        Ok(GpuDataset {
            book: DeviceBook::new(cb)?,
            flags: upload_flags(fixed.flags())?,
            offsets: None,
            lengths: None,
            host_offsets: None,
            host_flags: None,
            host_lengths: None,
            payload: Payload::new(fixed.slots(), residency)?,
            rows: fixed.rows() as u64,
            row_bytes: fixed.row_bytes() as u64,
            stored_bytes: stored,
            // Lengths derived from participation bits: up to L - 1 bytes.
            max_stored: fixed.row_bytes() as u64,
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
        let packed = layout == Layout::Packed;
        Ok(GpuDataset {
            book: DeviceBook::new(cb)?,
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
    ///
    /// [`Decoder`]: super::Decoder
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
        self.rows_view().view(&self.book)
    }

    /// Where the dataset's rows live, for a decode launch.
    pub(crate) fn rows_view(&self) -> RowsView {
        RowsView {
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
            rows: self.rows,
            offset_base: 0,
            clusters: self
                .clusters
                .as_ref()
                .map(|c| (c.ids.as_device_ptr().as_raw(), c.bits)),
            host: matches!(self.payload, Payload::Pinned(_)),
            fetch: None,
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
