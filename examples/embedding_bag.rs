//! Embedding bags (DLRM) decoded inside a user kernel: bags of 20–80 row
//! ids, Zipf(1.05)-distributed, each summed into one f32 vector, the rows
//! compressed by ibp in pinned host memory. The fused kernel
//! (`examples/fused-kernels/src/bag.rs`) decodes each row in registers
//! through ibp's device API and adds it to the bag's sum; the row never
//! reaches memory.
//!
//! Measured side by side in one run, per table (Cora f32; MiniLM's word
//! embeddings f32, and bf16 accumulated in f32):
//! - fused;
//! - ibp's gather into a device buffer, then the same sum over it;
//! - the uncompressed rows summed straight from pinned host memory;
//! - the ideal: the same rows' compressed bytes read, nothing else.
//!
//! Every variant's sums are checked bit for bit against a CPU sum in the
//! kernels' order (each element `((0 + r₀) + r₁) + …` in bag order).
//!
//! ```console
//! $ cargo run --release --features cuda --example embedding_bag -- [--bags N] [--table-mb M]
//! ```
//!
//! Tables are replicated to `--table-mb` (default 1024) MB of rows, so
//! that they do not sit in the GPU's L2 cache. Exit status 0 when every
//! check passed, 10 without a usable CUDA device, 1 otherwise.

#[path = "fused_host/mod.rs"]
mod fused_host;

use std::process::ExitCode;

use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use fused_host::{
    BLOCK, Block, Kernels, Measured, arg, bags, bf16_of_f32, cu, data_dir, exit_code, report,
    time_median, time_payload_read,
};
use fused_kernels::{BagParams, OK};
use ibp::gpu::{
    DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, GpuReadable, PinnedBuffer, Residency,
    copy_to_host_blocking, cust,
};
use ibp::layout::{LayoutOptions, Packed, compress_packed};
use ibp::{Error, Result, Rows};
use ibp_kernels::device::DatasetView;

fn main() -> ExitCode {
    exit_code("embedding_bag", run())
}

fn run() -> Result<()> {
    let n_bags = arg("--bags", 16384);
    let table_mb = arg("--table-mb", 1024);
    let gpu = Gpu::first()?;
    let k = Kernels::load(&gpu)?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cu)?;
    println!(
        "# Embedding bags on {}: {n_bags} bags of 20–80 Zipf(1.05) ids, tables replicated to {table_mb} MB, rows in pinned host memory",
        gpu.info().name
    );
    let mut all_ok = true;
    for (name, data, row_bytes, bf16) in tables()? {
        let t = Table {
            name: &name,
            base: &data,
            row_bytes,
            bf16,
        };
        let (text, ok) = t.measure(&gpu, &k, &stream, n_bags, table_mb)?;
        println!("{text}");
        all_ok &= ok;
    }
    if !all_ok {
        return Err(Error::corrupt("a result differs from the CPU's sum"));
    }
    println!("\nall sums equal the CPU's, bit for bit");
    Ok(())
}

/// A table: its name, its rows, the bytes of a row, and whether it is bf16.
type TableData = (String, Vec<u8>, usize, bool);

/// Cora (in the repository) and MiniLM's word embeddings (from
/// `IBP_DATA_DIR`, when there): `(name, rows, row bytes, bf16)`.
fn tables() -> Result<Vec<TableData>> {
    let cora = include_bytes!("../data/cora-features.npz");
    let doc = ibp::io::parse(cora, ibp::io::SourceFormat::Npz, &Default::default())?;
    let g = &doc.groups[0];
    let mut out = vec![(
        "Cora features f32".to_string(),
        g.data.to_vec(),
        g.row_shape(None)?.row_bytes as usize,
        false,
    )];
    let path = data_dir().join("model.safetensors");
    if !path.is_file() {
        eprintln!("MiniLM skipped: {} not found", path.display());
        return Ok(out);
    }
    let f = ibp::io::InputFile::open(&path)?;
    let opts = ibp::io::ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
    let doc = ibp::io::parse(f.bytes(), ibp::io::SourceFormat::Safetensors, &opts)?;
    let g = &doc.groups[0];
    let row = g.row_shape(None)?.row_bytes as usize;
    let bf16: Vec<u8> = bf16_of_f32(&g.data).collect();
    out.push((
        "MiniLM word embeddings f32".into(),
        g.data.to_vec(),
        row,
        false,
    ));
    out.push((
        "MiniLM word embeddings bf16 (f32 sums)".into(),
        bf16,
        row / 2,
        true,
    ));
    Ok(out)
}

struct Table<'a> {
    name: &'a str,
    base: &'a [u8],
    row_bytes: usize,
    bf16: bool,
}

impl Table<'_> {
    /// Element `e` of base row `r`, widened to f32.
    fn elem(&self, r: usize, e: usize) -> f32 {
        let row = &self.base[r * self.row_bytes..];
        if self.bf16 {
            half::bf16::from_le_bytes([row[2 * e], row[2 * e + 1]]).to_f32()
        } else {
            f32::from_le_bytes(row[4 * e..4 * e + 4].try_into().unwrap())
        }
    }

    /// The CPU's sums, in the kernels' order.
    fn cpu_sums(&self, ids: &[u32], starts: &[u32], base_rows: usize) -> Vec<u32> {
        let dim = self.row_bytes / if self.bf16 { 2 } else { 4 };
        let mut out = vec![0u32; (starts.len() - 1) * dim];
        for (b, w) in starts.windows(2).enumerate() {
            let mut acc = vec![0f32; dim];
            for &t in &ids[w[0] as usize..w[1] as usize] {
                let r = t as usize % base_rows;
                for (e, a) in acc.iter_mut().enumerate() {
                    *a += self.elem(r, e);
                }
            }
            for (o, a) in out[b * dim..(b + 1) * dim].iter_mut().zip(&acc) {
                *o = a.to_bits();
            }
        }
        out
    }

    /// The rows replicated to at least `table_mb` MB, compressed under the
    /// base rows' codebook (the replicas add nothing new) and uploaded
    /// pinned, and the same rows uncompressed in pinned memory.
    fn upload(&self, gpu: &Gpu, table_mb: usize) -> Result<Uploaded> {
        let l = self.row_bytes;
        let reps = (table_mb * 1_000_000).div_ceil(self.base.len()).max(1);
        let data = self.base.repeat(reps);
        let cb = ibp::fit::fit(Rows::new(self.base, l)?, &Default::default())?.codebook;
        let packed = compress_packed(&cb, Rows::new(&data, l)?, &LayoutOptions::default())?;
        let ds = GpuDataset::upload_packed(gpu, &cb, &packed.view(), Residency::Pinned)?;
        let plain_rows = PinnedBuffer::from_slice(&data)?;
        Ok(Uploaded {
            rows: self.base.len() / l * reps,
            reps,
            packed,
            ds,
            plain_rows,
        })
    }

    /// Runs `f`, then compares the sums in `out` with the CPU's `want` and
    /// every bag's status with OK; prints what differs. Whether all match.
    fn sums_match(
        &self,
        what: &str,
        stream: &Stream,
        (out, status): (&DeviceBuffer<f32>, &DeviceBuffer<u32>),
        want: &[u32],
        f: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        f()?;
        stream.synchronize().map_err(cu)?;
        let st = copy_to_host_blocking(status)?;
        let got: Vec<u32> = copy_to_host_blocking(out)?
            .iter()
            .map(|x| x.to_bits())
            .collect();
        let bad = got.iter().zip(want).filter(|(a, b)| a != b).count();
        if st.iter().any(|&s| s != OK) || bad != 0 {
            eprintln!(
                "{}: {what}: {bad} elements differ, status {:?}",
                self.name,
                st.iter().find(|&&s| s != OK)
            );
            return Ok(false);
        }
        Ok(true)
    }

    fn measure(
        &self,
        gpu: &Gpu,
        k: &Kernels,
        stream: &Stream,
        n_bags: usize,
        table_mb: usize,
    ) -> Result<(String, bool)> {
        let l = self.row_bytes;
        let base_rows = self.base.len() / l;
        let dim = (l / if self.bf16 { 2 } else { 4 }) as u32;
        let up = self.upload(gpu, table_mb)?;
        let (rows, ds) = (up.rows, &up.ds);
        let view = ds.device_view()?;
        let (ids, starts) = bags(rows, n_bags, 0x1bad_5eed ^ l as u64);
        let total = ids.len();
        let want = self.cpu_sums(&ids, &starts, base_rows);
        let mut b = BagBuffers::new(&ids, &starts, dim, l)?;
        if view.book_bytes % 4 != 0 {
            return Err(Error::invalid("decode book not a whole number of words"));
        }
        let (fused, plain, acc) = bag_kernels(self.bf16, l, dim)?;
        let ws = view.workspace_bytes() + acc;
        let p = b.params(view, up.plain_rows.device_addr(), dim, ws);
        let book16 = view.book_bytes.next_multiple_of(16);
        let fused_block = k.block_for(fused, book16, ws)?;
        let eight = Block {
            threads: BLOCK,
            shared: book16 + 8 * ws,
        };
        let plain_p = BagParams { ws_bytes: acc, ..p };
        let plain_shared = 8 * acc;
        // After the gather: rows in id order, ids = positions.
        let after = BagParams {
            plain: b.gathered.as_device_ptr().as_raw(),
            ids: 0,
            view: DatasetView {
                rows: total as u64,
                ..view
            },
            ..plain_p
        };
        let ideal_p = BagParams {
            out: b.xor.as_device_ptr().as_raw(),
            ..p
        };
        let dec = Decoder::new(gpu, ds, &DecodeOptions::default())?;
        let mut dstatus = DecodeStatus::new()?;
        // SAFETY (every launch below): each parameter block is its kernel's
        // type; every address is a live buffer of the sizes BagParams
        // states (ids < rows, out of bags × dim, gathered of total rows);
        // the shared memory is what the kernel's doc asks.
        // SAFETY: as stated above.
        let run_fused = || unsafe { k.launch_block(fused, fused_block, stream, p) };
        // SAFETY: as stated above.
        let run_eight = || unsafe { k.launch_block(fused, eight, stream, p) };
        // SAFETY: as stated above.
        let run_plain = || unsafe { k.launch(plain, plain_shared, stream, plain_p) };
        // SAFETY: as stated above.
        let run_ideal = || unsafe { k.launch("bag_read", 0, stream, ideal_p) };
        let mut run_decode_then = || -> Result<()> {
            dec.gather(gpu, &b.ids, &mut b.gathered, &dstatus, stream)?;
            // SAFETY: as above.
            unsafe { k.launch(plain, plain_shared, stream, after) }
        };
        // Correctness first: each variant's sums against the CPU's.
        let mut ok = true;
        let mut check = |what: &str, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
            ok &= self.sums_match(what, stream, (&b.out, &b.status), &want, f)?;
            Ok(())
        };
        check("fused", &mut || run_fused())?;
        if fused_block != eight {
            check("fused, blocks of 8 warps", &mut || run_eight())?;
        }
        check("uncompressed", &mut || run_plain())?;
        check("decode, then sum", &mut run_decode_then)?;
        let t_fused = time_median(stream, 2, 9, run_fused)?;
        // The same kernel in blocks of eight warps, where the chosen block
        // is larger (more warps resident: see `Kernels::block_for`).
        let mut fused_other = Vec::new();
        if fused_block != eight {
            fused_other.push((
                "fused, blocks of 8 warps",
                time_median(stream, 2, 9, run_eight)?,
            ));
        }
        let t_dc = time_median(stream, 2, 9, &mut run_decode_then)?;
        let t_plain = time_median(stream, 2, 9, run_plain)?;
        let t_ideal = time_median(stream, 2, 9, run_ideal)?;
        // The gathers' status (sticky: any corrupt row of any run).
        dstatus.check_blocking()?;
        let seq = ds.stored_bytes() as f64 / time_payload_read(k, stream, ds)? / 1e9;
        let m = Measured {
            compressed: up.stored_bytes(&ids),
            delivered: (total * l) as u64,
            fused: t_fused,
            fused_other,
            decode_then: t_dc,
            uncompressed: t_plain,
            ideal: t_ideal,
            sequential_gbps: seq,
        };
        let title = format!(
            "{}: {} rows of {l} B ({}× replicated), {total} ids in {n_bags} bags, fused in blocks of {} warps{}",
            self.name,
            rows,
            up.reps,
            fused_block.threads / 32,
            if ok {
                ", sums bit-exact"
            } else {
                ", SUMS DIFFER"
            }
        );
        Ok((report(&title, &m), ok))
    }
}

/// The device buffers of one table's bags: the ids and where each bag
/// starts, the sums and each bag's status, the gathered rows (decode, then
/// sum) and the ideal's word a bag.
struct BagBuffers {
    ids: DeviceBuffer<u32>,
    starts: DeviceBuffer<u32>,
    out: DeviceBuffer<f32>,
    status: DeviceBuffer<u32>,
    gathered: DeviceBuffer<u8>,
    xor: DeviceBuffer<u32>,
}

impl BagBuffers {
    /// Buffers for the bags `ids[starts[b]..starts[b + 1]]` of rows of `l`
    /// bytes, `dim` elements each.
    fn new(ids: &[u32], starts: &[u32], dim: u32, l: usize) -> Result<Self> {
        let n_bags = starts.len() - 1;
        Ok(BagBuffers {
            ids: DeviceBuffer::from_slice(ids).map_err(cu)?,
            starts: DeviceBuffer::from_slice(starts).map_err(cu)?,
            out: DeviceBuffer::<f32>::zeroed(n_bags * dim as usize).map_err(cu)?,
            status: DeviceBuffer::<u32>::zeroed(n_bags).map_err(cu)?,
            gathered: DeviceBuffer::<u8>::zeroed(ids.len() * l).map_err(cu)?,
            xor: DeviceBuffer::<u32>::zeroed(n_bags).map_err(cu)?,
        })
    }

    /// The fused kernel's parameters over these buffers: the dataset's
    /// `view`, the uncompressed rows at `plain`, a workspace of `ws` bytes
    /// a warp.
    fn params(&self, view: DatasetView, plain: u64, dim: u32, ws: u32) -> BagParams {
        BagParams {
            view,
            plain,
            ids: self.ids.as_device_ptr().as_raw(),
            bag_starts: self.starts.as_device_ptr().as_raw(),
            out: self.out.as_device_ptr().as_raw(),
            status: self.status.as_device_ptr().as_raw(),
            bags: self.status.len() as u32,
            dim,
            book_smem: view.book_bytes,
            ws_bytes: ws,
        }
    }
}

/// A table on the GPU: its rows replicated, packed and pinned, and
/// uncompressed in pinned memory.
struct Uploaded {
    rows: usize,
    reps: usize,
    packed: Packed,
    ds: GpuDataset,
    plain_rows: PinnedBuffer<u8>,
}

impl Uploaded {
    /// The stored bytes of the rows `ids` (repeats counted each time).
    fn stored_bytes(&self, ids: &[u32]) -> u64 {
        let o = &self.packed.offsets;
        ids.iter().map(|&t| o[t as usize + 1] - o[t as usize]).sum()
    }
}

/// The fused and the plain bag kernel for rows of `l` bytes (`dim`
/// elements), and the shared accumulator bytes a warp of them needs: sums
/// in registers up to 2 (bf16) or 3 (f32) steps of 512 bytes, in shared
/// memory beyond.
fn bag_kernels(bf16: bool, l: usize, dim: u32) -> Result<(&'static str, &'static str, u32)> {
    Ok(match (bf16, l) {
        (true, ..=1024) => ("bag_fused_bf16_s2", "bag_plain_bf16_s2", 0),
        (false, ..=1536) => ("bag_fused_f32_s3", "bag_plain_f32_s3", 0),
        (false, _) => (
            "bag_fused_f32_smem",
            "bag_plain_f32_smem",
            (4 * dim).next_multiple_of(16),
        ),
        (true, _) => return Err(Error::unsupported("bf16 rows over 1024 bytes")),
    })
}
