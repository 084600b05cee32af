//! `ibp bench`'s decode benchmarks: the Figure 7 grid, plain gathers,
//! device-resident decodes, the real tables (`--section decode`) and the
//! device-only look at the kernel (`--section device`).

use std::fmt::Write as _;

use cust::stream::Stream;
use ibp::Result;
use ibp::codebook::Codebook;
use ibp::gpu::{DecodeOptions, Decoder, Gpu, GpuDataset, RangePath, Residency};
use ibp_cli::measure::{
    BenchStorage, DecodeMeasurement, RangeAutoMeasurement, measure_decode, measure_decode_dma,
    measure_device_copy, measure_gather, measure_gather_dma, measure_h2d_pieces,
    measure_range_auto,
};
use ibp_testdata::figure7_dataset;

use super::plot::{BenchPlot, GridPoint, RealPoint};
use super::{Args, real_tables};

/// What every measurement of one run shares: the GPU, its stream and the
/// decoder options of the hidden experiment flags.
pub(super) struct Bench<'a> {
    pub gpu: &'a Gpu,
    pub stream: &'a Stream,
    pub opts: &'a DecodeOptions,
    /// Bytes of each DMA piece of the DMA paths' measurements.
    pub dma_piece: usize,
}

impl Bench<'_> {
    /// [`measure_decode`] of every row of `data`, stored as `storage` and
    /// placed per `residency`; `ideal` reads the compressed bytes and
    /// decodes nothing.
    pub fn decode(
        &self,
        data: &[u8],
        row: usize,
        cb: &Codebook,
        storage: BenchStorage,
        residency: Residency,
        ideal: bool,
    ) -> Result<DecodeMeasurement> {
        measure_decode(
            self.gpu,
            self.stream,
            data,
            row,
            cb,
            storage,
            residency,
            ideal,
            self.opts,
        )
    }

    /// [`Bench::decode`] of the packed layout, decoding (not the ideal).
    pub fn packed(
        &self,
        data: &[u8],
        row: usize,
        cb: &Codebook,
        residency: Residency,
    ) -> Result<DecodeMeasurement> {
        self.decode(data, row, cb, BenchStorage::PACKED, residency, false)
    }

    /// [`measure_gather`] of `batch` random rows.
    pub fn gather(
        &self,
        data: &[u8],
        row: usize,
        cb: &Codebook,
        residency: Residency,
        batch: usize,
    ) -> Result<DecodeMeasurement> {
        measure_gather(
            self.gpu,
            self.stream,
            data,
            row,
            cb,
            residency,
            batch,
            self.opts,
        )
    }

    /// [`measure_decode_dma`] in pieces of the bench's size (with the
    /// default decoder options, as that measurement always uses).
    fn dma(&self, data: &[u8], row: usize, cb: &Codebook) -> Result<DecodeMeasurement> {
        measure_decode_dma(self.gpu, self.stream, data, row, cb, self.dma_piece)
    }
}

/// The fraction of the decoded bytes that storage saved.
fn savings(m: &DecodeMeasurement) -> f64 {
    1.0 - m.stored_bytes as f64 / m.decoded_bytes as f64
}

/// Device-to-device copy rate of 1 GiB, counting bytes read plus written.
pub(super) fn device_copy_rate(stream: &Stream) -> Result<f64> {
    let copy_bytes = 1usize << 30;
    Ok(2.0 * copy_bytes as f64 / measure_device_copy(stream, copy_bytes)?)
}

/// The decompression benchmarks.
pub(super) fn decode_sections(
    b: &Bench,
    args: &Args,
    zero_copy_rate: f64,
    md: &mut String,
    picture: &mut BenchPlot,
) -> Result<()> {
    figure7_grid(b, args.rows, md, picture)?;
    uncompressed_gathers(b, args.rows, md)?;
    let copy_rate = device_resident(b, args.rows, md)?;
    if !args.no_real {
        real_data(b, args.real_bytes, zero_copy_rate, copy_rate, md, picture)?;
    }
    Ok(())
}

/// Section 1, Figure 7: decode from pinned host memory, vs the ideal and
/// a plain gather.
fn figure7_grid(b: &Bench, rows: usize, md: &mut String, picture: &mut BenchPlot) -> Result<()> {
    let _ = writeln!(
        md,
        "## Figure 7 grid: {} tensors decoded from pinned host memory (zero-copy)\n\nGB/s of decoded output. *DMA path*: the packed range copied by DMA into device scratch (pieces of `ibp::gpu::dma_range_piece_bytes`, at most {} MiB) and decoded from there, copy and decode overlapped. *ideal*: the same kernel reading exactly the compressed bytes with the same aligned line copies and writing the decoded size, decoding nothing; it is measured per layout (packed tensors share lines with their neighbours, fixed-stride slots start on line boundaries). *fixed*: fixed-stride with lengths derived from the participation bits (two round trips per batch); *fixed+lengths*: with a device table of lengths (4 B per tensor). *gather*: the raw path copying uncompressed tensors of the same size.\n",
        rows,
        b.dma_piece >> 20
    );
    let _ = writeln!(
        md,
        "| tensor | savings | packed GB/s | ideal (packed) GB/s | packed / ideal | fixed GB/s | fixed+lengths GB/s | ideal (fixed) GB/s | fixed+lengths / ideal | fixed / ideal | gather GB/s | packed / gather | PCIe GB/s read (packed) | DMA path GB/s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    eprintln!("figure 7 grid ({rows} tensors per point)...");
    for &size in &[256usize, 1024, 4096] {
        let (raw, raw_cb) = figure7_dataset(rows, size, 0.0, 7)?;
        let gather = b.packed(&raw, size, &raw_cb, Residency::Pinned)?;
        for &s in &[0.125, 0.25, 0.5, 0.75, 0.9] {
            let (data, cb) = figure7_dataset(rows, size, s, 11)?;
            let m = |layout, ideal| b.decode(&data, size, &cb, layout, Residency::Pinned, ideal);
            let packed = m(BenchStorage::PACKED, false)?;
            let ideal = m(BenchStorage::PACKED, true)?;
            let fixed = m(BenchStorage::FIXED, false)?;
            let fixed_l = m(BenchStorage::FIXED_LENGTHS, false)?;
            let dma = b.dma(&data, size, &cb)?;
            let ideal_f = m(BenchStorage::FIXED_LENGTHS, true)?;
            let real_savings = savings(&packed);
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
    Ok(())
}

/// Section 2: plain gather of uncompressed rows at several sizes.
fn uncompressed_gathers(b: &Bench, rows: usize, md: &mut String) -> Result<()> {
    let _ = writeln!(
        md,
        "\n## Uncompressed gather from pinned host memory\n\n| row | GB/s |\n| --- | --- |"
    );
    for &size in &[128usize, 256, 512, 1024, 4096, 16384] {
        let rows = (rows * 1024 / size).max(1000);
        let (raw, raw_cb) = figure7_dataset(rows, size, 0.0, 3)?;
        let g = b.packed(&raw, size, &raw_cb, Residency::Pinned)?;
        let _ = writeln!(md, "| {size} B | {:.1} |", g.decoded_rate() / 1e9);
    }
    Ok(())
}

/// Section 3: device-resident decode vs device copy. Returns the copy
/// rate.
fn device_resident(b: &Bench, rows: usize, md: &mut String) -> Result<f64> {
    let copy_rate = device_copy_rate(b.stream)?;
    let _ = writeln!(
        md,
        "\n## Device-resident decode\n\nDevice-to-device copy of 1 GiB: {:.0} GB/s counting bytes read plus written. *moved*: compressed bytes read plus decoded bytes written per second.\n\n| data | savings | decoded GB/s | moved GB/s | moved / copy |\n| --- | --- | --- | --- | --- |",
        copy_rate / 1e9
    );
    let dev_rows = rows * 4;
    for &(size, s) in &[
        (1024usize, 0.125),
        (1024, 0.5),
        (4096, 0.25),
        (4096, 0.5),
        (4096, 0.9),
    ] {
        let (data, cb) = figure7_dataset(dev_rows, size, s, 5)?;
        let d = b.packed(&data, size, &cb, Residency::Device)?;
        let _ = writeln!(
            md,
            "| synthetic {size} B × {dev_rows} | {:.1}% | {:.0} | {:.0} | {:.2} |",
            100.0 * savings(&d),
            d.decoded_rate() / 1e9,
            d.moved_rate() / 1e9,
            d.moved_rate() / copy_rate
        );
    }
    Ok(copy_rate)
}

/// A table as measured: real ones replicated to the measured size, with
/// the codebook fitted on the original.
struct RealTable {
    name: String,
    big: Vec<u8>,
    row: usize,
    cb: Codebook,
}

/// Section 4, real data: range decodes, which range path `range_auto`
/// takes, and section 5, random gathers of compressed rows.
fn real_data(
    b: &Bench,
    real_bytes: usize,
    zero_copy_rate: f64,
    copy_rate: f64,
    md: &mut String,
    picture: &mut BenchPlot,
) -> Result<()> {
    let _ = writeln!(
        md,
        "\n## Real data\n\nRows replicated to at least {} bytes (the tables are smaller); codebook fitted on the original table. *DMA copies alone*: the DMA path's copies of the stored bytes in the same pieces (`ibp::gpu::dma_range_piece_bytes`) with no decode, as decoded bytes a second (its ceiling when each piece's decode hides behind the next copy).\n\n| data | row | chunk | savings | pinned GB/s | pinned ideal GB/s | pinned / ideal | pinned DMA path GB/s | DMA copies alone GB/s | DMA path / copies alone | device GB/s | device moved / copy |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        real_bytes
    );
    let mut auto_rows = Vec::new();
    let mut gathers = Vec::new();
    for (name, data, row) in real_tables()? {
        let fit = ibp::fit::fit(ibp::Rows::new(&data, row)?, &Default::default())?;
        let reps = real_bytes.div_ceil(data.len()).max(1);
        let table = RealTable {
            big: data.repeat(reps),
            name,
            row,
            cb: fit.codebook,
        };
        let (zero_copy, dma) = real_range_row(b, &table, reps, copy_rate, md, picture)?;
        let a = measure_range_auto(
            b.gpu,
            b.stream,
            &table.big,
            row,
            &table.cb,
            b.dma_piece,
            b.opts,
        )?;
        auto_rows.push(range_auto_row(&table.name, row, &a, zero_copy, dma));
        eprintln!(
            "  {}: range_auto {:.1} GB/s by {}",
            table.name,
            a.auto.decoded_rate() / 1e9,
            path_name(a.calibration.path)
        );
        gathers.push(table);
    }
    let _ = writeln!(
        md,
        "\n### Which range path `range_auto` takes\n\n*prior*: the rule `Decoder::prefers_dma` gives before a calibration. *calibrated*: what `range_auto`'s first call chose on the measured table, from its timings of both paths on a sample (the better of two runs each, milliseconds). *faster*: the faster of the pinned zero-copy and DMA rates above, in this run; *chosen / faster*: the chosen path's rate above over the faster one (issue 33's target: ≥ 0.97). *range_auto GB/s*: `range_auto` itself timed after its first call.\n\n| data | row | prior | calibrated | sample rows | zero-copy ms | DMA ms | faster in this run | chosen / faster | range_auto GB/s | range_auto / faster | within 3% |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in &auto_rows {
        let _ = writeln!(md, "{r}");
    }
    real_gathers(b, &gathers, zero_copy_rate, md)
}

/// The name of a range path in the tables.
fn path_name(p: RangePath) -> &'static str {
    match p {
        RangePath::Dma => "DMA",
        RangePath::ZeroCopy => "zero-copy",
    }
}

/// A row of the `range_auto` table: `a` on the table `name` of `row`-byte
/// rows, against the zero-copy and DMA rates (decoded bytes per second)
/// measured beside it.
fn range_auto_row(
    name: &str,
    row: usize,
    a: &RangeAutoMeasurement,
    zero_copy: f64,
    dma: f64,
) -> String {
    let c = &a.calibration;
    let faster = zero_copy.max(dma);
    let chosen = match c.path {
        RangePath::Dma => dma,
        RangePath::ZeroCopy => zero_copy,
    };
    let ms = |s: Option<f64>| s.map_or("-".into(), |s| format!("{:.3}", s * 1e3));
    format!(
        "| {name} | {row} B | {} | {} | {} | {} | {} | {} | {:.3} | {:.1} | {:.3} | {} |",
        if a.prior_dma { "DMA" } else { "zero-copy" },
        path_name(c.path),
        c.sample_rows,
        ms(c.zero_copy_seconds),
        ms(c.dma_seconds),
        if dma > zero_copy { "DMA" } else { "zero-copy" },
        chosen / faster,
        a.auto.decoded_rate() / 1e9,
        a.auto.decoded_rate() / faster,
        if chosen / faster >= 0.97 { "yes" } else { "no" }
    )
}

/// One real table's row of range decodes (pinned, its ideal, the DMA path,
/// device-resident). Returns the decoded rates of the zero-copy and DMA
/// paths from pinned memory.
fn real_range_row(
    b: &Bench,
    t: &RealTable,
    reps: usize,
    copy_rate: f64,
    md: &mut String,
    picture: &mut BenchPlot,
) -> Result<(f64, f64)> {
    let (name, big, row, cb) = (&t.name, &t.big, t.row, &t.cb);
    let p = b.packed(big, row, cb, Residency::Pinned)?;
    let ideal = if row % 4 == 0 {
        Some(b.decode(big, row, cb, BenchStorage::PACKED, Residency::Pinned, true)?)
    } else {
        None
    };
    let d = b.packed(big, row, cb, Residency::Device)?;
    let dma = b.dma(big, row, cb)?;
    // The DMA path's copies alone, in the same pieces: its ceiling.
    let piece = ibp::gpu::dma_range_piece_bytes(dma.stored_bytes, b.dma_piece as u64);
    let copies = measure_h2d_pieces(b.stream, dma.stored_bytes as usize, piece as usize)?;
    let copies_rate = dma.decoded_bytes as f64 / copies;
    let saved = savings(&p);
    let _ = writeln!(
        md,
        "| {name} (×{reps}) | {row} B | {} B | {:.1}% | {:.1} | {} | {} | {:.1} | {:.1} | {:.3} | {:.0} | {:.2} |",
        cb.chunk().bytes(),
        100.0 * saved,
        p.decoded_rate() / 1e9,
        ideal
            .as_ref()
            .map_or("-".into(), |i| format!("{:.1}", i.decoded_rate() / 1e9)),
        ideal.as_ref().map_or("-".into(), |i| format!(
            "{:.3}",
            p.decoded_rate() / i.decoded_rate()
        )),
        dma.decoded_rate() / 1e9,
        copies_rate / 1e9,
        dma.decoded_rate() / copies_rate,
        d.decoded_rate() / 1e9,
        d.moved_rate() / copy_rate
    );
    picture.real.push(RealPoint {
        name: name.clone(),
        savings: saved,
        pinned: p.decoded_rate() / 1e9,
    });
    eprintln!(
        "  {name}: pinned {:.1} GB/s, device {:.0} GB/s",
        p.decoded_rate() / 1e9,
        d.decoded_rate() / 1e9
    );
    Ok((p.decoded_rate(), dma.decoded_rate()))
}

/// Section 5: random gathers of compressed rows.
fn real_gathers(
    b: &Bench,
    tables: &[RealTable],
    zero_copy_rate: f64,
    md: &mut String,
) -> Result<()> {
    let _ = writeln!(
        md,
        "\n## Random gathers of compressed rows\n\nUniform random row ids (8 index sets in rotation), decoded into device memory, checked first. *pinned ideal*: the zero-copy read rate of this run × the table's ratio (what a gather reading exactly the compressed bytes at link speed would deliver). *pinned DMA*: the DMA gather on the same index sets (ids in host memory; the requested tensors restaged on the host into pinned {} MiB pieces, each copied by DMA and decoded from device memory while the next is staged).\n\n| data | batch | pinned GB/s | pinned ideal GB/s | pinned / ideal | device GB/s | pinned DMA GB/s |\n| --- | --- | --- | --- | --- | --- | --- |",
        b.dma_piece >> 20
    );
    for RealTable { name, big, row, cb } in tables {
        for batch in [4096usize, 65536] {
            let p = b.gather(big, *row, cb, Residency::Pinned, batch)?;
            let d = b.gather(big, *row, cb, Residency::Device, batch)?;
            let piece = b.dma_piece;
            let (gpu, stream) = (b.gpu, b.stream);
            let m = measure_gather_dma(gpu, stream, big, *row, cb, batch, piece, b.opts)?;
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
    Ok(())
}

/// `--section device`'s tables (all but the row-length sweep, which
/// `bench::device_section` runs after them): device-resident decodes
/// (synthetic and real) and device gathers, each with the decoder's
/// geometry, against the device copy rate `copy_rate` of the same run.
pub(super) fn device_tables_section(
    b: &Bench,
    args: &Args,
    copy_rate: f64,
    md: &mut String,
) -> Result<()> {
    let _ = writeln!(
        md,
        "## Device-resident decode and gathers\n\nDevice-to-device copy of 1 GiB: {:.0} GB/s counting bytes read plus written. *geometry*: threads per block, blocks, shared bytes per block, batch mode.\n\n| data | savings | range GB/s | moved / copy | gather 4096 GB/s | gather 65536 GB/s | geometry |\n| --- | --- | --- | --- | --- | --- | --- |",
        copy_rate / 1e9
    );
    for RealTable {
        name,
        big: data,
        row,
        cb,
    } in &device_tables(args)?
    {
        if args
            .only
            .as_ref()
            .is_some_and(|o| !name.contains(o.as_str()))
        {
            continue;
        }
        let d = b.packed(data, *row, cb, Residency::Device)?;
        let g4 = b.gather(data, *row, cb, Residency::Device, 4096)?;
        let g64 = b.gather(data, *row, cb, Residency::Device, 65536)?;
        let sample = &data[..data.len().min(row * 4096)];
        let packed = ibp::layout::compress_packed(
            cb,
            ibp::Rows::new(sample, *row)?,
            &ibp::layout::LayoutOptions::default(),
        )?;
        let ds = GpuDataset::upload_packed(b.gpu, cb, &packed.view(), Residency::Device)?;
        let dec = Decoder::new(b.gpu, &ds, b.opts)?;
        let (block, grid, shared) = dec.geometry();
        let _ = writeln!(
            md,
            "| {name} | {:.1}% | {:.0} | {:.2} | {:.0} | {:.0} | {block}×{grid}, {shared} B{} |",
            100.0 * savings(&d),
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

/// `--section device`'s tables: three synthetic ones and, unless
/// `--no-real`, the real ones replicated to `--real-bytes`.
fn device_tables(args: &Args) -> Result<Vec<RealTable>> {
    let mut tables = Vec::new();
    for &(size, s) in &[(1024usize, 0.5), (4096, 0.5), (4096, 0.9)] {
        let (data, cb) = figure7_dataset(args.rows * 4, size, s, 5)?;
        tables.push(RealTable {
            name: format!("synthetic {size} B, {}%", s * 100.0),
            big: data,
            row: size,
            cb,
        });
    }
    if !args.no_real {
        for (name, data, row) in real_tables()? {
            let fit = ibp::fit::fit(ibp::Rows::new(&data, row)?, &Default::default())?;
            let reps = args.real_bytes.div_ceil(data.len()).max(1);
            tables.push(RealTable {
                name,
                big: data.repeat(reps),
                row,
                cb: fit.codebook,
            });
        }
    }
    Ok(tables)
}
