//! The float coding's decode rates (`ibp::float_code`, issue 34), measured
//! the way the rest of `ibp bench` measures ibp's IBP path and the way
//! `--peers nvcomp` measures nvCOMP, on the same bytes, so that a table's
//! rows compare cell by cell:
//! - *overlapped*: [`FloatDecoder::range_dma`], the coded payload in
//!   pinned memory copied into a [`DmaScratch`]'s two device pieces of
//!   [`DEFAULT_DMA_PIECE_BYTES`] stored bytes (the copy of piece k+1 on the
//!   scratch's stream beside the decode of piece k), each piece decoded
//!   once its bytes have landed;
//! - *zero-copy*: [`FloatDecoder::range_staged`] reading the payload from
//!   mapped pinned memory;
//! - *device*: [`FloatDecoder::range`], the payload in device memory;
//! - random gathers of the row ids of ibp's gather benchmark
//!   ([`super::gather_ids`]), zero-copy ([`FloatDecoder::gather_staged`])
//!   and from device memory.
//!
//! Every path decodes once into a poisoned buffer and is compared with the
//! original bytes before it is timed ([`super::time_median`]).

use ibp::float_code::{FitOptions, FloatType, compress, fit};
use ibp::gpu::cust::memory::DeviceBuffer;
use ibp::gpu::cust::stream::Stream;
use ibp::gpu::{
    DEFAULT_DMA_PIECE_BYTES, DecodeStatus, DmaScratch, FloatDecoder, Gpu, PinnedFloatRows,
    copy_to_host_blocking,
};
use ibp::{Error, Result, Rows};

use super::{cuda_err, gather_ids, time_median};

/// The bytes a buffer is poisoned with before a checked decode.
const POISON: u8 = 0xA5;

/// One gather batch size's decoded GB/s.
#[derive(Clone, Copy, Debug)]
pub struct FloatGather {
    /// Rows a batch.
    pub batch: usize,
    /// Payload read from pinned memory by the kernel.
    pub zero_copy: f64,
    /// Payload in device memory.
    pub device: f64,
}

/// The float coding of a table and its decode rates (decoded GB/s).
#[derive(Clone, Debug)]
pub struct FloatRates {
    /// Original bytes ÷ every stored byte (payload, index, table).
    pub ratio: f64,
    /// Rows stored coded, of all rows.
    pub coded_rows: usize,
    pub rows: usize,
    /// Pieces copied beside the decode of the previous piece.
    pub overlapped: f64,
    /// The kernel reading pinned memory.
    pub zero_copy: f64,
    /// The payload in device memory.
    pub device: f64,
    /// Random gathers, one entry a batch size.
    pub gathers: Vec<FloatGather>,
}

/// Fit and code `data` (rows of `row_bytes` elements of type `t`) on the
/// CPU, then measure every decode path and gathers of `batches` rows.
pub fn measure_float(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    t: FloatType,
    batches: &[usize],
) -> Result<FloatRates> {
    let rows = Rows::new(data, row_bytes)?;
    let coded = compress(&fit(t, rows, &FitOptions::default())?, rows)?;
    let n = coded.rows() as u64;
    let dev = FloatDecoder::new(gpu, &coded)?;
    let host = PinnedFloatRows::new(&coded)?;
    let pinned = host.span();
    let mut status = DecodeStatus::new()?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(data.len()).map_err(cuda_err("allocating the output"))?;

    let device = checked(
        stream,
        data,
        &mut status,
        "device",
        &mut out,
        &mut |o, st| dev.range(gpu, 0, n, o, st, stream),
    )?;
    let zero_copy = checked(
        stream,
        data,
        &mut status,
        "zero-copy",
        &mut out,
        &mut |o, st| dev.range_staged(gpu, 0, n, &pinned, o, st, stream),
    )?;
    let overlapped = {
        // The staging area is the scratch's two device pieces, which never
        // held these rows before this call: the check sees what this path
        // copied.
        let mut scratch = DmaScratch::new(DEFAULT_DMA_PIECE_BYTES)?;
        checked(
            stream,
            data,
            &mut status,
            "overlapped",
            &mut out,
            &mut |o, st| dev.range_dma(gpu, 0, n, &host, o, st, &mut scratch, stream),
        )?
    };

    let mut gathers = Vec::new();
    for &batch in batches {
        let mut gout = DeviceBuffer::<u8>::zeroed(batch * row_bytes)
            .map_err(cuda_err("allocating the output"))?;
        let sets = gather_ids(n, batch, 8)
            .into_iter()
            .map(|ids| {
                let d = DeviceBuffer::from_slice(&ids).map_err(cuda_err("uploading ids"))?;
                Ok((ids, d))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut rate = |zero_copy: bool| -> Result<f64> {
            for (ids, d) in &sets {
                gout.set_8(POISON)
                    .map_err(cuda_err("poisoning the output"))?;
                if zero_copy {
                    dev.gather_staged(gpu, d, &pinned, &mut gout, &status, stream)?;
                } else {
                    dev.gather(gpu, d, &mut gout, &status, stream)?;
                }
                stream.synchronize().map_err(cuda_err("gathering"))?;
                status.check_blocking()?;
                let got = copy_to_host_blocking(&gout)?;
                for (i, &t) in ids.iter().enumerate() {
                    let t = t as usize;
                    if got[i * row_bytes..(i + 1) * row_bytes]
                        != data[t * row_bytes..(t + 1) * row_bytes]
                    {
                        return Err(Error::corrupt(
                            "benchmark float-code gather differs from the original data",
                        ));
                    }
                }
            }
            let mut k = 0;
            let s = time_median(stream, 8, 24, || {
                k = (k + 1) % sets.len();
                if zero_copy {
                    dev.gather_staged(gpu, &sets[k].1, &pinned, &mut gout, &status, stream)
                } else {
                    dev.gather(gpu, &sets[k].1, &mut gout, &status, stream)
                }
            })?;
            status.check_blocking()?;
            Ok((batch * row_bytes) as f64 / s / 1e9)
        };
        let zero_copy = rate(true)?;
        let device = rate(false)?;
        gathers.push(FloatGather {
            batch,
            zero_copy,
            device,
        });
    }
    Ok(FloatRates {
        ratio: data.len() as f64 / coded.stored_bytes() as f64,
        coded_rows: coded.coded_rows(),
        rows: coded.rows(),
        overlapped,
        zero_copy,
        device,
        gathers,
    })
}

/// Decode with `f` once into a poisoned `out`, compare with `data`, then
/// time `f`: decoded GB/s.
fn checked(
    stream: &Stream,
    data: &[u8],
    status: &mut DecodeStatus,
    name: &str,
    out: &mut DeviceBuffer<u8>,
    f: &mut dyn FnMut(&mut DeviceBuffer<u8>, &DecodeStatus) -> Result<()>,
) -> Result<f64> {
    out.set_8(POISON)
        .map_err(cuda_err("poisoning the output"))?;
    f(out, status)?;
    stream
        .synchronize()
        .map_err(|e| Error::cuda(format!("float-code decode ({name}): {e}")))?;
    status.check_blocking()?;
    if copy_to_host_blocking(out)? != data {
        return Err(Error::corrupt(format!(
            "benchmark float-code decode ({name}) differs from the original data"
        )));
    }
    let s = time_median(stream, 2, 9, || f(out, status))?;
    status.check_blocking()?;
    Ok(data.len() as f64 / s / 1e9)
}
