//! `ibp bench`: GPU decompression benchmarks. Prints a table and writes a
//! results file naming the GPU, driver, commit and date. With a FILE, the
//! same measurements on the user's tensors instead ([`file`]).

#[cfg(feature = "cuda")]
mod cache;
#[cfg(feature = "nccl")]
mod collective;
mod compress;
mod cpu;
#[cfg(feature = "cuda")]
mod decode;
mod file;
#[cfg(feature = "cuda")]
mod float;
#[cfg(feature = "cuda")]
mod float_kv;
#[cfg(feature = "cuda")]
mod float_sweep;
#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod kv;
mod peers;
pub(super) mod plot;
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod sweep;

use std::path::PathBuf;

use ibp::Result;

use super::input::InputArgs;

/// Arguments of `ibp bench`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("file", |a| a.help(
    "Benchmark this file's tensors (.safetensors, .npy, .npz, or raw bytes with --dtype and --shape) instead of the built-in suite; see --tensor and --json"
)))]
#[command(mut_arg("tensors", |a| a.help(
    "With FILE: measure these tensors (repeatable; rows of one length). Default: every tensor of the row length that holds the most bytes"
)))]
pub struct Args {
    #[command(flatten)]
    pub(super) input: InputArgs,
    /// With FILE: print JSON (schema `ibp-bench-file/1`, see the README)
    /// instead of a table.
    #[arg(long)]
    pub(super) json: bool,
    /// Results file (Markdown). Default: docs/results/<gpu>.md.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Tensors per synthetic dataset (the paper uses 100,000).
    #[arg(long, default_value_t = 100_000)]
    pub(super) rows: usize,
    /// Skip the real-data rows (Cora, MiniLM).
    #[arg(long)]
    pub(super) no_real: bool,
    /// Bytes to replicate real tables to (at least); with FILE, the bytes
    /// measured (a smaller selection is replicated to this, a larger one
    /// cut to its first rows).
    #[arg(long, default_value_t = 1 << 30)]
    pub(super) real_bytes: usize,
    /// Use at most this many SMs.
    #[arg(long)]
    max_sms: Option<u32>,
    /// Measure one point only, `SIZE,SAVINGS,pinned|device[,CHUNK]` (for
    /// profilers and baselines), and print its rate instead of writing a
    /// results file.
    #[arg(long, hide = true)]
    point: Option<String>,
    /// Decoder ring bytes per warp (experiments).
    #[arg(long, hide = true)]
    ring_bytes: Option<u32>,
    /// Decoder warps per block (experiments).
    #[arg(long, hide = true)]
    warps: Option<u32>,
    /// Fetch lines with `cp-async` or `load-store` (experiments; default
    /// by residency).
    #[arg(long, hide = true)]
    fetch: Option<String>,
    /// Turn the batch decoder's fast paths off (to measure what they are
    /// worth; output is identical).
    #[arg(long, hide = true)]
    no_fast_paths: bool,
    /// Batch decode two tensors a warp (`on`) or one (`off`); default: on
    /// (experiments).
    #[arg(long, hide = true)]
    pairs: Option<String>,
    /// Batch decode four tensors a warp (`on`) or not (`off`) where the
    /// book takes the uniform or periodic kernels; default: by the rule
    /// (experiments).
    #[arg(long, hide = true)]
    quads: Option<String>,
    /// Decode a lane a tensor (`on`), a warp a tensor (`off`), or by the
    /// rule (default; experiments).
    #[arg(long, hide = true)]
    lanes: Option<String>,
    /// Streaming mode's decode book in shared memory (`shared`) or read
    /// through L1 (`global`); default: by the decoder's rule (experiments).
    #[arg(long, hide = true)]
    stream_book: Option<String>,
    /// Decode steps whose columns are all alike from their shared fields
    /// (`on`, the default) or from each chunk's own (`off`; experiments).
    #[arg(long, hide = true)]
    uniform: Option<String>,
    /// MiB of each DMA piece in the DMA path's measurements (experiments;
    /// default: `ibp::gpu::DEFAULT_DMA_PIECE_BYTES`).
    #[arg(long, hide = true, value_name = "MIB")]
    dma_piece_mib: Option<usize>,
    /// With `--section device`, `cache`, `compress` or `--peers`, only the
    /// tables whose name contains this (for profilers).
    #[arg(long, hide = true)]
    pub(super) only: Option<String>,
    /// With the compression benchmarks, also time each kernel stage alone.
    #[arg(long)]
    stages: bool,
    /// Which benchmarks: `all`, `decode` or `compress` (fit and compression);
    /// `device` runs only the device-resident decodes and gathers (a quick
    /// look at the decode kernel alone); `peers` only the comparison with
    /// `--peers`; `cache` the GPU feature cache (IBP(C/M): graph and Zipf
    /// workloads, its own results file); `kv` the appendable KV store
    /// (append of a decode step, bulk append, gather of random tokens);
    /// `collective` the compressed collectives through NCCL against raw
    /// ones (all-gather, broadcast; feature `nccl`, its own results file);
    /// `float` the float coding's GPU fit and compression (its own results
    /// file).
    #[arg(long, default_value = "all")]
    pub(super) section: String,
    #[command(flatten)]
    pub(super) peers: peers::PeerArgs,
    /// `--section device` and `float`: only the row-length sweep, none of
    /// the other tables.
    #[arg(long, conflicts_with = "no_sweep")]
    pub(super) sweep_only: bool,
    /// `--section device` and `float`: leave the row-length sweep out.
    #[arg(long)]
    pub(super) no_sweep: bool,
    /// `--section device`: the sweep's row lengths in bytes
    /// (comma-separated). Default: 64,128,256,512,768,1024,2048,4096,8192,16384.
    #[arg(long, value_delimiter = ',', value_name = "BYTES")]
    pub(super) sweep_rows: Option<Vec<usize>>,
    /// `--section device`: the sweep's chunk sizes in bytes. Default: 1,2,4,8.
    #[arg(long, value_delimiter = ',', value_name = "BYTES")]
    pub(super) sweep_chunks: Option<Vec<u32>>,
    /// `--section device`: the sweep's target savings in percent. Default:
    /// 12.5,25,50,75,90.
    #[arg(long, value_delimiter = ',', value_name = "PERCENT")]
    pub(super) sweep_savings: Option<Vec<f64>>,
    /// `--section device`: the sweep's columns: `random` (each column's
    /// invariant bits a value of its own), `alike` (one value for every
    /// column, as a dense float table's exponent: the uniform decode path),
    /// `bytes` (the bits below each byte's top bit, alike in every byte,
    /// as an fp8 table's exponent) or `halves` (the same by the 16-bit
    /// half, as an f16 table's).
    #[arg(long, default_value = "random", value_parser = ["random", "alike", "bytes", "halves"])]
    pub(super) sweep_columns: String,
    /// `--section device`: MiB decoded in each cell of the sweep (a cell
    /// holds at least 512 rows an SM whatever its MiB).
    #[arg(long, default_value_t = 128, value_name = "MIB")]
    pub(super) sweep_mib: usize,
    /// `--section cache`: vertices of the R-MAT graph (ogbn-products'
    /// scale by default).
    #[arg(long, default_value_t = 2_400_000)]
    vertices: usize,
    /// `--section cache`: undirected edges of the R-MAT graph.
    #[arg(long, default_value_t = 62_000_000)]
    edges: usize,
    /// `--section cache`: GraphSAGE mini-batches to time.
    #[arg(long, default_value_t = 4)]
    batches: usize,
    /// `--section cache`: how several GPUs share the batches: `alternate`
    /// (each GPU gathers whole batches in turn, a data-parallel step) or
    /// `split` (every batch cut into one share a GPU of equal predicted
    /// time, `FeatureCache::shares`).
    #[arg(long, value_enum, default_value_t = Spread::Alternate)]
    spread: Spread,
    /// `--section cache`: the cache budgets, in percent of the table's
    /// uncompressed bytes (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "PERCENT", default_values_t = [1u64, 5, 25])]
    budgets: Vec<u64>,
    /// `--section cache` and `collective`: use at most this many GPUs (all
    /// by default; the cache's table has rows for one GPU and for all of
    /// them).
    #[arg(long, default_value_t = 8)]
    gpus: usize,
}

pub fn run(args: Args) -> Result<()> {
    if args.input.file.is_some() {
        return file::run(&args);
    }
    for (given, flag) in [
        (args.json, "--json"),
        (!args.input.tensors.is_empty(), "--tensor"),
        (args.input.dtype.is_some(), "--dtype"),
        (args.input.shape.is_some(), "--shape"),
    ] {
        if given {
            return Err(ibp::Error::invalid(format!(
                "{flag} applies to `ibp bench FILE`; give the file to benchmark"
            )));
        }
    }
    suite(args)
}

#[cfg(not(feature = "cuda"))]
fn suite(_: Args) -> Result<()> {
    Err(ibp::Error::unsupported(
        "ibp bench needs the `cuda` feature: build with --features cuda",
    ))
}

/// A two-way experiment flag `name`: `None` when not given, `Some(true)`
/// for `words[0]`, `Some(false)` for `words[1]`, an error otherwise.
#[cfg(feature = "cuda")]
fn either(value: Option<&str>, name: &str, words: [&str; 2]) -> Result<Option<bool>> {
    match value {
        None => Ok(None),
        Some(v) if v == words[0] => Ok(Some(true)),
        Some(v) if v == words[1] => Ok(Some(false)),
        Some(other) => Err(ibp::Error::invalid(format!(
            "{name} {other}: use {} or {}",
            words[0], words[1]
        ))),
    }
}

/// The decoder options the hidden experiment flags ask for.
#[cfg(feature = "cuda")]
pub(super) fn decode_options(args: &Args) -> Result<ibp::gpu::DecodeOptions> {
    let mut opts = ibp::gpu::DecodeOptions::default().with_fast_paths(!args.no_fast_paths);
    if let Some(s) = args.max_sms {
        opts = opts.with_max_sms(s);
    }
    if let Some(b) = args.ring_bytes {
        opts = opts.with_ring_bytes(b);
    }
    if let Some(w) = args.warps {
        opts = opts.with_warps_per_block(w);
    }
    if let Some(on) = either(args.pairs.as_deref(), "--pairs", ["on", "off"])? {
        opts = opts.with_pairs(on);
    }
    if let Some(on) = either(args.quads.as_deref(), "--quads", ["on", "off"])? {
        opts = opts.with_quads(on);
    }
    if let Some(on) = either(args.lanes.as_deref(), "--lanes", ["on", "off"])? {
        opts = opts.with_lanes(on);
    }
    if let Some(shared) = either(
        args.stream_book.as_deref(),
        "--stream-book",
        ["shared", "global"],
    )? {
        opts = opts.with_stream_book(shared);
    }
    if let Some(on) = either(args.uniform.as_deref(), "--uniform", ["on", "off"])? {
        opts = opts.with_uniform(on);
    }
    if let Some(cp) = either(args.fetch.as_deref(), "--fetch", ["cp-async", "load-store"])? {
        opts = opts.with_fetch(if cp {
            ibp::gpu::Fetch::CpAsync
        } else {
            ibp::gpu::Fetch::LoadStore
        });
    }
    Ok(opts)
}

/// Bytes of each DMA piece the DMA paths are measured with.
#[cfg(feature = "cuda")]
fn dma_piece_bytes(args: &Args) -> usize {
    args.dma_piece_mib
        .map_or(ibp::gpu::DEFAULT_DMA_PIECE_BYTES, |m| m.max(1) << 20)
}

#[cfg(feature = "cuda")]
fn suite(args: Args) -> Result<()> {
    use cust::stream::{Stream, StreamFlags};
    use ibp::gpu::Gpu;

    check_peer_flags(&args)?;
    check_sweep_flags(&args)?;
    // Before the GPU: a missing library is the first thing to report.
    let peers = peers::Peers::load(&args.peers)?;
    let gpu = Gpu::first()?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)
        .map_err(|e| ibp::Error::cuda(e.to_string()))?;
    let opts = decode_options(&args)?;
    let b = decode::Bench {
        gpu: &gpu,
        stream: &stream,
        opts: &opts,
        dma_piece: dma_piece_bytes(&args),
    };
    let (h2d, zc) = measure_link(&gpu, &stream)?;
    if let Some(pt) = &args.point {
        return measure_point(&b, args.rows, pt);
    }
    let (decode, compress) = match args.section.as_str() {
        "all" => (true, true),
        "decode" | "device" => (true, false),
        "compress" | "peers" | "cache" | "kv" | "collective" | "float" => {
            (false, args.section == "compress")
        }
        other => {
            return Err(ibp::Error::invalid(format!(
                "--section {other}: use all, decode, device, compress, float, peers, cache, kv or collective"
            )));
        }
    };
    let info = gpu.info().clone();
    let mut md = header(&args, &info, peers.is_some(), decode, h2d, zc);
    let mut picture = plot::BenchPlot {
        gpu: info.name.clone(),
        dma_copy: Some(h2d / 1e9),
        zero_copy: Some(zc / 1e9),
        ..Default::default()
    };
    if compress {
        compress::section(
            &gpu,
            args.real_bytes,
            h2d,
            zc,
            args.stages,
            args.only.as_deref(),
            &mut md,
        )?;
    }
    if args.section == "float" {
        float::section(
            &gpu,
            args.real_bytes,
            args.sweep_only,
            args.no_sweep,
            &mut md,
        )?;
    } else if args.section == "cache" {
        cache_section(&gpu, &args, &mut md)?;
    } else if args.section == "collective" {
        collective_section(&args, &mut md)?;
    } else if args.section == "kv" {
        kv::section(&gpu, &stream, zc, &mut md)?;
    } else if args.section == "device" {
        device_section(&b, &args, &mut md)?;
    } else if decode {
        decode::decode_sections(&b, &args, zc, &mut md, &mut picture)?;
    }
    if let Some(p) = &peers {
        peers::section(
            &gpu,
            &stream,
            p,
            args.real_bytes,
            &opts,
            args.only.as_deref(),
            &mut md,
        )?;
    }
    println!("{md}");
    write_results(&args, &info.name, &md, &picture)
}

/// `--section device`: the device-resident tables, then the row-length
/// sweep (`--sweep-only`: the sweep alone; `--no-sweep`: without it), both
/// against one device copy rate measured first.
#[cfg(feature = "cuda")]
fn device_section(b: &decode::Bench, args: &Args, md: &mut String) -> Result<()> {
    let copy_rate = decode::device_copy_rate(b.stream)?;
    if !args.sweep_only {
        decode::device_tables_section(b, args, copy_rate, md)?;
    }
    if !args.no_sweep {
        sweep::run(b, args, copy_rate, md)?;
    }
    Ok(())
}

/// `--peers` and `--section peers` need each other (and the real tables).
#[cfg(feature = "cuda")]
fn check_peer_flags(args: &Args) -> Result<()> {
    if !args.peers.peers.is_empty() && (args.no_real || args.section == "compress") {
        return Err(ibp::Error::invalid(
            "--peers compares decoders on the real tables: drop --no-real, and use --section all, decode or peers",
        ));
    }
    if args.section == "peers" && args.peers.peers.is_empty() {
        return Err(ibp::Error::invalid(
            "--section peers needs a peer: add --peers nvcomp",
        ));
    }
    Ok(())
}

/// The sweep's options apply to `--section device` alone.
#[cfg(feature = "cuda")]
fn check_sweep_flags(args: &Args) -> Result<()> {
    if args.section == "float"
        && !(args.sweep_rows.is_some()
            || args.sweep_chunks.is_some()
            || args.sweep_savings.is_some()
            || args.sweep_mib != 128)
    {
        return Ok(());
    }
    let given = args.sweep_only
        || args.no_sweep
        || args.sweep_rows.is_some()
        || args.sweep_chunks.is_some()
        || args.sweep_savings.is_some()
        || args.sweep_mib != 128;
    if given && args.section != "device" {
        return Err(ibp::Error::invalid(
            "the --sweep-* options and --no-sweep apply to --section device (--sweep-only and --no-sweep to --section float too)",
        ));
    }
    Ok(())
}

/// This machine's PCIe in bytes per second: a pinned host-to-device copy
/// of 1 GiB and ibp's zero-copy kernel reading 1 GiB, printed on stderr.
#[cfg(feature = "cuda")]
fn measure_link(gpu: &ibp::gpu::Gpu, stream: &cust::stream::Stream) -> Result<(f64, f64)> {
    use ibp_cli::measure::{measure_h2d_copy, measure_zero_copy_read};
    let link_bytes = 1usize << 30;
    let h2d = link_bytes as f64 / measure_h2d_copy(stream, link_bytes)?;
    let zc = (link_bytes / 1536 * 1536) as f64 / measure_zero_copy_read(gpu, stream, link_bytes)?;
    eprintln!(
        "PCIe on this machine: pinned host-to-device copy {:.1} GB/s, zero-copy kernel read {:.1} GB/s",
        h2d / 1e9,
        zc / 1e9
    );
    Ok((h2d, zc))
}

/// `--point SIZE,SAVINGS,pinned|device[,CHUNK]`: one decode, its rate
/// printed. Without CHUNK, 4-byte chunks: the figure-7 dataset that
/// `--point` of every earlier commit measures (the same bytes), so that a
/// baseline binary measures the same cells (scripts/sweep-points.sh).
#[cfg(feature = "cuda")]
fn measure_point(b: &decode::Bench, rows: usize, pt: &str) -> Result<()> {
    use ibp::gpu::Residency;
    let parts: Vec<&str> = pt.split(',').collect();
    let bad = || ibp::Error::invalid("--point wants SIZE,SAVINGS,pinned|device[,CHUNK]");
    let (size, s, res, chunk) = match parts.as_slice() {
        [a, b, c, rest @ ..] if rest.len() <= 1 => (
            a.parse::<usize>().map_err(|_| bad())?,
            b.parse::<f64>().map_err(|_| bad())?,
            *c,
            match rest {
                [k] => k.parse::<u32>().map_err(|_| bad())?,
                _ => 4,
            },
        ),
        _ => return Err(bad()),
    };
    let residency = if res == "device" {
        Residency::Device
    } else {
        Residency::Pinned
    };
    let (data, cb) = ibp_testdata::synthetic_dataset(rows, size, chunk, s, 11)?;
    let m = b.packed(&data, size, &cb, residency)?;
    println!(
        "{size} B at {s}: {:.1} GB/s decoded, {:.1} GB/s moved",
        m.decoded_rate() / 1e9,
        m.moved_rate() / 1e9
    );
    Ok(())
}

/// The results file's title and its list of what was measured where: the
/// GPU, driver, commit, date, command and this machine's PCIe rates.
#[cfg(feature = "cuda")]
fn header(
    args: &Args,
    info: &ibp::gpu::DeviceInfo,
    peers: bool,
    decode: bool,
    h2d: f64,
    zc: f64,
) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let commit = option_env!("IBP_GIT_COMMIT").unwrap_or("unknown");
    let date = utc_now();
    let _ = writeln!(md, "# ibp GPU benchmarks: {}\n", info.name);
    let flags = format!(
        "{}{}{}",
        if args.section == "cache" {
            format!(
                " --vertices {} --edges {} --batches {} --spread {} --budgets {} --gpus {}",
                args.vertices,
                args.edges,
                args.batches,
                args.spread.name(),
                args.budgets
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                args.gpus
            )
        } else if args.section == "collective" {
            format!(" --real-bytes {} --gpus {}", args.real_bytes, args.gpus)
        } else if args.real_bytes != 1 << 30 {
            format!(" --real-bytes {}", args.real_bytes)
        } else {
            String::new()
        },
        if args.stages { " --stages" } else { "" },
        if peers {
            format!(" --peers nvcomp --peers-budget {}", args.peers.peers_budget)
        } else {
            String::new()
        }
    );
    // A run cut down to some tables says so.
    let flags = match &args.only {
        Some(o) => format!("{flags} --only \"{o}\""),
        None => flags,
    };
    let flags = match (&args.lanes, &args.pairs) {
        (Some(l), Some(p)) => format!("{flags} --lanes {l} --pairs {p}"),
        (Some(l), None) => format!("{flags} --lanes {l}"),
        (None, Some(p)) => format!("{flags} --pairs {p}"),
        (None, None) => flags,
    };
    let flags = match &args.quads {
        Some(q) => format!("{flags} --quads {q}"),
        None => flags,
    };
    let flags = match &args.uniform {
        Some(u) => format!("{flags} --uniform {u}"),
        None => flags,
    };
    let flags = match args.dma_piece_mib {
        Some(m) => format!("{flags} --dma-piece-mib {m}"),
        None => flags,
    };
    let flags = if args.section == "device" {
        let sweep = if args.no_sweep {
            " --no-sweep".to_string()
        } else {
            sweep::Spec::from_args(args).flags()
        };
        format!(
            "{flags}{}{sweep}",
            if args.sweep_only { " --sweep-only" } else { "" }
        )
    } else {
        flags
    };
    let _ = writeln!(
        md,
        "- GPU: {} ({} SMs, compute capability {}.{})\n- driver: {} (CUDA {}.{})\n- ibp commit: {commit}\n- date: {date}\n- command: `ibp bench --rows {} --section {}{}`\n{}- this machine's PCIe, measured in the same run: pinned host-to-device copy {:.1} GB/s (1 GiB, DMA); zero-copy kernel read {:.1} GB/s (1 GiB, ibp's bit-counting kernel)\n",
        info.name,
        info.sm_count,
        info.compute_capability.0,
        info.compute_capability.1,
        driver_release().unwrap_or_else(|| "release unknown".into()),
        info.driver_version / 1000,
        (info.driver_version % 1000) / 10,
        args.rows,
        args.section,
        flags,
        if decode {
            "- decode timing: CUDA events, median of 9 calls after 2 warm-ups; every configuration is decoded and compared with the original bytes first.\n"
        } else {
            ""
        },
        h2d / 1e9,
        zc / 1e9
    );
    md
}

/// `--section cache`: the feature cache on `gpu` and up to `--gpus` of
/// this machine's GPUs.
#[cfg(feature = "cuda")]
fn cache_section(gpu: &ibp::gpu::Gpu, args: &Args, md: &mut String) -> Result<()> {
    use std::fmt::Write as _;
    let mut more = Vec::new();
    for o in 1..ibp::gpu::Gpu::count().min(args.gpus as u32) {
        more.push(ibp::gpu::Gpu::new(o)?);
    }
    gpu.make_current()?;
    let all: Vec<&ibp::gpu::Gpu> = std::iter::once(gpu).chain(&more).collect();
    let a = cache::CacheArgs {
        vertices: args.vertices,
        edges: args.edges,
        batches: args.batches,
        max_gpus: args.gpus,
        only: args.only.clone(),
        budgets: args.budgets.clone(),
        spread: args.spread,
        uniform: either(args.uniform.as_deref(), "--uniform", ["on", "off"])?,
    };
    cache::section(&all, &a, md)?;
    if let Some(g) = more.first() {
        let _ = writeln!(
            md,
            "- second GPU: {} ({} SMs)\n",
            g.info().name,
            g.info().sm_count
        );
    }
    Ok(())
}

/// `--section collective`: the compressed collectives on up to `--gpus`
/// GPUs (feature `nccl`).
#[cfg(feature = "nccl")]
fn collective_section(args: &Args, md: &mut String) -> Result<()> {
    collective::section(args.gpus, args.real_bytes, md)
}

#[cfg(all(feature = "cuda", not(feature = "nccl")))]
fn collective_section(_: &Args, _: &mut String) -> Result<()> {
    Err(ibp::Error::unsupported(
        "--section collective needs the `nccl` feature: build ibp-cli with --features nccl",
    ))
}

/// Writes the results file (`--out`, or docs/results/<gpu>[-cache|-kv|-collective].md)
/// and, when the run decoded, its plot beside it.
#[cfg(feature = "cuda")]
fn write_results(args: &Args, gpu_name: &str, md: &str, picture: &plot::BenchPlot) -> Result<()> {
    let path = args.out.clone().unwrap_or_else(|| {
        let suffix = match args.section.as_str() {
            "cache" => "-cache",
            "kv" => "-kv",
            "collective" => "-collective",
            "float" => "-float",
            _ => "",
        };
        PathBuf::from(format!("docs/results/{}{suffix}.md", slug(gpu_name)))
    });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| ibp::Error::io(format!("creating {}", dir.display()), e))?;
    }
    std::fs::write(&path, md)
        .map_err(|e| ibp::Error::io(format!("writing {}", path.display()), e))?;
    eprintln!("results written to {}", path.display());
    if !picture.grid.is_empty() || !picture.real.is_empty() {
        let svg = plot::svg_path(&path);
        super::plot::write(&svg, &[picture.chart()])?;
        eprintln!("plot written to {}", svg.display());
    }
    Ok(())
}

/// The NVIDIA kernel driver's release (e.g. "580.159.04"), from
/// `/proc/driver/nvidia/version` on Linux.
#[cfg(feature = "cuda")]
fn driver_release() -> Option<String> {
    let v = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    v.split_whitespace()
        .find(|w| w.split('.').count() >= 2 && w.split('.').all(|p| p.parse::<u32>().is_ok()))
        .map(str::to_string)
}

/// Cora (embedded) and, when found, MiniLM's word embeddings in f32 and bf16
/// (`ibp_testdata::real_tables`, the tables the GPU tests use too).
#[cfg(feature = "cuda")]
pub(super) fn real_tables() -> Result<Vec<(String, Vec<u8>, usize)>> {
    let dir = std::env::var_os("IBP_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".tools/data"));
    let path = dir.join("model.safetensors");
    let model = path.is_file().then_some(path.as_path());
    if model.is_none() {
        eprintln!(
            "MiniLM skipped: {} not found (run scripts/setup.sh)",
            path.display()
        );
    }
    ibp_testdata::real_tables(super::input::EMBEDDED_CORA, model)
}

#[cfg(feature = "cuda")]
fn slug(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// Current UTC date and time, formatted without a date library.
#[cfg(feature = "cuda")]
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = secs / 86_400;
    let (h, m) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Civil-from-days (proleptic Gregorian).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02} UTC")
}

/// How several GPUs share a workload's batches.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// Each GPU gathers whole batches in turn (batch b on GPU b mod n).
    Alternate,
    /// Every batch cut into one share a GPU of equal predicted time
    /// (`FeatureCache::shares`, `gather_shares`).
    Split,
}

#[cfg(feature = "cuda")]
impl Spread {
    /// The option's value, for the results' command line.
    pub fn name(self) -> &'static str {
        match self {
            Spread::Alternate => "alternate",
            Spread::Split => "split",
        }
    }
}
