//! `--device auto|cpu|gpu`: where a command does its work, chosen once,
//! with the reason when `auto` ends up on the CPU.

use ibp::Result;

/// What `--device` accepts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceArg {
    /// The GPU when this ibp was built with `cuda` and one is usable, else
    /// the CPU.
    Auto,
    /// The CPU only.
    Cpu,
    /// The GPU; an error when none is usable.
    Gpu,
}

impl DeviceArg {
    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeviceArg::Auto => "auto",
            DeviceArg::Cpu => "cpu",
            DeviceArg::Gpu => "gpu",
        }
    }
}

/// The device chosen.
pub enum Device {
    /// The CPU; `why` says why `auto` did not take the GPU.
    Cpu {
        /// The reason the GPU was not used, for `auto`.
        why: Option<String>,
    },
    /// The first CUDA device.
    #[cfg(feature = "cuda")]
    Gpu(ibp::gpu::Gpu),
}

impl Device {
    /// Choose by `arg`. `--device gpu` without a usable GPU is an error of
    /// the driver's kind ([`ibp::ErrorKind::Cuda`]), or
    /// [`ibp::ErrorKind::Unsupported`] in a build without `cuda`.
    pub fn pick(arg: DeviceArg) -> Result<Self> {
        match arg {
            DeviceArg::Cpu => Ok(Device::Cpu { why: None }),
            DeviceArg::Auto | DeviceArg::Gpu => Self::gpu(arg == DeviceArg::Gpu),
        }
    }

    #[cfg(feature = "cuda")]
    fn gpu(required: bool) -> Result<Self> {
        match ibp::gpu::Gpu::first() {
            Ok(g) => Ok(Device::Gpu(g)),
            Err(e) if required => Err(ibp::Error::new(
                e.kind(),
                format!(
                    "--device gpu: no usable GPU: {}; use --device cpu, or --device auto to fall back to the CPU",
                    e.message()
                ),
            )),
            Err(e) => Ok(Device::Cpu {
                why: Some(format!("no usable GPU: {}", e.message())),
            }),
        }
    }

    #[cfg(not(feature = "cuda"))]
    fn gpu(required: bool) -> Result<Self> {
        const WHY: &str = "this ibp was built without the `cuda` feature";
        if required {
            return Err(ibp::Error::unsupported(format!(
                "--device gpu: {WHY}; rebuild with --features cuda, or use --device cpu"
            )));
        }
        Ok(Device::Cpu {
            why: Some(WHY.into()),
        })
    }

    /// `"gpu"` or `"cpu"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Device::Cpu { .. } => "cpu",
            #[cfg(feature = "cuda")]
            Device::Gpu(_) => "gpu",
        }
    }

    /// A name for reports: the GPU's, or the CPU's thread count.
    pub fn name(&self) -> String {
        match self {
            Device::Cpu { .. } => format!("CPU, {} threads", rayon::current_num_threads()),
            #[cfg(feature = "cuda")]
            Device::Gpu(g) => g.info().name.clone(),
        }
    }

    /// Why `auto` chose the CPU, if it did.
    pub fn why(&self) -> Option<&str> {
        match self {
            Device::Cpu { why } => why.as_deref(),
            #[cfg(feature = "cuda")]
            Device::Gpu(_) => None,
        }
    }
}
