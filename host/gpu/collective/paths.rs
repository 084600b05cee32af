//! The raw way of an all-gather of compressed rows (each owner decodes its
//! own rows, NCCL moves the decoded bytes), and the automatic choice
//! between it and the compressed way: the rates measured once
//! ([`Communicator::calibrate_blocking`]) and the prediction of
//! [`super::choose_path`].

use std::time::Instant;

use super::choice::{GatherPath, PathRates, PathSizes, choose_path};
use super::plan::{self, Partition};
use super::{CollectiveOptions, Communicator, ShardedRows};
use crate::error::{Error, Result};
use crate::gpu::decode::Request;
use crate::gpu::driver;
use crate::gpu::memory::GpuWritable;

/// Bytes a rank of the link probe moves at most.
const PROBE_BYTES: u64 = 16 << 20;

/// Calls timed back to back in each trial of the calibration, and trials
/// (the fastest is kept: the others met interference).
const REPS: u32 = 4;
const TRIALS: usize = 3;

impl Communicator {
    /// The raw way of [`Communicator::all_gather`] (arguments checked):
    /// each rank decodes its own rows into its output, then the outputs
    /// exchange the decoded rows ([`Communicator::raw_transfer`]).
    pub(super) fn all_gather_decoded_raw<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<()> {
        self.decode_own(rows, out, opts)?;
        // The NCCL streams wait for the own rows' decodes (and the
        // caller's work before them).
        self.order_after_callers()?;
        let bases: Vec<u64> = out.iter_mut().map(|o| o.device_addr_mut()).collect();
        // SAFETY: (1) each output is memory of its rank's GPU holding at
        // least `rows() · L` bytes (checked by `all_gather`); (2) the ranks'
        // streams wait for the moves before anything else they hold runs.
        unsafe { self.raw_transfer(&bases, &rows.part, rows.row_bytes, opts.chunk_bytes)? };
        for (r, rank) in self.ranks.iter().enumerate() {
            self.order_arrival(r)?;
            rows.uses[r].record(&rank.stream)?;
        }
        Ok(())
    }

    /// Enqueue each rank's decode of its own rows into its output, on its
    /// stream.
    fn decode_own<O: GpuWritable>(
        &self,
        rows: &ShardedRows,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<()> {
        for (r, rank) in self.ranks.iter().enumerate() {
            let own = rows.part.range(r);
            rank.gpu.make_current()?;
            if own.is_empty() {
                continue;
            }
            let (dec, view) = rows.decoder(&rank.gpu, r, opts)?;
            let req = Request::range(own.start, own.end - own.start);
            dec.launch(
                &rank.gpu,
                &view,
                &req,
                own.start,
                &mut out[r],
                &rank.status,
                &rank.stream,
            )?;
        }
        Ok(())
    }

    /// The way an auto call takes: the prediction's faster from the sizes
    /// and the rates, measured first when they are not yet
    /// ([`Communicator::calibrate_blocking`]).
    pub(super) fn choose_blocking<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<GatherPath> {
        // One rank: nothing moves, both ways are the decode. Rows of fewer
        // than 128 bytes a rank: too small to measure the link through
        // the outputs, and too small for the way to matter.
        if self.ranks() == 1 || rows.rows() * rows.row_bytes < 128 * self.ranks() as u64 {
            return Ok(GatherPath::Compressed);
        }
        let rates = match self.known_rates(rows) {
            Some(r) => r,
            None => self.calibrate_blocking(rows, out, opts)?,
        };
        Ok(choose_path(&self.path_sizes(rows, opts), &rates))
    }

    /// The rates measured on this communicator and `rows`, if both are.
    pub fn known_rates(&self, rows: &ShardedRows) -> Option<PathRates> {
        let (link, step_s) = self.link?;
        Some(PathRates {
            link,
            step_s,
            decode: *rows.decode_rate.get()?,
        })
    }

    /// What an all-gather of `rows` with `opts` moves and decodes, for
    /// [`super::predict_paths`].
    pub fn path_sizes(&self, rows: &ShardedRows, opts: &CollectiveOptions) -> PathSizes {
        let part = &rows.part;
        let l = rows.row_bytes;
        let steps = plan::steps(part, &|i| rows.offsets[i as usize], opts.chunk_bytes).len();
        let each = part.range(0).end;
        let even = (0..part.ranks()).all(|r| part.range(r).end - part.range(r).start == each);
        let raw_steps = if even {
            1
        } else {
            plan::steps(part, &|i| i * l, opts.chunk_bytes).len()
        };
        PathSizes::of(part, l, &|r| rows.payload_bytes_of(r), steps, raw_steps)
    }

    /// Measure what the automatic way weighs, keep it, and return it:
    /// - once per communicator, the link: in-place all-gathers, through
    ///   `out`, of 128 bytes a rank (the time of a step: an NCCL group and
    ///   the events around it) and of up to 16 MiB a rank (the bytes a
    ///   second a rank receives, that step time taken off);
    /// - once per `rows`, the decode: every rank decoding its own rows into
    ///   `out` (decoded bytes a second of the largest share).
    ///
    /// Host clock around a few calls enqueued back to back and one wait,
    /// the fastest of three trials: the enqueueing is counted, as it is in
    /// a caller's loop. **Synchronises**, and overwrites `out` (each rank's
    /// output of the rows, as for [`Communicator::all_gather`]); leaves
    /// the outputs' contents undefined and the decode statuses to
    /// [`Communicator::finish_blocking`]. Later calls return what was kept.
    /// With one rank: nothing moves, an infinite link and no step time.
    ///
    /// Errors ([`crate::ErrorKind::InvalidArgument`]) as
    /// [`Communicator::all_gather`]'s, and for rows of fewer than
    /// `128 · ranks` bytes in all (no room for the link's probe).
    pub fn calibrate_blocking<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<PathRates> {
        self.check_rows(&rows.ordinals, out, |_| rows.rows() * rows.row_bytes)?;
        let n = self.ranks();
        if self.link.is_none() {
            if n == 1 {
                self.link = Some((f64::INFINITY, 0.0));
            } else {
                // The rows' bytes of each output, what `check_rows` vouched
                // for (the probes stay inside them).
                let room = rows.rows() * rows.row_bytes;
                let probe = (room / n as u64).min(PROBE_BYTES) / 128 * 128;
                if probe == 0 {
                    return Err(Error::invalid(format!(
                        "rows of {room} bytes in all are too small to measure the link through the outputs: the probe needs {} (128 a rank)",
                        128 * n
                    )));
                }
                let bases: Vec<u64> = out.iter_mut().map(|o| o.device_addr_mut()).collect();
                let step_s = self.time_probe(&bases, 128)?;
                let big = self.time_probe(&bases, probe)?;
                let moved = (n as u64 - 1) * probe;
                let link = moved as f64 / (big - step_s).max(1e-9);
                self.link = Some((link, step_s));
            }
        }
        if rows.decode_rate.get().is_none() {
            let most = (0..n)
                .map(|r| rows.part.range(r).end - rows.part.range(r).start)
                .max()
                .unwrap_or(0)
                * rows.row_bytes;
            let t = self.fastest(|c| c.decode_own(rows, out, opts))?;
            let rate = if most == 0 {
                f64::INFINITY
            } else {
                most as f64 / t.max(1e-9)
            };
            let _ = rows.decode_rate.set(rate);
        }
        // Both are set above.
        Ok(self.known_rates(rows).unwrap_or(PathRates {
            link: 0.0,
            step_s: 0.0,
            decode: 0.0,
        }))
    }

    /// Seconds of one in-place all-gather of `bytes` bytes a rank through
    /// the buffers at `bases` (each at least `ranks · bytes` long).
    fn time_probe(&mut self, bases: &[u64], bytes: u64) -> Result<f64> {
        let part = Partition::even(self.ranks() as u64, self.ranks())?;
        self.fastest(|c| {
            c.order_after_callers()?;
            // SAFETY: (1) each base is a rank's output, at least `rows · L`
            // bytes, which `calibrate_blocking`'s probe size keeps at or
            // above `ranks · bytes`; (2) the ranks' streams wait for the
            // moves, and nothing else runs meanwhile (the calibration
            // waits for them).
            unsafe { c.raw_transfer(bases, &part, bytes, bytes)? };
            for r in 0..c.ranks() {
                c.order_arrival(r)?;
            }
            Ok(())
        })
    }

    /// The fastest of [`TRIALS`] trials of `one` enqueued [`REPS`] times
    /// and waited for, in seconds a call (after one untimed call).
    fn fastest(&mut self, mut one: impl FnMut(&mut Self) -> Result<()>) -> Result<f64> {
        self.wait_streams()?;
        one(self)?;
        self.wait_streams()?;
        let mut best = f64::INFINITY;
        for _ in 0..TRIALS {
            let t0 = Instant::now();
            for _ in 0..REPS {
                one(self)?;
            }
            self.wait_streams()?;
            best = best.min(t0.elapsed().as_secs_f64() / REPS as f64);
        }
        Ok(best)
    }

    /// Wait for every rank's two streams.
    fn wait_streams(&self) -> Result<()> {
        for r in &self.ranks {
            r.gpu.make_current()?;
            driver::sync(&r.comm_stream, "waiting for NCCL")?;
            driver::sync(&r.stream, "waiting for a rank's stream")?;
        }
        Ok(())
    }
}
