//! `ibp bench`: GPU decompression benchmarks. Prints a table and writes a
//! results file naming the GPU, driver, commit and date. With a FILE, the
//! same measurements on the user's tensors instead ([`super::bench_file`]).

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
    rows: usize,
    /// Skip the real-data rows (Cora, MiniLM).
    #[arg(long)]
    no_real: bool,
    /// Bytes to replicate real tables to (at least); with FILE, the bytes
    /// measured (a smaller selection is replicated to this, a larger one
    /// cut to its first rows).
    #[arg(long, default_value_t = 1 << 30)]
    pub(super) real_bytes: usize,
    /// Use at most this many SMs.
    #[arg(long)]
    max_sms: Option<u32>,
    /// Measure one point only, `SIZE,SAVINGS,pinned|device` (for profilers),
    /// and print its rate instead of writing a results file.
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
    /// With `--section device`, `cache` or `compress`, only the tables whose
    /// name contains this (for profilers).
    #[arg(long, hide = true)]
    only: Option<String>,
    /// With the compression benchmarks, also time each kernel stage alone.
    #[arg(long)]
    stages: bool,
    /// Which benchmarks: `all`, `decode` or `compress` (fit and compression);
    /// `device` runs only the device-resident decodes and gathers (a quick
    /// look at the decode kernel alone); `peers` only the comparison with
    /// `--peers`; `cache` the GPU feature cache (IBP(C/M): graph and Zipf
    /// workloads, its own results file); `kv` the appendable KV store
    /// (append of a decode step, bulk append, gather of random tokens).
    #[arg(long, default_value = "all")]
    pub(super) section: String,
    #[command(flatten)]
    pub(super) peers: super::peers::PeerArgs,
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
    /// `--section cache`: use at most this many GPUs (all by default; the
    /// table has rows for one GPU and for all of them).
    #[arg(long, default_value_t = 8)]
    gpus: usize,
}

pub fn run(args: Args) -> Result<()> {
    if args.input.file.is_some() {
        return super::bench_file::run(&args);
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
    match args.fetch.as_deref() {
        None => {}
        Some("cp-async") => opts = opts.with_fetch(ibp::gpu::Fetch::CpAsync),
        Some("load-store") => opts = opts.with_fetch(ibp::gpu::Fetch::LoadStore),
        Some(other) => {
            return Err(ibp::Error::invalid(format!(
                "--fetch {other}: use cp-async or load-store"
            )));
        }
    }
    Ok(opts)
}

#[cfg(feature = "cuda")]
fn suite(args: Args) -> Result<()> {
    use std::fmt::Write as _;

    use cust::stream::{Stream, StreamFlags};
    use ibp::gpu::bench::{BenchStorage, figure7_dataset, measure_decode};
    use ibp::gpu::{Gpu, Residency};

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
    // Before the GPU: a missing library is the first thing to report.
    let peers = super::peers::Peers::load(&args.peers)?;
    let gpu = Gpu::first()?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)
        .map_err(|e| ibp::Error::cuda(e.to_string()))?;
    let info = gpu.info().clone();
    let opts = decode_options(&args)?;
    use ibp::gpu::bench::{measure_h2d_copy, measure_zero_copy_read};
    let link_bytes = 1usize << 30;
    let h2d = link_bytes as f64 / measure_h2d_copy(&stream, link_bytes)?;
    let zc = (link_bytes / 1536 * 1536) as f64 / measure_zero_copy_read(&gpu, &stream, link_bytes)?;
    eprintln!(
        "PCIe on this machine: pinned host-to-device copy {:.1} GB/s, zero-copy kernel read {:.1} GB/s",
        h2d / 1e9,
        zc / 1e9
    );
    if let Some(pt) = &args.point {
        let parts: Vec<&str> = pt.split(',').collect();
        let bad = || ibp::Error::invalid("--point wants SIZE,SAVINGS,pinned|device");
        let (size, s, res) = match parts.as_slice() {
            [a, b, c] => (
                a.parse::<usize>().map_err(|_| bad())?,
                b.parse::<f64>().map_err(|_| bad())?,
                *c,
            ),
            _ => return Err(bad()),
        };
        let residency = if res == "device" {
            Residency::Device
        } else {
            Residency::Pinned
        };
        let (data, cb) = figure7_dataset(args.rows, size, s, 11)?;
        let m = measure_decode(
            &gpu,
            &stream,
            &data,
            size,
            &cb,
            BenchStorage::PACKED,
            residency,
            false,
            &opts,
        )?;
        println!(
            "{size} B at {s}: {:.1} GB/s decoded, {:.1} GB/s moved",
            m.decoded_rate() / 1e9,
            m.moved_rate() / 1e9
        );
        return Ok(());
    }
    let (decode, compress) = match args.section.as_str() {
        "all" => (true, true),
        "decode" | "device" => (true, false),
        "compress" | "peers" | "cache" | "kv" => (false, args.section == "compress"),
        other => {
            return Err(ibp::Error::invalid(format!(
                "--section {other}: use all, decode, device, compress, peers, cache or kv"
            )));
        }
    };
    let mut md = String::new();
    let mut picture = super::bench_plot::BenchPlot {
        gpu: info.name.clone(),
        dma_copy: Some(h2d / 1e9),
        zero_copy: Some(zc / 1e9),
        ..Default::default()
    };
    let commit = option_env!("IBP_GIT_COMMIT").unwrap_or("unknown");
    let date = utc_now();
    let _ = writeln!(md, "# ibp GPU benchmarks: {}\n", info.name);
    let flags = format!(
        "{}{}{}",
        if args.section == "cache" {
            format!(
                " --vertices {} --edges {} --batches {} --gpus {}",
                args.vertices, args.edges, args.batches, args.gpus
            )
        } else {
            String::new()
        },
        if args.stages { " --stages" } else { "" },
        if peers.is_some() {
            " --peers nvcomp"
        } else {
            ""
        }
    );
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

    if compress {
        super::bench_compress::section(
            &gpu,
            args.real_bytes,
            h2d,
            zc,
            args.stages,
            args.only.as_deref(),
            &mut md,
        )?;
    }
    if args.section == "cache" {
        let mut more = Vec::new();
        for o in 1..ibp::gpu::Gpu::count().min(args.gpus as u32) {
            more.push(ibp::gpu::Gpu::new(o)?);
        }
        gpu.make_current()?;
        let all: Vec<&ibp::gpu::Gpu> = std::iter::once(&gpu).chain(&more).collect();
        let a = super::bench_cache::CacheArgs {
            vertices: args.vertices,
            edges: args.edges,
            batches: args.batches,
            max_gpus: args.gpus,
            only: args.only.clone(),
        };
        super::bench_cache::section(&all, &a, &mut md)?;
        if let Some(g) = more.first() {
            let _ = writeln!(
                md,
                "- second GPU: {} ({} SMs)\n",
                g.info().name,
                g.info().sm_count
            );
        }
    } else if args.section == "kv" {
        super::bench_kv::section(&gpu, &stream, zc, &mut md)?;
    } else if args.section == "device" {
        device_section(&gpu, &stream, &args, &opts, &mut md)?;
    } else if decode {
        decode_sections(&gpu, &stream, &args, &opts, zc, &mut md, &mut picture)?;
    }
    if let Some(p) = &peers {
        super::peers::section(&gpu, &stream, p, args.real_bytes, &opts, &mut md)?;
    }
    println!("{md}");
    let path = args.out.unwrap_or_else(|| {
        let suffix = match args.section.as_str() {
            "cache" => "-cache",
            "kv" => "-kv",
            _ => "",
        };
        PathBuf::from(format!("docs/results/{}{suffix}.md", slug(&info.name)))
    });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| ibp::Error::io(format!("creating {}", dir.display()), e))?;
    }
    std::fs::write(&path, &md)
        .map_err(|e| ibp::Error::io(format!("writing {}", path.display()), e))?;
    eprintln!("results written to {}", path.display());
    if !picture.grid.is_empty() || !picture.real.is_empty() {
        let svg = super::bench_plot::svg_path(&path);
        super::plot::write(&svg, &[picture.chart()])?;
        eprintln!("plot written to {}", svg.display());
    }
    Ok(())
}

/// The decompression benchmarks.
#[cfg(feature = "cuda")]
fn decode_sections(
    gpu: &ibp::gpu::Gpu,
    stream: &cust::stream::Stream,
    args: &Args,
    opts: &ibp::gpu::DecodeOptions,
    zero_copy_rate: f64,
    md: &mut String,
    picture: &mut super::bench_plot::BenchPlot,
) -> Result<()> {
    use std::fmt::Write as _;

    use super::bench_plot::{GridPoint, RealPoint};
    use ibp::gpu::Residency;
    use ibp::gpu::bench::{
        BenchStorage, figure7_dataset, measure_decode, measure_decode_dma, measure_device_copy,
        measure_gather, measure_gather_dma,
    };
    let (gpu, stream, opts) = (gpu, stream, opts);
    // 1. Figure 7: decode from pinned host memory, vs the ideal and a plain gather.
    let _ = writeln!(
        md,
        "## Figure 7 grid: {} tensors decoded from pinned host memory (zero-copy)\n\nGB/s of decoded output. *DMA path*: the packed range copied by DMA into device scratch (8 MB pieces) and decoded from there, copy and decode overlapped. *ideal*: the same kernel reading exactly the compressed bytes with the same aligned line copies and writing the decoded size, decoding nothing; it is measured per layout (packed tensors share lines with their neighbours, fixed-stride slots start on line boundaries). *fixed*: fixed-stride with lengths derived from the participation bits (two round trips per batch); *fixed+lengths*: with a device table of lengths (4 B per tensor). *gather*: the raw path copying uncompressed tensors of the same size.\n",
        args.rows
    );
    let _ = writeln!(
        md,
        "| tensor | savings | packed GB/s | ideal (packed) GB/s | packed / ideal | fixed GB/s | fixed+lengths GB/s | ideal (fixed) GB/s | fixed+lengths / ideal | fixed / ideal | gather GB/s | packed / gather | PCIe GB/s read (packed) | DMA path GB/s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    eprintln!("figure 7 grid ({} tensors per point)...", args.rows);
    for &size in &[256usize, 1024, 4096] {
        let (raw, raw_cb) = figure7_dataset(args.rows, size, 0.0, 7)?;
        let gather = measure_decode(
            gpu,
            stream,
            &raw,
            size,
            &raw_cb,
            BenchStorage::PACKED,
            Residency::Pinned,
            false,
            opts,
        )?;
        for &s in &[0.125, 0.25, 0.5, 0.75, 0.9] {
            let (data, cb) = figure7_dataset(args.rows, size, s, 11)?;
            let m = |layout, ideal| {
                measure_decode(
                    gpu,
                    stream,
                    &data,
                    size,
                    &cb,
                    layout,
                    Residency::Pinned,
                    ideal,
                    opts,
                )
            };
            let packed = m(BenchStorage::PACKED, false)?;
            let ideal = m(BenchStorage::PACKED, true)?;
            let fixed = m(BenchStorage::FIXED, false)?;
            let fixed_l = m(BenchStorage::FIXED_LENGTHS, false)?;
            let dma = measure_decode_dma(
                gpu,
                stream,
                &data,
                size,
                &cb,
                ibp::gpu::DEFAULT_DMA_PIECE_BYTES,
            )?;
            let ideal_f = m(BenchStorage::FIXED_LENGTHS, true)?;
            let real_savings = 1.0 - packed.stored_bytes as f64 / packed.decoded_bytes as f64;
            let _ = writeln!(
                md,
                "| {size} B | {:.1}% | {:.1} | {:.1} | {:.3} | {:.1} | {:.1} | {:.1} | {:.3} | {:.3} | {:.1} | {:.2} | {:.1} | {:.1} |",
                100.0 * real_savings,
                packed.decoded_rate() / 1e9,
                ideal.decoded_rate() / 1e9,
                packed.decoded_rate() / ideal.decoded_rate(),
                fixed.decoded_rate() / 1e9,
                fixed_l.decoded_rate() / 1e9,
                ideal_f.decoded_rate() / 1e9,
                fixed_l.decoded_rate() / ideal_f.decoded_rate(),
                fixed.decoded_rate() / ideal_f.decoded_rate(),
                gather.decoded_rate() / 1e9,
                packed.decoded_rate() / gather.decoded_rate(),
                packed.stored_bytes as f64 / packed.seconds / 1e9,
                dma.decoded_rate() / 1e9,
            );
            picture.grid.push(GridPoint {
                row_bytes: size as u64,
                savings: real_savings,
                packed: packed.decoded_rate() / 1e9,
                ideal: ideal.decoded_rate() / 1e9,
            });
            eprintln!(
                "  {size} B at {:.1}%: packed {:.1} GB/s, ideal {:.1} GB/s",
                100.0 * real_savings,
                packed.decoded_rate() / 1e9,
                ideal.decoded_rate() / 1e9
            );
        }
    }

    // 2. Plain gather of uncompressed rows at several sizes.
    let _ = writeln!(
        md,
        "\n## Uncompressed gather from pinned host memory\n\n| row | GB/s |\n| --- | --- |"
    );
    for &size in &[128usize, 256, 512, 1024, 4096, 16384] {
        let rows = (args.rows * 1024 / size).max(1000);
        let (raw, raw_cb) = figure7_dataset(rows, size, 0.0, 3)?;
        let g = measure_decode(
            gpu,
            stream,
            &raw,
            size,
            &raw_cb,
            BenchStorage::PACKED,
            Residency::Pinned,
            false,
            opts,
        )?;
        let _ = writeln!(md, "| {size} B | {:.1} |", g.decoded_rate() / 1e9);
    }

    // 3. Device-resident decode vs device copy.
    let copy_bytes = 1usize << 30;
    let copy_s = measure_device_copy(stream, copy_bytes)?;
    let copy_rate = 2.0 * copy_bytes as f64 / copy_s;
    let _ = writeln!(
        md,
        "\n## Device-resident decode\n\nDevice-to-device copy of 1 GiB: {:.0} GB/s counting bytes read plus written. *moved*: compressed bytes read plus decoded bytes written per second.\n\n| data | savings | decoded GB/s | moved GB/s | moved / copy |\n| --- | --- | --- | --- | --- |",
        copy_rate / 1e9
    );
    let dev_rows = args.rows * 4;
    for &(size, s) in &[
        (1024usize, 0.125),
        (1024, 0.5),
        (4096, 0.25),
        (4096, 0.5),
        (4096, 0.9),
    ] {
        let (data, cb) = figure7_dataset(dev_rows, size, s, 5)?;
        let d = measure_decode(
            gpu,
            stream,
            &data,
            size,
            &cb,
            BenchStorage::PACKED,
            Residency::Device,
            false,
            opts,
        )?;
        let real = 1.0 - d.stored_bytes as f64 / d.decoded_bytes as f64;
        let _ = writeln!(
            md,
            "| synthetic {size} B × {dev_rows} | {:.1}% | {:.0} | {:.0} | {:.2} |",
            100.0 * real,
            d.decoded_rate() / 1e9,
            d.moved_rate() / 1e9,
            d.moved_rate() / copy_rate
        );
    }

    // 4. Real data.
    if !args.no_real {
        let _ = writeln!(
            md,
            "\n## Real data\n\nRows replicated to at least {} bytes (the tables are smaller); codebook fitted on the original table.\n\n| data | row | chunk | savings | pinned GB/s | pinned ideal GB/s | pinned / ideal | pinned DMA path GB/s | device GB/s | device moved / copy |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            args.real_bytes
        );
        let mut auto_rows = Vec::new();
        let mut gathers = Vec::new();
        for (name, data, row) in real_tables()? {
            let fit = ibp::fit::fit(ibp::Rows::new(&data, row)?, &Default::default())?;
            let reps = args.real_bytes.div_ceil(data.len()).max(1);
            let big = data.repeat(reps);
            let cb = &fit.codebook;
            let p = measure_decode(
                gpu,
                stream,
                &big,
                row,
                cb,
                BenchStorage::PACKED,
                Residency::Pinned,
                false,
                opts,
            )?;
            let ideal = if row % 4 == 0 {
                Some(measure_decode(
                    gpu,
                    stream,
                    &big,
                    row,
                    cb,
                    BenchStorage::PACKED,
                    Residency::Pinned,
                    true,
                    opts,
                )?)
            } else {
                None
            };
            let d = measure_decode(
                gpu,
                stream,
                &big,
                row,
                cb,
                BenchStorage::PACKED,
                Residency::Device,
                false,
                opts,
            )?;
            let dma = measure_decode_dma(
                gpu,
                stream,
                &big,
                row,
                cb,
                ibp::gpu::DEFAULT_DMA_PIECE_BYTES,
            )?;
            let savings = 1.0 - p.stored_bytes as f64 / p.decoded_bytes as f64;
            let _ = writeln!(
                md,
                "| {name} (×{reps}) | {row} B | {} B | {:.1}% | {:.1} | {} | {} | {:.1} | {:.0} | {:.2} |",
                cb.chunk().bytes(),
                100.0 * savings,
                p.decoded_rate() / 1e9,
                ideal
                    .as_ref()
                    .map_or("-".into(), |i| format!("{:.1}", i.decoded_rate() / 1e9)),
                ideal.as_ref().map_or("-".into(), |i| format!(
                    "{:.3}",
                    p.decoded_rate() / i.decoded_rate()
                )),
                dma.decoded_rate() / 1e9,
                d.decoded_rate() / 1e9,
                d.moved_rate() / copy_rate
            );
            picture.real.push(RealPoint {
                name: name.clone(),
                savings,
                pinned: p.decoded_rate() / 1e9,
            });
            eprintln!(
                "  {name}: pinned {:.1} GB/s, device {:.0} GB/s",
                p.decoded_rate() / 1e9,
                d.decoded_rate() / 1e9
            );
            let dec = ibp::gpu::Decoder::new(
                gpu,
                &ibp::gpu::GpuDataset::upload_packed(
                    gpu,
                    cb,
                    &ibp::layout::compress_packed(
                        cb,
                        ibp::Rows::new(&data, row)?,
                        &ibp::layout::LayoutOptions::default(),
                    )?
                    .view(),
                    Residency::Pinned,
                )?,
                opts,
            )?
            .prefers_dma();
            let faster_dma = dma.decoded_rate() > p.decoded_rate();
            auto_rows.push(format!(
                "| {name} | {} | {} | {} |",
                if dec { "DMA" } else { "zero-copy" },
                if faster_dma { "DMA" } else { "zero-copy" },
                if dec == faster_dma { "yes" } else { "no" }
            ));
            gathers.push((name, big, row, fit.codebook.clone()));
        }
        let _ = writeln!(
            md,
            "\n### Which range path `range_auto` takes\n\n| data | range_auto picks | faster in this run | right |\n| --- | --- | --- | --- |"
        );
        for r in &auto_rows {
            let _ = writeln!(md, "{r}");
        }
        // 5. Random gathers of compressed rows.
        let _ = writeln!(
            md,
            "\n## Random gathers of compressed rows\n\nUniform random row ids (8 index sets in rotation), decoded into device memory, checked first. *pinned ideal*: the zero-copy read rate of this run × the table's ratio (what a gather reading exactly the compressed bytes at link speed would deliver). *pinned DMA*: the DMA gather on the same index sets (ids in host memory; the requested tensors restaged on the host into pinned 8 MB pieces, each copied by DMA and decoded from device memory while the next is staged).\n\n| data | batch | pinned GB/s | pinned ideal GB/s | pinned / ideal | device GB/s | pinned DMA GB/s |\n| --- | --- | --- | --- | --- | --- | --- |"
        );
        for (name, big, row, cb) in &gathers {
            for batch in [4096usize, 65536] {
                let p = measure_gather(gpu, stream, big, *row, cb, Residency::Pinned, batch, opts)?;
                let d = measure_gather(gpu, stream, big, *row, cb, Residency::Device, batch, opts)?;
                let piece = ibp::gpu::DEFAULT_DMA_PIECE_BYTES;
                let m = measure_gather_dma(gpu, stream, big, *row, cb, batch, piece, opts)?;
                let ratio = p.decoded_bytes as f64 / p.stored_bytes as f64;
                let ideal = zero_copy_rate * ratio;
                let _ = writeln!(
                    md,
                    "| {name} | {batch} | {:.1} | {:.1} | {:.2} | {:.0} | {:.1} |",
                    p.decoded_rate() / 1e9,
                    ideal / 1e9,
                    p.decoded_rate() / ideal,
                    d.decoded_rate() / 1e9,
                    m.decoded_rate() / 1e9
                );
                eprintln!(
                    "  gather {name} ×{batch}: pinned {:.1} GB/s, device {:.0} GB/s, pinned DMA {:.1} GB/s",
                    p.decoded_rate() / 1e9,
                    d.decoded_rate() / 1e9,
                    m.decoded_rate() / 1e9
                );
            }
        }
    }

    Ok(())
}

/// `--section device`: device-resident decodes (synthetic and real) and
/// device gathers, each with the decoder's geometry.
#[cfg(feature = "cuda")]
fn device_section(
    gpu: &ibp::gpu::Gpu,
    stream: &cust::stream::Stream,
    args: &Args,
    opts: &ibp::gpu::DecodeOptions,
    md: &mut String,
) -> Result<()> {
    use std::fmt::Write as _;

    use ibp::gpu::bench::{
        BenchStorage, figure7_dataset, measure_decode, measure_device_copy, measure_gather,
    };
    use ibp::gpu::{Decoder, GpuDataset, Residency};
    let copy_bytes = 1usize << 30;
    let copy_rate = 2.0 * copy_bytes as f64 / measure_device_copy(stream, copy_bytes)?;
    let _ = writeln!(
        md,
        "## Device-resident decode and gathers\n\nDevice-to-device copy of 1 GiB: {:.0} GB/s counting bytes read plus written. *geometry*: threads per block, blocks, shared bytes per block, batch mode.\n\n| data | savings | range GB/s | moved / copy | gather 4096 GB/s | gather 65536 GB/s | geometry |\n| --- | --- | --- | --- | --- | --- | --- |",
        copy_rate / 1e9
    );
    let mut tables: Vec<(String, Vec<u8>, usize, ibp::codebook::Codebook)> = Vec::new();
    for &(size, s) in &[(1024usize, 0.5), (4096, 0.5), (4096, 0.9)] {
        let (data, cb) = figure7_dataset(args.rows * 4, size, s, 5)?;
        tables.push((
            format!("synthetic {size} B, {}%", s * 100.0),
            data,
            size,
            cb,
        ));
    }
    if !args.no_real {
        for (name, data, row) in real_tables()? {
            let fit = ibp::fit::fit(ibp::Rows::new(&data, row)?, &Default::default())?;
            let reps = args.real_bytes.div_ceil(data.len()).max(1);
            tables.push((name, data.repeat(reps), row, fit.codebook));
        }
    }
    for (name, data, row, cb) in &tables {
        if args
            .only
            .as_ref()
            .is_some_and(|o| !name.contains(o.as_str()))
        {
            continue;
        }
        let d = measure_decode(
            gpu,
            stream,
            data,
            *row,
            cb,
            BenchStorage::PACKED,
            Residency::Device,
            false,
            opts,
        )?;
        let g4 = measure_gather(gpu, stream, data, *row, cb, Residency::Device, 4096, opts)?;
        let g64 = measure_gather(gpu, stream, data, *row, cb, Residency::Device, 65536, opts)?;
        let sample = &data[..data.len().min(row * 4096)];
        let packed = ibp::layout::compress_packed(
            cb,
            ibp::Rows::new(sample, *row)?,
            &ibp::layout::LayoutOptions::default(),
        )?;
        let ds = GpuDataset::upload_packed(gpu, cb, &packed.view(), Residency::Device)?;
        let dec = Decoder::new(gpu, &ds, opts)?;
        let (block, grid, shared) = dec.geometry();
        let savings = 1.0 - d.stored_bytes as f64 / d.decoded_bytes as f64;
        let _ = writeln!(
            md,
            "| {name} | {:.1}% | {:.0} | {:.2} | {:.0} | {:.0} | {block}×{grid}, {shared} B{} |",
            100.0 * savings,
            d.decoded_rate() / 1e9,
            d.moved_rate() / copy_rate,
            g4.decoded_rate() / 1e9,
            g64.decoded_rate() / 1e9,
            if dec.is_batch_mode() { ", batch" } else { "" }
        );
        eprintln!("  {name}: device {:.0} GB/s", d.decoded_rate() / 1e9);
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

/// Cora (embedded) and, when found, MiniLM's word embeddings in f32 and bf16.
#[cfg(feature = "cuda")]
pub(super) fn real_tables() -> Result<Vec<(String, Vec<u8>, usize)>> {
    let mut out = Vec::new();
    let doc = ibp::io::parse(
        super::input::EMBEDDED_CORA,
        ibp::io::SourceFormat::Npz,
        &Default::default(),
    )?;
    let g = &doc.groups[0];
    out.push((
        "Cora features f32".into(),
        g.data.to_vec(),
        g.row_shape(None)?.row_bytes as usize,
    ));
    let dir = std::env::var_os("IBP_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".tools/data"));
    let path = dir.join("model.safetensors");
    if path.is_file() {
        let f = ibp::io::InputFile::open(&path)?;
        let opts =
            ibp::io::ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
        let doc = ibp::io::parse(f.bytes(), ibp::io::SourceFormat::Safetensors, &opts)?;
        let g = &doc.groups[0];
        let row = g.row_shape(None)?.row_bytes as usize;
        let bf16: Vec<u8> = g
            .data
            .as_chunks::<4>()
            .0
            .iter()
            .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
            .collect();
        out.push(("MiniLM word embeddings f32".into(), g.data.to_vec(), row));
        out.push(("MiniLM word embeddings bf16".into(), bf16, row / 2));
    } else {
        eprintln!(
            "MiniLM skipped: {} not found (run scripts/setup.sh)",
            path.display()
        );
    }
    Ok(out)
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
