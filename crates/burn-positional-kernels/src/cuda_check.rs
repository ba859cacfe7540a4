//! Every CubeCL kernel of this crate as the CUDA C++ that `cubecl-cuda` hands NVRTC, built on a
//! machine without a GPU or a CUDA driver (feature `cuda-check`; issue 62).
//!
//! `cubecl-cuda` compiles a kernel at its first launch: it expands the kernel for the device's
//! properties (`define_kernel`), turns the expansion into CUDA C++ (`CppCompiler<Cuda>`), and
//! hands the source to NVRTC with `--gpu-architecture=sm_90a` (or `sm_80`), its include path
//! and `-lineinfo` (`compute/context.rs`, `compile_to_ptx`). This module does the first two
//! steps for the properties `cubecl-cuda` reads off an H100/H200 and an A100
//! ([`NvidiaGpu`], filled in as its `runtime.rs` fills them), through the kernels' own
//! `create_dummy_kernel` (the launch's registration without a client); `tools/cuda/kernels.py`
//! does the third with NVRTC from PyPI and reads registers, spills, shared memory and `HMMA`
//! off the result (`cargo run --example cuda_kernels`, `.ci/checks` step `cuda-kernels`).
//!
//! Each kernel's folder lists its specializations (`cuda_cases`): the comptime values and
//! element types its launches choose, through the same plan functions the launch calls.

use std::sync::Arc;

use cubecl::ir::{
    DeviceIdentity, DeviceProperties, ElemType, FloatKind, HardwareProperties,
    MemoryDeviceProperties, MmaProperties, OpaqueType, PciVendor, PhysicalDevice, TargetProperties,
    VectorSize,
    features::{Plane, TypeUsage},
};
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::zspace::{Shape, Strides};
use cubecl_common::device::DeviceId;
use cubecl_cpp::{
    cuda::{
        arch::CudaArchitecture,
        mma::{
            CudaCmmaCompiler,
            manual::{contiguous_elements_cuda, supported_mma_combinations},
        },
    },
    register_supported_types,
    shared::{
        CompilationOptions, CppCompiler, CppSupportedFeatures, register_mma_features,
        register_wmma_features,
    },
    target::Cuda,
};
use cubecl_environment::stream::StreamId;

/// An NVIDIA GPU the kernels are compiled for: what `cubecl-cuda` reads off the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvidiaGpu {
    /// The GPUs this stands for.
    pub name: &'static str,
    /// Compute capability, major * 10 + minor (90: Hopper, 80: Ampere A100).
    pub arch: u32,
    /// Streaming multiprocessors (the split-key choice reads it).
    pub multiprocessors: u32,
    /// Shared memory one cube may use with the opt-in (`cubecl-cuda` reads
    /// `MAX_SHARED_MEMORY_PER_BLOCK_OPTIN` and opts in at launch).
    pub max_shared_per_cube: usize,
}

/// H100 and H200 (SXM): `sm_90`, 132 multiprocessors, 227 KiB of shared memory per cube.
pub const H100: NvidiaGpu = NvidiaGpu {
    name: "H100/H200",
    arch: 90,
    multiprocessors: 132,
    max_shared_per_cube: 227 * 1024,
};

/// A100: `sm_80`, 108 multiprocessors, 163 KiB of shared memory per cube.
pub const A100: NvidiaGpu = NvidiaGpu {
    name: "A100",
    arch: 80,
    multiprocessors: 108,
    max_shared_per_cube: 163 * 1024,
};

/// One kernel specialization as CUDA C++.
#[derive(Clone, Debug)]
pub struct KernelSource {
    /// The kernel's family ("attention forward, tensor cores").
    pub kernel: &'static str,
    /// Its comptime values and element types, as words.
    pub spec: String,
    /// The compute capability it was generated for.
    pub arch: u32,
    /// The `__global__` function's name.
    pub entrypoint: String,
    /// Units per cube (threads per block).
    pub cube_dim: [u32; 3],
    /// Shared memory the launch reserves dynamically (`cubecl-cuda` gives every kernel one
    /// dynamic block).
    pub dynamic_shared_bytes: usize,
    /// Whether the kernel's products must run on the tensor cores (`mma.sync`): its machine
    /// code must hold `HMMA`.
    pub tensor_cores: bool,
    /// The CUDA C++.
    pub source: String,
}

/// What a kernel folder's `cuda_cases` gets: the device it generates for.
pub(crate) struct Target {
    /// The full matrix of dtypes, widths and groups, or the check's part of it.
    pub(crate) full: bool,
    pub(crate) properties: Arc<DeviceProperties>,
    pub(crate) target: Arc<TargetProperties>,
}

/// A specialization to compile: its names and the kernel, built by `create_dummy_kernel`.
pub(crate) struct Case {
    pub(crate) kernel: &'static str,
    pub(crate) spec: String,
    pub(crate) tensor_cores: bool,
    pub(crate) build: Box<dyn CubeKernel + Send + Sync>,
}

impl Case {
    pub(crate) fn new(
        kernel: &'static str,
        spec: String,
        tensor_cores: bool,
        build: impl CubeKernel + Send + Sync + 'static,
    ) -> Self {
        Self {
            kernel,
            spec,
            tensor_cores,
            build: Box::new(build),
        }
    }
}

/// Every kernel specialization of this crate for `gpu`, as CUDA C++, in a stable order: the
/// full matrix of dtypes, head widths and groups (`full`), or the part `.ci/checks` builds.
/// Expanding and generating one attention kernel takes about a second (cubecl's optimizer), so
/// the work is spread over the machine's cores.
///
/// # Errors
///
/// A kernel whose expansion panics or that the CUDA C++ generator refuses, named with its
/// specialization.
pub fn kernel_sources(gpu: NvidiaGpu, full: bool) -> Result<Vec<KernelSource>, String> {
    let cases = cases(&Target::new(gpu, full));
    let options = compilation_options(gpu);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let slots: Vec<std::sync::Mutex<Option<Result<KernelSource, String>>>> =
        cases.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(case) = cases.get(at) else { break };
                    let source = compile(case, gpu, &options);
                    *slots[at].lock().expect("a compile thread panicked") = Some(source);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("a compile thread panicked")
                .expect("every case is compiled")
        })
        .collect()
}

/// Every kernel folder's specializations for `target`, in a stable order.
fn cases(target: &Target) -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(crate::embedding::cube::cuda_cases(target));
    cases.extend(crate::rope::cube::cuda_cases(target));
    cases.extend(crate::table_grad::cube::cuda_cases(target));
    cases.extend(crate::skinny::cube::cuda_cases(target));
    cases.extend(crate::attention::cube::cuda_cases::cases(target));
    cases.extend(crate::attention::cube::fragment::cuda_cases(target));
    cases
}

fn compile(
    case: &Case,
    gpu: NvidiaGpu,
    options: &CompilationOptions,
) -> Result<KernelSource, String> {
    let named = |e: &dyn std::fmt::Display| format!("{} ({}): {e}", case.kernel, case.spec);
    let mut definition = cubecl::define_kernel(&*case.build).map_err(|e| named(&e))?;
    // `create_dummy_kernel` registers as the checked `launch` does; this crate launches every
    // kernel unchecked, and the bounds checks are a compiler pass that reads this setting.
    definition.settings.execution_mode = ExecutionMode::Unchecked;
    let entrypoint = definition.settings.kernel_name.clone();
    let cube_dim = definition.settings.cube_dim;
    let compiled =
        cubecl::Compiler::compile(&mut CppCompiler::<Cuda>::default(), definition, options)
            .map_err(|e| named(&e))?;
    Ok(KernelSource {
        kernel: case.kernel,
        spec: case.spec.clone(),
        arch: gpu.arch,
        entrypoint,
        cube_dim: [cube_dim.x, cube_dim.y, cube_dim.z],
        dynamic_shared_bytes: compiled.shared_memory_size,
        tensor_cores: case.tensor_cores,
        source: compiled.to_string(),
    })
}

/// The C++ generator's options as `cubecl-cuda`'s `runtime.rs` sets them for `gpu` (the
/// `fast_tanh` of a CUDA 12.8 or later build, which `cudarc`'s `fallback-latest` is).
fn compilation_options(gpu: NvidiaGpu) -> CompilationOptions {
    CompilationOptions {
        warp_size: 32,
        supports_features: CppSupportedFeatures {
            fast_math: true,
            dp4a: gpu.arch >= 61,
            grid_constants: gpu.arch >= 70,
            fast_tanh: gpu.arch >= 75,
            clusters: gpu.arch >= 90,
            elect_sync: gpu.arch >= 90,
        },
        ..Default::default()
    }
}

impl Target {
    /// The check's part of the matrix for `gpu`, for tests.
    #[cfg(test)]
    pub(crate) fn for_tests(gpu: NvidiaGpu) -> Self {
        Self::new(gpu, false)
    }

    /// The device properties `cubecl-cuda` reads off `gpu` (the parts a kernel's expansion or
    /// this crate's plans read: types, `cmma` shapes, planes of 32, shared memory, units).
    fn new(gpu: NvidiaGpu, full: bool) -> Self {
        let arch = CudaArchitecture {
            version: gpu.arch,
            tensor_cores: true,
        };
        let hardware = HardwareProperties {
            load_width: 128,
            vector_register_count: None,
            plane_size_min: 32,
            plane_size_max: 32,
            max_bindings: 1024,
            max_shared_memory_size: gpu.max_shared_per_cube,
            max_cube_count: (i32::MAX as u32, 65_535, 65_535),
            max_units_per_cube: 1024,
            max_cube_dim: (1024, 1024, 64),
            num_streaming_multiprocessors: Some(gpu.multiprocessors),
            num_tensor_cores: Some(4),
            min_tensor_cores_dim: Some(8),
            num_cpu_cores: None,
            last_level_cache_size: None,
            max_vector_size: VectorSize::MAX,
            cube_mma_reserved_shared_memory: 0,
        };
        let memory = MemoryDeviceProperties::new(1 << 34, 512).with_max_memory(80 << 30);
        let mut physical = PhysicalDevice::default();
        physical.vendor = Some(PciVendor::Nvidia);
        let mut properties = DeviceProperties::new(
            Default::default(),
            memory,
            hardware,
            cubecl::profile::TimingMethod::Device,
            DeviceIdentity {
                name: format!("NVIDIA {}", gpu.name),
                fingerprint: format!("ptx_sm{}", gpu.arch),
                physical: Some(physical),
            },
        );
        register_supported_types(&mut properties);
        if gpu.arch >= 80 {
            properties.register_type_usage(ElemType::Float(FloatKind::TF32), TypeUsage::Conversion);
            properties.features.copy_async = true;
        }
        properties.features.plane.insert(Plane::Sync);
        properties.features.plane.insert(Plane::Ops);
        properties
            .features
            .plane
            .insert(Plane::NonUniformControlFlow);
        properties.features.memory_reinterpret = true;
        properties.features.alignment = true;
        properties.features.device_memory_scope = true;
        register_wmma_features(
            CudaCmmaCompiler::Cpp.supported_cmma_combinations(&arch),
            &mut properties,
        );
        // The register-level MMA (`mma.sync`), `ldmatrix`/`stmatrix` and the mbarrier type, as
        // `cubecl-cuda`'s runtime registers them (issue 72: the fragment layer's native path).
        register_mma_features(supported_mma_combinations(&arch), &mut properties);
        properties.register_opaque_type(OpaqueType::Barrier);
        for half in [FloatKind::F16, FloatKind::BF16] {
            if gpu.arch >= 75 {
                properties
                    .features
                    .matmul
                    .ldmatrix
                    .insert(ElemType::Float(half));
            }
            if gpu.arch >= 90 {
                properties
                    .features
                    .matmul
                    .stmatrix
                    .insert(ElemType::Float(half));
            }
        }
        let target = TargetProperties {
            mma: MmaProperties {
                register_size_bits: 32,
                const_plane_size: 32,
                register_layout_a: cubecl::cmma::MatrixLayout::RowMajor,
                register_layout_b: cubecl::cmma::MatrixLayout::ColMajor,
                register_layout_acc: cubecl::cmma::MatrixLayout::RowMajor,
                register_duplication_a: 1,
                register_duplication_b: 1,
                register_duplication_acc: 1,
                contiguous_elements: cubecl::ir::ContiguousElements::new(contiguous_elements_cuda),
            },
        };
        Self {
            full,
            properties: Arc::new(properties),
            target: Arc::new(target),
        }
    }
}

/// A placeholder tensor argument of `rank` dimensions: the expansion reads only its kind
/// (tensors' shapes and strides are run-time values).
pub(crate) fn tensor(rank: usize) -> TensorArg {
    let service = cubecl_common::device::ServiceId::of::<Target>(DeviceId {
        type_id: 0,
        index_id: 0,
    });
    let handle = Handle::new(service, StreamId { value: 0 }, 1024);
    // SAFETY: nothing is launched: the argument only registers its kind with a launcher that
    // is discarded.
    unsafe {
        TensorArg::from_raw_parts(
            handle,
            Strides::new(&vec![1; rank]),
            Shape::new_raw(std::iter::repeat_n(1, rank).collect()),
        )
    }
}

/// The cube of an elementwise launch on a large tensor: `CubeDim::new(client, units)` gives
/// planes of 32 and at most 8 of them on an NVIDIA GPU.
pub(crate) fn elementwise_dim() -> CubeDim {
    CubeDim::new_2d(32, 8)
}

/// The widest vector of `dtype` the launches take on an NVIDIA GPU: 16 bytes (its
/// `io_optimized_vector_sizes` at a load width of 128 bits).
pub(crate) fn widest_vector(dtype: burn::tensor::DType) -> usize {
    16 / dtype.size()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn cases(gpu: NvidiaGpu, full: bool) -> Vec<Case> {
        super::cases(&Target::new(gpu, full))
    }

    /// Every kernel family has cases on both GPUs, each named once, and the check's part of
    /// the matrix is inside the full one.
    #[test]
    fn every_kernel_has_cases_named_once() {
        let families = [
            "embedding forward",
            "rope: rows",
            "rope: strided",
            "table gradient: count",
            "table gradient: scan",
            "table gradient: fill",
            "table gradient: order",
            "table gradient: sum",
            "skinny product",
            "skinny product, transposed weight",
            "attention forward: tensor cores",
            "attention forward: shared",
            "attention forward: registers",
            "attention forward: split keys' combine",
            "attention forward: blocked",
            "attention backward: blocked, keys",
            "attention backward: blocked, queries",
            "attention backward: tensor cores, keys",
            "attention backward: tensor cores, queries",
            "attention backward: shared",
            "attention backward: registers",
            "attention fragment: mma.sync probe",
            "attention fragment: ldmatrix and shuffle probe",
            "attention fragment: exp2 probe",
            "attention fragment: async copy probe",
        ];
        for gpu in [H100, A100] {
            let named = |full| {
                let cases = cases(gpu, full);
                let names: BTreeSet<(String, String)> = cases
                    .iter()
                    .map(|c| (c.kernel.to_string(), c.spec.clone()))
                    .collect();
                assert_eq!(names.len(), cases.len(), "{}: a case named twice", gpu.name);
                let kinds: BTreeSet<&str> = cases.iter().map(|c| c.kernel).collect();
                assert_eq!(kinds, families.iter().copied().collect(), "{}", gpu.name);
                assert!(
                    cases.iter().any(|c| c.tensor_cores),
                    "{}: no case on the tensor cores",
                    gpu.name
                );
                names
            };
            let (check, full) = (named(false), named(true));
            assert!(check.is_subset(&full) && check.len() < full.len());
        }
    }

    /// The tensor-core kernels all the way to CUDA C++: their entry points and the fragment
    /// layer as `mma.sync` and `ldmatrix`, forward and backward, with no WMMA left.
    #[test]
    fn the_tensor_core_kernels_become_mma() {
        let cases = cases(H100, false);
        for kernel in [
            "attention forward: tensor cores",
            "attention backward: tensor cores, keys",
            "attention backward: tensor cores, queries",
        ] {
            let case = cases
                .iter()
                .find(|c| c.tensor_cores && c.kernel == kernel)
                .unwrap_or_else(|| panic!("no tensor-core case of {kernel}"));
            let source = compile(case, H100, &compilation_options(H100)).unwrap();
            assert!(source.source.contains("__global__ void __launch_bounds__("));
            assert!(source.source.contains(&source.entrypoint));
            assert!(source.dynamic_shared_bytes > 0 && source.dynamic_shared_bytes <= 48 * 1024);
            let source = source.source;
            assert!(
                source.contains("mma.sync.aligned.m16n8k16"),
                "{kernel}: the product"
            );
            assert!(source.contains("ldmatrix"), "{kernel}: the fragment loads");
            assert!(!source.contains("nvcuda::wmma"), "{kernel}: no WMMA left");
        }
    }
}
