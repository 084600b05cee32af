//! Ratios of the float coding (`ibp::float_code`) against IBP's packed
//! layout and the order-0 entropy bound, on the real tables: MiniLM's word
//! embeddings (bf16, f32, FP8 E4M3 and E5M2 casts), Cora's features and the
//! real KV cache (a MiniLM forward pass over its model card, bf16, f16 and
//! f32). Prints the markdown tables of `docs/results/entropy-ratio-cpu.md`.
//!
//! `cargo run --release -p ibp-cli --example float_code_ratio` (with
//! `scripts/env.sh` sourced, for `$IBP_DATA_DIR`).

use std::time::Instant;

use ibp::Rows;
use ibp::float_code::{FitOptions, FloatCoded, FloatType, Split, compress, fit};
use ibp::io::DType;
use ibp::layout::{LayoutOptions, compress_packed};
use ibp::{Error, Result};
use ibp_testdata::fp8::{E4M3, E5M2};
use ibp_testdata::kv::{KvOptions, KvPart, MiniLm, MiniLmFiles};

/// One data set: a name, the element type and its tables (bytes, row
/// bytes), each table a group of its own.
struct Data {
    name: String,
    ftype: FloatType,
    tables: Vec<(Vec<u8>, usize)>,
}

impl Data {
    fn raw(&self) -> u64 {
        self.tables.iter().map(|t| t.0.len() as u64).sum()
    }
}

/// IBP's stored bytes, as `ibp bench`'s CPU section counts them: payload,
/// flags, the u64 offsets and the codebook (mask and values).
fn ibp_stored(bytes: &[u8], row: usize) -> Result<u64> {
    let rows = Rows::new(bytes, row)?;
    let f = ibp::fit::fit(rows, &Default::default())?;
    let p = compress_packed(&f.codebook, rows, &LayoutOptions::default())?;
    Ok((p.payload.len() + p.flags.len() + 8 * p.offsets.len() + 2 * row) as u64)
}

fn element(bytes: &[u8], e: usize, i: usize) -> u32 {
    let mut v = [0u8; 4];
    v[..e].copy_from_slice(&bytes[i * e..(i + 1) * e]);
    u32::from_le_bytes(v)
}

/// The order-0 bound of `split`: every element's symbol at its entropy
/// (over the group), the residual at full width; no metadata.
fn bound_bits(t: FloatType, bytes: &[u8], split: Split) -> f64 {
    let e = t.bytes();
    let n = bytes.len() / e;
    let mut counts = vec![0u64; 1 << split.width()];
    for i in 0..n {
        let v = element(bytes, e, i);
        counts[((v >> split.low()) & ((1 << split.width()) - 1)) as usize] += 1;
    }
    let h: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum();
    n as f64 * (h + f64::from(t.bits() - u32::from(split.width())))
}

/// What an order-0 coder of 64 KiB chunks (as nvCOMP's ANS is run in the
/// peers bench) needs at best: per chunk, the byte entropy, over whole
/// elements (`planes` false) or each byte position of an element apart
/// (`planes` true, a guess at a "float mode"). No metadata.
fn chunk_entropy_bits(bytes: &[u8], elem: usize, planes: bool) -> f64 {
    let mut total = 0.0;
    for c in bytes.chunks(65_536) {
        let groups = if planes { elem } else { 1 };
        for p in 0..groups {
            let mut counts = [0u64; 256];
            let mut n = 0u64;
            for (i, &b) in c.iter().enumerate() {
                if !planes || i % elem == p {
                    counts[usize::from(b)] += 1;
                    n += 1;
                }
            }
            total += counts
                .iter()
                .filter(|&&k| k > 0)
                .map(|&k| -(k as f64) * (k as f64 / n as f64).log2())
                .sum::<f64>();
        }
    }
    total
}

/// Stored bytes of every table of `d` under `opts`, and the coded groups.
fn float_stored(d: &Data, opts: &FitOptions) -> Result<(u64, Vec<FloatCoded>)> {
    let mut total = 0;
    let mut groups = Vec::new();
    for (bytes, row) in &d.tables {
        let rows = Rows::new(bytes, *row)?;
        let t = fit(d.ftype, rows, opts)?;
        let g = compress(&t, rows)?;
        total += g.stored_bytes();
        groups.push(g);
    }
    Ok((total, groups))
}

fn data_sets(with_kv: bool) -> Result<Vec<Data>> {
    let cora = std::fs::read(
        ibp_testdata::data_file("cora-features.npz")
            .ok_or_else(|| Error::invalid("cora-features.npz not found"))?,
    )
    .map_err(|e| Error::io("reading cora-features.npz", e))?;
    let dir = MiniLmFiles::default_dir();
    let model = dir.join("model.safetensors");
    let tables = ibp_testdata::real_tables(&cora, Some(&model))?;
    let mut out = Vec::new();
    for (name, bytes, row) in tables {
        let ftype = if name.ends_with("bf16") {
            FloatType::Bf16
        } else {
            FloatType::F32
        };
        if name.starts_with("MiniLM") && ftype == FloatType::F32 {
            for (f, fname, ft) in [
                (E4M3, "e4m3", FloatType::E4M3),
                (E5M2, "e5m2", FloatType::E5M2),
            ] {
                let cast: Vec<u8> = bytes
                    .as_chunks::<4>()
                    .0
                    .iter()
                    .map(|b| f.from_f32(f32::from_le_bytes(*b)))
                    .collect();
                out.push(Data {
                    name: format!("MiniLM word embeddings fp8 {fname}"),
                    ftype: ft,
                    tables: vec![(cast, row / 4)],
                });
            }
        }
        out.push(Data {
            name,
            ftype,
            tables: vec![(bytes, row)],
        });
    }
    if !with_kv {
        return Ok(out);
    }
    let files = MiniLmFiles::in_dir(&dir);
    let m = MiniLm::load(&files)?;
    let t = Instant::now();
    let c = m.kv_cache(&files.card_text()?, &KvOptions::default())?;
    eprintln!(
        "KV cache: {} tokens, {} layers, forward pass {:.1} s",
        c.tokens,
        c.layers(),
        t.elapsed().as_secs_f64()
    );
    for (dt, ft) in [
        (DType::BF16, FloatType::Bf16),
        (DType::F16, FloatType::F16),
        (DType::F32, FloatType::F32),
    ] {
        let mut tables = Vec::new();
        for layer in 0..c.layers() {
            for part in [KvPart::Key, KvPart::Value] {
                tables.push((c.table_bytes(layer, part, &dt)?, c.width * ft.bytes()));
            }
        }
        out.push(Data {
            name: format!("KV cache {ft} ({} tables)", tables.len()),
            ftype: ft,
            tables,
        });
    }
    // The order of the issue: MiniLM first.
    out.sort_by_key(|d| (!d.name.starts_with("MiniLM"), d.name.starts_with("KV")));
    Ok(out)
}

fn split_name(t: FloatType, s: Split) -> String {
    let m = t.mantissa_bits();
    let k = m - s.low();
    let sign = u32::from(s.low()) + u32::from(s.width()) == t.bits();
    format!(
        "{}exp{}",
        if sign { "s+" } else { "" },
        if k > 0 {
            format!("+{k}m")
        } else {
            String::new()
        }
    )
}

/// CPU seconds this process has used, all threads together.
fn cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Median wall-clock seconds and median CPU seconds of `runs` calls of `f`.
fn median_secs(runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    let mut t = Vec::with_capacity(runs);
    let mut c = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (s, cs) = (Instant::now(), cpu_secs());
        f()?;
        t.push(s.elapsed().as_secs_f64());
        c.push(cpu_secs() - cs);
    }
    t.sort_by(f64::total_cmp);
    c.sort_by(f64::total_cmp);
    Ok((t[runs / 2], c[runs / 2]))
}

/// `speed`: fit, compress, decode and gather throughput of the default
/// design, in GB/s of raw bytes, median of 7 runs each, after a round trip
/// checked byte for byte.
fn speed(data: &[Data]) -> Result<()> {
    println!(
        "Each cell: GB/s of raw bytes by the wall clock on {} threads / GB/s per core by CPU time (raw bytes ÷ CPU seconds of all threads).\n",
        rayon::current_num_threads()
    );
    println!(
        "| data | raw MB | fit | compress | fit + compress | decode (all rows) | gather 65,536 random rows |"
    );
    println!("|{}", " --- |".repeat(7));
    for d in data.iter().filter(|d| !d.name.starts_with("Cora")) {
        let (bytes, row) = if d.tables.len() == 1 {
            (d.tables[0].0.clone(), d.tables[0].1)
        } else {
            // The KV tables, one group: the rows of every layer.
            (
                d.tables.iter().flat_map(|t| t.0.clone()).collect(),
                d.tables[0].1,
            )
        };
        let rows = Rows::new(&bytes, row)?;
        let o = FitOptions::default();
        let t = fit(d.ftype, rows, &o)?;
        let g = compress(&t, rows)?;
        let mut out = vec![0u8; bytes.len()];
        g.decompress_rows(0..rows.rows(), &mut out)?;
        if out != bytes {
            return Err(Error::corrupt(format!(
                "{}: the round trip differs",
                d.name
            )));
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let ids: Vec<u64> = (0..65_536)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s % rows.rows() as u64
            })
            .collect();
        let mut gathered = vec![0u8; ids.len() * row];
        let runs = 7;
        let t_fit = median_secs(runs, || fit(d.ftype, rows, &o).map(|_| ()))?;
        let t_comp = median_secs(runs, || compress(&t, rows).map(|_| ()))?;
        let t_both = median_secs(runs, || {
            compress(&fit(d.ftype, rows, &o)?, rows).map(|_| ())
        })?;
        let t_dec = median_secs(runs, || g.decompress_rows(0..rows.rows(), &mut out))?;
        let t_gat = median_secs(runs, || g.gather(&ids, &mut gathered))?;
        let gb = |b: usize, (s, c): (f64, f64)| {
            format!("{:.2} / {:.2}", b as f64 / s / 1e9, b as f64 / c / 1e9)
        };
        println!(
            "| {} | {:.1} | {} | {} | {} | {} | {} |",
            d.name,
            bytes.len() as f64 / 1e6,
            gb(bytes.len(), t_fit),
            gb(bytes.len(), t_comp),
            gb(bytes.len(), t_both),
            gb(bytes.len(), t_dec),
            gb(gathered.len(), t_gat),
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let mode = std::env::args().nth(1);
    let data = data_sets(mode.as_deref() != Some("profile"))?;
    if std::env::args().nth(1).as_deref() == Some("speed") {
        return speed(&data);
    }
    if std::env::args().nth(1).as_deref() == Some("profile") {
        // Compress one MiniLM table over and over, for a profiler.
        let which = std::env::args().nth(2).unwrap_or_else(|| "bf16".into());
        let d = data
            .iter()
            .find(|d| d.name.ends_with(&which))
            .ok_or_else(|| Error::invalid(format!("no MiniLM {which}")))?;
        let rows = Rows::new(&d.tables[0].0, d.tables[0].1)?;
        let t = fit(d.ftype, rows, &FitOptions::default())?;
        let g = compress(&t, rows)?;
        let mut out = vec![0u8; rows.bytes().len()];
        let (_, c) = median_secs(15, || compress(&t, rows).map(|_| ()))?;
        let (_, dc) = median_secs(15, || g.decompress_rows(0..rows.rows(), &mut out))?;
        let gb = rows.bytes().len() as f64 / 1e9;
        println!(
            "{}: compress {:.3} GB/s, decode {:.3} GB/s per core (CPU time)",
            d.name,
            gb / c,
            gb / dc
        );
        return Ok(());
    }
    let ratio = |d: &Data, s: u64| d.raw() as f64 / s as f64;

    println!("## Symbol split (4 sub-streams, codes of at most 12 bits)\n");
    println!(
        "Each cell: real ratio with all metadata / order-0 bound of that split (no metadata).\n"
    );
    let mut head = String::from("| data | ibp |");
    for sign in [false, true] {
        for k in 0..=3 {
            head += &format!(
                " {} |",
                split_name(FloatType::Bf16, Split::exponent(FloatType::Bf16, sign, k))
            );
        }
    }
    println!("{head}\n|{}", " --- |".repeat(10));
    let mut ibp = Vec::new();
    for d in &data {
        let s: u64 = d
            .tables
            .iter()
            .map(|(b, r)| ibp_stored(b, *r))
            .sum::<Result<u64>>()?;
        ibp.push(ratio(d, s));
        let mut line = format!("| {} | {:.3} |", d.name, ratio(d, s));
        for sign in [false, true] {
            for k in 0..=3u8 {
                if k > d.ftype.mantissa_bits() {
                    line += " - |";
                    continue;
                }
                let sp = Split::exponent(d.ftype, sign, k);
                let (st, _) = float_stored(d, &FitOptions::default().with_split(sp))?;
                let bound: f64 = d
                    .tables
                    .iter()
                    .map(|(b, _)| bound_bits(d.ftype, b, sp))
                    .sum();
                line += &format!(
                    " {:.3} / {:.3} |",
                    ratio(d, st),
                    d.raw() as f64 * 8.0 / bound
                );
            }
        }
        println!("{line}");
    }

    println!("\n## Sub-streams and code length limit (split chosen by `fit`)\n");
    let ss = [1u8, 2, 4, 8, 16, 32];
    let ls = [8u8, 11, 12, 15];
    let mut head = String::from("| data |");
    for s in ss {
        head += &format!(" S={s} |");
    }
    for l in ls {
        head += &format!(" S=4, L≤{l} |");
    }
    println!("{head}\n|{}", " --- |".repeat(1 + ss.len() + ls.len()));
    for d in &data {
        let mut line = format!("| {} |", d.name);
        for s in ss {
            let (st, _) = float_stored(d, &FitOptions::default().with_sub_streams(s))?;
            line += &format!(" {:.3} |", ratio(d, st));
        }
        for l in ls {
            let (st, _) = float_stored(d, &FitOptions::default().with_max_code_len(l))?;
            line += &format!(" {:.3} |", ratio(d, st));
        }
        println!("{line}");
    }

    println!("\n## The default design (fit's split, 4 sub-streams, L ≤ 12)\n");
    println!(
        "| data | rows × row | ibp | float code | bound of its split | 64 KiB order-0 bytes | 64 KiB order-0 byte planes | split | symbols | coded rows | table + index bytes | length-field bytes |"
    );
    println!("|{}", " --- |".repeat(12));
    for (d, ibp) in data.iter().zip(&ibp) {
        let (st, groups) = float_stored(d, &FitOptions::default())?;
        let bound: f64 = d
            .tables
            .iter()
            .zip(&groups)
            .map(|((b, _), g)| bound_bits(d.ftype, b, g.table().split()))
            .sum();
        let e = d.ftype.bytes();
        let ob: f64 = d
            .tables
            .iter()
            .map(|(b, _)| chunk_entropy_bits(b, e, false))
            .sum();
        let op: f64 = d
            .tables
            .iter()
            .map(|(b, _)| chunk_entropy_bits(b, e, true))
            .sum();
        let raw8 = d.raw() as f64 * 8.0;
        let meta: u64 = groups
            .iter()
            .map(|g| g.stored_bytes() - g.payload().len() as u64)
            .sum();
        let rows: usize = groups.iter().map(|g| g.rows()).sum();
        let coded: usize = groups.iter().map(|g| g.coded_rows()).sum();
        let g0 = &groups[0];
        let n = g0.row_bytes() / e;
        let s = g0.table().sub_streams();
        let lb = if s > 2 {
            let most = 2 * n.div_ceil(s) as u64 * u64::from(g0.table().max_code_len());
            64 - most.leading_zeros() as u64
        } else {
            0
        };
        let len_bytes = rows as u64 * (s.div_ceil(2) as u64 - 1) * lb / 8;
        println!(
            "| {} | {} × {} B | {:.3} | **{:.3}** | {:.3} | {:.3} | {:.3} | {} | {} | {coded} of {rows} | {meta} | {len_bytes} |",
            d.name,
            rows,
            g0.row_bytes(),
            ibp,
            ratio(d, st),
            raw8 / bound,
            raw8 / ob,
            raw8 / op,
            split_name(d.ftype, g0.table().split()),
            g0.table().symbols().len(),
        );
    }
    Ok(())
}
