//! Rows spread over a communicator's ranks, compressed ([`ShardedRows`])
//! and raw ([`RawRows`]), and the collectives that move them: the
//! pipelined in-place broadcasts behind all-gather and broadcast, and the
//! send/receive runs behind all-to-all ([`Exchange`]).

use cust::memory::{CopyDestination, DeviceBuffer};

use super::plan::{self, Partition, Run};
use super::{CollectiveOptions, Communicator};
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
struct Shard {
    book: DeviceBook,
    flags: DeviceBuffer<u8>,
    offsets: DeviceBuffer<u64>,
    /// The whole payload's size, padded to whole 128-byte lines (the
    /// decoder reads whole lines).
    payload: DeviceBuffer<u8>,
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
    part: Partition,
    row_bytes: u64,
    /// The offsets on the host (the plans cut pieces and runs by them).
    offsets: Vec<u64>,
    max_stored: u64,
    book_bytes: u64,
    shards: Vec<Shard>,
    /// The devices of the ranks, in rank order (the communicator's).
    ordinals: Vec<u32>,
    /// Per rank: the streams that used its buffers (waited for on drop).
    uses: Vec<LastUses>,
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
            offsets,
            book_bytes,
            uses: comm.ranks.iter().map(|_| LastUses::default()).collect(),
            ordinals: comm.ordinals(),
            shards,
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
    fn decoder<'a>(
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
    part: Partition,
    row_bytes: u64,
    bufs: Vec<DeviceBuffer<u8>>,
    ordinals: Vec<u32>,
    uses: Vec<LastUses>,
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
            let buf = DeviceBuffer::<u8>::zeroed(data.len().max(1))
                .map_err(cuda_err("allocating raw rows"))?;
            if b > a {
                buf.index(a..b)
                    .copy_from(&data[a..b])
                    .map_err(cuda_err("uploading raw rows"))?;
            }
            bufs.push(buf);
        }
        Ok(Self {
            part,
            row_bytes: row_bytes as u64,
            uses: comm.ranks.iter().map(|_| LastUses::default()).collect(),
            ordinals: comm.ordinals(),
            bufs,
        })
    }

    /// Rank `r`'s buffer of all rows (complete after an all-gather).
    /// Panics for a rank past the last.
    pub fn buffer(&self, r: usize) -> &DeviceBuffer<u8> {
        &self.bufs[r]
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

/// A mini-batch's rows by id on each rank, planned for
/// [`Communicator::all_to_all`]: the runs of rows each pair of ranks
/// moves, and each rank's ids on its GPU (the decode's gather index).
pub struct Exchange {
    /// The partition the runs were cut by (an exchange serves rows of
    /// that partition only).
    part: Partition,
    runs: Vec<Run>,
    index: Vec<Option<DeviceBuffer<u64>>>,
    counts: Vec<u64>,
    remote_bytes: u64,
}

impl Exchange {
    /// Plan the exchange of `requests[r]` (rank `r`'s rows, any order,
    /// repeats allowed; output row `i` of rank `r` receives row
    /// `requests[r][i]`) over `rows`' partition, and upload each rank's
    /// ids. Remote rows of one owner at most `max_gap_rows` apart travel
    /// as one run, with the rows between (fewer NCCL calls; 0 sends only
    /// what is asked for). Allocates and copies; returns when the copies
    /// are done.
    ///
    /// Errors ([`crate::ErrorKind::InvalidArgument`]) for a list count
    /// other than the ranks', or a row past the last.
    pub fn new_blocking(
        comm: &Communicator,
        rows: &ShardedRows,
        requests: &[&[u64]],
        max_gap_rows: u64,
    ) -> Result<Self> {
        let runs = plan::exchange_runs(&rows.part, requests, max_gap_rows)?;
        let mut index = Vec::with_capacity(requests.len());
        for (r, req) in requests.iter().enumerate() {
            comm.ranks[r].gpu.make_current()?;
            index.push(if req.is_empty() {
                None
            } else {
                Some(DeviceBuffer::from_slice(req).map_err(cuda_err("uploading requests"))?)
            });
        }
        let remote_bytes = runs
            .iter()
            .map(|x| rows.payload_bytes_of(x.rows.clone()))
            .sum();
        Ok(Self {
            part: rows.part.clone(),
            runs,
            index,
            counts: requests.iter().map(|r| r.len() as u64).collect(),
            remote_bytes,
        })
    }

    /// Compressed bytes moved between ranks (each remote row once per
    /// rank that asks for it).
    pub fn remote_bytes(&self) -> u64 {
        self.remote_bytes
    }

    /// Rows moved between ranks.
    pub fn remote_rows(&self) -> u64 {
        self.runs.iter().map(|r| r.rows.end - r.rows.start).sum()
    }
}

impl Communicator {
    /// Enqueue an all-gather: every rank ends with every row of `rows`
    /// decoded into its `out[r]` (row `i` at `i·L`). Each owner's rows go
    /// out in pieces of about `opts.chunk_bytes` compressed bytes (one
    /// in-place `ncclBroadcast` per owner and piece, all ranks in one
    /// group), and each piece is decoded on its rank's stream as soon as it
    /// has arrived, while the next piece travels; a rank's own rows are
    /// decoded at once. No host synchronisation and no device allocation
    /// (the call builds its plan and one decoder a rank in small host
    /// vectors): [`Communicator::finish_blocking`] waits and checks the
    /// decodes.
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
    ) -> Result<()> {
        self.check_rows(&rows.ordinals, out, |_| rows.rows() * rows.row_bytes)?;
        let mut decs = Vec::with_capacity(self.ranks());
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
            decs.push(rows.decoder(&rank.gpu, r, opts)?);
        }
        // Q: why no steps on one rank? A: every row is its own: nothing
        // to move, and the decode of its own rows covers them all.
        let steps = if self.ranks() == 1 {
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
        for step in &steps {
            nccl::group_start()?;
            let sent = (|| {
                for (r, rank) in self.ranks.iter().enumerate() {
                    let base = rows.shards[r].payload.as_device_ptr().as_raw();
                    for (owner, piece) in step {
                        let bytes = plan::bytes_of(&|i| rows.offsets[i as usize], piece);
                        let (a, b) = (bytes.start, bytes.end);
                        if b == a {
                            continue;
                        }
                        // SAFETY: (1) the shard's payload was allocated in
                        // rank r's context with the whole payload's bytes,
                        // and `a..b` lies inside it (offsets validated at
                        // upload); the streams are rank r's; (2) the only
                        // other access to these bytes is the decode of rows
                        // whose lines share them, which reads other bytes
                        // and ignores these (a piece's rows are decoded
                        // only after it arrived, ordered by `arrived`);
                        // (3) every rank walks the same steps in the same
                        // order, inside this group.
                        unsafe {
                            nccl::broadcast_in_place(
                                base + a,
                                (b - a) as usize,
                                *owner,
                                self.comms[r],
                                &rank.comm_stream,
                            )?
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
                for (owner, piece) in step {
                    if *owner == r {
                        continue;
                    }
                    let req = Request::range(piece.start, piece.end - piece.start);
                    dec.launch(
                        &rank.gpu,
                        view,
                        &req,
                        piece.start,
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
    /// ([`Partition::on_one`]). Errors
    /// ([`crate::ErrorKind::InvalidArgument`]) for rows owned by more than
    /// one rank.
    pub fn broadcast<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<()> {
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
        let n = self.ranks();
        let each = rows.part.range(0).end;
        let even =
            n > 1 && (0..n).all(|r| rows.part.range(r).end - rows.part.range(r).start == each);
        let steps = if n == 1 || even {
            Vec::new()
        } else {
            plan::steps(&rows.part, &|i| i * l, opts.chunk_bytes)
        };
        self.order_after_callers()?;
        if even && each > 0 {
            nccl::group_start()?;
            let sent = (|| {
                for (r, rank) in self.ranks.iter().enumerate() {
                    // SAFETY: (1) rank r's buffer of all rows (n · each
                    // rows of `l` bytes: an even partition covers them),
                    // allocated in its context, and its streams; (2)
                    // nothing else uses the buffer until its stream has
                    // waited for the transfer; (3) every rank makes this
                    // one call inside this group.
                    unsafe {
                        nccl::all_gather_in_place(
                            rows.bufs[r].as_device_ptr().as_raw(),
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
                    let base = rows.bufs[r].as_device_ptr().as_raw();
                    for (owner, piece) in step {
                        let span = plan::bytes_of(&|i| i * l, piece);
                        // SAFETY: (1) rank r's buffer of all rows, allocated
                        // in its context; `piece` is inside the partition;
                        // (2) nothing else uses the buffer during the
                        // collective (its stream waits for the transfers);
                        // (3) every rank walks the same steps in order.
                        unsafe {
                            nccl::broadcast_in_place(
                                base + span.start,
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
        for (r, rank) in self.ranks.iter().enumerate() {
            self.order_arrival(r)?;
            rows.uses[r].record(&rank.stream)?;
        }
        Ok(())
    }

    /// Enqueue an all-to-all of a mini-batch: rank `r`'s `out[r]` receives,
    /// as output row `i`, row `requests[r][i]` of `ex`'s plan, decoded.
    /// The remote rows' compressed bytes travel in runs of consecutive
    /// rows (one `ncclSend`/`ncclRecv` pair each, all in one group) into
    /// their place in each rank's payload; then one gather decode per
    /// rank reads own and arrived rows alike. No synchronisation and no
    /// device allocation (the decoders are small host values, made per
    /// call).
    pub fn all_to_all<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        ex: &Exchange,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<()> {
        if ex.part != rows.part || ex.counts.len() != self.ranks() {
            return Err(Error::invalid(
                "an exchange planned for other rows or another communicator; plan it for these",
            ));
        }
        self.check_rows(&rows.ordinals, out, |r| ex.counts[r] * rows.row_bytes)?;
        let mut decs = Vec::with_capacity(self.ranks());
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
            decs.push(rows.decoder(&rank.gpu, r, opts)?);
        }
        self.order_after_callers()?;
        nccl::group_start()?;
        let moved = (|| {
            for run in &ex.runs {
                let bytes = plan::bytes_of(&|i| rows.offsets[i as usize], &run.rows);
                let (a, b) = (bytes.start, bytes.end);
                if b == a {
                    continue;
                }
                let (src, dst) = (&self.ranks[run.src], &self.ranks[run.dst]);
                let at = |r: usize| rows.shards[r].payload.as_device_ptr().as_raw() + a;
                // SAFETY: (1) both payloads hold the whole payload's bytes
                // in their rank's context, `a..b` inside (validated
                // offsets), streams of the same ranks; (2) the source bytes
                // are the owner's own rows, which nothing writes; the
                // destination bytes are read only by the gather after
                // `arrived`; (3) both ends walk the runs in the same order
                // inside this group.
                unsafe {
                    nccl::send(
                        at(run.src),
                        (b - a) as usize,
                        run.dst,
                        self.comms[run.src],
                        &src.comm_stream,
                    )?;
                    nccl::recv(
                        at(run.dst),
                        (b - a) as usize,
                        run.src,
                        self.comms[run.dst],
                        &dst.comm_stream,
                    )?;
                }
            }
            Ok::<(), Error>(())
        })();
        let ended = nccl::group_end();
        moved?;
        ended?;
        for (r, rank) in self.ranks.iter().enumerate() {
            self.order_arrival(r)?;
            if let Some(index) = &ex.index[r] {
                let (dec, view) = &decs[r];
                let req = Request::gather(index);
                dec.launch(
                    &rank.gpu,
                    view,
                    &req,
                    0,
                    &mut out[r],
                    &rank.status,
                    &rank.stream,
                )?;
            }
            rows.uses[r].record(&rank.stream)?;
        }
        Ok(())
    }

    /// Enqueue the uncompressed baseline of [`Communicator::all_to_all`]:
    /// the same runs of `ex` on raw rows, each into its place in the
    /// receiving rank's buffer of all rows ([`RawRows::buffer`]), where the
    /// requested rows then are. No gather into request order, no
    /// synchronisation.
    pub fn all_to_all_raw(&mut self, rows: &RawRows, ex: &Exchange) -> Result<()> {
        if rows.ordinals != self.ordinals() {
            return Err(Error::invalid(
                "raw rows placed for another communicator's GPUs; upload them for this one",
            ));
        }
        if ex.part != rows.part || ex.counts.len() != self.ranks() {
            return Err(Error::invalid(
                "an exchange planned for other rows or another communicator; plan it for these",
            ));
        }
        let l = rows.row_bytes;
        self.order_after_callers()?;
        nccl::group_start()?;
        let moved = (|| {
            for run in &ex.runs {
                let span = plan::bytes_of(&|i| i * l, &run.rows);
                let (a, bytes) = (span.start, (span.end - span.start) as usize);
                let at = |r: usize| rows.bufs[r].as_device_ptr().as_raw() + a;
                let (src, dst) = (&self.ranks[run.src], &self.ranks[run.dst]);
                // SAFETY: (1) both buffers hold all rows in their rank's
                // context and the run lies inside the partition; streams
                // of the same ranks; (2) the source rows are the owner's,
                // which nothing writes; the destination's stream waits for
                // the transfer; (3) both ends walk the runs in the same
                // order inside this group.
                unsafe {
                    nccl::send(
                        at(run.src),
                        bytes,
                        run.dst,
                        self.comms[run.src],
                        &src.comm_stream,
                    )?;
                    nccl::recv(
                        at(run.dst),
                        bytes,
                        run.src,
                        self.comms[run.dst],
                        &dst.comm_stream,
                    )?;
                }
            }
            Ok::<(), Error>(())
        })();
        let ended = nccl::group_end();
        moved?;
        ended?;
        for (r, rank) in self.ranks.iter().enumerate() {
            self.order_arrival(r)?;
            rows.uses[r].record(&rank.stream)?;
        }
        Ok(())
    }

    /// The host-side checks of a collective: rows placed on this
    /// communicator's GPUs, and one output per rank, rank `r`'s at least
    /// `need(r)` bytes.
    fn check_rows<O: GpuWritable>(
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
