//! Which way an all-gather (or broadcast) of compressed rows should move
//! them: compressed, each rank decoding what arrives, or raw, each owner
//! decoding its own rows and NCCL moving the decoded bytes. Plain code
//! from sizes and measured rates, tested without a GPU; the rates come
//! from [`super::Communicator::calibrate_blocking`].
//!
//! Q: why would raw ever win, when it moves `ratio` times the bytes?
//! A: over NVLink the link moves hundreds of GB/s, so a table of a few MB
//! crosses it in tens of microseconds; the compressed way then pays more
//! in pipeline steps (one NCCL group each) and in the decode of every
//! remote row than the bytes it saves. Over a slow link (sockets between
//! hosts) the bytes dominate and compressed wins by about the ratio.

use super::plan::Partition;

/// How [`super::Communicator::all_gather`] moves the rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GatherPath {
    /// Predict both from the sizes and the rates measured on this
    /// communicator and these rows ([`choose_path`]), take the faster.
    /// The first call with rows not yet measured measures them
    /// ([`super::Communicator::calibrate_blocking`]: it synchronises).
    #[default]
    Auto,
    /// Move the compressed bytes; every rank decodes every row.
    Compressed,
    /// Every owner decodes its own rows into its output, then NCCL moves
    /// the decoded rows (`ncclAllGather` in place when every rank owns as
    /// many rows, else pipelined broadcasts).
    Raw,
}

/// Measured rates the prediction uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathRates {
    /// Bytes a second a rank receives over its links (an in-place
    /// all-gather's `(n − 1)/n` of its bytes over its time less `step_s`).
    pub link: f64,
    /// Seconds of one pipeline step beyond its bytes: one NCCL group and
    /// the launches and events around it (a tiny all-gather's time).
    pub step_s: f64,
    /// Decoded bytes a second one rank's decoder delivers from these rows
    /// (its own rows decoded, timed).
    pub decode: f64,
}

/// What a collective over some rows moves and decodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSizes {
    /// Per rank: the decoded bytes of its own rows.
    pub own_raw: Vec<u64>,
    /// Per rank: the compressed bytes of its own rows.
    pub own_payload: Vec<u64>,
    /// Decoded bytes of all rows (`N · L`).
    pub raw: u64,
    /// Compressed bytes of all rows.
    pub payload: u64,
    /// The compressed way's pipeline steps.
    pub steps: usize,
    /// The raw way's steps (1 for an in-place all-gather).
    pub raw_steps: usize,
}

impl PathSizes {
    /// The sizes of rows partitioned by `part`, `l` bytes a decoded row,
    /// `payload_of(rows)` the compressed bytes of a range of rows.
    pub fn of(
        part: &Partition,
        l: u64,
        payload_of: &dyn Fn(std::ops::Range<u64>) -> u64,
        steps: usize,
        raw_steps: usize,
    ) -> Self {
        let n = part.ranks();
        Self {
            own_raw: (0..n)
                .map(|r| (part.range(r).end - part.range(r).start) * l)
                .collect(),
            own_payload: (0..n).map(|r| payload_of(part.range(r))).collect(),
            raw: part.rows() * l,
            payload: payload_of(0..part.rows()),
            steps,
            raw_steps,
        }
    }
}

/// Predicted seconds of the compressed and the raw way, `(compressed,
/// raw)`, the slowest rank's:
/// - compressed: `steps · step_s`, plus `max(received / link, decoded /
///   decode)`, plus `decoded / (decode · steps)`: the transfers and the
///   decodes overlap step by step, all but the last step's decode (a
///   rank's own rows are decoded while the first step travels: not
///   counted);
/// - raw: `own / decode + raw_steps · step_s + received / link`: the
///   owner's decode comes first, then the raw bytes.
///
/// With one rank nothing moves and both are its decode.
pub fn predict_paths(s: &PathSizes, r: &PathRates) -> (f64, f64) {
    let per = |bytes: u64, rate: f64| {
        if rate > 0.0 {
            bytes as f64 / rate
        } else {
            f64::INFINITY
        }
    };
    let n = s.own_raw.len();
    if n <= 1 {
        let t = per(s.raw, r.decode);
        return (t, t);
    }
    let steps = s.steps.max(1) as f64;
    let mut comp = 0f64;
    let mut raw_recv = 0f64;
    let mut own = 0f64;
    for i in 0..n {
        let got = per(s.payload.saturating_sub(s.own_payload[i]), r.link);
        let dec = per(s.raw.saturating_sub(s.own_raw[i]), r.decode);
        comp = comp.max(got.max(dec) + dec / steps);
        raw_recv = raw_recv.max(per(s.raw.saturating_sub(s.own_raw[i]), r.link));
        own = own.max(per(s.own_raw[i], r.decode));
    }
    let comp = s.steps as f64 * r.step_s + comp;
    let raw = own + s.raw_steps as f64 * r.step_s + raw_recv;
    (comp, raw)
}

/// The way [`predict_paths`] predicts faster: [`GatherPath::Raw`] only
/// when its prediction is below the compressed one's (ties, one rank and
/// rates not measured keep the compressed way, which moves fewer bytes).
pub fn choose_path(s: &PathSizes, r: &PathRates) -> GatherPath {
    let (comp, raw) = predict_paths(s, r);
    if raw < comp {
        GatherPath::Raw
    } else {
        GatherPath::Compressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rows` rows of `l` bytes compressed `ratio` times over `n` even
    /// ranks, `chunk` compressed bytes a step.
    fn sizes(rows: u64, l: u64, ratio: f64, n: usize, chunk: u64) -> PathSizes {
        let part = Partition::even(rows, n).unwrap();
        let per_row = l as f64 / ratio;
        let payload_of = |r: std::ops::Range<u64>| ((r.end - r.start) as f64 * per_row) as u64;
        let biggest = (0..n).map(|i| payload_of(part.range(i))).max().unwrap();
        PathSizes::of(&part, l, &payload_of, biggest.div_ceil(chunk) as usize, 1)
    }

    /// The H200s over NVLink (about 120 GB/s a rank for a few MB, 25 µs a
    /// step) and over sockets on loopback (3 GB/s), decoding at 1 TB/s.
    const NVLINK: PathRates = PathRates {
        link: 120e9,
        step_s: 25e-6,
        decode: 1e12,
    };
    const SOCKETS: PathRates = PathRates {
        link: 3e9,
        step_s: 100e-6,
        decode: 1e12,
    };

    #[test]
    fn a_slow_link_takes_the_compressed_way_by_about_the_ratio() {
        // Cora: 2708 rows of 5732 bytes, 25× smaller, over 4 ranks.
        let cora = sizes(2708, 5732, 25.0, 4, 4 << 20);
        assert_eq!(cora.steps, 1);
        let (c, r) = predict_paths(&cora, &SOCKETS);
        assert_eq!(choose_path(&cora, &SOCKETS), GatherPath::Compressed);
        assert!(r / c > 10.0, "{c} {r}");
        // MiniLM bf16 (1.34×) still gains over sockets.
        let minilm = sizes(30522, 768, 1.34, 4, 4 << 20);
        assert_eq!(choose_path(&minilm, &SOCKETS), GatherPath::Compressed);
    }

    #[test]
    fn a_fast_link_takes_raw_when_the_ratio_is_small_and_decode_slow() {
        // MiniLM bf16 at 1.34 with a slow decoder: raw.
        let minilm = sizes(30522, 768, 1.34, 4, 4 << 20);
        let slow = PathRates {
            decode: 100e9,
            ..NVLINK
        };
        assert_eq!(choose_path(&minilm, &slow), GatherPath::Raw);
        // Cora at 25× with the decoder at 1 TB/s: compressed.
        let cora = sizes(2708, 5732, 25.0, 4, 4 << 20);
        assert_eq!(choose_path(&cora, &NVLINK), GatherPath::Compressed);
        // Many steps of fixed cost tip a small ratio to raw.
        let tiny_steps = sizes(30522, 768, 1.34, 4, 64 << 10);
        assert!(tiny_steps.steps > 50);
        assert_eq!(choose_path(&tiny_steps, &NVLINK), GatherPath::Raw);
    }

    #[test]
    fn the_prediction_counts_the_slowest_rank_and_edge_cases_keep_compressed() {
        // A broadcast: rank 0 owns everything; the others receive all.
        let part = Partition::on_one(1000, 4, 0).unwrap();
        let s = PathSizes::of(&part, 100, &|r| (r.end - r.start) * 50, 1, 1);
        assert_eq!(s.own_raw, vec![100_000, 0, 0, 0]);
        let rates = PathRates {
            link: 1e9,
            step_s: 0.0,
            decode: 1e12,
        };
        let (c, r) = predict_paths(&s, &rates);
        // Compressed: 50 KB at 1 GB/s plus the decode; raw: the owner's
        // decode then 100 KB.
        assert!((c - (50e-6 + 1e-7)).abs() < 1e-9, "{c}");
        assert!((r - (1e-7 + 100e-6)).abs() < 1e-9, "{r}");
        // One rank: both are the decode; compressed kept.
        let one = sizes(1000, 100, 2.0, 1, 1 << 20);
        let (c, r) = predict_paths(&one, &NVLINK);
        assert_eq!(c, r);
        assert_eq!(choose_path(&one, &NVLINK), GatherPath::Compressed);
        // Rates not measured (zero): nothing is finite, compressed kept.
        let zero = PathRates {
            link: 0.0,
            step_s: 0.0,
            decode: 0.0,
        };
        assert_eq!(
            choose_path(&sizes(1000, 100, 2.0, 4, 1 << 20), &zero),
            GatherPath::Compressed
        );
        assert_eq!(GatherPath::default(), GatherPath::Auto);
    }
}
