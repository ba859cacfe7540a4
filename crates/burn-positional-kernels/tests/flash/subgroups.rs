//! The emulated tensor-core kernels at lavapipe's subgroup widths (issue 72): the flash cases of
//! [`super`] in child processes with `LP_NATIVE_VECTOR_WIDTH` set.

use burn_positional_kernels::{
    FlashVariant, flash_variant_backward_launches, set_thread_flash_variant,
};

use super::{Bias, Case, Pos, cases, check_cases, wgpu_devices};

/// The subgroup width a child of [`tensor_cores_do_not_depend_on_the_subgroup_width`] is run
/// at (lavapipe's, in units), which that child checks its adapter reports.
const SUBGROUP_ENV: &str = "FLASH_SUBGROUP_UNITS";

/// The emulated tensor-core kernels at this process's subgroup width: forward and gradients of
/// the 65-token cases with each bias (none, ALiBi, the distance table at sequential
/// positions), each grouping of heads, against the slow twin. Run on its own as a test (the
/// adapter's own width: 32 on an NVIDIA GPU, lavapipe's default here) and by
/// [`tensor_cores_do_not_depend_on_the_subgroup_width`] at lavapipe's other widths, where
/// [`SUBGROUP_ENV`] says which the adapter must report.
#[test]
fn tensor_core_kernel_at_this_subgroup_width() {
    let _forcing = crate::forcing(FlashVariant::TensorCores);
    if let Some(want) = std::env::var_os(SUBGROUP_ENV) {
        let want: u32 = want
            .to_str()
            .and_then(|w| w.parse().ok())
            .expect("a unit count");
        for device in wgpu_devices() {
            let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner()
            else {
                panic!("{device:?} is not a CubeCL device");
            };
            let hardware = cube.client().properties().hardware.clone();
            assert_eq!(
                (hardware.plane_size_min, hardware.plane_size_max),
                (want, want),
                "{device:?}: the subgroup width {SUBGROUP_ENV} asks for"
            );
        }
    }
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|case| case.seq_q == 65 && matches!(case.pos, Pos::Whole | Pos::Offset))
        .collect();
    assert!(
        [Bias::None, Bias::Alibi, Bias::ByDistance]
            .iter()
            .all(|bias| cases
                .iter()
                .any(|c| std::mem::discriminant(&c.bias) == std::mem::discriminant(bias))),
        "the subset takes every bias: {cases:?}"
    );
    set_thread_flash_variant(Some(FlashVariant::TensorCores));
    let before = flash_variant_backward_launches(FlashVariant::TensorCores);
    check_cases(&wgpu_devices(), &cases);
    set_thread_flash_variant(None);
    assert!(flash_variant_backward_launches(FlashVariant::TensorCores) > before);
}

/// The emulated tensor-core kernels exchange through shared memory over virtual warps of 32
/// units, so nothing in them may depend on the adapter's real subgroups: on lavapipe, the test
/// above again in child processes with subgroups of 8 and of 4 units
/// (`LP_NATIVE_VECTOR_WIDTH=256` and `128`: llvmpipe's vector width in bits), each with a Mesa
/// shader cache of its own. Lavapipe's setting only: on a GPU adapter it says so and checks
/// nothing more (the test above runs there at the GPU's own width).
#[test]
fn tensor_cores_do_not_depend_on_the_subgroup_width() {
    let cpu_adapter = wgpu_devices().iter().all(|device| {
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("{device:?} is not a CubeCL device");
        };
        cube.client().properties().identity.physical.is_none()
    });
    if !cpu_adapter {
        println!(
            "a GPU adapter: its subgroup width is its own (LP_NATIVE_VECTOR_WIDTH is lavapipe's)"
        );
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    for bits in [256u32, 128] {
        let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("mesa-shader-cache-vector-width-{bits}"));
        let output = std::process::Command::new(&exe)
            .args([
                "flash::subgroups::tensor_core_kernel_at_this_subgroup_width",
                "--exact",
                "--test-threads",
                "1",
            ])
            .env("LP_NATIVE_VECTOR_WIDTH", bits.to_string())
            .env(SUBGROUP_ENV, (bits / 32).to_string())
            .env("MESA_SHADER_CACHE_DIR", &cache)
            .output()
            .expect("the test binary runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.status.success() && text.contains("1 passed"),
            "LP_NATIVE_VECTOR_WIDTH={bits} ({} units a subgroup): {text}",
            bits / 32
        );
    }
}
