//! Weight offloading in the FlexGen style (feature `cuda`): a model's
//! layers kept in pinned host memory, raw or compressed, and brought into
//! one of two reused device buffers just before each layer runs, the next
//! layer's transfer overlapping the current layer's compute.
//!
//! - [`HostTensor`]: one weight tensor of a layer between uses, in pinned
//!   host memory: its bytes (copied over with `cuMemcpyHtoDAsync`), its ibp
//!   dataset, or its float-coded rows (`ibp::float_code`, entropy-coded).
//! - How compressed rows cross the link ([`CodedTransfer`]): by DMA into a
//!   staging area of the slot, then decoded device-resident (the default;
//!   float-coded rows always), or read by ibp's kernel over PCIe
//!   (zero-copy, IBP only).
//! - [`OffloadedStack`]: the layers, two device-side slots each holding one
//!   layer's tensors (and a staging area for its compressed bytes) and a
//!   candle module built on them once, a copy stream and a decode stream.
//!   Its forward pass runs layer `i` from slot `i % 2` on candle's stream
//!   while layer `i + 1` is loaded into the other slot: the copy stream
//!   moves its bytes, the decode stream decodes each compressed tensor as
//!   soon as its bytes are in (an event per tensor), and events order the
//!   three streams (a slot is refilled only after the layer that read it is
//!   done, and a layer runs only after its slot is filled). The host never
//!   waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaDevice;
use candle_core::cuda_backend::cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, DevicePtr, result,
};
use candle_core::{DType, Device, Result, Shape, Storage, Tensor};
use candle_nn::VarBuilder;
use ibp::codebook::Codebook;
use ibp::container::GroupView;
use ibp::float_code::FloatCoded;
use ibp::gpu::{
    DecodeOptions, DecodeStatus, Decoder, FloatDecoder, ForeignStream, Gpu, GpuDataset, Payload,
    PinnedBuffer, Request, Residency, STAGING_ALIGN, Span, SpanMut,
};
use ibp::layout::PackedRef;

use crate::backend::candle_dtype;
use crate::wrap;

/// How a [`HostTensor`] is kept in host memory.
enum Stored {
    /// The tensor's bytes, pinned.
    Raw(PinnedBuffer<u8>),
    /// Its ibp dataset, the compressed rows pinned (boxed: a dataset's
    /// handles are ten times a buffer's).
    Coded(Box<GpuDataset>),
    /// Its float-coded rows: the staging image pinned, the index and
    /// decode table on the device.
    Float {
        image: PinnedBuffer<u8>,
        dec: Box<FloatDecoder>,
    },
}

/// How an [`OffloadedStack`] moves a tensor compressed by ibp (float-coded
/// tensors always go by DMA).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CodedTransfer {
    /// The copy engine moves the compressed bytes into the slot's staging
    /// area (`cuMemcpyHtoDAsync`), and ibp decodes them from device memory
    /// ([`Decoder::range_staged`]) on the decode stream.
    ///
    /// Q: why the default?
    /// A: a layer's tensors are whole, contiguous ranges of their payloads,
    /// the case DMA is for: on the H200 the copy engine moves them at the
    /// link's rate (54.5 GB/s, the raw path's measured rate), above what
    /// ibp's kernel reads over PCIe (about 51 GB/s), and the decode from
    /// device memory (about 750 GB/s of bf16 output on all SMs) is many
    /// times faster than the link delivers compressed rows (54.5 × 1.33 ≈
    /// 73 GB/s of output), so a load is bound by the copy alone, and the
    /// decode holds SMs only briefly. Zero-copy (measured 1.06× raw at
    /// batch 1, 0.72× at batch 32) holds SMs for the whole transfer.
    #[default]
    Dma,
    /// ibp's kernel reads the compressed rows from pinned memory over PCIe
    /// and writes the slot (no staging area, no copy engine). A dataset
    /// stored fixed-stride (no host offsets) always goes this way.
    ZeroCopy,
}

/// Options of an [`OffloadedStack`].
#[derive(Clone, Copy, Debug, Default)]
pub struct OffloadOptions {
    /// How tensors compressed by ibp cross the link.
    pub transfer: CodedTransfer,
    /// SMs ibp's device-resident decodes ([`CodedTransfer::Dma`]) may use
    /// (`DecodeOptions::max_sms`; zero-copy decodes use all). `None`: a
    /// quarter of the device's. (The float decoder has no cap: it sizes
    /// its grid by the rows, up to the whole device.)
    ///
    /// Q: why a quarter?
    /// A: the decodes overlap the previous layer's compute, which needs the
    /// SMs at large batches (batch 32 kept all of the H200's busy). A
    /// quarter of the H200's 132 SMs still decodes about 190 GB/s of bf16
    /// output (750 GB/s ÷ 4), 2.5 times what the link delivers compressed,
    /// so the copy stays the bound.
    pub decode_sms: Option<u32>,
}

impl OffloadOptions {
    /// Choose the transfer of tensors compressed by ibp.
    pub fn with_transfer(mut self, t: CodedTransfer) -> Self {
        self.transfer = t;
        self
    }

    /// Cap the SMs of ibp's decodes.
    pub fn with_decode_sms(mut self, sms: u32) -> Self {
        self.decode_sms = Some(sms);
        self
    }
}

/// One weight tensor of an offloaded layer, in pinned host memory.
pub struct HostTensor {
    name: String,
    dtype: DType,
    shape: Shape,
    stored: Stored,
}

fn cuda_err(e: impl std::fmt::Debug) -> candle_core::Error {
    candle_core::Error::Cuda(format!("{e:?}").into()).bt()
}

impl HostTensor {
    /// `bytes` (the tensor of `dtype` and `shape`, little-endian, row-major)
    /// copied into pinned memory, to be copied over raw.
    pub fn raw(name: &str, dtype: DType, shape: impl Into<Shape>, bytes: &[u8]) -> Result<Self> {
        let shape = shape.into();
        check_len(name, dtype, &shape, bytes.len() as u64)?;
        Ok(HostTensor {
            name: name.into(),
            dtype,
            shape,
            stored: Stored::Raw(PinnedBuffer::from_slice(bytes).map_err(wrap)?),
        })
    }

    /// A tensor compressed by ibp (`packed`, decoded with `cb`; its rows
    /// back to back are the tensor's bytes), its compressed rows copied into
    /// pinned memory, to be decoded over PCIe into the device buffer.
    pub fn compressed(
        gpu: &Gpu,
        name: &str,
        dtype: DType,
        shape: impl Into<Shape>,
        cb: &Codebook,
        packed: &PackedRef<'_>,
    ) -> Result<Self> {
        let shape = shape.into();
        let len = packed.rows() as u64 * packed.row_bytes() as u64;
        check_len(name, dtype, &shape, len)?;
        let ds = GpuDataset::upload_packed(gpu, cb, packed, Residency::Pinned).map_err(wrap)?;
        Ok(HostTensor {
            name: name.into(),
            dtype,
            shape,
            stored: Stored::Coded(Box::new(ds)),
        })
    }

    /// A tensor float-coded by `ibp::float_code` (`coded`: its rows back to
    /// back are the tensor's bytes), its coded rows copied into pinned
    /// memory and its index and decode table into device memory; each load
    /// copies the rows by DMA into the slot's staging area and decodes them
    /// there ([`FloatDecoder::range_staged`]).
    pub fn float_coded(
        gpu: &Gpu,
        name: &str,
        dtype: DType,
        shape: impl Into<Shape>,
        coded: &FloatCoded,
    ) -> Result<Self> {
        let shape = shape.into();
        let len = coded.rows() as u64 * coded.row_bytes() as u64;
        check_len(name, dtype, &shape, len)?;
        let dec = FloatDecoder::new_staged(gpu, coded).map_err(wrap)?;
        let image = PinnedBuffer::from_slice(&FloatDecoder::staging_image(coded)).map_err(wrap)?;
        Ok(HostTensor {
            name: name.into(),
            dtype,
            shape,
            stored: Stored::Float {
                image,
                dec: Box::new(dec),
            },
        })
    }

    /// Group `g` of an `.ibp` file under `name`: compressed if the file
    /// stores it coded, raw otherwise (small and 1-D tensors).
    pub fn from_group(gpu: &Gpu, name: &str, g: &GroupView<'_>) -> Result<Self> {
        let (dtype, false) = candle_dtype(g.dtype()).ok_or_else(|| {
            candle_core::Error::Msg(format!("tensor {:?}: unsupported type", g.name()))
        })?
        else {
            return Err(candle_core::Error::Msg(format!(
                "tensor {:?} widens to u32 when loaded; offload it converted",
                g.name()
            )));
        };
        let shape = Shape::from(crate::backend::dims(g.shape())?);
        if g.codebook().is_some() {
            let ds = GpuDataset::upload_group(gpu, g, Residency::Pinned).map_err(wrap)?;
            check_len(name, dtype, &shape, ds.rows() * ds.row_bytes())?;
            Ok(HostTensor {
                name: name.into(),
                dtype,
                shape,
                stored: Stored::Coded(Box::new(ds)),
            })
        } else {
            HostTensor::raw(name, dtype, shape, &g.decompress().map_err(wrap)?)
        }
    }

    /// Its name in the layer (what the module's `VarBuilder` asks for).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes it occupies in pinned memory (what crosses the link per load).
    pub fn stored_bytes(&self) -> u64 {
        match &self.stored {
            Stored::Raw(b) => b.len() as u64,
            Stored::Coded(ds) => ds.stored_bytes(),
            Stored::Float { image, .. } => image.len() as u64,
        }
    }

    /// Bytes of the staging area its DMA load needs (0: none), at an
    /// offset aligned to [`STAGING_ALIGN`]; `transfer` as the stack's.
    fn staging_bytes(&self, transfer: CodedTransfer) -> usize {
        match &self.stored {
            Stored::Raw(_) => 0,
            Stored::Coded(ds) => match (transfer, staged_copy(ds)) {
                (CodedTransfer::Dma, Some((_, need))) => need,
                _ => 0,
            },
            Stored::Float { dec, .. } => dec.staging_bytes().next_multiple_of(STAGING_ALIGN),
        }
    }

    /// Bytes of the tensor itself.
    pub fn tensor_bytes(&self) -> u64 {
        (self.shape.elem_count() * self.dtype.size_in_bytes()) as u64
    }
}

/// A dataset's whole payload as the DMA path copies it: the pinned bytes
/// and the staging bytes they need; `None` where the DMA path cannot serve
/// it (fixed-stride: no host offsets).
fn staged_copy(ds: &GpuDataset) -> Option<(&[u8], usize)> {
    let Payload::Pinned(p) = ds.payload() else {
        return None;
    };
    let r = ds.stored_range(0, ds.rows())?;
    let need = ds.staging_bytes(0, ds.rows())?;
    Some((&p[r.start as usize..r.end as usize], need))
}

fn check_len(name: &str, dtype: DType, shape: &Shape, len: u64) -> Result<()> {
    let want = (shape.elem_count() * dtype.size_in_bytes()) as u64;
    if want != len {
        return Err(candle_core::Error::Msg(format!(
            "tensor {name:?}: {shape:?} of {dtype:?} is {want} bytes, the data {len}"
        ))
        .bt());
    }
    Ok(())
}

/// One device-side copy of a layer: its tensors (allocated once, written by
/// each load), the staging area its compressed bytes land in, and the
/// module built on them.
struct Slot<L> {
    module: L,
    /// Per tensor, in the layers' order: device address and bytes.
    dst: Vec<(u64, usize)>,
    /// The tensors, kept alive for `dst`.
    _tensors: Vec<Tensor>,
    /// The staging area (device address and bytes; 0 bytes: none), its
    /// allocation kept alive by `_staging`.
    staging: (u64, usize),
    _staging: Option<CudaSlice<u8>>,
    /// Per tensor: recorded on the copy stream once its compressed bytes
    /// are in the staging area (the decode stream waits on it).
    copied: Vec<CudaEvent>,
}

/// A `VarBuilder` backend over one slot's tensors that hands out the slot's
/// own tensors (shared storage, never a converted copy: a copy would leave
/// the module reading memory the loads never write).
struct SlotBackend {
    tensors: HashMap<String, Tensor>,
}

impl candle_nn::var_builder::SimpleBackend for SlotBackend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> Result<Tensor> {
        let t = self.get_unchecked(name, dtype, dev)?;
        if t.shape() != &s {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: t.shape().clone(),
            }
            .bt());
        }
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, _dev: &Device) -> Result<Tensor> {
        let t = self.tensors.get(name).ok_or_else(|| {
            candle_core::Error::CannotFindTensor {
                path: name.to_string(),
            }
            .bt()
        })?;
        if t.dtype() != dtype {
            return Err(candle_core::Error::Msg(format!(
                "offloaded tensor {name:?} is {:?}; build the layer with that dtype (a conversion would copy it out of the slot)",
                t.dtype()
            ))
            .bt());
        }
        Ok(t.clone())
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// The device address of a CUDA tensor's data (contiguous, from offset 0).
fn device_addr(t: &Tensor, stream: &Arc<CudaStream>) -> Result<u64> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        return Err(cuda_err("a slot tensor is not on a CUDA device"));
    };
    if !layout.is_contiguous() || layout.start_offset() != 0 {
        return Err(cuda_err("a slot tensor is not contiguous"));
    }
    macro_rules! addr {
        ($t:ty) => {{ cs.as_cuda_slice::<$t>()?.device_ptr(stream).0 }};
    }
    Ok(match cs.dtype() {
        DType::U8 => addr!(u8),
        DType::U32 => addr!(u32),
        DType::I16 => addr!(i16),
        DType::I32 => addr!(i32),
        DType::I64 => addr!(i64),
        DType::BF16 => addr!(half::bf16),
        DType::F16 => addr!(half::f16),
        DType::F32 => addr!(f32),
        DType::F64 => addr!(f64),
        other => return Err(cuda_err(format!("offloading {other:?} tensors"))),
    })
}

/// A stack of layers whose weights live in pinned host memory and visit the
/// GPU one layer at a time (module docs).
pub struct OffloadedStack<L> {
    gpu: Gpu,
    device: CudaDevice,
    /// The stream the copies run on (candle's runs the layers).
    copy: Arc<CudaStream>,
    /// The stream ibp's decodes run on.
    decode: Arc<CudaStream>,
    layers: Vec<Vec<HostTensor>>,
    slots: Vec<Slot<L>>,
    /// Per slot: recorded on the copy stream after its load's copies.
    copies_done: Vec<CudaEvent>,
    /// Per slot: recorded on the decode stream after its load.
    loaded: Vec<CudaEvent>,
    /// Per slot: recorded on candle's stream after its layer ran.
    done: Vec<CudaEvent>,
    opts: OffloadOptions,
    /// The decoders' options (the SM cap resolved).
    decode_opts: DecodeOptions,
    status: Mutex<DecodeStatus>,
}

impl<L> OffloadedStack<L> {
    /// A stack of `layers` (each the same tensors, by name, dtype and shape,
    /// in the same order) on candle's CUDA device `device`, with the default
    /// [`OffloadOptions`]. `build` makes one layer's module from a
    /// `VarBuilder` over its tensors (called twice, once per slot); the
    /// tensors' dtype is the one it must ask for.
    pub fn new(
        device: &CudaDevice,
        gpu: Gpu,
        layers: Vec<Vec<HostTensor>>,
        build: impl Fn(VarBuilder<'static>) -> Result<L>,
    ) -> Result<Self> {
        Self::with_options(device, gpu, layers, OffloadOptions::default(), build)
    }

    /// [`OffloadedStack::new`] with `opts`.
    pub fn with_options(
        device: &CudaDevice,
        gpu: Gpu,
        layers: Vec<Vec<HostTensor>>,
        opts: OffloadOptions,
        build: impl Fn(VarBuilder<'static>) -> Result<L>,
    ) -> Result<Self> {
        let first = layers
            .first()
            .ok_or_else(|| candle_core::Error::Msg("an offloaded stack of no layers".into()))?;
        for (i, l) in layers.iter().enumerate() {
            let same = l.len() == first.len()
                && l.iter()
                    .zip(first)
                    .all(|(a, b)| (&a.name, a.dtype, &a.shape) == (&b.name, b.dtype, &b.shape));
            if !same {
                return Err(candle_core::Error::Msg(format!(
                    "layer {i} holds other tensors than layer 0"
                ))
                .bt());
            }
        }
        let stream = device.cuda_stream();
        if stream.context().ordinal() != gpu.ordinal() as usize {
            return Err(cuda_err("ibp's Gpu and candle's device differ"));
        }
        let ctx = stream.context();
        let copy = ctx.new_stream().map_err(cuda_err)?;
        let decode = ctx.new_stream().map_err(cuda_err)?;
        let dev = Device::Cuda(device.clone());
        let dtype = first
            .iter()
            .map(|t| t.dtype)
            .find(|d| d.is_float())
            .unwrap_or(first[0].dtype);
        // Staging for the largest layer under either transfer (so that
        // `set_transfer` never allocates).
        let staging_bytes = layers
            .iter()
            .map(|l| {
                l.iter()
                    .map(|h| h.staging_bytes(CodedTransfer::Dma))
                    .sum::<usize>()
            })
            .max()
            .unwrap_or(0);
        let events = |n: usize| -> Result<Vec<CudaEvent>> {
            (0..n)
                .map(|_| ctx.new_event(None).map_err(cuda_err))
                .collect()
        };
        let mut slots = Vec::new();
        for _ in 0..2 {
            let tensors: Vec<Tensor> = first
                .iter()
                .map(|t| Tensor::zeros(t.shape.clone(), t.dtype, &dev))
                .collect::<Result<_>>()?;
            let dst = tensors
                .iter()
                .zip(first)
                .map(|(t, h)| Ok((device_addr(t, &stream)?, h.tensor_bytes() as usize)))
                .collect::<Result<_>>()?;
            let map = first
                .iter()
                .zip(&tensors)
                .map(|(h, t)| (h.name.clone(), t.clone()))
                .collect();
            let vb = VarBuilder::from_backend(
                Box::new(SlotBackend { tensors: map }),
                dtype,
                dev.clone(),
            );
            // Q: why candle's allocator for the staging area? A: it is
            // device memory of the same context, freed with the stack;
            // cudarc's allocations are 256-byte aligned (STAGING_ALIGN).
            let staging = if staging_bytes > 0 {
                Some(stream.alloc_zeros::<u8>(staging_bytes).map_err(cuda_err)?)
            } else {
                None
            };
            let staging_at = match &staging {
                Some(b) => (b.device_ptr(&stream).0, staging_bytes),
                None => (0, 0),
            };
            slots.push(Slot {
                module: build(vb)?,
                dst,
                _tensors: tensors,
                staging: staging_at,
                _staging: staging,
                copied: events(first.len())?,
            });
        }
        // Nothing has run yet: both slots are free. (Recorded after the
        // slots' zero fills on candle's stream, which the first loads thus
        // follow.)
        let done = events(2)?;
        for e in &done {
            e.record(&stream).map_err(cuda_err)?;
        }
        let sms = gpu.info().sm_count;
        let decode_opts =
            DecodeOptions::default().with_max_sms(opts.decode_sms.unwrap_or(sms.div_ceil(4)));
        Ok(OffloadedStack {
            status: Mutex::new(DecodeStatus::new().map_err(wrap)?),
            gpu,
            device: device.clone(),
            copy,
            decode,
            layers,
            slots,
            copies_done: events(2)?,
            loaded: events(2)?,
            done,
            opts,
            decode_opts,
        })
    }

    /// Change how tensors compressed by ibp cross the link from the next
    /// forward pass on (the staging areas were sized for DMA).
    pub fn set_transfer(&mut self, t: CodedTransfer) {
        self.opts.transfer = t;
    }

    /// The options in force.
    pub fn options(&self) -> OffloadOptions {
        self.opts
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether the stack has no layers (never: `new` refuses that).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Bytes the layers occupy in pinned memory (what one forward pass
    /// moves over the link), and the bytes of their tensors.
    pub fn bytes(&self) -> (u64, u64) {
        self.layers.iter().flatten().fold((0, 0), |(s, t), h| {
            (s + h.stored_bytes(), t + h.tensor_bytes())
        })
    }

    /// Enqueue layer `i`'s load into slot `s`, after the slot's last
    /// reader, and record `loaded[s]` (module docs: copies on the copy
    /// stream, decodes on the decode stream, each DMA-staged tensor's
    /// decode after its own copy).
    fn load(&self, i: usize, s: usize) -> Result<()> {
        self.copy.wait(&self.done[s]).map_err(cuda_err)?;
        self.decode.wait(&self.done[s]).map_err(cuda_err)?;
        let slot = &self.slots[s];
        let status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: (1) the decode stream belongs to the device's primary
        // context (made from candle's stream's context, checked against
        // `gpu` in `new`); (2) `self.decode` lives as long as `self`, past
        // this call.
        let on =
            unsafe { ForeignStream::from_raw(self.decode.cu_stream() as *mut std::ffi::c_void) };
        let mut staged_at = 0usize;
        for (k, (h, &(addr, bytes))) in self.layers[i].iter().zip(&slot.dst).enumerate() {
            // SAFETY: (1) `addr` is the start of a slot tensor's allocation
            // of `bytes` bytes (`new` checked each layer's tensor sizes
            // against slot 0's), alive while `self` is; (2) only this
            // stack writes it, after `done[s]` (both streams waited on it)
            // and before `loaded[s]`, which candle's stream waits on before
            // the layer reads it.
            let mut out = unsafe { SpanMut::from_raw_parts(addr, bytes) };
            // The staging bytes this tensor takes (0: not staged).
            let need = h.staging_bytes(self.opts.transfer);
            if need > 0 && staged_at + need > slot.staging.1 {
                return Err(cuda_err("an offloaded layer outgrew the staging area"));
            }
            let stage = slot.staging.0 + staged_at as u64;
            match &h.stored {
                Stored::Raw(buf) => {
                    // SAFETY: (1) and (2) as for `out`; the source is
                    // pinned host memory that `self` owns and never writes
                    // after construction, so it outlives the asynchronous
                    // copy.
                    unsafe {
                        result::memcpy_htod_async(addr, &buf[..bytes], self.copy.cu_stream())
                    }
                    .map_err(cuda_err)?;
                }
                Stored::Coded(ds) => {
                    // Q: why cap only the staged decodes' SMs? A: a
                    // zero-copy decode lasts the whole transfer and reads
                    // at the link's rate only with every SM's lines in
                    // flight; it is kept as measured before.
                    let opts = if need > 0 {
                        &self.decode_opts
                    } else {
                        &DecodeOptions::default()
                    };
                    let dec = Decoder::new(&self.gpu, ds, opts).map_err(wrap)?;
                    match staged_copy(ds).filter(|_| need > 0) {
                        Some((src, _)) => {
                            self.stage(src, stage, &slot.copied[k])?;
                            // SAFETY: `stage .. stage + need` lies in the
                            // slot's staging allocation (checked above),
                            // alive while `self` is; the copy into it is
                            // ordered before the decode by `copied[k]`, and
                            // the next copy into it waits for `done[s]`,
                            // after this load's decodes.
                            let staged = unsafe { Span::from_raw_parts(stage, need) };
                            dec.range_staged(
                                &self.gpu,
                                0,
                                ds.rows(),
                                &staged,
                                &mut out,
                                &status,
                                &on,
                            )
                            .map_err(wrap)?;
                        }
                        None => dec
                            .enqueue(
                                &self.gpu,
                                &Request::range(0, ds.rows()),
                                &mut out,
                                &status,
                                &on,
                            )
                            .map_err(wrap)?,
                    }
                }
                Stored::Float { image, dec } => {
                    self.stage(&image[..], stage, &slot.copied[k])?;
                    // SAFETY: as for the IBP staging above.
                    let staged = unsafe { Span::from_raw_parts(stage, need) };
                    dec.range_staged(&self.gpu, 0, dec.rows(), &staged, &mut out, &status, &on)
                        .map_err(wrap)?;
                }
            }
            staged_at += need;
        }
        self.copies_done[s].record(&self.copy).map_err(cuda_err)?;
        self.decode.wait(&self.copies_done[s]).map_err(cuda_err)?;
        self.loaded[s].record(&self.decode).map_err(cuda_err)
    }

    /// Copy `src` (pinned, owned by `self`) to device address `at` on the
    /// copy stream, and make the decode stream wait for it through `ev`.
    fn stage(&self, src: &[u8], at: u64, ev: &CudaEvent) -> Result<()> {
        // SAFETY: (1) `at .. at + src.len()` lies in a slot's staging
        // allocation (the caller checked its tensor's staging bytes, which
        // cover `src`, against the area), alive while `self` is; (2) the
        // copy stream waited for `done[s]`, after the staging area's last
        // reader (the previous load's decodes, ordered before that layer
        // ran); (3) `src` is pinned host memory that `self` owns and never
        // writes after construction, so it outlives the asynchronous copy.
        unsafe { result::memcpy_htod_async(at, src, self.copy.cu_stream()) }.map_err(cuda_err)?;
        ev.record(&self.copy).map_err(cuda_err)?;
        self.decode.wait(ev).map_err(cuda_err)
    }

    /// Run the stack on `x`: `run(module, x)` for each layer in order on
    /// candle's stream, each layer's weights loaded just before it, the
    /// next layer's load overlapping it. Returns the last layer's output;
    /// nothing waits on the host ([`OffloadedStack::check_blocking`] reads
    /// the decode status).
    pub fn forward(
        &self,
        x: &Tensor,
        mut run: impl FnMut(&L, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let stream = self.device.cuda_stream();
        self.load(0, 0)?;
        let mut x = x.clone();
        for i in 0..self.layers.len() {
            let s = i % 2;
            if i + 1 < self.layers.len() {
                self.load(i + 1, 1 - s)?;
            }
            stream.wait(&self.loaded[s]).map_err(cuda_err)?;
            x = run(&self.slots[s].module, &x)?;
            self.done[s].record(&stream).map_err(cuda_err)?;
        }
        Ok(x)
    }

    /// Wait for candle's stream (and so every load it waited on), then read
    /// and clear the decode status: an error names a corrupt row.
    pub fn check_blocking(&self) -> Result<()> {
        self.device.cuda_stream().synchronize().map_err(cuda_err)?;
        self.copy.synchronize().map_err(cuda_err)?;
        self.decode.synchronize().map_err(cuda_err)?;
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.check_blocking().map_err(wrap)
    }
}
