//! The device API's shared-memory variant
//! (`ibp_kernels::device::decode_row_to_shared`) on the emulated warp: the
//! row lands in the caller's region, nothing past the region's padding is
//! written, and a corrupt row is reported.

use super::decode::float_rows;
use super::*;

/// `data`'s rows of `l` bytes fitted with chunks of `chunk` and compressed
/// to the fixed-stride layout, with every row's stored length (`l` for a
/// raw row, as the device length table holds them) and the device-side
/// tables in host memory.
struct Fixture {
    cb: Codebook,
    flags_cpu: Vec<u8>,
    lens: Vec<u32>,
    book: Aligned,
    entries: Aligned,
    slots: super::decode::Lined,
    flags: Aligned,
    rows: u64,
    l: usize,
}

impl Fixture {
    fn new(data: &[u8], l: usize, chunk: ChunkSize) -> Self {
        let rows = Rows::new(data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
        let lens = (0..data.len() / l)
            .map(|t| {
                let s = &fixed.slots[t * l..(t + 1) * l];
                if fixed.flags[t / 8] >> (t % 8) & 1 == 1 {
                    crate::encode::stream_len(&cb, s).unwrap() as u32
                } else {
                    l as u32
                }
            })
            .collect();
        Fixture {
            book: Aligned::from(&decode_book(&cb)),
            entries: Aligned::from(&decoder_table(&cb)),
            slots: super::decode::Lined::from(&fixed.slots),
            flags: Aligned::from(&fixed.flags),
            flags_cpu: fixed.flags,
            rows: (data.len() / l) as u64,
            cb,
            lens,
            l,
        }
    }

    fn encoded(&self, t: usize) -> bool {
        self.flags_cpu[t / 8] >> (t % 8) & 1 == 1
    }

    /// The dataset's view with the length table at `lengths`.
    fn view(&self, lengths: &Aligned) -> ibp_kernels::device::DatasetView {
        ibp_kernels::device::DatasetView {
            src: self.slots.addr(),
            lengths: lengths.addr(),
            flags: self.flags.addr(),
            rows: self.rows,
            row_bytes: self.l as u64,
            book: self.book.addr(),
            entries: self.entries.addr(),
            book_bytes: self.book.1 as u32,
            chunk: self.cb.chunk().bytes(),
            ..Default::default()
        }
    }
}

#[test]
fn the_device_api_decodes_a_row_into_shared_memory() {
    use ibp_kernels::device::{RowError, decode_row_to_shared};
    for (l, chunk) in [
        (100usize, ChunkSize::Four),
        (768, ChunkSize::Two),
        (1531, ChunkSize::Eight),
    ] {
        let n = 4;
        let data = float_rows(n, l, 11 + l as u64);
        let fx = Fixture::new(&data, l, chunk);
        let encoded = |t: usize| fx.encoded(t);
        let book = &fx.book;
        // The same rows with every encoded row's stored length one byte
        // short: its stream no longer ends where the table says.
        let short: Vec<u32> = (0..n).map(|t| fx.lens[t] - encoded(t) as u32).collect();
        for (what, lens) in [("good", &fx.lens), ("corrupt", &short)] {
            let lengths = Aligned::from(bytemuck::cast_slice(lens));
            let view = fx.view(&lengths);
            let ws = view.workspace_bytes() as usize;
            let region = view.row_shared_bytes() as usize;
            assert!(region >= l && region.is_multiple_of(16) && region < l + 16);
            for t in 0..n {
                // Workspace, then the row's region, then 64 guard bytes.
                let smem = Aligned::from(&vec![0x5au8; ws + region + 64]);
                let verdict = std::sync::Mutex::new(None);
                run_warp_with(smem.addr(), |w| {
                    // SAFETY: the dataset's buffers; the workspace at 0 and
                    // the region after it are inside `smem`, 16-aligned
                    // offsets.
                    let r = unsafe {
                        decode_row_to_shared(
                            w,
                            &view,
                            &HostBytes(book.addr()),
                            0,
                            t as u64,
                            ws as u32,
                        )
                    };
                    *verdict.lock().unwrap() = Some(r);
                });
                let r = verdict.into_inner().unwrap().unwrap();
                let got = smem.bytes();
                assert!(
                    got[ws + region..].iter().all(|&b| b == 0x5a),
                    "L={l} {what} row {t}: write past the region"
                );
                if what == "corrupt" && encoded(t) {
                    assert_eq!(r, Err(RowError::Corrupt), "L={l} row {t}");
                    continue;
                }
                assert_eq!(r, Ok(()), "L={l} {what} row {t}");
                assert!(
                    got[ws..ws + l] == data[t * l..(t + 1) * l],
                    "L={l} {what} row {t}"
                );
            }
        }
    }
}

#[test]
fn the_device_api_decodes_rows_fetched_one_ahead() {
    use ibp_kernels::device::{RowError, SharedStore, decode_fetched, fetch_row};
    for (l, chunk) in [(768usize, ChunkSize::Two), (1531, ChunkSize::Eight)] {
        let n = 7;
        let data = float_rows(n, l, 5 + l as u64);
        let fx = Fixture::new(&data, l, chunk);
        let book = &fx.book;
        // Row 3's stored length one byte short: its stream no longer ends
        // where the table says.
        assert!(fx.encoded(3), "row 3 is stored encoded");
        let mut short = fx.lens.clone();
        short[3] -= 1;
        for (what, lens) in [("good", &fx.lens), ("corrupt", &short)] {
            let lengths = Aligned::from(bytemuck::cast_slice(lens));
            let view = fx.view(&lengths);
            let ws = view.workspace_bytes();
            let region = view.row_shared_bytes();
            // The workspace, then a region per row, then 64 guard bytes.
            let at = |t: u32| ws + t * region;
            let smem = Aligned::from(&vec![0x5au8; at(n as u32) as usize + 64]);
            let results = std::sync::Mutex::new(Vec::new());
            run_warp_with(smem.addr(), |w| {
                let bk = HostBytes(book.addr());
                // SAFETY: the dataset's buffers; the workspace and every
                // region are inside `smem`, 16-aligned, apart. One piece a
                // lane held: the 1531-byte rows load the rest late.
                unsafe {
                    let mut cur = fetch_row::<_, 1>(w, &view, 0);
                    for t in 0..n as u64 {
                        let next = if t + 1 < n as u64 {
                            fetch_row::<_, 1>(w, &view, t + 1)
                        } else {
                            Err(RowError::BadIndex)
                        };
                        let mut sink = SharedStore::new(w, at(t as u32));
                        let r = cur.and_then(|f| decode_fetched(w, &view, &bk, 0, &f, &mut sink));
                        if w.lane() == 0 {
                            results.lock().unwrap().push(r);
                        }
                        cur = next;
                    }
                }
            });
            let results = results.into_inner().unwrap();
            let got = smem.bytes();
            assert!(got[at(n as u32) as usize..].iter().all(|&b| b == 0x5a));
            for (t, r) in results.iter().enumerate() {
                if what == "corrupt" && t == 3 {
                    assert_eq!(*r, Err(RowError::Corrupt), "L={l} row 3");
                    continue;
                }
                assert_eq!(*r, Ok(()), "L={l} {what} row {t}");
                let a = at(t as u32) as usize;
                assert!(
                    got[a..a + l] == data[t * l..(t + 1) * l],
                    "L={l} {what} row {t}"
                );
            }
        }
    }
}
