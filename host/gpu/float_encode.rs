//! GPU fit and compression of the float coding ([`crate::float_code`],
//! `docs/FORMAT.md` §7): [`FloatEncoder`] counts the symbols of a group's
//! rows in device memory (`ibp_float_hist`), chooses the table on the host
//! with the CPU fit's own choice ([`crate::float_code::fit`]), then sizes
//! every row (`ibp_float_size`), scans the sizes (the compressor's scan
//! kernels), and writes the rows and the index (`ibp_float_encode`,
//! bodies in `ibp_kernels::detail::float_encode`). The table and the bytes
//! are those of the CPU's [`crate::float_code::fit`] and
//! [`crate::float_code::compress`].
//!
//! ```no_run
//! use ibp::gpu::cust::memory::DeviceBuffer;
//! use ibp::gpu::{FloatEncoder, Gpu};
//! use ibp::float_code::{FitOptions, FloatType, compress, fit};
//! use ibp::Rows;
//!
//! # fn main() -> Result<(), ibp::Error> {
//! let values: Vec<u16> = (0..64_000u32).map(|i| (0x3c00 + (i * 7919) % 2048) as u16).collect();
//! let rows = Rows::of(&values, 64)?;
//! let gpu = Gpu::first()?;
//! let on_gpu = DeviceBuffer::from_slice(rows.bytes())?;
//! let mut enc = FloatEncoder::new(&gpu, rows.rows(), rows.bytes().len())?;
//! let table = enc.fit(FloatType::F16, &on_gpu, rows.row_bytes(), &FitOptions::default())?;
//! let coded = enc.compress(&table, &on_gpu, rows.row_bytes())?;
//! assert_eq!(coded, compress(&fit(FloatType::F16, rows, &FitOptions::default())?, rows)?);
//! # Ok(())
//! # }
//! ```

use cust::memory::{CopyDestination, DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::FloatEncodeParams;

use super::compress::{Work, enqueue_scan};
use super::driver::{copy_prefix, device_buffer, new_stream, sync, zero_async};
use super::launch::resident_blocks;
use super::memory::GpuReadable;
use super::{Gpu, cuda_err, kernels};
use crate::Rows;
use crate::error::{Error, Result};
use crate::float_code::{FitOptions, FitPlan, FloatCoded, FloatType, Table};

/// Threads a block of the three kernels.
const BLOCK: u32 = 256;

/// Bins of the widest field's histogram (and entries of the longest encode
/// table).
const MAX_SYMBOL_BINS: usize = 1 << crate::float_code::MAX_SYMBOL_BITS;

/// Sub-streams a row whose code bits the size pass keeps for the encoder
/// (32 bytes a row); with more, the encoder counts them again.
///
/// Q: why not room for 32? A: 128 bytes a row is a sixth of a 768-byte
/// row; the default is 4 sub-streams for rows of up to 512 elements.
const LANE_BITS_PER_ROW: usize = 8;

/// A group's last compression on the device: its shape and its payload's
/// length.
#[derive(Clone, Copy, Debug)]
struct Encoded {
    rows: usize,
    row_bytes: usize,
    payload_len: u64,
}

/// Fit and compression of float-coded groups on one GPU, into device
/// buffers it owns.
///
/// Made once for groups of up to `max_rows` rows and `max_bytes` bytes
/// ([`FloatEncoder::new`] allocates everything); every call then launches
/// on the encoder's own stream and returns when its work is done
/// (`fit` reads the histogram back, `encode` the payload's length), with no
/// device allocation. The compressed group stays on the device
/// ([`FloatEncoder::payload`], [`FloatEncoder::bases`],
/// [`FloatEncoder::rel`]) until [`FloatEncoder::coded`] copies it into a
/// [`FloatCoded`].
pub struct FloatEncoder<'g> {
    gpu: &'g Gpu,
    stream: Stream,
    max_rows: usize,
    max_bytes: usize,
    /// The wide field's histogram, u64 a bin.
    hist: DeviceBuffer<u8>,
    /// The encode table (`Table::encode_image`).
    table: DeviceBuffer<u32>,
    /// Sizes, offsets and the scan's scratch.
    work: Work,
    /// Each sub-stream's code bits from the size pass, for up to
    /// [`LANE_BITS_PER_ROW`] sub-streams a row.
    lane_bits: DeviceBuffer<u32>,
    payload: DeviceBuffer<u8>,
    bases: DeviceBuffer<u64>,
    rel: DeviceBuffer<u8>,
    /// The input of [`FloatEncoder::compress_host`], when made by
    /// [`FloatEncoder::with_host_input`].
    input: Option<DeviceBuffer<u8>>,
    last: Option<Encoded>,
}

impl std::fmt::Debug for FloatEncoder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloatEncoder")
            .field("max_rows", &self.max_rows)
            .field("max_bytes", &self.max_bytes)
            .field("last", &self.last)
            .finish()
    }
}

impl<'g> FloatEncoder<'g> {
    /// An encoder for groups of up to `max_rows` rows and `max_bytes`
    /// bytes on `gpu` (its context current): allocates the histogram, the
    /// table, the scan's buffers, the payload (`max_bytes`, rounded up to 4)
    /// and the index.
    ///
    /// Errors with [`crate::ErrorKind::Cuda`] when the memory cannot be
    /// allocated.
    pub fn new(gpu: &'g Gpu, max_rows: usize, max_bytes: usize) -> Result<Self> {
        Ok(Self {
            gpu,
            stream: new_stream()?,
            max_rows,
            max_bytes,
            hist: device_buffer(8 * MAX_SYMBOL_BINS, "allocating a histogram")?,
            table: device_buffer(MAX_SYMBOL_BINS, "allocating an encode table")?,
            work: Work::new(max_rows.max(1))?,
            lane_bits: device_buffer(
                LANE_BITS_PER_ROW * max_rows.max(1),
                "allocating sub-stream sums",
            )?,
            payload: device_buffer(max_bytes.next_multiple_of(4) + 4, "allocating a payload")?,
            bases: device_buffer(max_rows + 1, "allocating an index")?,
            rel: device_buffer((4 * max_rows).max(4), "allocating an index")?,
            input: None,
            last: None,
        })
    }

    /// [`FloatEncoder::new`], and a device buffer of `max_bytes` for the
    /// rows of [`FloatEncoder::compress_host`].
    pub fn with_host_input(gpu: &'g Gpu, max_rows: usize, max_bytes: usize) -> Result<Self> {
        let mut e = Self::new(gpu, max_rows, max_bytes)?;
        e.input = Some(device_buffer(
            max_bytes.next_multiple_of(4).max(4),
            "allocating the input",
        )?);
        Ok(e)
    }

    /// The rows of `rows` (`row_bytes` each) checked against the encoder:
    /// their count.
    fn rows_of<R: GpuReadable + ?Sized>(&self, rows: &R, row_bytes: usize) -> Result<usize> {
        let bytes = rows.byte_len();
        if row_bytes == 0 || !bytes.is_multiple_of(row_bytes) {
            return Err(Error::invalid(format!(
                "{bytes} bytes are not whole rows of {row_bytes} bytes"
            )));
        }
        let n = bytes / row_bytes;
        if n > self.max_rows || bytes > self.max_bytes {
            return Err(Error::invalid(format!(
                "{n} rows of {row_bytes} bytes; this encoder takes up to {} rows and {} bytes (FloatEncoder::new)",
                self.max_rows, self.max_bytes
            )));
        }
        if !rows.device_addr().is_multiple_of(4) {
            return Err(Error::invalid(format!(
                "rows at {:#x}; the GPU encoder reads rows from a 4-aligned address",
                rows.device_addr()
            )));
        }
        Ok(n)
    }

    /// Fit a table to the rows of a group in device memory (`rows`, whole
    /// rows of `row_bytes`): the same table as [`crate::float_code::fit`]
    /// of the same rows. Counts on the GPU, chooses on the host; returns
    /// when done.
    ///
    /// Errors as [`crate::float_code::fit`], with
    /// [`crate::ErrorKind::InvalidArgument`] for rows that are not whole,
    /// more than the encoder takes, or not 4-aligned, and with
    /// [`crate::ErrorKind::Cuda`] for a failed launch or copy.
    pub fn fit<R: GpuReadable + ?Sized>(
        &mut self,
        t: FloatType,
        rows: &R,
        row_bytes: usize,
        opts: &FitOptions,
    ) -> Result<Table> {
        let plan = FitPlan::new(t, row_bytes, opts)?;
        let n = self.rows_of(rows, row_bytes)?;
        let bins = 1usize << plan.wide.width();
        zero_async(&self.hist, 8 * bins, &self.stream)?;
        let smem = 4 * bins as u32;
        let p = FloatEncodeParams {
            src: rows.device_addr(),
            rows: n as u64,
            hist: self.hist.as_device_ptr().as_raw(),
            row_bytes: row_bytes as u32,
            elem_bytes: t.bytes() as u32,
            low: u32::from(plan.wide.low()),
            width: u32::from(plan.wide.width()),
            table_smem_bytes: smem,
            ..Default::default()
        };
        // Q: why at least words / 2^30 blocks? A: a block counts in u32
        // bins; with at most 2^22 words a thread, no bin of a block can
        // reach 2^32.
        let words = rows.byte_len() as u64 / 4;
        let resident = resident_blocks(self.gpu, kernels::FLOAT_HIST, BLOCK, smem as usize)?;
        let grid = u64::from(resident)
            .max(words >> 30)
            .min(u64::from(u32::MAX >> 1)) as u32;
        if n > 0 {
            // SAFETY: the rows are `n · row_bytes` bytes of device memory at
            // a 4-aligned address (checked), readable in whole words (their
            // allocation's granularity); the histogram holds 2^width u64,
            // zeroed above on this stream; the launch gives 4 · 2^width
            // bytes of shared memory.
            unsafe {
                self.gpu.launch(
                    kernels::FLOAT_HIST,
                    grid.max(1),
                    BLOCK,
                    smem,
                    &self.stream,
                    p,
                )?;
            }
        }
        sync(&self.stream, "the float fit's histogram")?;
        let raw = copy_prefix(&self.hist, 8 * bins)?;
        let counts: Vec<u64> = raw
            .as_chunks::<8>()
            .0
            .iter()
            .map(|c| u64::from_le_bytes(*c))
            .collect();
        plan.choose(&counts, n)
    }

    /// Compress the rows of a group in device memory under `table` into
    /// the encoder's buffers; returns the payload's length when done. The
    /// bytes are those of [`crate::float_code::compress`].
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for rows that are
    /// not whole elements of the table's type, more than the encoder
    /// takes, not 4-aligned, or longer than 16 MiB, or a table whose codes
    /// are longer than 12 bits; with [`crate::ErrorKind::Cuda`] for a
    /// failed launch or copy.
    pub fn encode<R: GpuReadable + ?Sized>(
        &mut self,
        table: &Table,
        rows: &R,
        row_bytes: usize,
    ) -> Result<u64> {
        self.last = None;
        let shape = table.encode_params(row_bytes)?;
        let image = table.encode_image()?;
        let n = self.rows_of(rows, row_bytes)?;
        if n == 0 {
            self.last = Some(Encoded {
                rows: 0,
                row_bytes,
                payload_len: 0,
            });
            return Ok(0);
        }
        // The encoder's earlier work is done (every call returns synced),
        // so the table may be replaced by a synchronous copy.
        self.table
            .index(..image.len())
            .copy_from(&image[..])
            .map_err(cuda_err("uploading a float-code table"))?;
        let mut p = FloatEncodeParams {
            src: rows.device_addr(),
            rows: n as u64,
            table: self.table.as_device_ptr().as_raw(),
            sizes: self.work.sizes.as_device_ptr().as_raw(),
            offsets: self.work.offsets.as_device_ptr().as_raw(),
            payload: self.payload.as_device_ptr().as_raw(),
            bases: self.bases.as_device_ptr().as_raw(),
            rel: self.rel.as_device_ptr().as_raw(),
            lane_bits: if shape.sub_streams as usize <= LANE_BITS_PER_ROW {
                self.lane_bits.as_device_ptr().as_raw()
            } else {
                0
            },
            ..shape
        };
        let smem = p.table_smem_bytes;
        // Rows a block takes at once: 32 / G a warp.
        let g = p.sub_streams.next_power_of_two();
        let per_block = u64::from(BLOCK / 32 * (32 / g));
        let want = (n as u64).div_ceil(per_block);
        let size_grid = want.min(u64::from(resident_blocks(
            self.gpu,
            kernels::FLOAT_SIZE,
            BLOCK,
            smem as usize,
        )?)) as u32;
        // SAFETY: the rows are `n · row_bytes` bytes of 4-aligned device
        // memory (checked), readable in whole words; the table holds
        // 2^width u32 (just copied); `sizes` holds at least `n` u64 (the
        // Work of `max_rows`) and `lane_bits` (when set) `n · S` u32 (S at
        // most LANE_BITS_PER_ROW); the launch gives `table_smem_bytes` of
        // shared memory.
        unsafe {
            self.gpu.launch(
                kernels::FLOAT_SIZE,
                size_grid.max(1),
                BLOCK,
                smem,
                &self.stream,
                p,
            )?;
        }
        enqueue_scan(self.gpu, &self.work, n, row_bytes, true, 0, &self.stream)?;
        sync(&self.stream, "the float-coded rows' sizes")?;
        let total = copy_prefix(&self.work.offsets.index(n..n + 1), 1)?[0];
        // Below `n · row_bytes ≤ max_bytes`: no row is stored longer.
        zero_async(
            &self.payload,
            (total as usize).next_multiple_of(4),
            &self.stream,
        )?;
        p.offsets = self.work.offsets.as_device_ptr().as_raw();
        let enc_grid = want.min(u64::from(resident_blocks(
            self.gpu,
            kernels::FLOAT_ENCODE,
            BLOCK,
            smem as usize,
        )?)) as u32;
        // SAFETY: as above; the offsets are the scan of this table's sizes
        // of these rows (this stream), so every row's bytes lie in the
        // first `total ≤ max_bytes` bytes of the payload, zeroed above; the
        // bases hold `max_rows + 1 ≥ ⌈n / B⌉ + 1` u64 and rel `4 · max_rows`
        // bytes.
        unsafe {
            self.gpu.launch(
                kernels::FLOAT_ENCODE,
                enc_grid.max(1),
                BLOCK,
                smem,
                &self.stream,
                p,
            )?;
        }
        sync(&self.stream, "the float-coded rows")?;
        self.last = Some(Encoded {
            rows: n,
            row_bytes,
            payload_len: total,
        });
        Ok(total)
    }

    /// The last [`FloatEncoder::encode`]'s shape, or an error.
    fn last(&self) -> Result<Encoded> {
        self.last.ok_or_else(|| {
            Error::invalid("the float encoder holds no compressed group (FloatEncoder::encode)")
        })
    }

    /// The last group's payload on the device (every row's stored bytes).
    pub fn payload(&self) -> Result<DeviceSlice<u8>> {
        let e = self.last()?;
        Ok(self.payload.index(..e.payload_len as usize))
    }

    /// The last group's block bases on the device (`docs/FORMAT.md` §7.4).
    pub fn bases(&self) -> Result<DeviceSlice<u64>> {
        let e = self.last()?;
        let (log2, _) = crate::float_code::index_shape(e.row_bytes);
        Ok(self.bases.index(..e.rows.div_ceil(1 << log2) + 1))
    }

    /// The last group's relative row starts on the device, `w` bytes a row
    /// (§7.4).
    pub fn rel(&self) -> Result<DeviceSlice<u8>> {
        let e = self.last()?;
        let (_, w) = crate::float_code::index_shape(e.row_bytes);
        Ok(self.rel.index(..usize::from(w) * e.rows))
    }

    /// The last group, copied to the host as a [`FloatCoded`] under `table`
    /// (the table it was compressed with).
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] when nothing was
    /// compressed, and with [`crate::ErrorKind::Cuda`] for a failed copy.
    pub fn coded(&self, table: &Table) -> Result<FloatCoded> {
        let e = self.last()?;
        if e.rows == 0 {
            return FloatCoded::from_parts(table, 0, e.row_bytes, vec![0], &[], Vec::new());
        }
        let payload = copy_prefix(&self.payload()?, e.payload_len as usize)?;
        let bases = self.bases()?;
        let bases = copy_prefix(&bases, bases.len())?;
        let rel = self.rel()?;
        let rel = copy_prefix(&rel, rel.len())?;
        FloatCoded::from_parts(table, e.rows, e.row_bytes, bases, &rel, payload)
    }

    /// [`FloatEncoder::encode`] and [`FloatEncoder::coded`].
    pub fn compress<R: GpuReadable + ?Sized>(
        &mut self,
        table: &Table,
        rows: &R,
        row_bytes: usize,
    ) -> Result<FloatCoded> {
        self.encode(table, rows, row_bytes)?;
        self.coded(table)
    }

    /// Fit and compress host rows: copies them into the encoder's input
    /// buffer, then [`FloatEncoder::fit`] and [`FloatEncoder::compress`];
    /// the result equals the CPU's `compress(&fit(t, rows, opts)?, rows)`.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for an encoder made
    /// without an input buffer ([`FloatEncoder::with_host_input`]), and as
    /// those calls.
    pub fn compress_host(
        &mut self,
        t: FloatType,
        rows: Rows<'_>,
        opts: &FitOptions,
    ) -> Result<FloatCoded> {
        let input = self.input.take().ok_or_else(|| {
            Error::invalid("this float encoder has no input buffer (FloatEncoder::with_host_input)")
        })?;
        let r = (|| {
            let len = rows.bytes().len();
            if len > self.max_bytes {
                return Err(Error::invalid(format!(
                    "{len} bytes of rows; this encoder takes up to {}",
                    self.max_bytes
                )));
            }
            input
                .index(..len)
                .copy_from(rows.bytes())
                .map_err(cuda_err("uploading rows"))?;
            let table = self.fit(t, &input.index(..len), rows.row_bytes(), opts)?;
            self.compress(&table, &input.index(..len), rows.row_bytes())
        })();
        self.input = Some(input);
        r
    }
}
