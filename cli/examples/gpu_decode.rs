//! Decode the compressed groups of an `.ibp` file on the GPU from pinned
//! host memory, check every byte against the CPU's decode, and compare the
//! rate with a plain copy of the uncompressed bytes: the GPU step of
//! `scripts/demo.sh`.
//!
//! ```console
//! $ cargo run --release -p ibp-cli --features cuda --example gpu_decode -- FILE.ibp
//! ```
//!
//! Exit status 0 when every group decoded identically, 10 when there is no
//! usable CUDA device (the demo then decodes on the CPU), 1 on any other
//! error. The last line of a success is `gpu_decode_gbps=… copy_gbps=…`.

use std::path::PathBuf;
use std::process::ExitCode;

use cust::stream::{Stream, StreamFlags};
use ibp::container::IbpFile;
use ibp::gpu::{DecodeOptions, Gpu, Residency, is_no_device};
use ibp::{Error, Result};
use ibp_cli::measure::{BenchStorage, measure_decode, measure_h2d_copy};

const NO_DEVICE: u8 = 10;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: gpu_decode FILE.ibp");
        return ExitCode::from(2);
    };
    match run(&path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_no_device(&e) => {
            eprintln!("gpu_decode: no usable CUDA device ({})", e.message());
            ExitCode::from(NO_DEVICE)
        }
        Err(e) => {
            eprintln!("gpu_decode: {}", e.message());
            ExitCode::FAILURE
        }
    }
}

fn run(path: &std::path::Path) -> Result<()> {
    let file = IbpFile::open(path)?;
    let gpu = Gpu::first()?;
    let stream =
        Stream::new(StreamFlags::NON_BLOCKING, None).map_err(|e| Error::cuda(e.to_string()))?;
    let (mut decoded, mut decode_s, mut copy_s) = (0u64, 0f64, 0f64);
    for g in file.groups() {
        let (Some(cb), Some(_)) = (g.codebook(), g.packed()) else {
            continue; // raw or fixed-stride groups: nothing to decode here
        };
        // The CPU's decode (hash-checked) is what the GPU's must equal.
        let mut data = vec![0u8; (g.rows() * g.row_bytes()) as usize];
        g.decompress_into(&mut data)?;
        // Q: why measure_decode, which compresses `data` again?
        // A: the encoder is deterministic, so it stores exactly the file's
        // bytes; and it is the library's checked, event-timed path (decode
        // all rows, compare with `data`, then the median of nine runs).
        let m = measure_decode(
            &gpu,
            &stream,
            &data,
            g.row_bytes() as usize,
            cb,
            BenchStorage::PACKED,
            Residency::Pinned,
            false,
            &DecodeOptions::default(),
        )?;
        let copy = measure_h2d_copy(&stream, data.len())?;
        println!(
            "{}: {} tensors of {} B, {} stored: decoded from pinned memory at {:.1} GB/s, identical to the CPU's decode; a plain copy of the uncompressed bytes: {:.1} GB/s",
            g.name(),
            g.rows(),
            g.row_bytes(),
            m.stored_bytes,
            m.decoded_rate() / 1e9,
            data.len() as f64 / copy / 1e9
        );
        decoded += data.len() as u64;
        decode_s += m.seconds;
        copy_s += copy;
    }
    if decoded == 0 {
        return Err(Error::invalid(format!(
            "{} holds no packed group to decode",
            path.display()
        )));
    }
    println!("on {}", gpu.info().name);
    println!(
        "gpu_decode_gbps={:.1} copy_gbps={:.1}",
        decoded as f64 / decode_s / 1e9,
        decoded as f64 / copy_s / 1e9
    );
    Ok(())
}
