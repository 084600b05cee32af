//! Every kernel ibp launches, with the one parameter block it takes: the
//! kernel crate's list (`ibp_kernels::params::kernels`, where each kernel,
//! its block and its register cap are declared once, and which build.rs
//! reads for the caps), and the choice among a family by chunk size or
//! mode. A kernel cannot be launched with another kernel's parameters, and
//! no launch names a kernel by string.

use ibp_kernels::params::kernels as list;
pub(crate) use ibp_kernels::params::kernels::*;
use ibp_kernels::params::{DecodeParams, EncodeParams, KvAppendParams};

/// Compression for chunks of `chunk` bytes.
pub(crate) const fn encode(chunk: u32) -> Kernel<EncodeParams> {
    list::by_chunk(list::ENCODE, chunk)
}

/// Compression into unmeasured fixed-stride slots for chunks of `chunk`
/// bytes.
pub(crate) const fn encode_slots(chunk: u32) -> Kernel<EncodeParams> {
    list::by_chunk(list::ENCODE_SLOTS, chunk)
}

/// The KV store's append for chunks of `chunk` bytes.
pub(crate) const fn kv_append(chunk: u32) -> Kernel<KvAppendParams> {
    list::by_chunk(list::KV_APPEND, chunk)
}

/// The step a decode kernel runs, as the book's classes allow and the
/// caller chooses (`DeviceBook::uniform`, `DeviceBook::periodic`,
/// `DecodeOptions::uniform`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The general step, which decodes every book.
    General,
    /// A book whose every step is uniform (unclustered; batch or
    /// streaming mode).
    Uniform,
    /// A book whose every step is periodic (unclustered batch mode: in
    /// streaming mode the general kernel).
    Periodic,
}

/// The decode kernel for batch or streaming mode, of a clustered dataset
/// or not; `groups`: tensors a warp, 1, 2 or 4 (unclustered batch mode
/// only, else ignored; four for the uniform and periodic steps only, the
/// general step taking two); `step`: the step it runs (clustered datasets
/// run the general one).
pub(crate) const fn decode(
    batch: bool,
    clustered: bool,
    groups: u32,
    step: Step,
) -> Kernel<DecodeParams> {
    match (batch, clustered, step) {
        (true, false, Step::Periodic) if groups >= 4 => DECODE_QUADS_PERIODIC,
        (true, false, Step::Periodic) if groups >= 2 => DECODE_PAIRS_PERIODIC,
        (true, false, Step::Periodic) => DECODE_PERIODIC,
        (true, false, Step::Uniform) if groups >= 4 => DECODE_QUADS_UNIFORM,
        (true, false, Step::Uniform) if groups >= 2 => DECODE_PAIRS_UNIFORM,
        (true, false, _) if groups >= 2 => DECODE_PAIRS,
        (true, false, Step::Uniform) => DECODE_UNIFORM,
        (true, false, _) => DECODE,
        (false, false, Step::Uniform) => DECODE_STREAM_UNIFORM,
        (false, false, _) => DECODE_STREAM,
        (true, true, _) => DECODE_CLUSTERED,
        (false, true, _) => DECODE_CLUSTERED_STREAM,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries of a PTX text: name, bytes of its one parameter, and
    /// its `.maxnreg`, if any.
    fn entries(ptx: &str) -> Vec<(String, usize, Option<u32>)> {
        let mut out = Vec::new();
        let mut lines = ptx.lines();
        while let Some(line) = lines.next() {
            let Some(rest) = line.trim_start().strip_prefix(".visible .entry ") else {
                continue;
            };
            let name = rest.split('(').next().unwrap_or_default().to_string();
            let mut bytes = 0;
            let mut cap = None;
            for l in lines.by_ref() {
                let l = l.trim_start();
                if l.starts_with(".param") {
                    // `.param .align 8 .b8 NAME_param_0[BYTES]`
                    let n = l.rsplit('[').next().and_then(|t| t.strip_suffix(']'));
                    bytes += n.and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
                } else if let Some(n) = l.strip_prefix(".maxnreg ") {
                    cap = n.trim().parse().ok();
                } else if l.starts_with('{') {
                    break;
                }
            }
            out.push((name, bytes, cap));
        }
        out
    }

    #[test]
    fn the_shipped_ptx_holds_exactly_the_declared_kernels() {
        for (arch, ptx) in crate::gpu::EMBEDDED_PTX {
            if ptx.starts_with("// docs.rs build") {
                continue;
            }
            let mut got = entries(ptx);
            got.sort();
            let mut want: Vec<_> = ALL
                .iter()
                .map(|d| (d.name.to_string(), d.param_bytes, d.max_registers))
                .collect();
            want.sort();
            assert_eq!(
                got, want,
                "{arch}: the PTX's entries (name, parameter bytes, .maxnreg) differ from \
                 ibp_kernels::params::kernels; regenerate the PTX (scripts/ptx.sh) or declare \
                 the kernel there"
            );
        }
    }

    #[test]
    fn entries_are_read_with_their_parameter_bytes_and_cap() {
        let ptx = ".visible .entry k_one(\n\t.param .align 8 .b8 k_one_param_0[48]\n)\n\
                   .maxnreg 40\n{\n\tret;\n}\n.visible .entry k_two(\n\t.param .u64 k_two_param_0[8]\n)\n{\n}\n";
        assert_eq!(
            entries(ptx),
            vec![("k_one".into(), 48, Some(40)), ("k_two".into(), 8, None)]
        );
    }

    #[test]
    fn families_are_chosen_by_chunk_size_and_mode() {
        assert_eq!(encode(2).name(), "ibp_encode_c2");
        assert_eq!(encode_slots(8).name(), "ibp_encode_slots_c8");
        assert_eq!(kv_append(4).name(), "ibp_kv_append_c4");
        assert_eq!(decode(true, false, 1, Step::General).name(), "ibp_decode");
        assert_eq!(
            decode(true, false, 2, Step::General).name(),
            "ibp_decode_pairs"
        );
        assert_eq!(
            decode(true, false, 1, Step::Uniform).name(),
            "ibp_decode_uniform"
        );
        assert_eq!(
            decode(true, false, 2, Step::Uniform).name(),
            "ibp_decode_pairs_uniform"
        );
        assert_eq!(
            decode(false, false, 2, Step::General).name(),
            "ibp_decode_stream"
        );
        assert_eq!(
            decode(false, false, 2, Step::Uniform).name(),
            "ibp_decode_stream_uniform"
        );
        assert_eq!(
            decode(true, false, 1, Step::Periodic).name(),
            "ibp_decode_periodic"
        );
        assert_eq!(
            decode(true, false, 2, Step::Periodic).name(),
            "ibp_decode_pairs_periodic"
        );
        assert_eq!(
            decode(true, false, 4, Step::Periodic).name(),
            "ibp_decode_quads_periodic"
        );
        assert_eq!(
            decode(true, false, 4, Step::Uniform).name(),
            "ibp_decode_quads_uniform"
        );
        // The general step has no quarter-warp form: its pairs.
        assert_eq!(
            decode(true, false, 4, Step::General).name(),
            "ibp_decode_pairs"
        );
        assert_eq!(
            decode(false, false, 4, Step::Uniform).name(),
            "ibp_decode_stream_uniform"
        );
        // Streaming mode has no periodic kernel: the general.
        assert_eq!(
            decode(false, false, 1, Step::Periodic).name(),
            "ibp_decode_stream"
        );
        assert_eq!(
            decode(false, true, 1, Step::General).name(),
            "ibp_decode_clustered_stream"
        );
        assert_eq!(
            decode(true, true, 2, Step::Uniform).name(),
            "ibp_decode_clustered"
        );
    }
}
