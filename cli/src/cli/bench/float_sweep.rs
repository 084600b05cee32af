//! `ibp bench --section float`'s row-length sweep of the float coding's
//! device-resident decode: MiniLM's real values (cast to bf16, f32 and FP8
//! E4M3) laid out as rows of 64 B to 16 KiB, each table replicated to
//! about 64 MiB, coded with the default options and decoded whole from
//! device memory by both kernels (`ibp_float_decode_staged` where a
//! block's stages fit, and `ibp_float_decode`), against the device copy of
//! the same run. Every configuration is decoded once into a poisoned
//! buffer and compared with the original before it is timed.
//!
//! Q: why real values at every length, not synthetic rows? A: the coding's
//! work follows the data (code lengths, raw rows); the sweep changes only
//! the row length, so each cell's difference is the shape's.

#![cfg(feature = "cuda")]

use std::fmt::Write as _;

use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::float_code::{FitOptions, FloatType, compress, fit};
use ibp::gpu::{DecodeStatus, FloatDecoder, Gpu, copy_to_host_blocking};
use ibp::{Error, Result, Rows};

use ibp_cli::measure::time_median;

/// Bytes each cell decodes, about.
const CELL_BYTES: usize = 64 << 20;

/// Row lengths of the sweep, in bytes: powers of two, MiniLM's 768, and
/// shapes of real tables the project does not ship (600- and 1200-byte
/// dense vectors, Cora's 5732-byte rows), whose rows are not 16-aligned.
const ROW_BYTES: [usize; 9] = [64, 256, 600, 768, 1200, 2048, 5732, 8192, 16384];

/// Append the sweep to `md`: one row a type and row length. `values` are
/// MiniLM's word embeddings (f32), `cast` makes a type's bytes of them.
pub(super) fn section(
    gpu: &Gpu,
    values: &[u8],
    cast: fn(&[u8], FloatType) -> Vec<u8>,
    md: &mut String,
) -> Result<()> {
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)
        .map_err(|e| Error::cuda(format!("creating a stream: {e}")))?;
    let copy = super::decode::device_copy_rate(&stream)? / 1e9;
    let _ = writeln!(
        md,
        "## Float coding: row-length sweep, device-resident range decode\n\nMiniLM's word embeddings cast to each type (FP8 scaled by 16), as rows of the given length, replicated to about {} MiB, default options (*S* sub-streams by the row's length, `float_code::sub_streams_for`); decoded whole from device memory, median of 9 calls after 2 warm-ups, output checked first. *staged*: `ibp_float_decode_staged` (where a block's stages fit 112 KiB; `-` otherwise); *direct*: `ibp_float_decode`; each with its elements written through tiles in shared memory (the default) and one store an element (*no tiles*); *staged* and *direct* allow tiles, which the decoder takes only where they cost no staging and no resident block (`FloatDecoder::with_tiles`); *default*: the decoder's own choice; *moved / copy*: the default's (stored + decoded bytes) a second ÷ this run's device copy ({copy:.0} GB/s, read plus written); *S = 4*: where *S* is not 4, the same rows fitted with four sub-streams, decoded by the default kernel (ratio, GB/s). Rates are decoded bytes a second.\n\n| type | row bytes | S | ratio | staged | staged, no tiles | direct | direct, no tiles | moved / copy | default | S = 4 |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        CELL_BYTES >> 20
    );
    for t in [FloatType::Bf16, FloatType::F32, FloatType::E4M3] {
        let one = cast(values, t);
        for row in ROW_BYTES {
            let usable = one.len() / row * row;
            if usable == 0 {
                continue;
            }
            let data = one[..usable].repeat(CELL_BYTES.div_ceil(usable).max(1));
            let rows = Rows::new(&data, row)?;
            let coded = compress(&fit(t, rows, &FitOptions::default())?, rows)?;
            let ratio = data.len() as f64 / coded.stored_bytes() as f64;
            let s = coded.table().sub_streams();
            let mut dec = FloatDecoder::new(gpu, &coded)?;
            let default_staged = dec.stages_rows();
            let mut out = DeviceBuffer::<u8>::zeroed(data.len())
                .map_err(|e| Error::cuda(format!("allocating the output: {e}")))?;
            let mut status = DecodeStatus::new()?;
            // Staged and direct, each with and without tiles; the first
            // is the decoder's default.
            let mut cells = Vec::new();
            let default_tiles = dec.writes_tiles();
            for (staged, tiles) in [(true, true), (true, false), (false, true), (false, false)] {
                dec = dec.with_staging(gpu, staged)?.with_tiles(gpu, tiles)?;
                cells.push(if staged && !dec.stages_rows() {
                    None
                } else {
                    Some(rate(gpu, &stream, &dec, &data, &mut out, &mut status)?)
                });
            }
            let default = if default_staged { cells[0] } else { cells[2] };
            let moved = default.unwrap_or(0.0) * (1.0 + 1.0 / ratio);
            let cell = |c: Option<f64>| c.map_or("-".to_string(), |s| format!("{s:.1}"));
            let four = if s == 4 {
                "-".to_string()
            } else {
                let opts = FitOptions::default().with_sub_streams(4);
                let c4 = compress(&fit(t, rows, &opts)?, rows)?;
                let d4 = FloatDecoder::new(gpu, &c4)?;
                let r4 = rate(gpu, &stream, &d4, &data, &mut out, &mut status)?;
                format!(
                    "{:.3}, {r4:.1}",
                    data.len() as f64 / c4.stored_bytes() as f64
                )
            };
            let _ = writeln!(
                md,
                "| {t} | {row} | {s} | {ratio:.3} | {} | {} | {} | {} | {:.2} | {} | {four} |",
                cell(cells[0]),
                cell(cells[1]),
                cell(cells[2]),
                cell(cells[3]),
                moved / copy,
                match (default_staged, default_tiles) {
                    (true, true) => "staged, tiles",
                    (true, false) => "staged",
                    (false, true) => "direct, tiles",
                    (false, false) => "direct",
                }
            );
        }
    }
    md.push('\n');
    Ok(())
}

/// `dec`'s whole range decoded into `out`, checked against `data`, then
/// timed: decoded GB/s.
fn rate(
    gpu: &Gpu,
    stream: &Stream,
    dec: &FloatDecoder,
    data: &[u8],
    out: &mut DeviceBuffer<u8>,
    status: &mut DecodeStatus,
) -> Result<f64> {
    out.set_8(0xA5)
        .map_err(|e| Error::cuda(format!("poisoning the output: {e}")))?;
    dec.range(gpu, 0, dec.rows(), out, &*status, stream)?;
    stream
        .synchronize()
        .map_err(|e| Error::cuda(format!("float-code sweep decode: {e}")))?;
    status.check_blocking()?;
    if copy_to_host_blocking(out)? != data {
        return Err(Error::corrupt(
            "benchmark self-check failed: the float-code sweep's decode differs from the original data",
        ));
    }
    let s = {
        let st = &*status;
        time_median(stream, 2, 9, || {
            dec.range(gpu, 0, dec.rows(), out, st, stream)
        })?
    };
    status.check_blocking()?;
    Ok(data.len() as f64 / s / 1e9)
}
