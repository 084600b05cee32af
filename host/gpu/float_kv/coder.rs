//! The float-coded KV store's encoder of one piece of rows: the GPU
//! encoder's size pass (`ibp_float_size`) and its write pass
//! (`ibp_float_encode_strided`: a row every `stride` bytes, no scan and no
//! index) into a device staging area, with the store's table,
//! enqueued on the caller's stream into buffers reserved once (no
//! allocation, no host synchronisation). The placement kernel then takes
//! the stage's rows to the pages (`super::FloatKvStore`).

use cust::memory::DeviceBuffer;
use cust::stream::Stream;
use ibp_kernels::params::FloatEncodeParams;

use super::super::driver::{copy_prefix, device_buffer, sync, zero_async};
use super::super::launch::resident_blocks;
use super::super::{Gpu, cuda_err, kernels};
use crate::error::{Error, Result};
use crate::float_code::Table;

/// Threads a block of the size and write passes (as `FloatEncoder`).
const BLOCK: u32 = 256;

/// Sub-streams a row whose code bits the size pass keeps for the write
/// pass (as `FloatEncoder`: 32 bytes a row; the default is 4).
const LANE_BITS_PER_ROW: usize = 8;

/// The encoder's buffers for pieces of up to `piece_rows` rows, and the
/// launch shapes.
pub(super) struct Coder {
    pub piece_rows: usize,
    /// Bytes from a staged row to the next: the raw row rounded up to 16.
    pub stride: u64,
    /// The table's shape (`Table::encode_params`) with the buffers'
    /// addresses.
    params: FloatEncodeParams,
    /// The encode table, on the device.
    _table: DeviceBuffer<u32>,
    /// Every row's stored size (`piece_rows` u64).
    pub sizes: DeviceBuffer<u64>,
    _lane_bits: DeviceBuffer<u32>,
    /// The piece's stored forms, a row every `stride` bytes.
    pub stage: DeviceBuffer<u8>,
    /// Grid caps of the two passes (blocks resident at once).
    size_blocks: u32,
    encode_blocks: u32,
}

impl Coder {
    /// Buffers for pieces of `piece_rows` rows of `row_bytes` under
    /// `table`. Allocates and copies the table, synchronously.
    pub fn new(gpu: &Gpu, table: &Table, row_bytes: usize, piece_rows: usize) -> Result<Self> {
        let shape = table.encode_params(row_bytes)?;
        let image = table.encode_image()?;
        let t =
            DeviceBuffer::from_slice(&image).map_err(cuda_err("uploading a float-code table"))?;
        let stride = (row_bytes as u64).next_multiple_of(16);
        let sizes = device_buffer(piece_rows, "allocating sizes")?;
        let lane_bits =
            device_buffer(LANE_BITS_PER_ROW * piece_rows, "allocating sub-stream sums")?;
        let stage = device_buffer(piece_rows * stride as usize, "allocating a stage")?;
        let smem = shape.table_smem_bytes as usize;
        let params = FloatEncodeParams {
            table: t.as_device_ptr().as_raw(),
            sizes: sizes.as_device_ptr().as_raw(),
            payload: stage.as_device_ptr().as_raw(),
            stride,
            lane_bits: if shape.sub_streams as usize <= LANE_BITS_PER_ROW {
                lane_bits.as_device_ptr().as_raw()
            } else {
                0
            },
            ..shape
        };
        Ok(Coder {
            piece_rows,
            stride,
            params,
            _table: t,
            sizes,
            _lane_bits: lane_bits,
            stage,
            size_blocks: resident_blocks(gpu, kernels::FLOAT_SIZE, BLOCK, smem)?,
            encode_blocks: resident_blocks(gpu, kernels::FLOAT_ENCODE_STRIDED, BLOCK, smem)?,
        })
    }

    /// Blocks for `n` rows, at most `cap`: a group of `G` lanes a row.
    fn grid(&self, n: u64, cap: u32) -> u32 {
        let g = self.params.sub_streams.clamp(1, 32).next_power_of_two();
        let per_block = u64::from(BLOCK / 32 * (32 / g));
        n.div_ceil(per_block).clamp(1, u64::from(cap)) as u32
    }

    /// The parameters for `n` rows at `src`, checked.
    fn for_rows(&self, src: u64, n: usize) -> Result<FloatEncodeParams> {
        if n > self.piece_rows {
            return Err(Error::invalid(format!(
                "{n} rows in a piece of at most {}",
                self.piece_rows
            )));
        }
        if !src.is_multiple_of(4) {
            return Err(Error::invalid(format!(
                "rows at {src:#x}; the GPU encoder reads rows from a 4-aligned address"
            )));
        }
        Ok(FloatEncodeParams {
            src,
            rows: n as u64,
            ..self.params
        })
    }

    /// Enqueue the size pass of `n` rows at `src` (device memory or memory
    /// the GPU reads, `n · L` bytes, 4-aligned) into `sizes`.
    fn enqueue_sizes(&self, gpu: &Gpu, p: &FloatEncodeParams, stream: &Stream) -> Result<()> {
        let grid = self.grid(p.rows, self.size_blocks);
        // SAFETY: the rows are `rows · row_bytes` bytes at a 4-aligned
        // address the device reads in whole words (the callers': a
        // `GpuReadable` of whole rows); the table holds 2^width u32;
        // `sizes` holds piece_rows ≥ rows u64 and `lane_bits` (when set)
        // rows · S u32 (S ≤ LANE_BITS_PER_ROW); the launch gives
        // `table_smem_bytes` of shared memory.
        unsafe {
            gpu.launch(
                kernels::FLOAT_SIZE,
                grid,
                BLOCK,
                p.table_smem_bytes,
                stream,
                *p,
            )
        }
    }

    /// Every stored size of `n` rows at `src`, on the host: the size pass
    /// on `stream`, then waits for it.
    pub fn sizes_blocking(
        &self,
        gpu: &Gpu,
        src: u64,
        n: usize,
        stream: &Stream,
    ) -> Result<Vec<u64>> {
        let p = self.for_rows(src, n)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        self.enqueue_sizes(gpu, &p, stream)?;
        sync(stream, "the float-coded rows' sizes")?;
        copy_prefix(&self.sizes, n)
    }

    /// Enqueue on `stream`: the stored forms of `n` rows at `src` into
    /// the stage, row `i` at `i · stride`, its length in `sizes[i]`. No
    /// allocation, no wait.
    ///
    /// The stage is read by the placement after this, on the same stream;
    /// the next call writes it again, so the placement must be enqueued
    /// before it on the same stream.
    pub fn enqueue(&self, gpu: &Gpu, src: u64, n: usize, stream: &Stream) -> Result<()> {
        let p = self.for_rows(src, n)?;
        if n == 0 {
            return Ok(());
        }
        self.enqueue_sizes(gpu, &p, stream)?;
        // The write pass ORs into zeroed memory.
        zero_async(&self.stage, n * self.stride as usize, stream)?;
        let grid = self.grid(p.rows, self.encode_blocks);
        // SAFETY: as `enqueue_sizes`; with `stride` (a multiple of 16, at
        // least L ≥ every size) row i's bytes lie in the stage's bytes i ·
        // stride .., inside the first n · stride ≤ piece_rows · stride,
        // zeroed above on this stream; the sizes are this table's of these
        // rows (this stream); no index is written.
        unsafe {
            gpu.launch(
                kernels::FLOAT_ENCODE_STRIDED,
                grid,
                BLOCK,
                p.table_smem_bytes,
                stream,
                p,
            )
        }
    }
}
