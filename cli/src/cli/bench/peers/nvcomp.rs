//! NVIDIA's nvCOMP, loaded at run time through its C API.
//!
//! Nothing in ibp needs nvCOMP to build or link: the library is opened with
//! `dlopen` from a path the user names (`--nvcomp PATH` or `IBP_NVCOMP`),
//! every symbol ibp calls is resolved once, and the library's major version
//! is checked against the one these declarations were written from.
//!
//! The declarations below are written by hand from the headers of nvCOMP
//! 6.0 (`include/nvcomp/{shared_types,ans,bitcomp,cascaded,lz4}.h` in the
//! `nvidia-libnvcomp-cu13` wheel). Only the batched API is used: a batch is
//! device arrays of chunk pointers and sizes, one call per batch.
//!
//! This file is also compiled into `cli/tests/gpu_peers.rs` (through `#[path]`),
//! so it names only `ibp`'s public API, `libc` and `std`.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use ibp::gpu::cust;
use ibp::{Error, Result};

use cust::memory::DeviceBuffer;
use cust::stream::Stream;

/// The environment variable naming the library (a file, or a folder that
/// holds `libnvcomp.so.6`).
pub const ENV: &str = "IBP_NVCOMP";

/// The nvCOMP major version these declarations were written from.
pub const SUPPORTED_MAJOR: u32 = 6;

/// The library's file name.
const SONAME: &str = "libnvcomp.so.6";

/// Where the library is looked for when neither `--nvcomp` nor
/// [`ENV`] names it: where `IBP_FETCH_NVCOMP=1 scripts/setup.sh` puts it.
const SETUP_DIR: &str = ".tools/nvcomp";

/// What to do when nvCOMP is missing, appended to "nvCOMP not found".
const HOW_TO_GET_IT: &str = "pass --nvcomp PATH or set IBP_NVCOMP to NVIDIA's libnvcomp.so.6 \
     (`pip download --no-deps nvidia-libnvcomp-cu13`, then unzip the wheel: \
     nvidia/libnvcomp/lib64/libnvcomp.so.6), or run `IBP_FETCH_NVCOMP=1 bash scripts/setup.sh`, \
     which puts it in .tools/nvcomp";

// ---------------------------------------------------------------------------
// C types (shared_types.h).

/// `nvcompStatus_t`; 0 is `nvcompSuccess`.
type Status = c_int;

/// `cudaStream_t`: the runtime's stream is the driver's `CUstream`.
type CuStream = *mut c_void;

/// `nvcompProperties_t`.
#[repr(C)]
#[derive(Default)]
struct Properties {
    /// `major * 1000 + minor * 100 + patch`.
    version: u32,
    /// The CUDA runtime version nvCOMP was built with.
    cudart_version: u32,
}

/// `nvcompAlignmentRequirements_t`: minimum alignments of input, output and
/// temporary buffers, in bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Alignments {
    /// Each input chunk.
    pub input: usize,
    /// Each output chunk.
    pub output: usize,
    /// The temporary buffer.
    pub temp: usize,
}

/// Any of the 64-byte option structs (`nvcompBatched*CompressOpts_t`,
/// `nvcompBatched*DecompressOpts_t`), passed by value.
///
/// Q: why one opaque type for eight different structs?
/// A: every one of them is 64 bytes with an alignment of at most 8 (checked
/// against the headers with a C program, outside CI), and the x86-64 System V
/// ABI passes any such aggregate the same way: copied to the stack (class
/// MEMORY). Each codec fills in its fields at the offsets its header gives.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Opts([u8; 64]);

impl Opts {
    fn zeroed() -> Self {
        Self([0; 64])
    }

    fn u32_at(mut self, offset: usize, v: u32) -> Self {
        self.0[offset..offset + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn u64_at(mut self, offset: usize, v: u64) -> Self {
        self.0[offset..offset + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn u8_at(mut self, offset: usize, v: u8) -> Self {
        self.0[offset] = v;
        self
    }
}

/// `nvcompType_t`: the element type a codec is told the data has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    /// `NVCOMP_TYPE_CHAR` (bytes).
    Char,
    /// `NVCOMP_TYPE_USHORT`.
    U16,
    /// `NVCOMP_TYPE_UINT`.
    U32,
    /// `NVCOMP_TYPE_FLOAT16` (ANS: "all half-precision formats", bf16 too).
    Float16,
    /// `NVCOMP_TYPE_FLOAT32`.
    Float32,
}

impl DataType {
    fn code(self) -> u32 {
        match self {
            DataType::Char => 0,
            DataType::U16 => 3,
            DataType::U32 => 5,
            DataType::Float16 => 10,
            DataType::Float32 => 11,
        }
    }

    /// Bytes per element: chunk sizes must be a multiple.
    pub fn bytes(self) -> usize {
        match self {
            DataType::Char => 1,
            DataType::U16 | DataType::Float16 => 2,
            DataType::U32 | DataType::Float32 => 4,
        }
    }

    fn label(self) -> &'static str {
        match self {
            DataType::Char => "bytes",
            DataType::U16 => "u16",
            DataType::U32 => "u32",
            DataType::Float16 => "float16",
            DataType::Float32 => "float32",
        }
    }
}

/// `NVCOMP_TYPE_BITS`: "infer from the stream" in decompression options.
const TYPE_BITS: u32 = 0xff;

/// The nvCOMP codec families ibp compares with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// rANS entropy coding (`ans.h`).
    Ans,
    /// Bitcomp (`bitcomp.h`), lossless mode.
    Bitcomp,
    /// Cascaded: delta, run-length and frame-of-reference, then bit packing
    /// (`cascaded.h`).
    Cascaded,
    /// LZ4 (`lz4.h`).
    Lz4,
}

impl Family {
    /// Every family, in the order of [`Nvcomp`]'s symbol tables.
    const ALL: [Family; 4] = [Family::Ans, Family::Bitcomp, Family::Cascaded, Family::Lz4];

    /// The family's part of the C symbol names (`nvcompBatched<NAME>...`).
    fn symbol(self) -> &'static str {
        match self {
            Family::Ans => "ANS",
            Family::Bitcomp => "Bitcomp",
            Family::Cascaded => "Cascaded",
            Family::Lz4 => "LZ4",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One nvCOMP configuration: a family and the element type it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codec {
    /// The codec family.
    pub family: Family,
    /// The element type the data is declared as.
    pub data_type: DataType,
}

impl Codec {
    /// A short name for tables, e.g. "ANS float32", "LZ4".
    pub fn name(&self) -> String {
        match (self.family, self.data_type) {
            (f, DataType::Char) => f.symbol().to_string(),
            (f, t) => format!("{} {}", f.symbol(), t.label()),
        }
    }

    /// The configurations compared on data of `elem_bytes`-byte elements
    /// (4: f32, 2: f16/bf16, anything else: bytes) whose floats are
    /// `float` (ANS's float types apply then): ANS on bytes, ANS with the
    /// float type, Bitcomp and Cascaded with the unsigned integer type of
    /// the element width, and LZ4 on bytes.
    pub fn for_elements(elem_bytes: usize, float: bool) -> Vec<Codec> {
        let (int, flt) = match elem_bytes {
            4 => (DataType::U32, Some(DataType::Float32)),
            2 => (DataType::U16, Some(DataType::Float16)),
            _ => (DataType::Char, None),
        };
        let c = |family, data_type| Codec { family, data_type };
        let mut out = vec![c(Family::Ans, DataType::Char)];
        if let (true, Some(t)) = (float, flt) {
            out.push(c(Family::Ans, t));
        }
        out.push(c(Family::Bitcomp, int));
        // Cascaded works on integers; bytes are its `NVCOMP_TYPE_CHAR`.
        out.push(c(Family::Cascaded, int));
        out.push(c(Family::Lz4, DataType::Char));
        out
    }

    /// The compression options (field offsets from the headers).
    fn compress_opts(&self) -> Opts {
        let t = self.data_type.code();
        match self.family {
            // {type = nvcomp_rANS, data_type, max_sub_chunk_count = 0 (8),
            //  states_per_lane = 0, histogram_reduction_log2 = 0}
            Family::Ans => Opts::zeroed().u32_at(0, 0).u32_at(4, t),
            // {algorithm = 0 (default), data_type, delta = 0.0,
            //  mode = BITCOMP_LOSSLESS}
            Family::Bitcomp => Opts::zeroed().u32_at(0, 0).u32_at(4, t),
            // {common_opts = {data_type, mode = ASYMMETRIC, terminal_codec =
            //  CASCADED_BITPACK, coarse = NONE}, fine_grained = ALL,
            //  compression_level = 3}: the header's defaults with our type.
            Family::Cascaded => Opts::zeroed()
                .u32_at(0, t)
                .u32_at(4, 1)
                .u64_at(8, 1)
                .u64_at(16, 0)
                .u64_at(24, 0b111)
                .u8_at(32, 3),
            // {data_type, bitshuffle_mode = NONE}
            Family::Lz4 => Opts::zeroed().u32_at(0, t),
        }
    }

    /// The decompression options: the default backend, and the element
    /// type where naming it picks a specialised kernel.
    fn decompress_opts(&self) -> Opts {
        let t = self.data_type.code();
        match self.family {
            // {backend = DEFAULT, data_type, max_sub_chunk_count = 0,
            //  states_per_lane = 0, skip_validate = 0}; bytes as in the
            // header's default (BITS: from the stream), a float type named.
            Family::Ans if self.data_type == DataType::Char => Opts::zeroed().u32_at(4, TYPE_BITS),
            Family::Ans => Opts::zeroed().u32_at(4, t),
            // {backend = DEFAULT}
            Family::Bitcomp => Opts::zeroed(),
            // {backend = DEFAULT, common_opts = {BITS (from the stream), ..}}
            Family::Cascaded => Opts::zeroed().u32_at(8, TYPE_BITS),
            // {backend = DEFAULT, sort_before_hw_decompress = 0, data_type,
            //  bitshuffle_mode = NONE}
            Family::Lz4 => Opts::zeroed().u32_at(8, t),
        }
    }
}

// ---------------------------------------------------------------------------
// Function pointer types: the same seven entry points for every family.

type GetProperties = unsafe extern "C" fn(*mut Properties) -> Status;
type StatusString = unsafe extern "C" fn(Status) -> *const c_char;
type GetAlignments = unsafe extern "C" fn(Opts, *mut Alignments) -> Status;
/// `(num_chunks, max_uncompressed_chunk_bytes, opts, *temp_bytes,
/// max_total_uncompressed_bytes, stream)`.
type GetTempSize = unsafe extern "C" fn(usize, usize, Opts, *mut usize, usize, CuStream) -> Status;
/// `(max_uncompressed_chunk_bytes, opts, *max_compressed_chunk_bytes)`.
type GetMaxOutput = unsafe extern "C" fn(usize, Opts, *mut usize) -> Status;
/// `(in_ptrs, in_bytes, max_uncompressed_chunk_bytes, num_chunks, temp,
/// temp_bytes, out_ptrs, out_bytes, opts, statuses, stream)`.
type CompressAsync = unsafe extern "C" fn(
    *const *const c_void,
    *const usize,
    usize,
    usize,
    *mut c_void,
    usize,
    *const *mut c_void,
    *mut usize,
    Opts,
    *mut Status,
    CuStream,
) -> Status;
/// `(in_ptrs, in_bytes, out_buffer_bytes, out_actual_bytes, num_chunks,
/// temp, temp_bytes, out_ptrs, opts, statuses, stream)`.
type DecompressAsync = unsafe extern "C" fn(
    *const *const c_void,
    *const usize,
    *const usize,
    *mut usize,
    usize,
    *mut c_void,
    usize,
    *const *mut c_void,
    Opts,
    *mut Status,
    CuStream,
) -> Status;

/// One family's entry points.
struct FamilyApi {
    compress_alignments: GetAlignments,
    compress_temp: GetTempSize,
    compress_max_output: GetMaxOutput,
    compress: CompressAsync,
    decompress_alignments: GetAlignments,
    decompress_temp: GetTempSize,
    decompress: DecompressAsync,
}

/// The names of the entry points ibp resolves, for `family`.
fn family_symbols(family: Family) -> [String; 7] {
    let f = family.symbol();
    [
        format!("nvcompBatched{f}CompressGetRequiredAlignments"),
        format!("nvcompBatched{f}CompressGetTempSize"),
        format!("nvcompBatched{f}CompressGetMaxOutputChunkSize"),
        format!("nvcompBatched{f}CompressAsync"),
        format!("nvcompBatched{f}DecompressGetRequiredAlignments"),
        format!("nvcompBatched{f}DecompressGetTempSize"),
        format!("nvcompBatched{f}DecompressAsync"),
    ]
}

/// Every symbol ibp resolves (`cli/tests/gpu_peers.rs` checks each one).
#[allow(dead_code)]
pub fn symbol_names() -> Vec<String> {
    let mut v = vec!["nvcompGetProperties".into(), "nvcompGetStatusString".into()];
    for f in Family::ALL {
        v.extend(family_symbols(f));
    }
    v
}

/// nvCOMP, opened and checked.
///
/// Q: why is the library never closed?
/// A: nvCOMP links the CUDA runtime statically, which registers its kernels
/// and exit handlers when loaded; unloading it while the process still runs
/// CUDA code is not something the runtime supports. The handle lives until
/// the process exits, as a directly linked library would.
pub struct Nvcomp {
    path: PathBuf,
    version: (u32, u32, u32),
    cudart_version: u32,
    status_string: StatusString,
    families: Vec<FamilyApi>,
}

/// Look `name` up in `handle`.
///
/// # Safety
/// `handle` must come from a successful `dlopen`, and `T` must be the
/// function pointer type the symbol has in C.
unsafe fn symbol<T: Copy>(handle: *mut c_void, path: &Path, name: &str) -> Result<T> {
    let c = CString::new(name).map_err(|_| Error::invalid("symbol name with a NUL"))?;
    // SAFETY: `handle` is a live dlopen handle (caller), `c` a C string.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if p.is_null() {
        return Err(Error::unsupported(format!(
            "nvCOMP at {} has no symbol {name}: ibp needs nvCOMP {SUPPORTED_MAJOR}.x",
            path.display()
        )));
    }
    debug_assert_eq!(size_of::<T>(), size_of::<*mut c_void>());
    // SAFETY: `T` is the symbol's function pointer type (caller), and a
    // function pointer has the size and representation of a data pointer on
    // the platforms dlsym exists on.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// The last `dlerror` message.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a thread-local C string.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated, valid until the next dl call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn not_found(what: &str) -> Error {
    Error::unsupported(format!("nvCOMP not found: {what}; {HOW_TO_GET_IT}"))
}

impl Nvcomp {
    /// The library to open: `explicit` (`--nvcomp`), else [`ENV`], else
    /// `.tools/nvcomp/libnvcomp.so.6` when it exists. A folder stands for
    /// the library in it (directly, in `lib64/`, or in the wheel's
    /// `nvidia/libnvcomp/lib64/`). "nvCOMP not found"
    /// ([`ibp::ErrorKind::Unsupported`]) when there is none.
    pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
        let named = explicit.map(Path::to_path_buf).or_else(|| {
            std::env::var_os(ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let Some(p) = named else {
            let default = Path::new(SETUP_DIR).join(SONAME);
            return if default.is_file() {
                Ok(default)
            } else {
                Err(not_found("no --nvcomp given and IBP_NVCOMP is not set"))
            };
        };
        if p.is_file() {
            return Ok(p);
        }
        if p.is_dir() {
            for sub in ["", "lib64", "lib", "nvidia/libnvcomp/lib64"] {
                let c = p.join(sub).join(SONAME);
                if c.is_file() {
                    return Ok(c);
                }
            }
            return Err(not_found(&format!("no {SONAME} in {}", p.display())));
        }
        Err(not_found(&format!("{} does not exist", p.display())))
    }

    /// [`Nvcomp::locate`], then [`Nvcomp::open`].
    pub fn find(explicit: Option<&Path>) -> Result<Self> {
        Self::open(&Self::locate(explicit)?)
    }

    /// Open the library at `path`, resolve every symbol and check the
    /// version ([`SUPPORTED_MAJOR`]). Needs no GPU.
    pub fn open(path: &Path) -> Result<Self> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::invalid("the nvCOMP path contains a NUL byte"))?;
        // SAFETY: `c` is a C string; loading runs the library's initialisers,
        // which is what using it means.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(Error::unsupported(format!(
                "nvCOMP at {} does not load: {}",
                path.display(),
                dl_error()
            )));
        }
        // SAFETY: `handle` is live, and the type is the header's.
        let get_properties: GetProperties = unsafe { symbol(handle, path, "nvcompGetProperties")? };
        // SAFETY: as above.
        let status_string: StatusString = unsafe { symbol(handle, path, "nvcompGetStatusString")? };
        let mut props = Properties::default();
        // SAFETY: valid out-pointer to an nvcompProperties_t.
        let s = unsafe { get_properties(&mut props) };
        if s != 0 {
            return Err(Error::unsupported(format!(
                "nvCOMP at {}: nvcompGetProperties failed (status {s})",
                path.display()
            )));
        }
        let v = props.version;
        let version = (v / 1000, (v % 1000) / 100, v % 100);
        if version.0 != SUPPORTED_MAJOR {
            return Err(Error::unsupported(format!(
                "nvCOMP at {} is version {}.{}.{}; ibp's declarations are for \
                 nvCOMP {SUPPORTED_MAJOR}.x (nvidia-libnvcomp-cu13 6.*)",
                path.display(),
                version.0,
                version.1,
                version.2
            )));
        }
        let mut families = Vec::new();
        for f in Family::ALL {
            let n = family_symbols(f);
            // SAFETY: `handle` is live; the types follow the family's
            // header, where all seven have the same shape.
            let api = unsafe {
                FamilyApi {
                    compress_alignments: symbol(handle, path, &n[0])?,
                    compress_temp: symbol(handle, path, &n[1])?,
                    compress_max_output: symbol(handle, path, &n[2])?,
                    compress: symbol(handle, path, &n[3])?,
                    decompress_alignments: symbol(handle, path, &n[4])?,
                    decompress_temp: symbol(handle, path, &n[5])?,
                    decompress: symbol(handle, path, &n[6])?,
                }
            };
            families.push(api);
        }
        Ok(Self {
            path: path.to_path_buf(),
            version,
            cudart_version: props.cudart_version,
            status_string,
            families,
        })
    }

    /// The file that was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// (major, minor, patch).
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// The CUDA runtime version nvCOMP was built with (e.g. 13000).
    pub fn cudart_version(&self) -> u32 {
        self.cudart_version
    }

    fn api(&self, codec: Codec) -> &FamilyApi {
        &self.families[codec.family.index()]
    }

    /// An error for a failed nvCOMP call, with the library's own words.
    fn fail(&self, what: &str, codec: Codec, s: Status) -> Error {
        // SAFETY: nvcompGetStatusString takes any status value and returns a
        // static string (or NULL).
        let p = unsafe { (self.status_string)(s) };
        let text = if p.is_null() {
            String::new()
        } else {
            // SAFETY: non-null static C string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Error::cuda(format!("nvCOMP {} {what}: status {s} {text}", codec.name()))
    }

    fn check(&self, what: &str, codec: Codec, s: Status) -> Result<()> {
        if s == 0 {
            Ok(())
        } else {
            Err(self.fail(what, codec, s))
        }
    }

    /// Alignments `codec` needs of compression inputs and decompression
    /// inputs and outputs.
    pub fn alignments(&self, codec: Codec) -> Result<(Alignments, Alignments)> {
        let api = self.api(codec);
        let (mut c, mut d) = (Alignments::default(), Alignments::default());
        // SAFETY: valid out-pointers; options built per the header.
        let s = unsafe { (api.compress_alignments)(codec.compress_opts(), &mut c) };
        self.check("compression alignments", codec, s)?;
        // SAFETY: as above.
        let s = unsafe { (api.decompress_alignments)(codec.decompress_opts(), &mut d) };
        self.check("decompression alignments", codec, s)?;
        Ok((c, d))
    }

    /// Compress `data` in chunks of `chunk` bytes (the last one may be
    /// shorter) on the GPU and bring the result back to the host. A CUDA
    /// context must be current.
    pub fn compress(
        &self,
        codec: Codec,
        data: &[u8],
        chunk: usize,
        stream: &Stream,
    ) -> Result<Chunks> {
        let e = codec.data_type.bytes();
        if chunk == 0 || !chunk.is_multiple_of(e) || !data.len().is_multiple_of(e) {
            return Err(Error::invalid(format!(
                "nvCOMP {}: chunks of {chunk} B and {} B of data are not whole {e}-byte elements",
                codec.name(),
                data.len()
            )));
        }
        if data.is_empty() {
            return Err(Error::invalid("nothing to compress"));
        }
        let api = self.api(codec);
        let (calign, dalign) = self.alignments(codec)?;
        let n = data.len().div_ceil(chunk);
        // Inputs at a stride that keeps every chunk aligned.
        let in_stride = chunk.next_multiple_of(calign.input.max(1));
        let input = if in_stride == chunk {
            upload(data, "the data to compress")?
        } else {
            let mut padded = vec![0u8; n * in_stride];
            for (i, c) in data.chunks(chunk).enumerate() {
                padded[i * in_stride..i * in_stride + c.len()].copy_from_slice(c);
            }
            upload(&padded, "the data to compress")?
        };
        let raw: Vec<u64> = data.chunks(chunk).map(|c| c.len() as u64).collect();
        let opts = codec.compress_opts();
        let mut max_out = 0usize;
        // SAFETY: valid out-pointer.
        let s = unsafe { (api.compress_max_output)(chunk, opts, &mut max_out) };
        self.check("maximum output size", codec, s)?;
        let out_stride = max_out.next_multiple_of(calign.output.max(8));
        let output = zeroed::<u8>(n * out_stride, "compression output")?;
        let mut temp_bytes = 0usize;
        // SAFETY: valid out-pointer; `stream` is a live stream.
        let s = unsafe {
            (api.compress_temp)(
                n,
                chunk,
                opts,
                &mut temp_bytes,
                data.len(),
                raw_stream(stream),
            )
        };
        self.check("temporary size", codec, s)?;
        let temp = zeroed::<u8>(temp_bytes.max(1), "compression scratch")?;
        let in_ptrs = upload(
            &(0..n)
                .map(|i| input.as_device_ptr().as_raw() + (i * in_stride) as u64)
                .collect::<Vec<_>>(),
            "chunk pointers",
        )?;
        let in_sizes = upload(&raw, "chunk sizes")?;
        let out_ptrs = upload(
            &(0..n)
                .map(|i| output.as_device_ptr().as_raw() + (i * out_stride) as u64)
                .collect::<Vec<_>>(),
            "chunk pointers",
        )?;
        let out_sizes = zeroed::<u64>(n, "chunk sizes")?;
        let statuses = zeroed::<i32>(n, "statuses")?;
        // SAFETY: every pointer array holds `n` device addresses of buffers
        // that live until the synchronisation below; sizes are within them;
        // `temp` has `temp_bytes` bytes.
        let s = unsafe {
            (api.compress)(
                dptr(&in_ptrs),
                dptr(&in_sizes),
                chunk,
                n,
                dptr_mut(&temp),
                temp_bytes,
                dptr(&out_ptrs),
                dptr_mut(&out_sizes),
                opts,
                dptr_mut(&statuses),
                raw_stream(stream),
            )
        };
        self.check("compression", codec, s)?;
        stream
            .synchronize()
            .map_err(|e| Error::cuda(format!("nvCOMP {} compression: {e}", codec.name())))?;
        if let Some(&bad) = to_host(&statuses)?.iter().find(|&&s| s != 0) {
            return Err(self.fail("compression of a chunk", codec, bad));
        }
        let sizes = to_host(&out_sizes)?;
        let all = to_host(&output)?;
        // Pack the chunks, each at an offset the decompressor accepts.
        let align = dalign.input.max(8) as u64;
        let mut offsets = Vec::with_capacity(n);
        let mut at = 0u64;
        for &s in &sizes {
            offsets.push(at);
            at = (at + s).next_multiple_of(align);
        }
        let mut packed = vec![0u8; at as usize];
        for i in 0..n {
            let (o, s) = (offsets[i] as usize, sizes[i] as usize);
            packed[o..o + s].copy_from_slice(&all[i * out_stride..i * out_stride + s]);
        }
        Ok(Chunks {
            codec,
            data: packed,
            offsets,
            sizes,
            raw,
            max_raw: chunk,
            input_alignment: align as usize,
            output_alignment: dalign.output.max(1),
        })
    }

    /// Prepare a batched decode: chunk `i` is read from device address
    /// `inputs[i]` (`in_sizes[i]` bytes) and written to `outputs[i]`
    /// (`raw[i]` bytes). The addresses may be device memory or mapped
    /// pinned host memory.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_job(
        &self,
        codec: Codec,
        inputs: &[u64],
        in_sizes: &[u64],
        outputs: &[u64],
        raw: &[u64],
        max_raw: usize,
        stream: &Stream,
    ) -> Result<DecodeJob> {
        let n = inputs.len();
        if in_sizes.len() != n || outputs.len() != n || raw.len() != n || n == 0 {
            return Err(Error::invalid(
                "a decode batch needs one input, size, output and length per chunk",
            ));
        }
        let total: u64 = raw.iter().sum();
        let mut temp_bytes = 0usize;
        // SAFETY: valid out-pointer; `stream` is live.
        let s = unsafe {
            (self.api(codec).decompress_temp)(
                n,
                max_raw,
                codec.decompress_opts(),
                &mut temp_bytes,
                total as usize,
                raw_stream(stream),
            )
        };
        self.check("decompression temporary size", codec, s)?;
        Ok(DecodeJob {
            codec,
            n,
            in_ptrs: upload(inputs, "chunk pointers")?,
            in_sizes: upload(in_sizes, "chunk sizes")?,
            out_ptrs: upload(outputs, "output pointers")?,
            out_caps: upload(raw, "output sizes")?,
            out_sizes: zeroed(n, "output sizes")?,
            statuses: zeroed(n, "statuses")?,
            temp_bytes,
            temp: zeroed(temp_bytes.max(1), "decompression scratch")?,
            raw: raw.to_vec(),
        })
    }

    /// Enqueue the decode of chunks `range` of `job` on `stream` (one
    /// batched call; nothing is synchronised).
    pub fn decode(
        &self,
        job: &DecodeJob,
        range: std::ops::Range<usize>,
        stream: &Stream,
    ) -> Result<()> {
        if range.start >= range.end || range.end > job.n {
            return Err(Error::invalid("decode range outside the batch"));
        }
        let at = |b: &DeviceBuffer<u64>, i: usize| b.as_device_ptr().as_raw() + 8 * i as u64;
        let k = range.start;
        let codec = job.codec;
        // SAFETY: the job's arrays hold `job.n` entries (so `range` is in
        // them), each naming memory the caller keeps alive until the stream
        // is synchronised; `temp` has `temp_bytes` bytes and is used by one
        // stream at a time (the caller's).
        let s = unsafe {
            (self.api(codec).decompress)(
                at(&job.in_ptrs, k) as *const *const c_void,
                at(&job.in_sizes, k) as *const usize,
                at(&job.out_caps, k) as *const usize,
                at(&job.out_sizes, k) as *mut usize,
                range.len(),
                dptr_mut(&job.temp),
                job.temp_bytes,
                at(&job.out_ptrs, k) as *const *mut c_void,
                codec.decompress_opts(),
                (job.statuses.as_device_ptr().as_raw() + 4 * k as u64) as *mut Status,
                raw_stream(stream),
            )
        };
        self.check("decompression", codec, s)
    }

    /// After the stream is synchronised: every chunk of `job` decoded with
    /// success and to its full length.
    pub fn check_job(&self, job: &DecodeJob) -> Result<()> {
        if let Some(&bad) = to_host(&job.statuses)?.iter().find(|&&s| s != 0) {
            return Err(self.fail("decompression of a chunk", job.codec, bad));
        }
        if to_host(&job.out_sizes)? != job.raw {
            return Err(Error::corrupt(format!(
                "nvCOMP {} decoded a chunk to the wrong length",
                job.codec.name()
            )));
        }
        Ok(())
    }
}

/// Compressed chunks on the host: chunk `i` is
/// `data[offsets[i]..offsets[i] + sizes[i]]`, at an offset the decompressor
/// accepts, and decodes to `raw[i]` bytes.
pub struct Chunks {
    /// The codec that wrote them.
    pub codec: Codec,
    /// The chunks, packed.
    pub data: Vec<u8>,
    /// Where each chunk starts in `data`.
    pub offsets: Vec<u64>,
    /// Each chunk's compressed size.
    pub sizes: Vec<u64>,
    /// Each chunk's decoded size.
    pub raw: Vec<u64>,
    /// The largest decoded size.
    pub max_raw: usize,
    /// The alignment each chunk's offset keeps (what the decoder needs of
    /// its inputs, at least 8).
    pub input_alignment: usize,
    /// The alignment each decoded chunk's destination needs.
    pub output_alignment: usize,
}

impl Chunks {
    /// Compressed bytes (without the alignment padding between chunks).
    pub fn stored_bytes(&self) -> u64 {
        self.sizes.iter().sum()
    }

    /// Decoded bytes.
    pub fn raw_bytes(&self) -> u64 {
        self.raw.iter().sum()
    }

    /// Chunks.
    pub fn count(&self) -> usize {
        self.sizes.len()
    }
}

/// A batched decode prepared on the device ([`Nvcomp::decode_job`]).
pub struct DecodeJob {
    codec: Codec,
    n: usize,
    in_ptrs: DeviceBuffer<u64>,
    in_sizes: DeviceBuffer<u64>,
    out_ptrs: DeviceBuffer<u64>,
    out_caps: DeviceBuffer<u64>,
    out_sizes: DeviceBuffer<u64>,
    statuses: DeviceBuffer<i32>,
    temp_bytes: usize,
    temp: DeviceBuffer<u8>,
    raw: Vec<u64>,
}

fn raw_stream(s: &Stream) -> CuStream {
    s.as_inner() as CuStream
}

fn dptr<T: cust::memory::DeviceCopy, U>(b: &DeviceBuffer<T>) -> *const U {
    b.as_device_ptr().as_raw() as *const U
}

fn dptr_mut<T: cust::memory::DeviceCopy, U>(b: &DeviceBuffer<T>) -> *mut U {
    b.as_device_ptr().as_raw() as *mut U
}

/// A device copy of `v`.
pub fn upload<T: cust::memory::DeviceCopy>(v: &[T], what: &str) -> Result<DeviceBuffer<T>> {
    DeviceBuffer::from_slice(v).map_err(|e| Error::cuda(format!("uploading {what}: {e}")))
}

/// A zeroed device buffer of `n` elements.
pub fn zeroed<T: cust::memory::DeviceCopy + bytemuck::Zeroable>(
    n: usize,
    what: &str,
) -> Result<DeviceBuffer<T>> {
    DeviceBuffer::zeroed(n).map_err(|e| Error::cuda(format!("allocating {what}: {e}")))
}

/// A host copy of a device buffer.
pub fn to_host<T: cust::memory::DeviceCopy + Default + Clone>(
    b: &DeviceBuffer<T>,
) -> Result<Vec<T>> {
    ibp::gpu::copy_to_host_blocking(b)
}
