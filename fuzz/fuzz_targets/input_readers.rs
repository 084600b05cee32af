//! Arbitrary bytes as npy, npz and safetensors: each reader returns an
//! error or a document, and a document it returns must restore to exactly
//! the input.
#![no_main]

use ibp::io::{self, ParseOptions, SourceFormat};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for format in [
        SourceFormat::Npy,
        SourceFormat::Npz,
        SourceFormat::Safetensors,
    ] {
        // Deferred npz members (inflated when used) restore the same.
        for defer in [false, true] {
            let opts = ParseOptions::default().with_deferred_inflate(defer);
            if let Ok(doc) = io::parse(data, format, &opts) {
                let back = doc.restore_to_vec().expect("a parsed document restores");
                assert!(
                    back == data,
                    "{format}: restored bytes differ from the input"
                );
            }
        }
    }
    let _ = SourceFormat::detect(None, data);
});
