//! The all-to-all of a mini-batch ([`Exchange`],
//! [`Communicator::all_to_all`], [`Communicator::all_to_all_raw`]): each
//! pair of ranks moves its runs of rows in one send.
//!
//! Q: why pack the runs instead of one send per run?
//! A: a random mini-batch is hundreds to thousands of runs a pair, and
//! each run was an `ncclSend`/`ncclRecv` pair inside one group: on 4 H200s
//! over NVLink that group did not finish in 200 s (NCCL logged 439 P2P
//! connections), where 2 GPUs took seconds
//! (docs/results/nvidia-h200-collective-2026-11-28.md). Now each rank
//! gathers its runs for a peer into one staging buffer (`ibp_copy_runs`,
//! one launch a rank for all its peers), sends it in one piece, and the
//! receiver puts each run back at its place in its payload (one launch),
//! so the decode after arrival is unchanged. A group holds at most
//! `ranks − 1` sends and as many receives a rank.

use cust::memory::DeviceBuffer;

use super::launch;
use super::plan::{self, Partition, PeerPlan, Run};
use super::rows::{RawRows, ShardedRows};
use super::{CollectiveOptions, Communicator};
use crate::error::{Error, Result};
use crate::gpu::cuda_err;
use crate::gpu::decode::Request;
use crate::gpu::driver::event::LastUses;
use crate::gpu::driver::{self, nccl};
use crate::gpu::memory::GpuWritable;

/// One path's lists on one rank: the host plan (which bytes of the
/// staging buffers go to and come from each peer) and its copies on the
/// device (`None` when there are none).
struct Lists {
    plan: PeerPlan,
    pack: Option<DeviceBuffer<u64>>,
    unpack: Option<DeviceBuffer<u64>>,
}

impl Lists {
    /// Upload `plan`'s copies to the current context's device.
    fn upload(plan: PeerPlan) -> Result<Self> {
        let up = |list: &[[u64; 3]]| -> Result<Option<DeviceBuffer<u64>>> {
            if list.is_empty() {
                return Ok(None);
            }
            let flat: Vec<u64> = list.iter().flatten().copied().collect();
            Ok(Some(
                DeviceBuffer::from_slice(&flat).map_err(cuda_err("uploading a copy list"))?,
            ))
        };
        Ok(Self {
            pack: up(&plan.pack)?,
            unpack: up(&plan.unpack)?,
            plan,
        })
    }
}

/// One rank's staging: the buffers its sends leave from and its receives
/// land in (sized for the larger of the two paths), and each path's lists.
/// Field order is drop order.
struct Stage {
    compressed: Lists,
    raw: Lists,
    send: DeviceBuffer<u8>,
    recv: DeviceBuffer<u8>,
}

impl Stage {
    /// The lists of the raw path or of the compressed one.
    fn lists(&self, raw: bool) -> &Lists {
        if raw { &self.raw } else { &self.compressed }
    }
}

/// A mini-batch's rows by id on each rank, planned for
/// [`Communicator::all_to_all`]: the runs of rows each pair of ranks
/// moves, each rank's ids on its GPU (the decode's gather index), and each
/// rank's staging buffers and copy lists, made once here so that the
/// collective allocates nothing.
///
/// Memory: per rank, a send and a receive staging buffer, each as large as
/// the bytes of the runs it sends (receives), compressed or raw
/// (`rows · L`) whichever is larger, so the one exchange serves both
/// [`Communicator::all_to_all`] and its baseline
/// [`Communicator::all_to_all_raw`] without an allocation in either; plus
/// 24 bytes a run for the copy lists (both paths).
pub struct Exchange {
    /// The partition the runs were cut by (an exchange serves rows of
    /// that partition only).
    part: Partition,
    /// The decoded row length and the hash of the compressed offsets the
    /// lists were made from: rows laid out otherwise are refused.
    row_bytes: u64,
    layout: u64,
    /// The devices of the ranks its buffers were made on.
    ordinals: Vec<u32>,
    runs: Vec<Run>,
    index: Vec<Option<DeviceBuffer<u64>>>,
    counts: Vec<u64>,
    remote_bytes: u64,
    stages: Vec<Stage>,
    /// Per rank: the streams that used its buffers (waited for on drop).
    uses: Vec<LastUses>,
}

impl Exchange {
    /// Plan the exchange of `requests[r]` (rank `r`'s rows, any order,
    /// repeats allowed; output row `i` of rank `r` receives row
    /// `requests[r][i]`) over `rows`' partition, and upload each rank's
    /// ids, copy lists and staging buffers. Remote rows of one owner at
    /// most `max_gap_rows` apart travel as one run, with the rows between
    /// (fewer copies; 0 moves only what is asked for). Allocates and
    /// copies; returns when the copies are done.
    ///
    /// Errors ([`crate::ErrorKind::InvalidArgument`]) for a list count
    /// other than the ranks', or a row past the last.
    pub fn new_blocking(
        comm: &Communicator,
        rows: &ShardedRows,
        requests: &[&[u64]],
        max_gap_rows: u64,
    ) -> Result<Self> {
        let n = comm.ranks();
        if rows.part.ranks() != n {
            return Err(Error::invalid(format!(
                "rows spread over {} ranks for a communicator of {n}; upload them for this one",
                rows.part.ranks()
            )));
        }
        let runs = plan::exchange_runs(&rows.part, requests, max_gap_rows)?;
        let l = rows.row_bytes;
        let comp = plan::peer_plans(n, &runs, &|i| rows.offsets[i as usize]);
        let raw = plan::peer_plans(n, &runs, &|i| i * l);
        let mut index = Vec::with_capacity(n);
        let mut stages = Vec::with_capacity(n);
        for (r, (c, w)) in comp.into_iter().zip(raw).enumerate() {
            comm.ranks[r].gpu.make_current()?;
            let req = requests[r];
            index.push(if req.is_empty() {
                None
            } else {
                Some(DeviceBuffer::from_slice(req).map_err(cuda_err("uploading requests"))?)
            });
            // Whole 16-byte groups: the unpack reads the aligned words
            // that hold a range's bytes.
            let size = |a: u64, b: u64| a.max(b).next_multiple_of(16).max(16) as usize;
            let send = size(c.send_bytes(), w.send_bytes());
            let recv = size(c.recv_bytes(), w.recv_bytes());
            stages.push(Stage {
                compressed: Lists::upload(c)?,
                raw: Lists::upload(w)?,
                send: driver::device_buffer(send, "allocating an exchange's send staging")?,
                recv: driver::device_buffer(recv, "allocating an exchange's receive staging")?,
            });
        }
        let remote_bytes = runs
            .iter()
            .map(|x| rows.payload_bytes_of(x.rows.clone()))
            .sum();
        Ok(Self {
            part: rows.part.clone(),
            row_bytes: l,
            layout: rows.layout,
            ordinals: comm.ordinals(),
            runs,
            index,
            counts: requests.iter().map(|r| r.len() as u64).collect(),
            remote_bytes,
            stages,
            uses: (0..n).map(|_| LastUses::default()).collect(),
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

    /// Runs of consecutive rows moved (each packed and unpacked by one
    /// copy).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// `ncclSend`s one all-to-all makes, over all ranks (at most one a
    /// pair of ranks).
    pub fn sends(&self) -> usize {
        self.stages
            .iter()
            .map(|s| {
                s.compressed
                    .plan
                    .send
                    .iter()
                    .filter(|r| r.end > r.start)
                    .count()
            })
            .sum()
    }

    /// Refuse an exchange planned for another partition, layout or
    /// communicator.
    fn check(&self, comm: &Communicator, part: &Partition, row_bytes: u64) -> Result<()> {
        if self.part != *part || self.ordinals != comm.ordinals() || self.row_bytes != row_bytes {
            return Err(Error::invalid(
                "an exchange planned for other rows or another communicator; plan it for these",
            ));
        }
        Ok(())
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        for u in &self.uses {
            let _ = u.synchronize();
        }
    }
}

/// Which of an exchange's two paths a call takes, with each rank's
/// buffer of rows (the payload, or the raw rows).
struct Path<'a> {
    raw: bool,
    bufs: Vec<u64>,
    uses: &'a [LastUses],
}

impl Communicator {
    /// Enqueue an all-to-all of a mini-batch: rank `r`'s `out[r]` receives,
    /// as output row `i`, row `requests[r][i]` of `ex`'s plan, decoded.
    /// Each rank packs the compressed bytes of its runs for each peer into
    /// its send staging (one `ibp_copy_runs` launch, on its stream), each
    /// pair of ranks moves them in one `ncclSend`/`ncclRecv` (all in one
    /// group), each rank unpacks what arrived into its place in its
    /// payload (one launch); then one gather decode per rank reads own and
    /// arrived rows alike. No synchronisation and no device allocation
    /// (the staging and lists belong to `ex`; the decoders are small host
    /// values, made per call).
    pub fn all_to_all<O: GpuWritable>(
        &mut self,
        rows: &ShardedRows,
        ex: &Exchange,
        out: &mut [O],
        opts: &CollectiveOptions,
    ) -> Result<()> {
        ex.check(self, &rows.part, rows.row_bytes)?;
        if ex.layout != rows.layout {
            return Err(Error::invalid(
                "an exchange planned for rows of another layout; plan it for these",
            ));
        }
        self.check_rows(&rows.ordinals, out, |r| ex.counts[r] * rows.row_bytes)?;
        let mut decs = Vec::with_capacity(self.ranks());
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
            decs.push(rows.decoder(&rank.gpu, r, opts)?);
        }
        let path = Path {
            raw: false,
            bufs: rows
                .shards
                .iter()
                .map(|s| s.payload.as_device_ptr().as_raw())
                .collect(),
            uses: &rows.uses,
        };
        self.exchange(ex, &path)?;
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
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
    /// the same runs of `ex` on raw rows, packed, sent and unpacked the
    /// same way, each into its place in the receiving rank's buffer of all
    /// rows ([`RawRows::buffer`]), where the requested rows then are. No
    /// gather into request order, no synchronisation. Errors
    /// ([`crate::ErrorKind::InvalidArgument`]) for raw rows of another
    /// partition or row length than `ex` was planned for.
    pub fn all_to_all_raw(&mut self, rows: &RawRows, ex: &Exchange) -> Result<()> {
        if rows.ordinals != self.ordinals() {
            return Err(Error::invalid(
                "raw rows placed for another communicator's GPUs; upload them for this one",
            ));
        }
        ex.check(self, &rows.part, rows.row_bytes)?;
        let path = Path {
            raw: true,
            bufs: rows
                .bufs
                .iter()
                .map(|b| b.as_device_ptr().as_raw())
                .collect(),
            uses: &rows.uses,
        };
        self.exchange(ex, &path)
    }

    /// The moving part of both all-to-alls: pack on each rank's stream,
    /// one send and one receive a pair of ranks on the NCCL streams (after
    /// the packs and the callers' work), unpack on each rank's stream
    /// after the transfers.
    ///
    /// Q: why can the next call's pack reuse the send staging at once?
    /// A: it runs on the rank's stream, which waited (`arrived`) for this
    /// call's transfers; and the next call's transfers into the receive
    /// staging wait (`ready`) for this call's unpack, on the same stream.
    fn exchange(&self, ex: &Exchange, path: &Path<'_>) -> Result<()> {
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.gpu.make_current()?;
            let (st, l) = (&ex.stages[r], ex.stages[r].lists(path.raw));
            if let Some(pack) = &l.pack {
                // SAFETY: (1) rank r's list, buffers and stream; (2) the
                // list was made from this layout (checked by the callers:
                // partition, row length, offsets), so every source range
                // is inside rank r's rows buffer (payload padded to
                // 128-byte lines, raw rows to 16 bytes) and every
                // destination range inside the send staging, sized for
                // it; (3) the staging ranges are back to back, apart from
                // each other and from the rows buffer; the staging's last
                // reader, the previous call's sends, is done (see the Q&A).
                unsafe {
                    launch::copy_runs(
                        &rank.gpu,
                        pack.as_device_ptr().as_raw(),
                        l.plan.pack.len() as u64,
                        path.bufs[r],
                        st.send.as_device_ptr().as_raw(),
                        &rank.stream,
                    )?
                };
            }
        }
        self.order_after_callers()?;
        nccl::group_start()?;
        let moved = (|| {
            for (r, rank) in self.ranks.iter().enumerate() {
                let (st, l) = (&ex.stages[r], ex.stages[r].lists(path.raw));
                // Every rank walks its peers in rank order.
                for p in 0..self.ranks() {
                    let (to, from) = (&l.plan.send[p], &l.plan.recv[p]);
                    // SAFETY: (1) the staging buffers are rank r's, sized
                    // for every range of its plan; the streams are rank
                    // r's; (2) the send staging was filled by the pack,
                    // which the NCCL stream waited for; the receive
                    // staging is read only by the unpack after `arrived`;
                    // (3) peer p's plan holds the matching range, as long
                    // (`peer_plans`), walked in the same order inside this
                    // group.
                    unsafe {
                        if to.end > to.start {
                            nccl::send(
                                st.send.as_device_ptr().as_raw() + to.start,
                                (to.end - to.start) as usize,
                                p,
                                self.comms[r],
                                &rank.comm_stream,
                            )?;
                        }
                        if from.end > from.start {
                            nccl::recv(
                                st.recv.as_device_ptr().as_raw() + from.start,
                                (from.end - from.start) as usize,
                                p,
                                self.comms[r],
                                &rank.comm_stream,
                            )?;
                        }
                    }
                }
            }
            Ok::<(), Error>(())
        })();
        let ended = nccl::group_end();
        moved?;
        ended?;
        for (r, rank) in self.ranks.iter().enumerate() {
            self.order_arrival(r)?;
            let (st, l) = (&ex.stages[r], ex.stages[r].lists(path.raw));
            if let Some(unpack) = &l.unpack {
                // SAFETY: (1) rank r's list, buffers and stream; (2) each
                // source range lies in the receive staging (sized for the
                // plan, padded to 16 bytes), each destination range in the
                // rows buffer (same layout as planned); (3) the
                // destination ranges are the remote runs of rank r, apart
                // from each other, from its own rows (which the packs
                // read) and from the staging; the rows buffer's readers
                // (the decode) come after on this stream.
                unsafe {
                    launch::copy_runs(
                        &rank.gpu,
                        unpack.as_device_ptr().as_raw(),
                        l.plan.unpack.len() as u64,
                        st.recv.as_device_ptr().as_raw(),
                        path.bufs[r],
                        &rank.stream,
                    )?
                };
            }
            ex.uses[r].record(&rank.stream)?;
            path.uses[r].record(&rank.stream)?;
        }
        Ok(())
    }
}
