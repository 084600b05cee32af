//! GPU decode of float-coded rows ([`crate::float_code`], `docs/FORMAT.md`
//! §7): a group uploaded once ([`FloatDecoder::new`]), then any range or
//! gather of its rows decoded into device memory by the kernel
//! `ibp_float_decode` (body: `ibp_kernels::detail::float_decode`). The
//! group's payload may also stay in pinned host memory
//! ([`super::PinnedFloatRows`]): decoded zero-copy
//! ([`FloatDecoder::range_staged`], [`FloatDecoder::gather_staged`]) or
//! copied by DMA piece by piece ([`FloatDecoder::range_dma`]); the rows of a
//! [`super::FloatFeatureCache`] are placed by the cache itself.
//!
//! ```no_run
//! use ibp::gpu::cust::memory::DeviceBuffer;
//! use ibp::gpu::cust::stream::{Stream, StreamFlags};
//! use ibp::gpu::{DecodeStatus, FloatDecoder, Gpu, copy_to_host_blocking};
//! use ibp::float_code::{FitOptions, FloatType, compress, fit};
//! use ibp::Rows;
//!
//! # fn main() -> Result<(), ibp::Error> {
//! let values: Vec<f32> = (0..64_000).map(|i| ((i % 97) as f32 - 48.0) / 256.0).collect();
//! let rows = Rows::of(&values, 64)?;
//! let coded = compress(&fit(FloatType::F32, rows, &FitOptions::default())?, rows)?;
//!
//! let gpu = Gpu::first()?;
//! let dec = FloatDecoder::new(&gpu, &coded)?;
//! let mut status = DecodeStatus::new()?;
//! let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
//! let ids = DeviceBuffer::from_slice(&[999u64, 0, 7])?;
//! let mut out = DeviceBuffer::<u8>::zeroed(3 * rows.row_bytes())?;
//! dec.gather(&gpu, &ids, &mut out, &status, &stream)?; // enqueued, no sync
//! stream.synchronize()?;
//! status.check_blocking()?;
//! assert_eq!(copy_to_host_blocking(&out)?[..rows.row_bytes()], *rows.row(999));
//! # Ok(())
//! # }
//! ```

use cust::memory::{DeviceBuffer, DeviceSlice};
use ibp_kernels::params::{FLOAT_DIRECT_INDEX, FloatDecodeParams, FloatView};

use super::memory::{GpuReadable, GpuWritable, Span};
use super::stream::GpuStream;
use super::{DecodeStatus, Gpu, cuda_err, kernels};
use crate::error::{Error, Result};
use crate::float_code::{FloatCoded, Table};

/// Warps a block of the decode.
const WARPS: u32 = 8;

/// The most shared memory a block of the staged decode takes: two blocks
/// an SM (16 warps) at least. Rows whose groups' stages need more (rows
/// past about 1.7 KB with four sub-streams) are read where they lie.
const STAGED_MAX_SHARED: u32 = 112 << 10;

/// The launch a decoder makes: the kernel, the bytes a group stages its row
/// in (0: none), the block's shared memory and the blocks that fill the
/// device once.
#[derive(Clone, Copy, Debug)]
struct Plan {
    kernel: kernels::Kernel<FloatDecodeParams>,
    stage_bytes: u32,
    /// A group's output tile in elements (0: elements stored directly).
    tile_elems: u32,
    shared: u32,
    resident: u32,
}

impl Plan {
    /// [`Plan::build`], with tiles only where a row fills one and they cost
    /// nothing else: not the staging (a block's stages and tiles over
    /// [`STAGED_MAX_SHARED`]) and not a resident block an SM.
    ///
    /// Q: why would tiles cost a block? A: they add 2–9 KiB a block of
    /// shared memory beside the stages; measured on the H200 (seventh
    /// session, `ibp bench --section float`), bf16 rows of 2 KB (eight
    /// sub-streams) went from three blocks an SM to two with tiles and
    /// decoded at 447 GB/s against 616 without them, where 768-byte rows
    /// keep three blocks and gain 1.37× from them.
    fn choose(gpu: &Gpu, p: &FloatDecodeParams, staged: bool, tiles: bool) -> Result<Self> {
        let without = Self::build(gpu, p, staged, false)?;
        if !tiles {
            return Ok(without);
        }
        // Q: and rows shorter than a tile? A: their one partial tile a row
        // costs two warp barriers for a few stores; measured on the H200
        // (seventh session, beside the session's first kernels in one
        // call), 64-byte rows lost 7–13% with tiles.
        let n = p.row_bytes >> (p.elem_bytes.trailing_zeros() & 3);
        if n < FloatDecodeParams::tile_elems_for(p.sub_streams.clamp(1, 32)) {
            return Ok(without);
        }
        let with = Self::build(gpu, p, staged, true)?;
        let loses_stage = without.stage_bytes != 0 && with.stage_bytes == 0;
        Ok(if loses_stage || with.resident < without.resident {
            without
        } else {
            with
        })
    }

    /// The staged decode when a block's stages (and tiles) fit
    /// [`STAGED_MAX_SHARED`] (and `staged` allows it), else the decode that
    /// reads rows where they lie; with `tiles`, each warp's output tiles
    /// after the stages (`ibp_kernels::detail::float_bulk`).
    fn build(gpu: &Gpu, p: &FloatDecodeParams, staged: bool, tiles: bool) -> Result<Self> {
        let table = p.table_smem_bytes.next_multiple_of(16);
        let groups = 32 / p.sub_streams.clamp(1, 32).next_power_of_two();
        let stage = p.view().workspace_bytes();
        let tile_elems = if tiles {
            FloatDecodeParams::tile_elems_for(p.sub_streams.clamp(1, 32))
        } else {
            0
        };
        let tile = WARPS * FloatDecodeParams { tile_elems, ..*p }.tile_warp_bytes();
        let shared = table + WARPS * groups * stage + tile;
        let (kernel, stage_bytes, shared) = if staged && shared <= STAGED_MAX_SHARED {
            (kernels::FLOAT_DECODE_STAGED, stage, shared)
        } else {
            (kernels::FLOAT_DECODE, 0, table + tile)
        };
        let resident =
            gpu.blocks_per_sm(kernel, 32 * WARPS, shared as usize)? * gpu.info().sm_count;
        Ok(Plan {
            kernel,
            stage_bytes,
            tile_elems,
            shared,
            resident,
        })
    }
}

/// Bytes of padding after the payload on the device: the decoder reads
/// whole aligned words around a row's bytes (`FloatDecodeParams`).
const PAYLOAD_PAD: usize = 16;

/// A hash of a group's index as the decoder reads it (shape, block bases,
/// relative starts): two images with the same hash place every row alike.
pub(super) fn index_fingerprint(img: &crate::float_code::DeviceImage) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let p = &img.params;
    for v in [p.rows, p.payload_len, u64::from(p.row_bytes)] {
        h.update(&v.to_le_bytes());
    }
    for v in [p.block_log2, p.rel_width] {
        h.update(&v.to_le_bytes());
    }
    h.update(&img.bases);
    h.update(&img.rel);
    h.digest()
}

/// Where a launch reads and how many rows it writes: the payload's
/// address, the ids' address (0 for the range from `first`) and the rows.
#[derive(Clone, Copy)]
pub(super) struct Launch {
    pub payload: u64,
    pub ids: u64,
    pub first: u64,
    pub count: u64,
}

/// Rows of one float-coded group placed by their owner, as
/// [`FloatDecoder::gather_direct`] reads them
/// (`ibp_kernels::params::FLOAT_DIRECT_INDEX`): row `t` is the `lens[t]`
/// bytes at `span + starts[t]`.
///
/// Every field is a device address or a count: `starts` (u64) and `lens`
/// (u32) hold `rows` entries in memory the device reads; every row lies
/// inside `span .. span + span_len`, a span 16-aligned whose 16-byte
/// pieces around each row, and the 16 bytes after each row, the device
/// reads too (with `span` 0 and `span_len` `u64::MAX` the starts are
/// addresses: rows in a slab and in mapped pinned pages at once).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirectIndex {
    pub span: u64,
    pub span_len: u64,
    pub starts: u64,
    pub lens: u64,
    pub rows: u64,
}

/// A float-coded group in device memory, and the decode of its rows.
///
/// Made once per group ([`FloatDecoder::new`] allocates and copies); every
/// decode ([`FloatDecoder::range`], [`FloatDecoder::gather`]) only
/// enqueues a kernel on the caller's stream, into the caller's buffer, and
/// reports damaged rows and ids past the end in a [`DecodeStatus`]
/// (zeroing their output rows), as [`super::Decoder`] does.
pub struct FloatDecoder {
    /// The payload on the device; `None` for a decoder made by
    /// [`FloatDecoder::new_staged`], whose payload the caller stages.
    payload: Option<DeviceBuffer<u8>>,
    table: DeviceBuffer<u8>,
    bases: DeviceBuffer<u8>,
    rel: DeviceBuffer<u8>,
    /// The shape and the group's addresses; the call fills the rest.
    pub(super) params: FloatDecodeParams,
    /// [`index_fingerprint`] of the group's index: a payload in pinned
    /// memory ([`super::PinnedFloatRows`]) is decoded only with the index it
    /// was laid out by.
    pub(super) index_hash: u64,
    /// The kernel and its shared memory.
    plan: Plan,
    /// What the caller allows ([`FloatDecoder::with_staging`],
    /// [`FloatDecoder::with_tiles`]); the plan takes each where it fits.
    allow_staging: bool,
    allow_tiles: bool,
}

impl std::fmt::Debug for FloatDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloatDecoder")
            .field("rows", &self.params.rows)
            .field("row_bytes", &self.params.row_bytes)
            .field("sub_streams", &self.params.sub_streams)
            .finish()
    }
}

impl FloatDecoder {
    /// Upload `coded` (its payload, index and decode table) to `gpu`'s
    /// memory: allocates and copies, synchronously.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for a table whose
    /// codes are longer than 12 bits (fit with
    /// [`crate::float_code::FitOptions::max_code_len`] at most 12, the
    /// default) or rows longer than 16 MiB, and with
    /// [`crate::ErrorKind::Cuda`] when the memory cannot be allocated.
    pub fn new(gpu: &Gpu, coded: &FloatCoded) -> Result<Self> {
        let mut payload = Vec::new();
        payload
            .try_reserve_exact(coded.payload().len() + PAYLOAD_PAD)
            .map_err(|_| Error::out_of_memory(coded.payload().len(), "the payload's upload"))?;
        payload.extend_from_slice(coded.payload());
        payload.resize(coded.payload().len() + PAYLOAD_PAD, 0);
        let payload = DeviceBuffer::from_slice(&payload)
            .map_err(cuda_err("uploading a float-coded payload"))?;
        let mut dec = Self::without_payload(gpu, coded)?;
        dec.payload = Some(payload);
        Ok(dec)
    }

    /// Upload `coded`'s index and decode table but not its payload: each
    /// decode ([`FloatDecoder::range_staged`]) reads the payload from a
    /// staging area the caller filled (a DMA copy of
    /// [`FloatDecoder::staging_image`]), so the payload itself can stay in
    /// host memory between uses (offloaded weights). Allocates and copies
    /// the index and table, synchronously; errors as [`FloatDecoder::new`].
    pub fn new_staged(gpu: &Gpu, coded: &FloatCoded) -> Result<Self> {
        Self::without_payload(gpu, coded)
    }

    /// The bytes a staging area for [`FloatDecoder::range_staged`] holds:
    /// the payload, then zeroed padding (the decoder reads whole words
    /// around a row's bytes). Copy them into device memory as they are.
    pub fn staging_image(coded: &FloatCoded) -> Vec<u8> {
        let mut v = coded.payload().to_vec();
        v.resize(coded.payload().len() + PAYLOAD_PAD, 0);
        v
    }

    /// Bytes of [`FloatDecoder::staging_image`]: what a staging area must
    /// hold.
    pub fn staging_bytes(&self) -> usize {
        self.params.payload_len as usize + PAYLOAD_PAD
    }

    /// The index and table on the device; the payload's address is the
    /// caller's to fill.
    fn without_payload(gpu: &Gpu, coded: &FloatCoded) -> Result<Self> {
        let img = coded.device_image()?;
        let up = |b: &[u8], what: &'static str| DeviceBuffer::from_slice(b).map_err(cuda_err(what));
        let table = up(&img.table, "uploading a float-code table")?;
        let bases = up(&img.bases, "uploading a float-coded index")?;
        let rel = up(&img.rel, "uploading a float-coded index")?;
        let params = FloatDecodeParams {
            payload: 0,
            bases: bases.as_device_ptr().as_raw(),
            rel: rel.as_device_ptr().as_raw(),
            table: table.as_device_ptr().as_raw(),
            table_smem_bytes: img.table.len() as u32,
            ..img.params
        };
        let plan = Plan::choose(gpu, &params, true, true)?;
        Ok(Self {
            index_hash: index_fingerprint(&img),
            payload: None,
            table,
            bases,
            rel,
            params,
            plan,
            allow_staging: true,
            allow_tiles: true,
        })
    }

    /// Whether coded rows are staged in shared memory before their decode
    /// (`ibp_float_decode_staged`; the default wherever a block's stages
    /// fit in 112 KiB, rows of up to about 1.7 KB with four sub-streams):
    /// `false` reads every row where it lies (`ibp_float_decode`), the
    /// decoder of rows too long to stage. For measuring one against the
    /// other; both decode the same bytes.
    pub fn with_staging(mut self, gpu: &Gpu, staged: bool) -> Result<Self> {
        self.allow_staging = staged;
        self.plan = Plan::choose(gpu, &self.params, staged, self.allow_tiles)?;
        Ok(self)
    }

    /// Whether elements may go out through tiles in shared memory, 16 bytes
    /// a store (the default; `ibp_kernels::detail::float_bulk`), or one
    /// store an element (`false`). Tiles are taken only where they cost no
    /// staging and no resident block, and only for output rows that start
    /// 16-aligned, whatever this says. For measuring one against the other;
    /// both decode the same bytes.
    pub fn with_tiles(mut self, gpu: &Gpu, tiles: bool) -> Result<Self> {
        self.allow_tiles = tiles;
        self.plan = Plan::choose(gpu, &self.params, self.allow_staging, tiles)?;
        Ok(self)
    }

    /// Whether this decoder writes through tiles
    /// ([`FloatDecoder::with_tiles`]).
    pub fn writes_tiles(&self) -> bool {
        self.plan.tile_elems != 0
    }

    /// Whether this decoder stages rows in shared memory
    /// ([`FloatDecoder::with_staging`]).
    pub fn stages_rows(&self) -> bool {
        self.plan.stage_bytes != 0
    }

    /// Rows of the group.
    pub fn rows(&self) -> u64 {
        self.params.rows
    }

    /// Bytes of a row, decoded.
    pub fn row_bytes(&self) -> usize {
        self.params.row_bytes as usize
    }

    /// Bytes the group takes in device memory (payload, index, table).
    pub fn device_bytes(&self) -> usize {
        self.payload.as_ref().map_or(0, |p| p.len())
            + self.table.len()
            + self.bases.len()
            + self.rel.len()
    }

    /// Enqueue the decode of rows `first .. first + count` into `out` (row
    /// `i` at `out[i·L ..]`, `L` = [`FloatDecoder::row_bytes`]).
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for rows past the
    /// end or an `out` shorter than `count · L` or not aligned to the
    /// element size; damaged rows are reported later by `status`.
    pub fn range<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        if first
            .checked_add(count)
            .is_none_or(|end| end > self.params.rows)
        {
            return Err(Error::invalid(format!(
                "rows {first}..{first}+{count} of a group of {} rows",
                self.params.rows
            )));
        }
        let payload = self.resident_payload()?;
        self.enqueue(gpu, payload, 0, first, count, out, status, stream)
    }

    /// [`FloatDecoder::range`] for a decoder made by
    /// [`FloatDecoder::new_staged`] (or any other): the payload is read from
    /// `staged`, device memory holding [`FloatDecoder::staging_image`] of
    /// the group, copied there by the caller and complete (or ordered
    /// before `stream`) when the launch runs; or that image in mapped pinned
    /// host memory ([`super::PinnedBuffer::span`]), read zero-copy over the
    /// link. What the staging area holds
    /// otherwise decodes to wrong rows or is reported as damaged, never
    /// read out of bounds.
    ///
    /// Errors as [`FloatDecoder::range`], and with
    /// [`crate::ErrorKind::InvalidArgument`] for a staging area shorter than
    /// [`FloatDecoder::staging_bytes`] or not aligned to
    /// [`super::STAGING_ALIGN`] bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn range_staged<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        staged: &Span<'_>,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        if first
            .checked_add(count)
            .is_none_or(|end| end > self.params.rows)
        {
            return Err(Error::invalid(format!(
                "rows {first}..{first}+{count} of a group of {} rows",
                self.params.rows
            )));
        }
        let addr = self.staged_payload(staged)?;
        self.enqueue(gpu, addr, 0, first, count, out, status, stream)
    }

    /// The group as a user kernel decodes it, a warp a row
    /// (`ibp_kernels::device::float::decode_float_row`; docs/DEVICE-API.md,
    /// "Float-coded rows"), with the payload this decoder keeps on the
    /// device. Its addresses are valid while `self` lives.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for a decoder made
    /// by [`FloatDecoder::new_staged`] (use
    /// [`FloatDecoder::device_view_staged`]).
    pub fn device_view(&self) -> Result<FloatView> {
        let payload = self.resident_payload()?;
        Ok(FloatDecodeParams {
            payload,
            ..self.params
        }
        .view())
    }

    /// [`FloatDecoder::device_view`] with the payload read from `staged`:
    /// [`FloatDecoder::staging_image`] in device memory or in mapped pinned
    /// host memory (a [`super::PinnedBuffer`]'s span, read zero-copy by the
    /// kernel: only the rows it decodes cross the link). Its addresses are
    /// valid while `self` and the staging area live.
    ///
    /// Errors as [`FloatDecoder::range_staged`] for the staging area.
    pub fn device_view_staged(&self, staged: &Span<'_>) -> Result<FloatView> {
        let payload = self.staged_payload(staged)?;
        Ok(FloatDecodeParams {
            payload,
            ..self.params
        }
        .view())
    }

    /// The payload's device address; errors for a staged decoder.
    fn resident_payload(&self) -> Result<u64> {
        match &self.payload {
            Some(p) => Ok(p.as_device_ptr().as_raw()),
            None => Err(Error::invalid(
                "this float decoder keeps no payload on the device (FloatDecoder::new_staged); decode with range_staged",
            )),
        }
    }

    /// Enqueue the decode of rows `ids` (any order, repeats allowed) into
    /// `out` (row `i` gets row `ids[i]`). An id past the end is reported by
    /// `status` (its output row zeroed).
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for an `out`
    /// shorter than `ids.len() · L` or not aligned to the element size.
    pub fn gather<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        ids: &DeviceSlice<u64>,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let addr = ids.as_device_ptr().as_raw();
        let payload = self.resident_payload()?;
        self.enqueue(gpu, payload, addr, 0, ids.len() as u64, out, status, stream)
    }

    /// [`FloatDecoder::gather`] with the payload read from `staged`, as
    /// [`FloatDecoder::range_staged`] reads it: device memory holding
    /// [`FloatDecoder::staging_image`], or that image in mapped pinned host
    /// memory (a [`super::PinnedBuffer`]'s span), which the kernel then
    /// reads zero-copy, only the bytes of the rows asked for.
    ///
    /// Errors as [`FloatDecoder::gather`] and, for the staging area, as
    /// [`FloatDecoder::range_staged`].
    pub fn gather_staged<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        ids: &DeviceSlice<u64>,
        staged: &Span<'_>,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let payload = self.staged_payload(staged)?;
        let addr = ids.as_device_ptr().as_raw();
        self.enqueue(gpu, payload, addr, 0, ids.len() as u64, out, status, stream)
    }

    /// The address of a staging area, checked: aligned and long enough.
    fn staged_payload(&self, staged: &Span<'_>) -> Result<u64> {
        let addr = staged.device_addr();
        if !addr.is_multiple_of(super::STAGING_ALIGN as u64)
            || staged.byte_len() < self.staging_bytes()
        {
            return Err(Error::invalid(format!(
                "a staging area of {} bytes at {addr:#x}; the payload needs {} bytes aligned to {} (FloatDecoder::staging_bytes)",
                staged.byte_len(),
                self.staging_bytes(),
                super::STAGING_ALIGN
            )));
        }
        Ok(addr)
    }

    /// A decoder of rows under `table`, `row_bytes` bytes each, that their
    /// owner places itself (a KV store's slots, a cache's slab and host
    /// rows): the decode table on the device, no payload or index; decode
    /// with [`FloatDecoder::gather_direct`]. Allocates and copies the
    /// table, synchronously; errors as [`FloatDecoder::new`].
    pub(crate) fn for_table(gpu: &Gpu, table: &Table, row_bytes: usize) -> Result<Self> {
        let none = crate::float_code::compress(table, crate::Rows::new(&[], row_bytes)?)?;
        Self::without_payload(gpu, &none)
    }

    /// Enqueue the decode of rows placed by a [`DirectIndex`]: output row
    /// `i` gets row `ids[i]` (`ids` a device address of `count` u64), or
    /// `first + i` when `ids` is 0. A row whose index entry is out of its
    /// span or longer than a row, and an id past the index, are reported by
    /// `status` (their output rows zeroed).
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for an `out`
    /// shorter than `count · L` or not aligned to the element size.
    ///
    /// # Safety
    /// `rows` is as [`DirectIndex`] says, and `ids`, when not 0, the device
    /// address of `count` u64, each valid until the decode has run.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gather_direct<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        rows: &DirectIndex,
        ids: u64,
        first: u64,
        count: u64,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let placed = FloatDecodeParams {
            payload_len: rows.span_len,
            bases: rows.starts,
            rel: rows.lens,
            rows: rows.rows,
            block_log2: 0,
            rel_width: FLOAT_DIRECT_INDEX,
            ..self.params
        };
        if ids == 0 && first.checked_add(count).is_none_or(|e| e > rows.rows) {
            return Err(Error::invalid(format!(
                "rows {first}..+{count} of a direct index of {} rows",
                rows.rows
            )));
        }
        let at = Launch {
            payload: rows.span,
            ids,
            first,
            count,
        };
        self.enqueue_as(gpu, &placed, at, out, status, stream)
    }

    /// The one launch: `count` output rows, from `ids` (an address, 0 for
    /// the range from `first`), the payload at `payload`.
    #[allow(clippy::too_many_arguments)]
    fn enqueue<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        payload: u64,
        ids: u64,
        first: u64,
        count: u64,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let at = Launch {
            payload,
            ids,
            first,
            count,
        };
        self.enqueue_as(gpu, &self.params, at, out, status, stream)
    }

    /// [`FloatDecoder::enqueue`] of the group `group` (this decoder's, or
    /// one placed by a [`DirectIndex`], or a piece of it in a DMA ring).
    pub(super) fn enqueue_as<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        group: &FloatDecodeParams,
        at: Launch,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let Launch {
            payload,
            ids,
            first,
            count,
        } = at;
        let l = group.row_bytes as u64;
        let need = count.checked_mul(l);
        if need.is_none_or(|n| n > out.writable_len() as u64) {
            return Err(Error::invalid(format!(
                "{count} rows of {l} bytes need {} output bytes; the output holds {}",
                count.saturating_mul(l),
                out.writable_len()
            )));
        }
        let addr = out.device_addr_mut();
        if !addr.is_multiple_of(u64::from(group.elem_bytes)) {
            return Err(Error::invalid(format!(
                "the output at {addr:#x} is not aligned to the {}-byte elements",
                group.elem_bytes
            )));
        }
        if count == 0 {
            return Ok(());
        }
        let p = FloatDecodeParams {
            payload,
            ids,
            first,
            count,
            out: addr,
            out_stride: l,
            status: status.words.as_device_ptr().as_raw(),
            stage_bytes: self.plan.stage_bytes,
            // Tiles store 16 bytes at a time: output rows 16-aligned only.
            tile_elems: if (addr | l).is_multiple_of(16) {
                self.plan.tile_elems
            } else {
                0
            },
            ..*group
        };
        // Rows a block decodes at once: 32 / G a warp.
        let g = group.sub_streams.next_power_of_two();
        let per_block = u64::from(WARPS * (32 / g));
        let grid = count.div_ceil(per_block).min(u64::from(self.plan.resident)) as u32;
        // SAFETY: the payload (padded by PAYLOAD_PAD) is this decoder's
        // device buffer or a staging area the caller vouched for as memory
        // the device reads (a `Span`: device memory or mapped pinned
        // memory) of at least `staging_bytes` (checked by `staged_payload`),
        // or the span of a DirectIndex its caller vouched for
        // (`gather_direct`'s contract); index and table are this decoder's
        // device buffers laid out by `device_image` (or the DirectIndex's),
        // as FloatDecodeParams requires; `ids` holds `count` u64 (a
        // DeviceSlice's length) or is 0 with `first + count <= rows`
        // (checked by `range`); `out` holds `count` rows of `l` bytes,
        // aligned to the element (checked above); the status is two u64;
        // the launch gives the table rounded to 16, for the staged kernel
        // WARPS · 32 / G stages of `stage_bytes`, and with tiles WARPS
        // warps' `tile_warp_bytes` (`Plan::choose`), the payload 16-aligned (a
        // device allocation, or a staging area aligned to STAGING_ALIGN)
        // and padded by PAYLOAD_PAD = 16 bytes.
        unsafe {
            gpu.launch(
                self.plan.kernel,
                grid.max(1),
                32 * WARPS,
                self.plan.shared,
                stream,
                p,
            )
        }
    }
}
