//! Memory on the emulated machine: host memory seen as global memory
//! ([`HostMem`]), host bytes seen as shared memory or a read-only table
//! ([`HostBytes`]), and a host buffer aligned as device allocations are
//! ([`Buffer`]).

use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};

use ibp_kernels::simt::{Book, Counter, Mem, Shared};

/// Host memory as a kernel's global memory: an address is a host pointer.
///
/// Q: why atomics, when the emulated lanes share one thread?
/// A: `Mem`'s contract is the GPU's: two lanes may OR or add into one word
/// (`red.global`). Relaxed atomics keep that defined here, whatever order
/// the lanes run in.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostMem;

// SAFETY: (every method) the caller passes addresses of live, aligned host
// memory that no Rust reference aliases while it is written, as `Mem`
// requires.
impl Mem for HostMem {
    unsafe fn ld_u8(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU8::from_ptr(a as *mut u8) }.load(Relaxed) as u32
    }
    unsafe fn ld_u32(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU32::from_ptr(a as *mut u32) }.load(Relaxed)
    }
    unsafe fn ld_u64(&self, a: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.load(Relaxed)
    }
    unsafe fn ld_ro_u64(&self, a: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { self.ld_u64(a) }
    }
    unsafe fn st_u8(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU8::from_ptr(a as *mut u8) }.store(v as u8, Relaxed)
    }
    unsafe fn st_u32(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU32::from_ptr(a as *mut u32) }.store(v, Relaxed)
    }
    unsafe fn st_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.store(v, Relaxed)
    }
    unsafe fn ld_v4(&self, a: u64) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        std::array::from_fn(|i| unsafe { self.ld_u32(a + 4 * i as u64) })
    }
    unsafe fn st_u16(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU16::from_ptr(a as *mut u16) }.store(v as u16, Relaxed)
    }
    unsafe fn or_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.fetch_or(v, Relaxed);
    }
    unsafe fn min_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.fetch_min(v, Relaxed);
    }
    unsafe fn st_v4(&self, a: u64, v: [u32; 4]) {
        for (i, x) in v.into_iter().enumerate() {
            // SAFETY: the caller's contract (this method's `# Safety`).
            unsafe { self.st_u32(a + 4 * i as u64, x) };
        }
    }
    unsafe fn or_u32(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU32::from_ptr(a as *mut u32) }.fetch_or(v, Relaxed);
    }
    unsafe fn add_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.fetch_add(v, Relaxed);
    }
}

// SAFETY: the caller passes the address of a live, aligned host u64, as
// `Counter` requires.
impl Counter for HostMem {
    unsafe fn fetch_add_u64(&self, a: u64, v: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.fetch_add(v, Relaxed)
    }
}

/// Host bytes at this address, read as shared memory (a shared address is
/// an offset from it) or as a read-only table ([`Book`]: the decode book
/// of `ibp_kernels::device`, in shared or global memory on the GPU).
#[derive(Clone, Copy, Debug)]
pub struct HostBytes(pub u64);

// SAFETY: (every method) the caller passes offsets inside the buffer at
// `self.0`, as `Shared` requires.
impl Shared for HostBytes {
    unsafe fn lds_u8(&self, a: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_u8(self.0 + a as u64) }
    }
    unsafe fn lds_u32(&self, a: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_u32(self.0 + a as u64) }
    }
    unsafe fn sts_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_u32(self.0 + a as u64, v) }
    }
    unsafe fn sts_u8(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_u8(self.0 + a as u64, v) }
    }
    unsafe fn sts_u16(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_u16(self.0 + a as u64, v) }
    }
    unsafe fn sts_v4(&self, a: u32, v: [u32; 4]) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_v4(self.0 + a as u64, v) }
    }
    unsafe fn lds_v4(&self, a: u32) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_v4(self.0 + a as u64) }
    }
    unsafe fn ors_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.or_u32(self.0 + a as u64, v) }
    }
    unsafe fn adds_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU32::from_ptr((self.0 + a as u64) as *mut u32) }.fetch_add(v, Relaxed);
    }
}

// SAFETY: (every method) the caller passes offsets inside the table at
// `self.0`, as `Book` requires.
impl Book for HostBytes {
    unsafe fn ld_u8(&self, off: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_u8(self.0 + off as u64) }
    }
    unsafe fn ld_u32(&self, off: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_u32(self.0 + off as u64) }
    }
    unsafe fn ld_v2(&self, off: u32) -> [u32; 2] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        std::array::from_fn(|i| unsafe { HostMem.ld_u32(self.0 + (off + 4 * i as u32) as u64) })
    }
    unsafe fn ld_v4(&self, off: u32) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        std::array::from_fn(|i| unsafe { HostMem.ld_u32(self.0 + (off + 4 * i as u32) as u64) })
    }
}

/// The unit of a [`Buffer`]: one 128-byte line, aligned to 128.
#[derive(Clone, Copy)]
#[repr(C, align(128))]
struct Line([u8; LINE]);

/// Bytes of a [`Line`].
const LINE: usize = 128;

/// A host buffer for an emulated kernel's global memory (or a block's
/// shared memory): `len` bytes at a 128-aligned address, in whole
/// 128-byte lines, as a device allocation is (`cudaMalloc` aligns to 256),
/// so every aligned access a kernel makes to a device buffer is aligned
/// here too, and a body that reads whole lines stays inside (a `Vec<u8>`
/// is only 1-aligned).
///
/// A kernel gets [`Buffer::addr`] as a `u64` and reads and writes it
/// through [`HostMem`] (or an emulated [`crate::Lane`]); read the results
/// back with [`Buffer::bytes`] or [`Buffer::as_slice`] once the launch has
/// returned. Past `len`, up to the end of its last line, the buffer holds
/// zeros.
pub struct Buffer {
    lines: Vec<Line>,
    len: usize,
    /// `lines`' address, taken once from a mutable pointer: the kernel's
    /// writes go through it.
    addr: u64,
}

impl Buffer {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        // Q: why one line at least? A: so that an empty buffer still has a
        // real address, as a kernel handed an empty view may form it.
        let mut lines = vec![Line([0; LINE]); len.div_ceil(LINE).max(1)];
        let addr = lines.as_mut_ptr() as u64;
        Buffer { lines, len, addr }
    }

    /// A copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.bytes_mut().copy_from_slice(bytes);
        b
    }

    /// A copy of `items` (u32s, u64s, floats: any plain-old-data type).
    pub fn from_slice<T: bytemuck::Pod>(items: &[T]) -> Self {
        Self::from_bytes(bytemuck::cast_slice(items))
    }

    /// The address to hand a kernel (128-aligned).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` initialised bytes (`LINE` a
        // line, `len.div_ceil(LINE)` lines or more), and `Line` is plain
        // bytes with no padding.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) }
    }

    /// The bytes, to fill before a launch.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes the slice the only
        // access while it lives.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.len) }
    }

    /// The bytes as `T`s.
    ///
    /// # Panics
    /// When the length is not a multiple of `size_of::<T>()`, or `T` needs
    /// more than 128-byte alignment.
    pub fn as_slice<T: bytemuck::Pod>(&self) -> &[T] {
        bytemuck::cast_slice(self.bytes())
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}
