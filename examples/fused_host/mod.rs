//! The host side shared by the fused examples (`embedding_bag`,
//! `gemv_stream`) and `tests/gpu_device_api.rs`: the examples' PTX (shipped
//! in `examples/fused-kernels/ptx/`, built from `examples/fused-kernels`
//! with `ibp-kernel-builder` by `scripts/ptx.sh`; the library's build.rs
//! never builds it), launches, launch sizes, the Zipf sampler and the results
//! table.
#![allow(dead_code)] // each user takes what it needs

use std::ffi::c_void;

use cust::function::BlockSize;
use cust::memory::DeviceBuffer;
use cust::module::{Module, ModuleJitOption};
use cust::stream::Stream;
use ibp::gpu::{Gpu, copy_to_host_blocking, cust, jit_max_registers};
use ibp::{Error, Result};

/// The examples' kernels, for sm_80 and later: the shipped file, by its path
/// from this one (every user of this module includes it from here).
pub const PTX: &str = include_str!("../fused-kernels/ptx/fused_kernels.ptx");

/// Threads per block of every example kernel (eight warps).
pub const BLOCK: u32 = 256;

/// The examples' module, loaded on the current context (`Gpu::first()`
/// makes it current).
pub struct Kernels {
    module: Module,
    sms: u32,
    max_shared: u32,
}

fn cuda(what: &'static str) -> impl Fn(cust::error::CudaError) -> Error {
    move |e| Error::cuda(format!("{what}: {e}"))
}

impl Kernels {
    /// Load the PTX (the driver JIT-compiles it for this GPU), under ibp's
    /// own register cap (`ibp::gpu::JIT_MAX_REGISTERS`, 128: two blocks of
    /// eight warps resident per SM; `IBP_JIT_MAX_REGISTERS` sets another).
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let cap = jit_max_registers();
        let module = Module::from_ptx(PTX, &[ModuleJitOption::MaxRegisters(cap)])
            .map_err(cuda("loading the examples' PTX"))?;
        Ok(Kernels {
            module,
            sms: gpu.info().sm_count,
            max_shared: gpu.info().max_shared_per_block,
        })
    }

    /// Blocks of `threads` threads that fill the GPU once for kernel `name`
    /// with `shared` bytes of dynamic shared memory per block.
    pub fn grid(&self, name: &str, threads: u32, shared: u32) -> Result<u32> {
        let f = self
            .module
            .get_function(name)
            .map_err(cuda("finding a kernel"))?;
        self.opt_in(&f, name, shared)?;
        let per_sm = f
            .max_active_blocks_per_multiprocessor(BlockSize::x(threads), shared as usize)
            .map_err(cuda("occupancy"))?;
        if per_sm == 0 {
            return Err(Error::invalid(format!(
                "{name} does not fit on an SM with {shared} bytes of shared memory a block"
            )));
        }
        Ok(per_sm * self.sms)
    }

    /// The block for kernel `name` whose blocks need `fixed` bytes of
    /// dynamic shared memory (the book) and `per_warp` more for each warp
    /// (its workspace): of 8, 16, 24 and 32 warps a block, the one that
    /// keeps the most warps resident on an SM, the smallest on a tie.
    ///
    /// Q: why not always eight warps?
    /// A: a warp that needs a large workspace (Cora's bag: 11.6 KB, with a
    /// 23 KB book) fits one block of eight on an SM, eight warps in all,
    /// too few to hide the host reads' latency; one block of sixteen
    /// shares the book and doubles the warps.
    pub fn block_for(&self, name: &str, fixed: u32, per_warp: u32) -> Result<Block> {
        choose_block(self.max_shared, fixed, per_warp, |b| {
            self.grid(name, b.threads, b.shared)
                .map_or(0, |blocks| blocks / self.sms)
        })
        .ok_or_else(|| {
            Error::invalid(format!(
                "{name} does not fit on an SM with {fixed} + {per_warp} a warp bytes of shared memory"
            ))
        })
    }

    /// Above 48 KiB of dynamic shared memory a kernel must opt in.
    fn opt_in(&self, f: &cust::function::Function<'_>, name: &str, shared: u32) -> Result<()> {
        if shared > self.max_shared {
            return Err(Error::invalid(format!(
                "{name} needs {shared} bytes of shared memory a block; this GPU allows {}",
                self.max_shared
            )));
        }
        ibp::gpu::set_max_dynamic_shared(f, shared)
    }

    /// Enqueue kernel `name` on a full grid of [`BLOCK`] threads a block
    /// with parameter block `p`.
    ///
    /// # Safety
    /// `P` is the kernel's parameter type (`fused_kernels::*Params`) and
    /// every address in `p` is valid for what the kernel's `# Safety`
    /// states; `shared` is what it needs.
    pub unsafe fn launch<P: Copy>(
        &self,
        name: &str,
        shared: u32,
        stream: &Stream,
        p: P,
    ) -> Result<()> {
        let b = Block {
            threads: BLOCK,
            shared,
        };
        // SAFETY: the caller's.
        unsafe { self.launch_block(name, b, stream, p) }
    }

    /// [`Kernels::launch`] with blocks of `b.threads` threads.
    ///
    /// # Safety
    /// As [`Kernels::launch`], with `b.shared` what a block of `b.threads`
    /// needs.
    pub unsafe fn launch_block<P: Copy>(
        &self,
        name: &str,
        b: Block,
        stream: &Stream,
        p: P,
    ) -> Result<()> {
        let grid = self.grid(name, b.threads, b.shared)?;
        let f = self
            .module
            .get_function(name)
            .map_err(cuda("finding a kernel"))?;
        let mut p = p;
        let args = [&mut p as *mut P as *mut c_void];
        // SAFETY: the caller's (parameter type and addresses); the driver
        // copies size_of::<P>() bytes from args[0] at the launch.
        unsafe { stream.launch(&f, grid, b.threads, b.shared, &args) }
            .map_err(|e| Error::cuda(format!("launching {name}: {e}")))
    }
}

/// An example's exit status: 0 when `r` is `Ok`, 10 without a usable
/// CUDA device, 1 otherwise; the error goes to stderr after `name`.
pub fn exit_code(name: &str, r: Result<()>) -> std::process::ExitCode {
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if ibp::gpu::is_no_device(&e) => {
            eprintln!("{name}: no usable CUDA device ({})", e.message());
            std::process::ExitCode::from(10)
        }
        Err(e) => {
            eprintln!("{name}: {}", e.message());
            std::process::ExitCode::FAILURE
        }
    }
}

/// A CUDA error as ibp's.
pub fn cu(e: cust::error::CudaError) -> Error {
    Error::cuda(e.to_string())
}

/// `--name VALUE` from the command line, or `default` when it is absent or
/// does not parse.
pub fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Where the real data lives: `IBP_DATA_DIR`, else `.tools/data`.
pub fn data_dir() -> std::path::PathBuf {
    std::env::var_os("IBP_DATA_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| ".tools/data".into())
}

/// Little-endian f32 elements rounded to bf16.
pub fn bf16_of_f32(f32_bytes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    f32_bytes
        .as_chunks::<4>()
        .0
        .iter()
        .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
}

/// MiniLM's layer matrices as bf16 rows of `cols` elements (384, its
/// hidden size), and where they came from: every 2-D
/// `encoder.layer.*.weight` of `model.safetensors` in [`data_dir`] (rounded
/// to bf16), or, when `minilm-layers-bf16.safetensors` is there instead
/// (what scripts/stage-device.sh carries to the GPU machine: a row sample
/// of the same matrices, already bf16), that file.
pub fn minilm_layer_rows(cols: usize) -> Result<(Vec<u8>, String)> {
    let dir = data_dir();
    let sample = dir.join("minilm-layers-bf16.safetensors");
    let full = dir.join("model.safetensors");
    let is_layer = |n: &str| n.starts_with("encoder.layer.") && n.ends_with(".weight");
    if full.is_file() {
        let f = ibp::io::InputFile::open(&full)?;
        let doc = ibp::io::parse(
            f.bytes(),
            ibp::io::SourceFormat::Safetensors,
            &Default::default(),
        )?;
        let mut out = Vec::new();
        let mut n = 0;
        for g in doc.groups.iter().filter(|g| is_layer(&g.name)) {
            // 2-D f32 matrices only (LayerNorm weights are vectors); each
            // has 384 × k elements, read as rows of 384.
            if g.shape.len() != 2 || g.dtype.size() != 4 || g.data.len() % (4 * cols) != 0 {
                continue;
            }
            n += 1;
            out.extend(bf16_of_f32(&g.data));
        }
        if n > 0 {
            return Ok((out, format!("{n} layer matrices of {}", full.display())));
        }
    }
    if sample.is_file() {
        let f = ibp::io::InputFile::open(&sample)?;
        let doc = ibp::io::parse(
            f.bytes(),
            ibp::io::SourceFormat::Safetensors,
            &Default::default(),
        )?;
        let g = &doc.groups[0];
        return Ok((
            g.data.to_vec(),
            format!("the row sample {}", sample.display()),
        ));
    }
    Err(Error::invalid(format!(
        "no MiniLM layer weights in {} (model.safetensors or minilm-layers-bf16.safetensors; scripts/setup.sh downloads the model)",
        dir.display()
    )))
}

/// The CPU's GEMV of bf16 rows, in f64: each row's sum and the bound on its
/// f32 error (Σ|w·x|).
pub struct Reference {
    want: Vec<f64>,
    bound: Vec<f64>,
    cols: usize,
}

impl Reference {
    /// The reference of the rows `base` (bf16, `cols` a row).
    pub fn of(base: &[u8], cols: usize, x: &[f32]) -> Reference {
        let (want, bound) = base
            .chunks(2 * cols)
            .map(|row| {
                let (mut s, mut b) = (0f64, 0f64);
                for (e, xe) in x.iter().enumerate() {
                    let w = half::bf16::from_le_bytes([row[2 * e], row[2 * e + 1]]).to_f32() as f64;
                    s += w * *xe as f64;
                    b += (w * *xe as f64).abs();
                }
                (s, b)
            })
            .unzip();
        Reference { want, bound, cols }
    }

    /// Whether every `y` (replicas of the base rows) is within
    /// n·2⁻²⁴·Σ|wx| of the reference and the status is OK; prints what is
    /// not.
    pub fn holds(
        &self,
        what: &str,
        y: &DeviceBuffer<f32>,
        status: &DeviceBuffer<u32>,
    ) -> Result<bool> {
        let tol = self.cols as f64 * (-24f64).exp2();
        let got = copy_to_host_blocking(y)?;
        let st = copy_to_host_blocking(status)?[0];
        let base_rows = self.want.len();
        let bad = got
            .iter()
            .enumerate()
            .filter(|&(r, &v)| {
                let b = r % base_rows;
                (v as f64 - self.want[b]).abs() > tol * self.bound[b] + f64::MIN_POSITIVE
            })
            .count();
        if bad != 0 || st != fused_kernels::OK {
            let rows = got.len();
            eprintln!("{what}: {bad} of {rows} outputs outside the bound, status {st}");
            return Ok(false);
        }
        Ok(true)
    }
}

/// `y` of the rows `base` (bf16, `cols` a row) in the order of the float
/// GEMV kernel (`fused_kernels::float_gemv`), as f32 bits: lane `k < s` sums `w[i]·x[i]` for `i = k, k + s, …` from 0.0,
/// lanes `s..32` hold 0.0, then partners 16, 8, 4, 2, 1 are added.
pub fn kernel_order_gemv(base: &[u8], cols: usize, s: usize, x: &[f32]) -> Vec<u32> {
    base.chunks(2 * cols)
        .map(|row| {
            let mut lanes = [0f32; 32];
            for (k, acc) in lanes.iter_mut().enumerate().take(s) {
                for i in (k..cols).step_by(s) {
                    let w = f32::from_bits(
                        u32::from(u16::from_le_bytes([row[2 * i], row[2 * i + 1]])) << 16,
                    );
                    *acc += w * x[i];
                }
            }
            let mut m = 16;
            while m > 0 {
                let prev = lanes;
                for (l, v) in lanes.iter_mut().enumerate() {
                    *v = prev[l] + prev[l ^ m];
                }
                m >>= 1;
            }
            lanes[0].to_bits()
        })
        .collect()
}

/// Median seconds of `read_bytes` reading the dataset's whole payload
/// zero-copy (the sequential read a fused kernel's rate is set against).
pub fn time_payload_read(k: &Kernels, stream: &Stream, ds: &ibp::gpu::GpuDataset) -> Result<f64> {
    time_read(k, stream, ds.payload().device_addr(), ds.stored_bytes())
}

/// Median seconds of `read_bytes` reading `bytes` bytes at `src` (16-aligned
/// device memory or mapped pinned host memory), sequentially.
pub fn time_read(k: &Kernels, stream: &Stream, src: u64, bytes: u64) -> Result<f64> {
    let xor = DeviceBuffer::<u32>::zeroed(1).map_err(cu)?;
    let p = fused_kernels::ReadParams {
        src,
        bytes,
        out: xor.as_device_ptr().as_raw(),
    };
    // SAFETY: the caller's source holds `bytes` readable bytes; one u32 out.
    time_median(stream, 2, 9, || unsafe {
        k.launch("read_bytes", 0, stream, p)
    })
}

/// Median seconds per call of `f`: `warmup` untimed calls, then `reps`
/// calls, each timed by a pair of CUDA events recorded on `stream` around it.
///
/// Q: why a timer of the examples' own, when `ibp bench` has one? A: the
/// examples show what a host app writes with ibp's public API; the
/// benchmark harness (`ibp::gpu::bench`) is no part of it (hidden, and
/// only in a build with the feature `bench-hooks`).
pub fn time_median(
    stream: &Stream,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    use cust::event::{Event, EventFlags};
    for _ in 0..warmup {
        f()?;
    }
    stream.synchronize().map_err(cu)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Event::new(EventFlags::DEFAULT).map_err(cu)?;
        let end = Event::new(EventFlags::DEFAULT).map_err(cu)?;
        start.record(stream).map_err(cu)?;
        f()?;
        end.record(stream).map_err(cu)?;
        end.synchronize().map_err(cu)?;
        times.push(f64::from(end.elapsed_time_f32(&start).map_err(cu)?) / 1e3);
    }
    times.sort_by(f64::total_cmp);
    times
        .get(times.len() / 2)
        .copied()
        .ok_or_else(|| Error::invalid("time_median: no timed calls (reps = 0)"))
}

/// A launch's block: threads, and dynamic shared memory in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Threads per block (a multiple of 32).
    pub threads: u32,
    /// Dynamic shared memory per block.
    pub shared: u32,
}

/// A seeded xorshift64 (the examples' ids and vectors are reproducible).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo ..= hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % (hi - lo + 1) as u64) as u32
    }
}

/// Zipf(`s`) over `n` items: rank `k` (from 1) drawn with probability
/// ∝ `k^-s`; ranks are mapped to rows by a seeded shuffle (hot rows are
/// scattered over the table, as in a real embedding table).
pub struct Zipf {
    cdf: Vec<f64>,
    rows: Vec<u32>,
}

impl Zipf {
    /// The distribution over `n` rows.
    pub fn new(n: usize, s: f64, rng: &mut Rng) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 1..=n {
            acc += (k as f64).powf(-s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        let mut rows: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            rows.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        Zipf { cdf, rows }
    }

    /// One row.
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let u = rng.unit();
        let k = self
            .cdf
            .partition_point(|&c| c < u)
            .min(self.rows.len() - 1);
        self.rows[k]
    }
}

/// Bags of 20 to 80 ids each, Zipf(1.05) over `rows`: `(ids, starts)` with
/// bag `b` = `ids[starts[b] .. starts[b + 1]]`.
pub fn bags(rows: usize, bags: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = Rng(seed | 1);
    let z = Zipf::new(rows, 1.05, &mut rng);
    let mut ids = Vec::new();
    let mut starts = vec![0u32];
    for _ in 0..bags {
        let n = rng.range(20, 80);
        for _ in 0..n {
            ids.push(z.sample(&mut rng));
        }
        starts.push(ids.len() as u32);
    }
    (ids, starts)
}

/// One workload's measurements (median seconds a run) and what each run
/// moves.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Compressed bytes the fused kernel reads.
    pub compressed: u64,
    /// Decoded bytes it consumes.
    pub delivered: u64,
    /// The fused kernel.
    pub fused: f64,
    /// Other fused variants measured beside it (name, seconds).
    pub fused_other: Vec<(&'static str, f64)>,
    /// ibp's decode into a device buffer, then the consumer over it.
    pub decode_then: f64,
    /// The consumer over the uncompressed rows in pinned host memory.
    pub uncompressed: f64,
    /// The compressed bytes read and nothing else (same rows, same lines).
    pub ideal: f64,
    /// The sequential zero-copy read rate of the payload, GB/s.
    pub sequential_gbps: f64,
}

/// The table of one workload: GB/s of compressed and delivered bytes for
/// each variant, then the three ratios against the targets.
pub fn report(workload: &str, m: &Measured) -> String {
    let &Measured {
        compressed,
        delivered,
        fused,
        ref fused_other,
        decode_then,
        uncompressed,
        ideal,
        sequential_gbps,
    } = m;
    let savings = 1.0 - compressed as f64 / delivered as f64;
    let gb = |b: u64, s: f64| b as f64 / s / 1e9;
    let mut t = String::new();
    t += &format!(
        "\n### {workload}\n\ncompressed {:.1} MB for {:.1} MB delivered (savings {:.1}%); sequential zero-copy read of the payload: {:.1} GB/s\n\n",
        compressed as f64 / 1e6,
        delivered as f64 / 1e6,
        100.0 * savings,
        sequential_gbps
    );
    t += "| variant | ms | GB/s compressed | GB/s delivered |\n|---|---:|---:|---:|\n";
    let mut rows = vec![("fused (decode in registers)", fused, compressed)];
    rows.extend(fused_other.iter().map(|&(name, s)| (name, s, compressed)));
    rows.extend([
        ("ibp decode, then consume", decode_then, compressed),
        ("uncompressed, zero-copy", uncompressed, delivered),
        ("ideal: read the compressed bytes only", ideal, compressed),
    ]);
    for (name, s, c) in rows {
        t += &format!(
            "| {name} | {:.3} | {:.1} | {:.1} |\n",
            s * 1e3,
            gb(c, s),
            gb(delivered, s)
        );
    }
    let target_u = 0.9 / (1.0 - savings);
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    t += "\n| ratio | value | target | |\n|---|---:|---:|---|\n";
    t += &format!(
        "| fused ÷ ideal (speed) | {:.2} | ≥ 0.90 | {} |\n",
        ideal / fused,
        verdict(ideal / fused >= 0.9)
    );
    t += &format!(
        "| fused ÷ decode-then-consume | {:.2} | ≥ 1.30 | {} |\n",
        decode_then / fused,
        verdict(decode_then / fused >= 1.3)
    );
    t += &format!(
        "| fused ÷ uncompressed | {:.2} | ≥ {:.2} (0.9 / (1 − savings)) | {} |\n",
        uncompressed / fused,
        target_u,
        verdict(uncompressed / fused >= target_u)
    );
    t
}

/// [`Kernels::block_for`]'s rule: of 8, 16, 24 and 32 warps a block, each
/// with `fixed + warps · per_warp` bytes of shared memory (at most
/// `max_shared`), the block whose `per_sm` (blocks resident on an SM, 0
/// when it does not fit) times its warps is largest, the smallest on a
/// tie; `None` when none fits.
pub fn choose_block(
    max_shared: u32,
    fixed: u32,
    per_warp: u32,
    per_sm: impl Fn(Block) -> u32,
) -> Option<Block> {
    let mut best: Option<(u32, Block)> = None;
    for warps in [8, 16, 24, 32] {
        let b = Block {
            threads: 32 * warps,
            shared: fixed + warps * per_warp,
        };
        if b.shared > max_shared {
            break;
        }
        let resident = per_sm(b) * warps;
        if resident > best.map_or(0, |(r, _)| r) {
            best = Some((resident, b));
        }
    }
    best.map(|(_, b)| b)
}

#[cfg(test)]
mod block_tests {
    use super::{Block, choose_block};

    /// An SM of the H200's shape: 228 KB of shared memory (1 KB of it
    /// reserved per block), 64 warps, and `regs_warps` warps' registers.
    fn h200(regs_warps: u32) -> impl Fn(Block) -> u32 {
        move |b: Block| {
            let warps = b.threads / 32;
            let by_smem = (233_472 / (b.shared + 1024)).min(32);
            by_smem.min(64 / warps).min(regs_warps / warps)
        }
    }

    #[test]
    fn a_large_workspace_takes_a_larger_block() {
        // Cora's bag: a 23 KB book and 11.6 KB a warp. Eight warps (116
        // KB) fit one block; sixteen (209 KB) fit one block of twice the
        // warps; twenty-four do not fit at all.
        let b = choose_block(232_448, 23_000, 11_600, h200(64)).unwrap();
        assert_eq!(b.threads, 512);
        assert_eq!(b.shared, 23_000 + 16 * 11_600);
    }

    #[test]
    fn a_small_workspace_keeps_eight_warps_on_a_tie() {
        // Small workspaces: every size reaches the register limit of 32
        // warps; the smallest block wins the tie.
        let b = choose_block(232_448, 4_096, 2_048, h200(32)).unwrap();
        assert_eq!(b.threads, 256);
        assert_eq!(b.shared, 4_096 + 8 * 2_048);
    }

    #[test]
    fn nothing_fits_when_eight_warps_exceed_the_limit() {
        assert!(choose_block(100_000, 60_000, 6_000, h200(64)).is_none());
        // A block the occupancy rule rejects counts as no warps.
        assert!(choose_block(232_448, 1_000, 1_000, |_| 0).is_none());
    }
}
