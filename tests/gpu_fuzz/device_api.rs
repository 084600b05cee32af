//! The device API inside user kernels: the fused bag kernels and the
//! tutorial crate's `row_sums`.

use super::*;

impl Fuzz<'_> {
    /// The device API inside user kernels: one-row bags through the fused
    /// bag kernels (rows of f32 or bf16), and `row_sums`.
    pub(crate) fn device_api(
        &mut self,
        rng: &mut Rng,
        case: &Case,
        ds: &GpuDataset,
        res: Residency,
        rows: &[Option<Vec<u8>>],
    ) -> Result<(), Fail> {
        let view = must(ds.device_view(), "device_view")?;
        let l = case.l;
        // Rows as bf16 (up to 1024 bytes), f32 in registers (up to 1536
        // bytes) or f32 in shared memory (any length).
        let kernel = if l.is_multiple_of(2) && l <= 1024 && (!l.is_multiple_of(4) || chance(rng, 3))
        {
            Some(("bag_fused_bf16_s2", true, false))
        } else if l.is_multiple_of(4) && l <= 1536 && chance(rng, 2) {
            Some(("bag_fused_f32_s3", false, false))
        } else if l.is_multiple_of(4) {
            Some(("bag_fused_f32_smem", false, true))
        } else {
            None
        };
        if let Some((name, bf16, smem)) = kernel {
            let path = if res == Residency::Pinned {
                "api-bag-pinned"
            } else {
                "api-bag-device"
            };
            let r = self.bags(rng, view, name, bf16, smem, case.n as u64, rows);
            self.record(path, r)?;
        }
        if self.user.is_some() {
            let r = self.row_sums(view, case, rows);
            self.record("api-user-rows", r)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bags(
        &self,
        rng: &mut Rng,
        view: DatasetView,
        name: &str,
        bf16: bool,
        smem: bool,
        n: u64,
        rows: &[Option<Vec<u8>>],
    ) -> Run {
        let l = view.row_bytes as u32;
        let dim = l / if bf16 { 2 } else { 4 };
        // One row a bag: bag b sums row ids[b] alone (bad ids included).
        let ids: Vec<u32> = random_index(rng, n, false)
            .iter()
            .map(|&t| t as u32)
            .collect();
        let bags = ids.len();
        let starts: Vec<u32> = (0..=bags as u32).collect();
        let d_ids = cu(DeviceBuffer::from_slice(&ids), "ids")?;
        let d_starts = cu(DeviceBuffer::from_slice(&starts), "bag starts")?;
        let out = cu(
            DeviceBuffer::from_slice(&vec![f32::from_bits(0xA5A5_A5A5); bags * dim as usize]),
            "sums",
        )?;
        let status = cu(
            DeviceBuffer::from_slice(&vec![0xA5A5_A5A5u32; bags]),
            "bag status",
        )?;
        let acc = if smem {
            (4 * dim).next_multiple_of(16)
        } else {
            0
        };
        let ws = view.workspace_bytes() + acc;
        let p = BagParams {
            view,
            plain: 0,
            ids: d_ids.as_device_ptr().as_raw(),
            bag_starts: d_starts.as_device_ptr().as_raw(),
            out: out.as_device_ptr().as_raw(),
            status: status.as_device_ptr().as_raw(),
            bags: bags as u32,
            dim,
            book_smem: view.book_bytes,
            ws_bytes: ws,
        };
        let block = match self
            .bags
            .block_for(name, view.book_bytes.next_multiple_of(16), ws)
        {
            Ok(b) => b,
            // The book and a workspace do not fit a block: the example's
            // limit, not the decoder's.
            Err(_) => return Ok(Outcome::Typed),
        };
        self.settle()?;
        // SAFETY: BagParams for a bag kernel; the view is a live dataset's,
        // ids and starts hold `bags` and `bags + 1` u32, out `bags × dim`
        // f32, status `bags` u32, all live until the synchronisation below;
        // the block gives the book and `ws` bytes a warp of shared memory
        // (`smem` kernels: the accumulator is part of `ws`).
        let launched = unsafe { self.bags.launch_block(name, block, &self.stream, p) };
        must(launched, "launching a bag kernel")?;
        self.sync()?;
        let sums = must(copy_to_host_blocking(&out), "copying sums")?;
        let st = must(copy_to_host_blocking(&status), "copying bag status")?;
        let mut corrupt = false;
        for (b, &t) in ids.iter().enumerate() {
            let want = match rows.get(t as usize) {
                None => BAD_INDEX,
                Some(None) => CORRUPT,
                Some(Some(_)) => OK,
            };
            if st[b] != want {
                return Err(Fail::Mismatch(format!(
                    "{name}: bag {b} (row {t}) has status {:#x}, the CPU says {want}",
                    st[b]
                )));
            }
            corrupt |= want == CORRUPT;
            if let Some(Some(row)) = rows.get(t as usize) {
                for e in 0..dim as usize {
                    let x = if bf16 {
                        f32::from_bits(
                            (u16::from_le_bytes([row[2 * e], row[2 * e + 1]]) as u32) << 16,
                        )
                    } else {
                        f32::from_le_bytes(row[4 * e..4 * e + 4].try_into().unwrap())
                    };
                    let cpu = 0.0f32 + x;
                    let gpu = sums[b * dim as usize + e];
                    if !same_sum(gpu, cpu) {
                        return Err(Fail::Mismatch(format!(
                            "{name}: bag {b} (row {t}) element {e}: {:#010x}, the CPU's {:#010x}",
                            gpu.to_bits(),
                            cpu.to_bits()
                        )));
                    }
                }
            }
        }
        Ok(if corrupt {
            Outcome::Corrupt
        } else {
            Outcome::Equal
        })
    }

    /// `row_sums`: one warp a row decodes it into the sum of its
    /// bytes, written only when the row decodes (`u32::MAX` stays for a
    /// corrupt one).
    pub(crate) fn row_sums(
        &self,
        mut view: DatasetView,
        case: &Case,
        rows: &[Option<Vec<u8>>],
    ) -> Run {
        let module = self.user.as_ref().expect("the user module");
        let n = case.n;
        let shared = 8 * view.workspace_bytes();
        if shared > 48 * 1024 {
            // The test launches without the opt-in above 48 KiB.
            return Ok(Outcome::Typed);
        }
        let out = cu(DeviceBuffer::from_slice(&vec![u32::MAX; n]), "row sums")?;
        let mut o = out.as_device_ptr().as_raw();
        let f = cu(module.get_function("row_sums"), "row_sums")?;
        self.settle()?;
        let args = [
            &mut view as *mut _ as *mut c_void,
            &mut o as *mut u64 as *mut c_void,
        ];
        // SAFETY: row_sums takes (DatasetView, *mut u32): a live
        // dataset's view and `n` u32 (warps past the rows get BadIndex and
        // write nothing); eight warps a block, each with its workspace.
        let launched = unsafe {
            self.stream
                .launch(&f, n.div_ceil(8) as u32, 256, shared, &args)
        };
        cu(launched, "launching row_sums")?;
        self.sync()?;
        let got = must(copy_to_host_blocking(&out), "copying row sums")?;
        let mut corrupt = false;
        for (t, row) in rows.iter().enumerate() {
            let want = row
                .as_ref()
                .map_or(u32::MAX, |r| r.iter().map(|&b| b as u32).sum());
            corrupt |= row.is_none();
            if got[t] != want {
                return Err(Fail::Mismatch(format!(
                    "row_sums: row {t}: {:#x}, the CPU's {want:#x}",
                    got[t]
                )));
            }
        }
        Ok(if corrupt {
            Outcome::Corrupt
        } else {
            Outcome::Equal
        })
    }
}

/// Whether a one-row bag's sum from the GPU matches the CPU's `0 + x`:
/// the same bits, or NaN on both sides (the GPU's adds return the
/// canonical NaN, x86's keep the payload).
pub(crate) fn same_sum(gpu: f32, cpu: f32) -> bool {
    gpu.to_bits() == cpu.to_bits() || (gpu.is_nan() && cpu.is_nan())
}
