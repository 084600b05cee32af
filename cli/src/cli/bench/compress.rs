//! `ibp bench --section compress`: GPU fit and compression against the
//! issue's targets (host-resident input at 40 GB/s or more, device-resident
//! at 1 TB/s or more), with the CPU on the same machine alongside. Every
//! configuration is checked byte for byte against the CPU encoder first.

#![cfg(feature = "cuda")]

use std::fmt::Write as _;
use std::time::Instant;

use cust::memory::DeviceBuffer;
use ibp::fit::{FitOptions, Sample};
use ibp::gpu::{
    Compressor, DeviceCompressed, Fitter, Gpu, HostCompressor, HostOptions, HostRead, PinnedBuffer,
    Registered,
};
use ibp::layout::Layout;
use ibp::{Error, Result, Rows};

/// Median wall time of `reps` calls after one warm-up.
fn median(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[reps / 2])
}

fn check(ok: bool, what: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::corrupt(format!(
            "benchmark self-check failed: {what} differs from the CPU"
        )))
    }
}

/// Append the compression section to `md`.
pub fn section(
    gpu: &Gpu,
    real_bytes: usize,
    h2d: f64,
    zc: f64,
    stages: bool,
    only: Option<&str>,
    md: &mut String,
) -> Result<()> {
    let mut stage_md = String::from(
        "\n### Stages on device-resident data\n\nThe sampled fit's phases first (wall-clock time inside `Fitter::fit_blocking` with a sample of 1/16, median of 5; its \"rest on the host\" is the fit's time less the other two), then each kernel launched alone and synchronised (median of 5).\n\n| data | stage | ms | input GB/s |\n| --- | --- | --- | --- |\n",
    );
    let _ = writeln!(
        md,
        "## Fit and compression\n\nEach table is replicated to at least {} bytes. Wall-clock time of the public calls, median of 5 after a warm-up, with output buffers allocated once and reused (`Compressor::compress_into_blocking`, `HostCompressor`; in *fit + compress* the codebook's device memory too, `Compressor::replace`; *one-shot* is `Compressor::compress_host_blocking`, which allocates its buffers, 3 × 128 MiB of device memory and 64 MiB pinned, on every call); every configuration was first compared byte for byte with the CPU encoder (`compress_packed`, `compress_fixed`) and the GPU fit with the CPU fit. Rates are input bytes per second.\n\n- *fit all*: `Fitter::fit_blocking` counting and weighing every tensor; *fit 1/16*: on the sample of every 16th tensor (`Sample::Fraction(1/16)`), which the CPU fit accepts too and which chooses the same codebook here.\n- *device*: the rows in device memory; `Compressor::compress_blocking` to the packed layout, output in device memory (rows of whole 4-byte words under a codebook at least a fifth invariant: encoded into scratch slots, nothing measured first, then moved to their offsets by `ibp_compact`; others measured, cleared where writes meet and encoded); *compress fixed*: to the fixed-stride layout (rows of whole 4-byte words written straight into their slots by `ibp_encode_slots_c*`, nothing measured first; others measured, zeroed and encoded), checked also in a buffer reused from a packed run.\n- *host*: the rows in pinned host memory; `Compressor::compress_host_blocking` (64 MiB batches, each read once, by DMA into a device batch buffer (`HostRead::Dma`, the default) or zero-copy by the size kernel (`HostRead::ZeroCopy`); three batches in flight; compressed batches copied back to pinned memory and handed to a callback that does nothing else). *registered*: the same from ordinary (pageable) memory registered for the call with `Registered`, registration included.\n- *CPU*: `ibp::fit::fit` plus `compress_packed` on this machine's CPU ({} threads), one run.\n- PCIe on this machine: pinned host-to-device copy {:.1} GB/s, zero-copy kernel read {:.1} GB/s.\n",
        real_bytes,
        rayon::current_num_threads(),
        h2d / 1e9,
        zc / 1e9
    );
    let _ = writeln!(
        md,
        "| data | bytes | chunk | savings | device: fit all | device: fit 1/16 | device: compress packed | device: compress fixed | **device: fit 1/16 + compress** | device: fit 1/16 + compress fixed | device: fit all + compress | host: fit 1/16 | host: compress (DMA) | host: compress (zero-copy) | host: compress (one-shot) | **host: fit 1/16 + compress** | host: fit all + compress | registered: compress | CPU: fit + compress |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let mut tables = super::real_tables()?;
    for (size, s) in [(4096usize, 0.5), (4096, 0.9)] {
        let rows = (real_bytes / size).max(1);
        let (data, _) = ibp_testdata::figure7_dataset(rows, size, s, 3)?;
        tables.push((
            format!("synthetic {size} B, {:.0}% invariant", 100.0 * s),
            data,
            size,
        ));
    }
    for (name, data, l) in tables {
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let reps = real_bytes.div_ceil(data.len()).max(1);
        let big = if reps > 1 { data.repeat(reps) } else { data };
        eprintln!("compression: {name} ({} MB)...", big.len() >> 20);
        let t = measure(gpu, &big, l)?;
        if stages {
            stage_rows(gpu, &name, &big, l, &mut stage_md)?;
        }
        let gbs = |s: f64| rate(big.len(), s);
        let _ = writeln!(
            md,
            "| {name} (×{reps}) | {} MB | {} B | {:.1}% | {} | {} | {} | {} | **{}** | {} | {} | {} | {} | {} | {} | **{}** | {} | {} | {:.2} |",
            big.len() >> 20,
            t.chunk_bytes,
            100.0 * t.savings,
            gbs(t.d_fit_all),
            gbs(t.d_fit_part),
            gbs(t.d_packed),
            gbs(t.d_fixed),
            gbs(t.d_total),
            gbs(t.d_total_fixed),
            gbs(t.d_total_all),
            gbs(t.h_fit),
            gbs(t.h_comp),
            gbs(t.h_comp_zc),
            gbs(t.h_once),
            gbs(t.h_total),
            gbs(t.h_total_all),
            gbs(t.reg),
            t.cpu_rate / 1e9,
        );
        eprintln!(
            "  device fit 1/16 + compress {} GB/s, host {} GB/s, CPU {:.2} GB/s",
            gbs(t.d_total),
            gbs(t.h_total),
            t.cpu_rate / 1e9
        );
    }
    let _ = writeln!(
        md,
        "\nAll rates in GB/s (10^9 bytes per second) of input.\n"
    );
    if stages {
        md.push_str(&stage_md);
    }
    Ok(())
}

/// GB/s of `bytes` of input in `seconds`, as the tables print it.
fn rate(bytes: usize, seconds: f64) -> String {
    format!("{:.1}", bytes as f64 / seconds / 1e9)
}

/// `--stages`: each kernel stage of compressing `big` timed alone, as rows
/// of the stages table.
fn stage_rows(gpu: &Gpu, name: &str, big: &[u8], l: usize, stage_md: &mut String) -> Result<()> {
    let device = DeviceBuffer::from_slice(big).map_err(|e| Error::cuda(e.to_string()))?;
    let cb = ibp::fit::fit(Rows::new(big, l)?, &FitOptions::default())?.codebook;
    let comp = Compressor::new(gpu, &cb)?;
    for (stage, t) in comp.profile_stages(&device, 5)? {
        let _ = writeln!(
            stage_md,
            "| {name} | {stage} | {:.3} | {} |",
            t * 1e3,
            rate(big.len(), t)
        );
    }
    Ok(())
}

/// What [`measure`] times, in seconds per call (median of 5), with the
/// CPU's rate in bytes per second; see the section's notes for each.
#[derive(Default)]
pub struct Times {
    pub chunk_bytes: u32,
    pub savings: f64,
    pub cpu_rate: f64,
    pub d_fit_all: f64,
    pub d_fit_part: f64,
    pub d_packed: f64,
    pub d_fixed: f64,
    pub d_total: f64,
    pub d_total_fixed: f64,
    pub d_total_all: f64,
    pub h_fit: f64,
    pub h_comp: f64,
    pub h_comp_zc: f64,
    pub h_once: f64,
    pub h_total: f64,
    pub h_total_all: f64,
    pub reg: f64,
}

/// The CPU's fit and packed compression of the input: what the GPU must
/// reproduce.
struct CpuReference {
    fit: ibp::fit::Fit,
    /// The fit on the sample of every 16th row.
    sample_fit: ibp::fit::Fit,
    packed: ibp::layout::Packed,
    /// Input bytes per second of the full fit plus compression.
    rate: f64,
}

impl CpuReference {
    fn run(rows: Rows<'_>, sample: &FitOptions) -> Result<CpuReference> {
        let t = Instant::now();
        let fit = ibp::fit::fit(rows, &FitOptions::default())?;
        let packed = ibp::layout::compress_packed(
            &fit.codebook,
            rows,
            &ibp::layout::LayoutOptions::default(),
        )?;
        let rate = rows.bytes().len() as f64 / t.elapsed().as_secs_f64();
        let sample_fit = ibp::fit::fit(rows, sample)?;
        Ok(CpuReference {
            fit,
            sample_fit,
            packed,
            rate,
        })
    }
}

/// The input in device and in pinned host memory, and the two fits timed:
/// of every row and of the sample.
struct Inputs<'a> {
    gpu: &'a Gpu,
    /// One fitter for every fit: its buffers stay warm, as a loop's would.
    fitter: Fitter<'a>,
    l: usize,
    device: DeviceBuffer<u8>,
    pinned: PinnedBuffer<u8>,
    all: FitOptions,
    part: FitOptions,
}

/// Fit and compress `big` (rows of `l` bytes) every way the section
/// measures, each checked byte for byte against the CPU first (an error of
/// kind `Corrupt` when one differs).
pub fn measure(gpu: &Gpu, big: &[u8], l: usize) -> Result<Times> {
    let part = FitOptions::default().with_sample(Sample::Fraction(1.0 / 16.0));
    let rows = Rows::new(big, l)?;
    let cpu = CpuReference::run(rows, &part)?;
    let inputs = Inputs {
        gpu,
        fitter: Fitter::new(gpu),
        l,
        device: DeviceBuffer::from_slice(big).map_err(|e| Error::cuda(e.to_string()))?,
        pinned: PinnedBuffer::from_slice(big)?,
        all: FitOptions::default(),
        part,
    };
    let (gcb, fixed, sampled) = self_checks(&inputs, &cpu, rows)?;
    let mut times = Times {
        chunk_bytes: cpu.fit.codebook.chunk().bytes(),
        savings: 1.0 - cpu.packed.payload.len() as f64 / big.len() as f64,
        cpu_rate: cpu.rate,
        ..Times::default()
    };
    // Buffers are allocated once per configuration and reused, as a
    // service compressing tensor after tensor would.
    let mut dev_out = DeviceCompressed::empty()?;
    time_device(&inputs, &gcb, &mut dev_out, &fixed, &mut times)?;
    // Fit and compress as a loop that does it again and again would: the
    // codebook's device memory reused too (`Compressor::replace`).
    let mut fitted = Compressor::new(gpu, &sampled)?;
    time_device_fits(&inputs, &mut fitted, &mut dev_out, &mut times)?;
    check(
        dev_out.to_packed_blocking()? == cpu.packed,
        "device fit and compression through a replaced codebook",
    )?;
    time_host(&inputs, big, &gcb, &mut fitted, &mut times)?;
    Ok(times)
}

/// The GPU's fits and compressions (device and host input) compared with
/// the CPU's. Returns the CPU codebook on the device, the fixed-stride
/// output and the GPU's sampled fit's codebook.
fn self_checks<'a>(
    i: &Inputs<'a>,
    cpu: &CpuReference,
    rows: Rows<'_>,
) -> Result<(
    Compressor<'a>,
    ibp::layout::FixedStride,
    ibp::codebook::Codebook,
)> {
    let l = i.l;
    let g = i.fitter.fit_blocking(&i.device, l, &i.all)?;
    check(
        g.codebook == cpu.fit.codebook && g.candidates == cpu.fit.candidates,
        "fit (device)",
    )?;
    let g = i.fitter.fit_blocking(&i.pinned, l, &i.part)?;
    check(
        g.codebook == cpu.sample_fit.codebook,
        "sampled fit (pinned)",
    )?;
    let cb = &cpu.fit.codebook;
    let gcb = Compressor::new(i.gpu, cb)?;
    let p = gcb
        .compress_blocking(&i.device, Layout::Packed)?
        .to_packed_blocking()?;
    check(p == cpu.packed, "device compression (packed)")?;
    let f = gcb
        .compress_blocking(&i.device, Layout::FixedStride)?
        .to_fixed_blocking()?;
    check(
        f == ibp::layout::compress_fixed(cb, rows, &ibp::layout::LayoutOptions::default())?,
        "device compression (fixed)",
    )?;
    let h = gcb.compress_host_packed_blocking(&i.pinned, 64 << 20)?;
    check(h == cpu.packed, "host compression")?;
    Ok((gcb, f, g.codebook))
}

/// Device-resident input: the fits alone and the compressions alone.
fn time_device(
    i: &Inputs,
    gcb: &Compressor<'_>,
    dev_out: &mut DeviceCompressed,
    fixed: &ibp::layout::FixedStride,
    t: &mut Times,
) -> Result<()> {
    let (l, device) = (i.l, &i.device);
    t.d_fit_all = median(5, || i.fitter.fit_blocking(device, l, &i.all).map(drop))?;
    t.d_fit_part = median(5, || i.fitter.fit_blocking(device, l, &i.part).map(drop))?;
    t.d_packed = median(5, || {
        gcb.compress_into_blocking(device, Layout::Packed, dev_out)
    })?;
    t.d_fixed = median(5, || {
        gcb.compress_into_blocking(device, Layout::FixedStride, dev_out)
    })?;
    // The fixed-stride output written over the packed one's stale bytes
    // (no memset before it when rows are whole 4-byte words) is checked
    // too.
    gcb.compress_into_blocking(device, Layout::Packed, dev_out)?;
    gcb.compress_into_blocking(device, Layout::FixedStride, dev_out)?;
    check(
        dev_out.to_fixed_blocking()? == *fixed,
        "device compression (fixed, into a reused buffer)",
    )
}

/// Device-resident input: a fit then compression through the codebook
/// `fitted`, replaced each time.
fn time_device_fits(
    i: &Inputs,
    fitted: &mut Compressor<'_>,
    dev_out: &mut DeviceCompressed,
    t: &mut Times,
) -> Result<()> {
    let (l, device) = (i.l, &i.device);
    let mut fit_and_compress = |opts: &FitOptions, layout: Layout| {
        median(5, || {
            let fit = i.fitter.fit_blocking(device, l, opts)?;
            fitted.replace(&fit.codebook)?;
            fitted.compress_into_blocking(device, layout, dev_out)
        })
    };
    t.d_total = fit_and_compress(&i.part, Layout::Packed)?;
    t.d_total_fixed = fit_and_compress(&i.part, Layout::FixedStride)?;
    t.d_total_all = fit_and_compress(&i.all, Layout::Packed)?;
    Ok(())
}

/// Host-resident input (pinned, and pageable memory registered for the
/// call): the sampled fit, compression (DMA, zero-copy, one-shot) and fit
/// plus compression.
fn time_host(
    i: &Inputs,
    big: &[u8],
    gcb: &Compressor<'_>,
    fitted: &mut Compressor<'_>,
    t: &mut Times,
) -> Result<()> {
    let (l, pinned) = (i.l, &i.pinned);
    let host_opts = HostOptions::default();
    let zc_opts = HostOptions {
        read: HostRead::ZeroCopy,
        ..HostOptions::default()
    };
    let mut hc = HostCompressor::new(l, &host_opts)?;
    let mut hc_zc = HostCompressor::new(l, &zc_opts)?;
    t.h_fit = median(5, || i.fitter.fit_blocking(pinned, l, &i.part).map(drop))?;
    t.h_comp = median(5, || {
        hc.compress_blocking(gcb, pinned, |_| Ok(())).map(drop)
    })?;
    t.h_comp_zc = median(5, || {
        hc_zc.compress_blocking(gcb, pinned, |_| Ok(())).map(drop)
    })?;
    t.h_once = median(5, || {
        gcb.compress_host_blocking(pinned, &host_opts, |_| Ok(()))
            .map(drop)
    })?;
    let mut fit_and_compress = |opts: &FitOptions| {
        median(5, || {
            let fit = i.fitter.fit_blocking(pinned, l, opts)?;
            fitted.replace(&fit.codebook)?;
            hc.compress_blocking(fitted, pinned, |_| Ok(())).map(drop)
        })
    };
    t.h_total = fit_and_compress(&i.part)?;
    t.h_total_all = fit_and_compress(&i.all)?;
    t.reg = median(5, || {
        let r = Registered::new(big)?;
        hc.compress_blocking(gcb, &r, |_| Ok(())).map(drop)
    })?;
    Ok(())
}
