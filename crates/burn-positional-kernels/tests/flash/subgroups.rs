//! The kernels at lavapipe's subgroup widths, in child processes with `LP_NATIVE_VECTOR_WIDTH`
//! set: the emulated tensor-core kernels, which must not depend on it (issue 72), and the
//! register-blocked forward's plane shuffles, which take the device's width (issue 73).

use burn::tensor::Device;
use burn_positional_kernels::{
    FlashVariant, flash_blocked_plane_launches, flash_variant_backward_launches,
    set_flash_planes_forced, set_thread_flash_variant,
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
    if let Some(want) = asked_width() {
        assert_adapter_width(want);
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

/// The subgroup width [`SUBGROUP_ENV`] asks a child process's adapter for, if set.
fn asked_width() -> Option<u32> {
    std::env::var_os(SUBGROUP_ENV).map(|want| {
        want.to_str()
            .and_then(|w| w.parse().ok())
            .expect("a unit count")
    })
}

/// Every wgpu device's adapter reports subgroups of exactly `want` units.
fn assert_adapter_width(want: u32) {
    for device in wgpu_devices() {
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
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

/// Whether every wgpu device is a CPU adapter (no physical card: lavapipe), whose subgroup
/// width `LP_NATIVE_VECTOR_WIDTH` sets.
fn cpu_adapters() -> bool {
    wgpu_devices().iter().all(|device| {
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("{device:?} is not a CubeCL device");
        };
        cube.client().properties().identity.physical.is_none()
    })
}

/// Runs `test` (this binary's test of that name) in a child process per lavapipe subgroup width
/// (8 and 4 units: `LP_NATIVE_VECTOR_WIDTH=256` and `128`, llvmpipe's vector width in bits),
/// each with [`SUBGROUP_ENV`] set to it and a Mesa shader cache of its own; `ignored`: the test
/// is one that runs only so. Fails with the child's output where it fails.
fn at_lavapipe_widths(test: &str, ignored: bool) {
    let exe = std::env::current_exe().expect("the test binary's path");
    for bits in [256u32, 128] {
        let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("mesa-shader-cache-vector-width-{bits}"));
        let mut args = vec![test, "--exact", "--test-threads", "1"];
        if ignored {
            args.push("--ignored");
        }
        let output = std::process::Command::new(&exe)
            .args(&args)
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
            "{test} at LP_NATIVE_VECTOR_WIDTH={bits} ({} units a subgroup): {text}",
            bits / 32
        );
    }
}

/// The emulated tensor-core kernels exchange through shared memory over virtual warps of 32
/// units, so nothing in them may depend on the adapter's real subgroups: on lavapipe, the test
/// above again in child processes with subgroups of 8 and of 4 units
/// (`LP_NATIVE_VECTOR_WIDTH=256` and `128`: llvmpipe's vector width in bits), each with a Mesa
/// shader cache of its own. Lavapipe's setting only: on a GPU adapter it says so and checks
/// nothing more (the test above runs there at the GPU's own width).
#[test]
fn tensor_cores_do_not_depend_on_the_subgroup_width() {
    if !cpu_adapters() {
        println!(
            "a GPU adapter: its subgroup width is its own (LP_NATIVE_VECTOR_WIDTH is lavapipe's)"
        );
        return;
    }
    at_lavapipe_widths(
        "flash::subgroups::tensor_core_kernel_at_this_subgroup_width",
        false,
    );
}

/// The register-blocked forward's row statistics through plane shuffles (issue 73) at this
/// process's subgroup width, which the adapter must report as [`SUBGROUP_ENV`] asks: plane
/// operations forced on (CubeCL reports none on a CPU adapter, though lavapipe's driver runs
/// subgroups), the blocked kernel forced, the forward of every case below 1,000 tokens and of
/// the wide heads (values of 40 under the general formula: cubes of 32 rows, row groups of 16
/// units) against the slow twin. At 8 units the row groups of 8 (cubes of 64 rows) combine by
/// shuffles alone and those of 16 by shuffles then shared memory; at 4 both take both; each
/// launch counted by how it combined. Run only by [`blocked_planes_at_lavapipe_widths`]: the
/// switch is the process's, and would take the shared-memory path from the other blocked tests
/// of a process that runs them beside it.
#[test]
#[ignore = "run in child processes by flash::subgroups::blocked_planes_at_lavapipe_widths"]
fn blocked_planes_at_this_subgroup_width() {
    let want = asked_width().unwrap_or_else(|| panic!("{SUBGROUP_ENV} is not set"));
    assert_adapter_width(want);
    let want = want as usize;
    let _forcing = crate::forcing(FlashVariant::Blocked);
    set_flash_planes_forced(true);
    set_thread_flash_variant(Some(FlashVariant::Blocked));
    let whole_before = flash_blocked_plane_launches(want.min(8), true);
    let partial_before = flash_blocked_plane_launches(want, false);
    let shared_before = flash_blocked_plane_launches(1, false);
    let mut cases: Vec<Case> = cases().into_iter().filter(|c| c.seq_q < 1000).collect();
    cases.extend(super::wide_cases(|_| true));
    let plain: Vec<Device> = wgpu_devices()
        .into_iter()
        .filter(|d| !d.is_autodiff())
        .collect();
    assert!(!plain.is_empty(), "a wgpu device without autodiff");
    check_cases(&plain, &cases);
    set_thread_flash_variant(None);
    set_flash_planes_forced(false);
    let whole = flash_blocked_plane_launches(want.min(8), true) - whole_before;
    let partial = flash_blocked_plane_launches(want, false) - partial_before;
    assert!(
        partial > 0 && (want < 8 || whole > 0),
        "subgroups of {want}: {whole} launches by shuffles alone, {partial} by shuffles then \
         shared memory"
    );
    assert_eq!(
        flash_blocked_plane_launches(1, false) - shared_before,
        0,
        "launches by shared memory alone with plane operations forced on"
    );
}

/// [`blocked_planes_at_this_subgroup_width`] on lavapipe at subgroups of 8 and of 4 units, in
/// child processes. On a GPU adapter it says so and checks nothing more: there the blocked
/// kernel's own tests run its plane path at the GPU's width, which its plane operations choose.
#[test]
fn blocked_planes_at_lavapipe_widths() {
    if !cpu_adapters() {
        println!("a GPU adapter: the blocked tests take its own plane width");
        return;
    }
    at_lavapipe_widths(
        "flash::subgroups::blocked_planes_at_this_subgroup_width",
        true,
    );
}
