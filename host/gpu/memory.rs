//! Memory the kernels can read: device buffers (cust's), and pinned host
//! buffers mapped into the device's address space, read zero-copy over PCIe.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use cust::memory::{DeviceBuffer, DeviceCopy, DeviceSlice};

use super::driver::host_memory;
use crate::error::{Error, Result};

/// Something a kernel can read: its device address and length in bytes.
pub trait GpuReadable {
    /// Address of the first byte in the device's (unified) address space.
    fn device_addr(&self) -> u64;
    /// Length in bytes.
    fn byte_len(&self) -> usize;
}

impl<T: DeviceCopy> GpuReadable for DeviceSlice<T> {
    fn device_addr(&self) -> u64 {
        self.as_device_ptr().as_raw()
    }
    fn byte_len(&self) -> usize {
        self.len() * size_of::<T>()
    }
}

impl<T: DeviceCopy> GpuReadable for DeviceBuffer<T> {
    fn device_addr(&self) -> u64 {
        self.as_device_ptr().as_raw()
    }
    fn byte_len(&self) -> usize {
        self.len() * size_of::<T>()
    }
}

/// Page-locked host memory mapped into the device's address space.
///
/// Kernels read it directly over PCIe (zero-copy): no staging copy, no DMA
/// set-up per tensor. It dereferences to a slice on the host.
///
/// Q: why not cust's `LockedBuffer`?
/// A: it allocates with `cuMemAllocHost`, which does not promise a device
/// mapping on every configuration; we ask for `DEVICEMAP` explicitly and take
/// the device address the driver gives, so a kernel never dereferences a host
/// pointer it was not handed.
pub struct PinnedBuffer<T: bytemuck::Pod> {
    host: *mut T,
    device: u64,
    len: usize,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<T>.
unsafe impl<T: bytemuck::Pod + Send> Send for PinnedBuffer<T> {}
// SAFETY: shared access only hands out &[T].
unsafe impl<T: bytemuck::Pod + Sync> Sync for PinnedBuffer<T> {}

impl<T: bytemuck::Pod> PinnedBuffer<T> {
    /// A zeroed buffer of `len` elements, allocated in pinned host memory.
    /// A CUDA context must be current.
    pub fn zeroed(len: usize) -> Result<Self> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::invalid("pinned buffer size overflows usize"))?;
        // cuMemHostAlloc rejects 0 bytes; keep one byte so pointers stay valid.
        let alloc = bytes.max(1);
        // SAFETY: freed once, in Drop (or below when the mapping fails).
        let p = unsafe { host_memory::alloc_host_mapped(alloc)? };
        // SAFETY: `p` came from alloc_host_mapped (mapped).
        let d = match unsafe { host_memory::host_device_address(p) } {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: `p` is ours and not used after this.
                unsafe { host_memory::free_host(p) };
                return Err(e);
            }
        };
        // SAFETY: `alloc` bytes are writable; zero them (Pod: all-zero is valid).
        unsafe { std::ptr::write_bytes(p, 0, alloc) };
        Ok(Self {
            host: p as *mut T,
            device: d,
            len,
            _owns: PhantomData,
        })
    }

    /// A pinned copy of `data` (allocates pinned host memory).
    pub fn from_slice(data: &[T]) -> Result<Self> {
        let mut b = Self::zeroed(data.len())?;
        b.copy_from_slice(data);
        Ok(b)
    }

    /// Device address of element 0.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }
}

impl<T: bytemuck::Pod> Deref for PinnedBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `host` points to `len` initialised (zeroed or written) T.
        unsafe { std::slice::from_raw_parts(self.host, self.len) }
    }
}

impl<T: bytemuck::Pod> DerefMut for PinnedBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.host, self.len) }
    }
}

impl<T: bytemuck::Pod> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by alloc_host_mapped in `zeroed`, freed once,
        // after every host borrow; work that reads it on the device is
        // waited for by its enqueuer before the buffer is dropped (as
        // before this layer: the drop itself does not wait).
        unsafe { host_memory::free_host(self.host as *mut u8) };
    }
}

impl<T: bytemuck::Pod> PinnedBuffer<T> {
    /// Elements `range` of the buffer as a kernel source (fit, compress,
    /// count bits), without a copy; `None` when the range is not inside.
    pub fn span(&self, range: std::ops::Range<usize>) -> Option<Span<'_>> {
        let size = size_of::<T>();
        let len = range.end.checked_sub(range.start)?;
        Span::of(self, range.start.checked_mul(size)?, len.checked_mul(size)?)
    }
}

impl<T: bytemuck::Pod> GpuReadable for PinnedBuffer<T> {
    fn device_addr(&self) -> u64 {
        self.device
    }
    fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }
}

/// Bytes `offset .. offset + len` of a readable source, as a kernel source
/// itself (borrowing the source, so it cannot be freed meanwhile): a slice
/// of a [`PinnedBuffer`], a [`Registered`] region or device memory to fit,
/// compress or count without copying it.
pub struct Span<'a> {
    addr: u64,
    len: usize,
    _src: PhantomData<&'a ()>,
}

impl<'a> Span<'a> {
    /// The sub-range; `None` when it is not inside `src`.
    pub fn of<S: GpuReadable + ?Sized>(src: &'a S, offset: usize, len: usize) -> Option<Self> {
        (offset.checked_add(len)? <= src.byte_len()).then(|| Span {
            addr: src.device_addr() + offset as u64,
            len,
            _src: PhantomData,
        })
    }
}

impl<'a> Span<'a> {
    /// `len` bytes at device address `addr`, memory ibp did not allocate
    /// (another library's device buffer, a mapped pinned buffer), as a
    /// kernel source for `'a`. No driver call; nothing is copied.
    ///
    /// # Safety
    /// 1. `addr .. addr + len` is device memory of the device
    ///    [`crate::gpu::Gpu`] runs on, or host memory mapped into its
    ///    address space, allocated in (or visible from) the device's primary
    ///    context, and stays allocated for `'a` and until every kernel ibp
    ///    enqueued on it has completed.
    /// 2. No write to those bytes runs unordered with ibp's reads: every
    ///    write is complete, or ordered before ibp's work on the stream the
    ///    work is enqueued on (for [`crate::gpu::Compressor`]'s blocking
    ///    calls, which run on their own stream: complete before the call).
    /// 3. For a gather index ([`crate::gpu::Request::gather_span`]): the
    ///    bytes hold initialised integers of the index type.
    pub unsafe fn from_raw_parts(addr: u64, len: usize) -> Self {
        Span {
            addr,
            len,
            _src: PhantomData,
        }
    }

    /// `len` bytes of page-locked host memory at `ptr`, allocated or
    /// registered by another library with device mapping (cudarc's pinned
    /// allocations, `cudaHostAlloc(…, cudaHostAllocMapped)`), as a kernel
    /// source read zero-copy. Asks the driver for the device address, which
    /// fails (a [`crate::ErrorKind::Cuda`] error) when `ptr` is not mapped
    /// pinned memory.
    ///
    /// # Safety
    /// 1. `ptr .. ptr + len` lies inside one such allocation or
    ///    registration, which stays alive for `'a` and until every kernel
    ///    ibp enqueued on it has completed.
    /// 2. As [`Span::from_raw_parts`]'s 2: no host or device write runs
    ///    unordered with ibp's reads.
    pub unsafe fn from_pinned_host(ptr: *const u8, len: usize) -> Result<Self> {
        // SAFETY: the caller's 1: `ptr` is in mapped pinned memory, alive.
        let addr = unsafe { host_memory::host_device_address(ptr as *mut u8)? };
        // SAFETY: the mapping covers the allocation (1), and the caller's 2.
        Ok(unsafe { Span::from_raw_parts(addr, len) })
    }
}

impl GpuReadable for Span<'_> {
    fn device_addr(&self) -> u64 {
        self.addr
    }
    fn byte_len(&self) -> usize {
        self.len
    }
}

/// Host memory registered with the driver and mapped into the device's
/// address space for as long as this lives: the kernels read the caller's
/// own bytes zero-copy, with no pinned copy.
pub struct Registered<'a> {
    ptr: *const u8,
    device: u64,
    len: usize,
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> Registered<'a> {
    /// Page-lock and map `bytes` (read-only for the device). A CUDA context
    /// must be current. Fails when the range (or part of it) is already
    /// registered.
    pub fn new(bytes: &'a [u8]) -> Result<Self> {
        if bytes.is_empty() {
            return Err(Error::invalid("cannot register 0 bytes"));
        }
        let ptr = bytes.as_ptr();
        // Q: why try read-only first?
        // A: the bytes may be a read-only mapping (a memory-mapped file);
        // registering those writable fails. Devices without read-only
        // registration take the plain flag.
        let mut r = Ok(());
        for flags in [
            host_memory::REGISTER_MAPPED_READ_ONLY,
            host_memory::REGISTER_MAPPED,
        ] {
            // SAFETY: `ptr .. ptr + len` is a live borrow for 'a; it is
            // unregistered in Drop before the borrow ends; ibp's kernels
            // only read sources (the plain flag's device writes never come).
            r = unsafe { host_memory::register_host(ptr, bytes.len(), flags) };
            if r.is_ok() {
                break;
            }
        }
        r?;
        // SAFETY: `ptr` is registered with DEVICEMAP.
        let device = match unsafe { host_memory::host_device_address(ptr as *mut u8) } {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: registered above, not used after this.
                unsafe { host_memory::unregister_host(ptr) };
                return Err(e);
            }
        };
        Ok(Self {
            ptr,
            device,
            len: bytes.len(),
            _borrow: PhantomData,
        })
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, unregistered once.
        unsafe { host_memory::unregister_host(self.ptr) };
    }
}

impl GpuReadable for Registered<'_> {
    fn device_addr(&self) -> u64 {
        self.device
    }
    fn byte_len(&self) -> usize {
        self.len
    }
}

/// Something a decode writes into: its device address and length in bytes.
/// Device buffers of cust ([`DeviceSlice<u8>`], [`DeviceBuffer<u8>`]) and
/// memory of another library ([`SpanMut`]).
///
/// Q: why sealed? A: the kernels write wherever it points; a safe impl
/// outside the crate could name any address. Memory ibp does not know
/// comes in through [`SpanMut::from_raw_parts`], whose caller answers for it.
pub trait GpuWritable: writable::Sealed {
    /// Address of the first byte (taken through `&mut`: the caller hands
    /// over write access for the work it enqueues).
    fn device_addr_mut(&mut self) -> u64;
    /// Length in bytes.
    fn writable_len(&self) -> usize;
}

mod writable {
    pub trait Sealed {}
    impl Sealed for cust::memory::DeviceSlice<u8> {}
    impl Sealed for cust::memory::DeviceBuffer<u8> {}
    impl Sealed for super::SpanMut<'_> {}
    impl<T: super::GpuWritable + ?Sized> Sealed for &mut T {}
}

// A reborrow (`&mut out` where `out: &mut DeviceBuffer<u8>`) works as
// deref coercion did when the decode took `&mut DeviceSlice<u8>`.
impl<T: GpuWritable + ?Sized> GpuWritable for &mut T {
    fn device_addr_mut(&mut self) -> u64 {
        (**self).device_addr_mut()
    }
    fn writable_len(&self) -> usize {
        (**self).writable_len()
    }
}

impl GpuWritable for DeviceSlice<u8> {
    fn device_addr_mut(&mut self) -> u64 {
        self.as_device_ptr().as_raw()
    }
    fn writable_len(&self) -> usize {
        self.len()
    }
}

impl GpuWritable for DeviceBuffer<u8> {
    fn device_addr_mut(&mut self) -> u64 {
        self.as_device_ptr().as_raw()
    }
    fn writable_len(&self) -> usize {
        self.len()
    }
}

/// Bytes of memory ibp did not allocate, borrowed for writing for `'a`: the
/// output of a decode into another library's buffer (cudarc's
/// `CudaSlice<u8>`, a C allocation).
#[derive(Debug)]
pub struct SpanMut<'a> {
    addr: u64,
    len: usize,
    _dst: PhantomData<&'a mut ()>,
}

impl<'a> SpanMut<'a> {
    /// `len` bytes at device address `addr`, writable by ibp's kernels.
    ///
    /// # Safety
    /// 1. `addr .. addr + len` is device memory of the device
    ///    [`crate::gpu::Gpu`] runs on (or mapped pinned host memory),
    ///    allocated in (or visible from) the device's primary context, and
    ///    stays allocated for `'a` and until every kernel ibp enqueued on it
    ///    has completed.
    /// 2. Nothing else reads or writes those bytes unordered with ibp's
    ///    writes: earlier accesses are complete or ordered before ibp's work
    ///    on its stream, and later ones are ordered after it (on the same
    ///    stream, or after an event or a synchronisation that follows it).
    /// 3. No other `SpanMut`, Rust reference or kernel argument lets the
    ///    bytes be written by other work at the same time.
    pub unsafe fn from_raw_parts(addr: u64, len: usize) -> Self {
        SpanMut {
            addr,
            len,
            _dst: PhantomData,
        }
    }

    /// `len` bytes of page-locked, device-mapped host memory at `ptr`
    /// (another library's pinned allocation), writable by ibp's kernels
    /// over PCIe. Asks the driver for the device address, which fails (a
    /// [`crate::ErrorKind::Cuda`] error) when `ptr` is not mapped pinned
    /// memory.
    ///
    /// # Safety
    /// 1. `ptr .. ptr + len` lies inside one such allocation or
    ///    registration (registered writable), alive for `'a` and until
    ///    every kernel ibp enqueued on it has completed.
    /// 2. and 3. As [`SpanMut::from_raw_parts`]'s, host accesses included:
    ///    the host touches the bytes only after ibp's work is complete.
    pub unsafe fn from_pinned_host(ptr: *mut u8, len: usize) -> Result<Self> {
        // SAFETY: the caller's 1: `ptr` is in mapped pinned memory, alive.
        let addr = unsafe { host_memory::host_device_address(ptr)? };
        // SAFETY: the mapping covers the allocation (1), and the caller's
        // 2 and 3.
        Ok(unsafe { SpanMut::from_raw_parts(addr, len) })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes `offset .. offset + len` as a span of their own, borrowing this
    /// one; `None` when the range is not inside.
    pub fn sub(&mut self, offset: usize, len: usize) -> Option<SpanMut<'_>> {
        (offset.checked_add(len)? <= self.len).then(|| SpanMut {
            addr: self.addr + offset as u64,
            len,
            _dst: PhantomData,
        })
    }
}

impl GpuWritable for SpanMut<'_> {
    fn device_addr_mut(&mut self) -> u64 {
        self.addr
    }
    fn writable_len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_span_reports_its_parts() {
        // SAFETY: never handed to a kernel; only its address and length are read.
        let s = unsafe { Span::from_raw_parts(0x7f00_0000_1000, 96) };
        assert_eq!((s.device_addr(), s.byte_len()), (0x7f00_0000_1000, 96));
        let inner = Span::of(&s, 32, 64).expect("inside");
        assert_eq!(
            (inner.device_addr(), inner.byte_len()),
            (0x7f00_0000_1020, 64)
        );
        assert!(Span::of(&s, 33, 64).is_none(), "past the end");
        assert!(Span::of(&s, usize::MAX, 2).is_none(), "overflow");
    }

    #[test]
    fn a_writable_span_checks_its_sub_ranges() {
        // SAFETY: never handed to a kernel.
        let mut s = unsafe { SpanMut::from_raw_parts(0x1000, 256) };
        assert_eq!(s.writable_len(), 256);
        let mut t = s.sub(128, 128).expect("inside");
        assert_eq!((t.device_addr_mut(), t.len()), (0x1080, 128));
        assert!(s.sub(129, 128).is_none());
        assert!(s.sub(usize::MAX, 1).is_none());
        assert!(s.sub(256, 0).is_some_and(|e| e.is_empty()));
        // Through a reborrow, as a caller holding `&mut` passes it on.
        let mut r = &mut s;
        let reborrowed = <&mut SpanMut<'_> as GpuWritable>::device_addr_mut(&mut r);
        assert_eq!((reborrowed, GpuWritable::writable_len(&r)), (0x1000, 256));
    }
}
