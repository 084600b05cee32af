//! Rows spread over a communicator's ranks, compressed ([`ShardedRows`])
//! and raw ([`RawRows`]), and the collectives that move them: the
//! pipelined in-place broadcasts behind all-gather and broadcast (the
//! all-to-all is `exchange.rs`).

use cust::memory::{CopyDestination, DeviceBuffer, DeviceSlice};

use super::plan::{self, Partition};
use super::{CollectiveOptions, Communicator, GatherPath};
use crate::codebook::Codebook;
use crate::error::{Error, Result};
use crate::gpu::book::DeviceBook;
use crate::gpu::decode::{Decoder, Request, Shape};
use crate::gpu::driver::event::LastUses;
use crate::gpu::driver::nccl;
use crate::gpu::memory::GpuWritable;
use crate::gpu::rows_view::RowsView;
use crate::gpu::{Gpu, cuda_err};
use crate::layout::PackedRef;

/// One rank's copy of a packed dataset: the metadata whole, the payload
/// at full size with the rank's own rows' bytes in place (the rest filled
/// by the collectives).
pub(super) struct Shard {
    book: DeviceBook,
    flags: DeviceBuffer<u8>,
    offsets: DeviceBuffer<u64>,
    /// The whole payload's size, padded to whole 128-byte lines (the
    /// decoder reads whole lines).
    pub(super) payload: DeviceBuffer<u8>,
}

/// A packed compressed dataset spread over a [`Communicator`]'s ranks by
/// a [`Partition`]: rank `r` starts with the payload of the rows it owns.
///
/// Q: why the packed layout, when the fixed-stride layout bounds each
/// row's size without a table?
/// A: a fixed-stride slot is a whole row's `L` bytes: sending slots would
/// move as many bytes as the raw rows. The packed payload is the
/// compressed bytes back to back; its offsets (8 bytes a row) are the
/// metadata every rank holds from the start, so no collective exchanges
/// sizes, the property the fixed stride was wanted for.
pub struct ShardedRows {
    pub(super) part: Partition,
    pub(super) row_bytes: u64,
    /// The offsets on the host (the plans cut pieces and runs by them).
    pub(super) offsets: Vec<u64>,
    /// A hash of the offsets: an all-to-all's copy lists are made from
    /// them, and refused for rows laid out otherwise.
    pub(super) layout: u64,
    max_stored: u64,
    book_bytes: u64,
    pub(super) shards: Vec<Shard>,
    /// The devices of the ranks, in rank order (the communicator's).
    pub(super) ordinals: Vec<u32>,
    /// Per rank: the streams that used its buffers (waited for on drop).
    pub(super) uses: Vec<LastUses>,
    /// Decoded bytes a second of a rank's own rows, measured once
    /// ([`Communicator::calibrate_blocking`]).
    pub(super) decode_rate: std::sync::OnceLock<f64>,
}

impl ShardedRows {
    /// Place `packed` (validated first) on `comm`'s ranks: each rank gets
    /// the codebook's tables, the flags and the offsets, and the payload
    /// bytes of the rows `part` gives it, in a payload buffer of the whole
    /// size. Allocates and copies; returns when the copies are done.
    ///
    /// Errors ([`crate::ErrorKind::InvalidArgument`]) when `part` is not
    /// over `comm`'s ranks and `packed`'s rows, or `cb` is for another
    /// tensor length.
    pub fn upload(
        comm: &Communicator,
        cb: &Codebook,
        packed: &PackedRef<'_>,
        part: Partition,
    ) -> Result<Self> {
        packed.validate()?;
        check_part(comm, &part, packed.rows() as u64)?;
        if cb.row_bytes() != packed.row_bytes() {
            return Err(Error::invalid(format!(
                "codebook is for {}-byte tensors, the dataset has {}-byte tensors",
                cb.row_bytes(),
                packed.row_bytes()
            )));
        }
        let offsets = packed.offsets().to_vec();
        let payload = packed.payload();
        let mut shards = Vec::with_capacity(comm.ranks());
        for (r, rank) in comm.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
            let own = part.range(r);
            let (a, b) = (offsets[own.start as usize], offsets[own.end as usize]);
            let buf = DeviceBuffer::<u8>::zeroed(payload.len().max(1).next_multiple_of(128))
                .map_err(cuda_err("allocating a shard's payload"))?;
            if b > a {
                buf.index(a as usize..b as usize)
                    .copy_from(&payload[a as usize..b as usize])
                    .map_err(cuda_err("uploading a shard's rows"))?;
            }
            let flags = if packed.flags().is_empty() {
                &[0u8][..]
            } else {
                packed.flags()
            };
            shards.push(Shard {
                book: DeviceBook::new(cb)?,
                flags: DeviceBuffer::from_slice(flags).map_err(cuda_err("uploading flags"))?,
                offsets: DeviceBuffer::from_slice(&offsets)
                    .map_err(cuda_err("uploading offsets"))?,
                payload: buf,
            });
        }
        let book_bytes = shards[0].book.all_book_bytes();
        Ok(Self {
            part,
            row_bytes: packed.row_bytes() as u64,
            max_stored: offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0),
            layout: xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(&offsets)),
            offsets,
            book_bytes,
            uses: comm.ranks.iter().map(|_| LastUses::default()).collect(),
            ordinals: comm.ordinals(),
            shards,
            decode_rate: std::sync::OnceLock::new(),
        })
    }

    /// Number of rows.
    pub fn rows(&self) -> u64 {
        self.part.rows()
    }

    /// Bytes per decoded row.
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Compressed payload bytes of all rows (what an all-gather moves,
    /// less each rank's own).
    pub fn payload_bytes(&self) -> u64 {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Compressed payload bytes of rows `rows`.
    pub fn payload_bytes_of(&self, rows: std::ops::Range<u64>) -> u64 {
        self.offsets[rows.end as usize] - self.offsets[rows.start as usize]
    }

    /// Bytes of the metadata every rank holds: offsets, flags and decode
    /// book (replicated once, at upload).
    pub fn metadata_bytes(&self) -> u64 {
        8 * self.offsets.len() as u64 + self.rows().div_ceil(8) + self.book_bytes
    }

    /// Which rank owns which rows.
    pub fn partition(&self) -> &Partition {
        &self.part
    }

    /// Rank `r`'s decoder and the view of its rows.
    pub(super) fn decoder<'a>(
        &'a self,
        gpu: &Gpu,
        r: usize,
        opts: &CollectiveOptions,
    ) -> Result<(Decoder<'a>, RowsView)> {
        let s = &self.shards[r];
        let shape = Shape {
            max_stored: self.max_stored,
            host: false,
            clustered: false,
        };
        let dec = Decoder::for_book(gpu, &s.book, shape, &opts.decode)?;
        let view = RowsView {
            src: s.payload.as_device_ptr().as_raw(),
            offsets: s.offsets.as_device_ptr().as_raw(),
            lengths: 0,
            flags: s.flags.as_device_ptr().as_raw(),
            rows: self.rows(),
            offset_base: 0,
            clusters: None,
            host: false,
            fetch: None,
        };
        Ok((dec, view))
    }
}

impl Drop for ShardedRows {
    fn drop(&mut self) {
        for u in &self.uses {
            let _ = u.synchronize();
        }
    }
}

/// Raw rows spread over a [`Communicator`]'s ranks, the baseline of the
/// compressed collectives: rank `r` starts with the rows it owns, in a
/// buffer of all rows, which [`Communicator::all_gather_raw`] fills.
pub struct RawRows {
    pub(super) part: Partition,
    pub(super) row_bytes: u64,
    /// Per rank: all rows, padded to whole 16-byte groups.
    pub(super) bufs: Vec<DeviceBuffer<u8>>,
    /// Per rank: the rows of `bufs`, without the padding.
    views: Vec<DeviceSlice<u8>>,
    pub(super) ordinals: Vec<u32>,
    pub(super) uses: Vec<LastUses>,
}

impl RawRows {
    /// Place `data` (rows of `row_bytes` bytes back to back) on `comm`'s
    /// ranks: each rank's own rows in a zeroed buffer of all rows.
    /// Allocates and copies; returns when the copies are done.
    pub fn upload(
        comm: &Communicator,
        data: &[u8],
        row_bytes: usize,
        part: Partition,
    ) -> Result<Self> {
        if row_bytes == 0 || !data.len().is_multiple_of(row_bytes) {
            return Err(Error::invalid(format!(
                "{} bytes are not whole rows of {row_bytes} bytes",
                data.len()
            )));
        }
        check_part(comm, &part, (data.len() / row_bytes) as u64)?;
        let mut bufs = Vec::with_capacity(comm.ranks());
        for (r, rank) in comm.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
            let own = part.range(r);
            let (a, b) = (own.start as usize * row_bytes, own.end as usize * row_bytes);
            // Whole 16-byte groups: the all-to-all's unpack reads the
            // aligned words that hold a range's bytes.
            let buf = DeviceBuffer::<u8>::zeroed(data.len().max(1).next_multiple_of(16))
                .map_err(cuda_err("allocating raw rows"))?;
            if b > a {
                buf.index(a..b)
                    .copy_from(&data[a..b])
                    .map_err(cuda_err("uploading raw rows"))?;
            }
            bufs.push(buf);
        }
        let views = bufs.iter().map(|b| b.index(..data.len())).collect();
        Ok(Self {
            part,
            row_bytes: row_bytes as u64,
            uses: comm.ranks.iter().map(|_| LastUses::default()).collect(),
            ordinals: comm.ordinals(),
            bufs,
            views,
        })
    }

    /// Rank `r`'s buffer of all rows (complete after an all-gather).
    /// Panics for a rank past the last.
    pub fn buffer(&self, r: usize) -> &DeviceSlice<u8> {
        &self.views[r]
    }

    /// Which rank owns which rows.
    pub fn partition(&self) -> &Partition {
        &self.part
    }
}

impl Drop for RawRows {
    fn drop(&mut self) {
        for u in &self.uses {
            let _ = u.synchronize();
        }
    }
}

fn check_part(comm: &Communicator, part: &Partition, rows: u64) -> Result<()> {
    if part.ranks() != comm.ranks() || part.rows() != rows {
        return Err(Error::invalid(format!(
            "a partition of {} rows over {} ranks for {rows} rows over {} ranks",
            part.rows(),
            part.ranks(),
            comm.ranks()
        )));
    }
    Ok(())
}

impl Communicator {
    /// Enqueue an all-gather: every rank ends with every row of `rows`
    /// decoded into its `out[r]` (row `i` at `i·L`), by the way
    /// `opts.path` names ([`GatherPath`]; returned: the way taken, never
    /// `Auto`):
    ///
    /// - **compressed**: each owner's rows go out in pieces of about
    ///   `opts.chunk_bytes` compressed bytes, and each piece is decoded on
    ///   its rank's stream as soon as it has arrived, while the next piece
    ///   travels; a rank's own rows are decoded at once;
    /// - **raw**: each owner decodes its own rows into its output, then
    ///   NCCL moves the decoded rows between the outputs;
    /// - **auto** (the default): the way [`super::choose_path`] predicts
    ///   faster from the sizes and the rates measured on this communicator
    ///   and these rows. **The first auto call on rows not yet measured
    ///   synchronises once**: it runs [`Communicator::calibrate_blocking`]
    ///   into `out` first. Call that yourself to pay it ahead of time.
    ///
    /// Otherwise no host synchronisation and no device allocation (the call
    /// builds its plan and one decoder a rank in small host vectors):
    /// [`Communicator::finish_blocking`] waits and checks the decodes.
    ///
    /// `out[r]` must be memory of rank `r`'s GPU. Errors
    /// ([`crate::ErrorKind::InvalidArgument`], before anything is
    /// enqueued) for an output count other than the ranks', an output
    /// shorter than the rows, or `rows` of another communicator's shape.
    pub fn all_gather<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<GatherPath> {
        self.check_rows(&rows.ordinals, out, |_| rows.rows() * rows.row_bytes)?;
        let path = match opts.path {
            GatherPath::Auto => self.choose_blocking(rows, out, opts)?,
            p => p,
        };
        match path {
            GatherPath::Raw => self.all_gather_decoded_raw(rows, out, opts)?,
            _ => self.all_gather_compressed(rows, out, opts)?,
        }
        Ok(if path == GatherPath::Raw {
            path
        } else {
            GatherPath::Compressed
        })
    }

    /// The compressed way of [`Communicator::all_gather`] (arguments
    /// checked).
    ///
    /// Work a call enqueues, `n` ranks and `s` steps (the count behind the
    /// latency of small tables): one event record and wait a rank before
    /// (the NCCL stream after the caller's work) and a record and wait a
    /// rank and step after (the decodes after the transfers); one NCCL
    /// group a step, holding, when the step has several owners, one
    /// `ncclSend` from each owner to each other rank and the matching
    /// `ncclRecv` (at most `n·(n − 1)` of each, run concurrently, one NCCL
    /// kernel a rank), else one `ncclBroadcast` a rank; decode launches: one
    /// a rank for its own rows, then one a rank and step for each run of
    /// adjacent remote pieces (on 4 ranks and one step: 4 + 6).
    ///
    /// Q: why sends and receives, not one broadcast per owner and piece?
    /// A: the broadcasts of a group run one after another, each a chain
    /// through every rank: four ranks paid four chains' latency a step,
    /// and the 15.5 MB Cora all-gather ran at 0.72× the raw one on 4
    /// H200s. The sends of a group run at once, one hop each, and move
    /// the same bytes over each rank's links. A piece with one owner (a
    /// broadcast) keeps `ncclBroadcast`: its chain sends each byte once
    /// from the owner, where sends would send it `n − 1` times.
    fn all_gather_compressed<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<()> {
        let n = self.ranks();
        let mut decs = Vec::with_capacity(n);
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
            decs.push(rows.decoder(&rank.gpu, r, opts)?);
        }
        // Q: why no steps on one rank? A: every row is its own: nothing
        // to move, and the decode of its own rows covers them all.
        let steps = if n == 1 {
            Vec::new()
        } else {
            plan::steps(&rows.part, &|i| rows.offsets[i as usize], opts.chunk_bytes)
        };
        self.order_after_callers()?;
        // A rank's own rows need no transfer: decode them first, on its
        // stream, while its NCCL stream moves the others.
        for (r, rank) in self.ranks.iter().enumerate() {
            let own = rows.part.range(r);
            rank.gpu.make_current()?;
            let (dec, view) = &decs[r];
            let req = Request::range(own.start, own.end - own.start);
            dec.launch(
                &rank.gpu,
                view,
                &req,
                own.start,
                &mut out[r],
                &rank.status,
                &rank.stream,
            )?;
        }
        let before = |i: u64| rows.offsets[i as usize];
        for step in &steps {
            let owners = step
                .iter()
                .filter(|(_, p)| !plan::bytes_of(&before, p).is_empty())
                .count();
            nccl::group_start()?;
            let sent = (|| {
                for (r, rank) in self.ranks.iter().enumerate() {
                    let base = rows.shards[r].payload.as_device_ptr().as_raw();
                    for (owner, piece) in step {
                        let bytes = plan::bytes_of(&before, piece);
                        let (a, len) = (base + bytes.start, (bytes.end - bytes.start) as usize);
                        if len == 0 {
                            continue;
                        }
                        // SAFETY: (1) the shard's payload was allocated in
                        // rank r's context with the whole payload's bytes,
                        // and `a .. a + len` lies inside it (offsets
                        // validated at upload); the streams are rank r's;
                        // (2) the only other access to these bytes is the
                        // decode of rows whose lines share them, which reads
                        // other bytes and ignores these (a piece's rows are
                        // decoded only after it arrived, ordered by
                        // `arrived`); an owner's own bytes are only read;
                        // (3) every rank walks the same steps in the same
                        // order inside this group: a broadcast is made by
                        // every rank, and each send from `owner` to a rank
                        // meets that rank's receive from `owner`, one pair
                        // per piece.
                        unsafe {
                            if owners == 1 {
                                nccl::broadcast_in_place(
                                    a,
                                    len,
                                    *owner,
                                    self.comms[r],
                                    &rank.comm_stream,
                                )?
                            } else if *owner == r {
                                for peer in (0..n).filter(|&p| p != r) {
                                    nccl::send(a, len, peer, self.comms[r], &rank.comm_stream)?;
                                }
                            } else {
                                nccl::recv(a, len, *owner, self.comms[r], &rank.comm_stream)?;
                            }
                        };
                    }
                }
                Ok::<(), Error>(())
            })();
            // The group is closed even after a failed call.
            let ended = nccl::group_end();
            sent?;
            ended?;
            for (r, rank) in self.ranks.iter().enumerate() {
                self.order_arrival(r)?;
                let (dec, view) = &decs[r];
                let remote = step
                    .iter()
                    .filter(|(o, _)| *o != r)
                    .map(|(_, p)| p.clone())
                    .collect();
                for run in plan::merge_adjacent(remote) {
                    let req = Request::range(run.start, run.end - run.start);
                    dec.launch(
                        &rank.gpu,
                        view,
                        &req,
                        run.start,
                        &mut out[r],
                        &rank.status,
                        &rank.stream,
                    )?;
                }
            }
        }
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
            rows.uses[r].record(&rank.stream)?;
        }
        Ok(())
    }

    /// Enqueue a broadcast of a weight set: [`Communicator::all_gather`]
    /// of `rows` whose partition puts every row on one rank
    /// ([`Partition::on_one`]), by the way `opts.path` names (returned).
    /// Errors
    /// ([`crate::ErrorKind::InvalidArgument`]) for rows owned by more than
    /// one rank.
    pub fn broadcast<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<GatherPath> {
        let owners = (0..rows.part.ranks())
            .filter(|&r| !rows.part.range(r).is_empty())
            .count();
        if owners > 1 {
            return Err(Error::invalid(format!(
                "a broadcast sends from one rank; these rows are spread over {owners} (use all_gather)"
            )));
        }
        self.all_gather(rows, out, opts)
    }

    /// Enqueue the uncompressed baseline of [`Communicator::all_gather`]
    /// (and of a broadcast, with a [`Partition::on_one`]), into each rank's
    /// buffer of all rows ([`RawRows::buffer`]): NCCL's own in-place
    /// `ncclAllGather` when every rank owns as many rows (two or more
    /// ranks), else the same pipelined in-place broadcasts as the
    /// compressed one. No synchronisation.
    ///
    /// Q: why NCCL's all-gather where it applies? A: it is the strongest
    /// baseline, NCCL's ring or tree tuned for the links; the compressed
    /// collective must beat that, not a weaker walk.
    pub fn all_gather_raw(&mut self, rows: &RawRows, opts: &CollectiveOptions) -> Result<()> {
        let l = rows.row_bytes;
        if rows.ordinals != self.ordinals() {
            return Err(Error::invalid(
                "raw rows placed for another communicator's GPUs; upload them for this one",
            ));
        }
        self.order_after_callers()?;
        let bases: Vec<u64> = rows
            .bufs
            .iter()
            .map(|b| b.as_device_ptr().as_raw())
            .collect();
        // SAFETY: each base is rank r's buffer of all rows (at least
        // `rows() · l` bytes), allocated in its context; nothing else uses
        // the buffers until the ranks' streams have waited for the
        // transfers (below).
        unsafe { self.raw_transfer(&bases, &rows.part, l, opts.chunk_bytes)? };
        for (r, rank) in self.ranks.iter().enumerate() {
            self.order_arrival(r)?;
            rows.uses[r].record(&rank.stream)?;
        }
        Ok(())
    }

    /// Enqueue on the NCCL streams the moves that give every rank's buffer
    /// at `bases[r]` (rows of `l` bytes, row `i` at `i·l`) every row from
    /// its owner's: one in-place `ncclAllGather` when every rank owns as
    /// many rows (two ranks or more), else pipelined in-place broadcasts of
    /// about `chunk` bytes of each owner a step. Nothing with one rank.
    /// The caller orders the NCCL streams after the owners' rows are in
    /// place, and the ranks' streams after the moves.
    ///
    /// # Safety
    /// (1) `bases[r]` is an allocation of rank `r`'s context of at least
    /// `part.rows() · l` bytes; (2) nothing else reads or writes those
    /// bytes until the moves are done, ordered as above.
    pub(super) unsafe fn raw_transfer(
        &self,
        bases: &[u64],
        part: &Partition,
        l: u64,
        chunk: u64,
    ) -> Result<()> {
        let n = self.ranks();
        let each = part.range(0).end;
        let even = n > 1 && (0..n).all(|r| part.range(r).end - part.range(r).start == each);
        let steps = if n == 1 || even {
            Vec::new()
        } else {
            plan::steps(part, &|i| i * l, chunk)
        };
        if even && each > 0 {
            nccl::group_start()?;
            let sent = (|| {
                for (r, rank) in self.ranks.iter().enumerate() {
                    // SAFETY: the caller's (1) and (2): rank r's buffer of
                    // n · each rows (an even partition covers them) and its
                    // streams; (3) every rank makes this one call inside
                    // this group.
                    unsafe {
                        nccl::all_gather_in_place(
                            bases[r],
                            (each * l) as usize,
                            r,
                            self.comms[r],
                            &rank.comm_stream,
                        )?
                    };
                }
                Ok::<(), Error>(())
            })();
            let ended = nccl::group_end();
            sent?;
            ended?;
        }
        for step in &steps {
            nccl::group_start()?;
            let sent = (|| {
                for (r, rank) in self.ranks.iter().enumerate() {
                    for (owner, piece) in step {
                        let span = plan::bytes_of(&|i| i * l, piece);
                        // SAFETY: the caller's (1) and (2); `piece` is
                        // inside the partition; (3) every rank walks the
                        // same steps in order.
                        unsafe {
                            nccl::broadcast_in_place(
                                bases[r] + span.start,
                                (span.end - span.start) as usize,
                                *owner,
                                self.comms[r],
                                &rank.comm_stream,
                            )?
                        };
                    }
                }
                Ok::<(), Error>(())
            })();
            let ended = nccl::group_end();
            sent?;
            ended?;
        }
        Ok(())
    }

    /// The host-side checks of a collective: rows placed on this
    /// communicator's GPUs, and one output per rank, rank `r`'s at least
    /// `need(r)` bytes.
    pub(super) fn check_rows<O: GpuWritable>(
        &self,
        ordinals: &[u32],
        out: &[O],
        need: impl Fn(usize) -> u64,
    ) -> Result<()> {
        if ordinals != self.ordinals() {
            return Err(Error::invalid(format!(
                "rows placed on GPUs {ordinals:?} for a communicator over GPUs {:?}; upload them for this one",
                self.ordinals()
            )));
        }
        if out.len() != self.ranks() {
            return Err(Error::invalid(format!(
                "{} outputs for a communicator of {} ranks; give one per rank",
                out.len(),
                self.ranks()
            )));
        }
        for (r, o) in out.iter().enumerate() {
            if (o.writable_len() as u64) < need(r) {
                return Err(Error::invalid(format!(
                    "rank {r}'s output holds {} bytes; its rows need {}",
                    o.writable_len(),
                    need(r)
                )));
            }
        }
        Ok(())
    }
}
