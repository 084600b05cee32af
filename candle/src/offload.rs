//! Weight offloading in the FlexGen style (feature `cuda`): a model's
//! layers kept in pinned host memory, raw or compressed by ibp, and brought
//! into one of two reused device buffers just before each layer runs, the
//! next layer's transfer overlapping the current layer's compute.
//!
//! - [`HostTensor`]: one weight tensor of a layer between uses: its bytes in
//!   pinned host memory (copied over with `cuMemcpyHtoDAsync`), or its ibp
//!   dataset there (decoded by ibp's kernel, which reads the compressed rows
//!   over PCIe and writes the device buffer: fewer bytes on the link).
//! - [`OffloadedStack`]: the layers, two device-side slots each holding one
//!   layer's tensors and a candle module built on them once, and a copy
//!   stream. Its forward pass runs layer `i` from slot `i % 2` on candle's
//!   stream while layer `i + 1` is loaded into the other slot on the copy
//!   stream; two pairs of events order them (a slot is refilled only after
//!   the layer that read it is done, and a layer runs only after its slot is
//!   filled). The host never waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaDevice;
use candle_core::cuda_backend::cudarc::driver::{CudaEvent, CudaStream, DevicePtr, result};
use candle_core::{DType, Device, Result, Shape, Storage, Tensor};
use candle_nn::VarBuilder;
use ibp::codebook::Codebook;
use ibp::container::GroupView;
use ibp::gpu::{
    DecodeOptions, DecodeStatus, Decoder, ForeignStream, Gpu, GpuDataset, PinnedBuffer, Request,
    Residency, SpanMut,
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
        }
    }

    /// Bytes of the tensor itself.
    pub fn tensor_bytes(&self) -> u64 {
        (self.shape.elem_count() * self.dtype.size_in_bytes()) as u64
    }
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
/// each load) and the module built on them.
struct Slot<L> {
    module: L,
    /// Per tensor, in the layers' order: device address and bytes.
    dst: Vec<(u64, usize)>,
    /// The tensors, kept alive for `dst`.
    _tensors: Vec<Tensor>,
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
    /// The stream the loads run on (candle's runs the layers).
    copy: Arc<CudaStream>,
    layers: Vec<Vec<HostTensor>>,
    slots: Vec<Slot<L>>,
    /// Per slot: recorded on the copy stream after its load.
    loaded: Vec<CudaEvent>,
    /// Per slot: recorded on candle's stream after its layer ran.
    done: Vec<CudaEvent>,
    status: Mutex<DecodeStatus>,
}

impl<L> OffloadedStack<L> {
    /// A stack of `layers` (each the same tensors, by name, dtype and shape,
    /// in the same order) on candle's CUDA device `device`. `build` makes
    /// one layer's module from a `VarBuilder` over its tensors (called
    /// twice, once per slot); the tensors' dtype is the one it must ask for.
    pub fn new(
        device: &CudaDevice,
        gpu: Gpu,
        layers: Vec<Vec<HostTensor>>,
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
        let copy = stream.context().new_stream().map_err(cuda_err)?;
        let dev = Device::Cuda(device.clone());
        let dtype = first
            .iter()
            .map(|t| t.dtype)
            .find(|d| d.is_float())
            .unwrap_or(first[0].dtype);
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
            slots.push(Slot {
                module: build(vb)?,
                dst,
                _tensors: tensors,
            });
        }
        let ctx = stream.context();
        let events = || -> Result<Vec<CudaEvent>> {
            (0..2)
                .map(|_| ctx.new_event(None).map_err(cuda_err))
                .collect()
        };
        // Nothing has run yet: both slots are free.
        let done = events()?;
        for e in &done {
            e.record(&stream).map_err(cuda_err)?;
        }
        Ok(OffloadedStack {
            status: Mutex::new(DecodeStatus::new().map_err(wrap)?),
            gpu,
            device: device.clone(),
            copy,
            layers,
            slots,
            loaded: events()?,
            done,
        })
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

    /// Enqueue layer `i`'s load into slot `s` on the copy stream, after the
    /// slot's last reader, and record `loaded[s]`.
    fn load(&self, i: usize, s: usize) -> Result<()> {
        self.copy.wait(&self.done[s]).map_err(cuda_err)?;
        let slot = &self.slots[s];
        let status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: (1) the copy stream belongs to the device's primary
        // context (made from candle's stream's context, checked against
        // `gpu` in `new`); (2) `self.copy` lives as long as `self`, past
        // this call.
        let on = unsafe { ForeignStream::from_raw(self.copy.cu_stream() as *mut std::ffi::c_void) };
        for (h, &(addr, bytes)) in self.layers[i].iter().zip(&slot.dst) {
            match &h.stored {
                Stored::Raw(buf) => {
                    // SAFETY: (1) `addr` is the start of a slot tensor's
                    // allocation of `bytes` bytes (`new` checked each
                    // layer's tensor sizes against slot 0's), alive while
                    // `self` is; (2) the source is pinned host memory that
                    // `self` owns and never writes after construction, so it
                    // outlives the asynchronous copy; (3) the copy stream
                    // waited for `done[s]`, recorded after the slot's last
                    // reader.
                    unsafe {
                        result::memcpy_htod_async(addr, &buf[..bytes], self.copy.cu_stream())
                    }
                    .map_err(cuda_err)?;
                }
                Stored::Coded(ds) => {
                    // SAFETY: as for the raw copy: a live allocation of
                    // `bytes` bytes on this device that only this stack
                    // writes, its readers ordered before by `done[s]` and
                    // after by `loaded[s]`.
                    let mut out = unsafe { SpanMut::from_raw_parts(addr, bytes) };
                    let dec =
                        Decoder::new(&self.gpu, ds, &DecodeOptions::default()).map_err(wrap)?;
                    dec.enqueue(
                        &self.gpu,
                        &Request::range(0, ds.rows()),
                        &mut out,
                        &status,
                        &on,
                    )
                    .map_err(wrap)?;
                }
            }
        }
        self.loaded[s].record(&self.copy).map_err(cuda_err)
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
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.check_blocking().map_err(wrap)
    }
}
