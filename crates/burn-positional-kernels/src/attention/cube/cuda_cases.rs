//! The attention kernels' specializations for the CUDA compile check
//! ([`crate::cuda_check`]): for each storage dtype, head width and group, the kernels
//! [`launch`](super::launch) and [`launch_backward`](super::launch_backward) take, through the
//! same plans, for long sequences (a short sequence takes smaller cubes of the same code).
//!
//! - The tensor-core forward and backward (`mma.sync`, f32 emulated) at every width, both score
//!   formulas.
//! - The shared and register kernels, forced or as the fallback.
//! - The register-blocked forward and backward, both score formulas.
//! - The split keys' combine.
//!
//! Every width, dtype, group and bias-gradient size is the full matrix (`cargo run --example
//! cuda_kernels -- --full`, the table in `docs/gpu.md`); `.ci/checks` builds the part
//! `Matrix::takes` names.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::DType;
use cubecl::prelude::*;

use super::{
    InputsLaunch, KEY_BLOCK, ScalarsLaunch, backward, backward_shared, blocked, blocked_backward,
    mma, mma_backward, mma_backward_keys, registers, shared, split,
};
use crate::attention::Sizes;
use crate::cuda_check::{Case, Target, elementwise_dim, tensor};

/// Head widths `(d_head, d_v)`: the models' 32, 64 and 128, and the odd widths the tests launch
/// (40, 96, and 64-wide keys with 32-wide values).
const WIDTHS: [(usize, usize); 6] = [(32, 32), (40, 40), (64, 64), (96, 96), (128, 128), (64, 32)];

/// Query heads per key/value head: one (multi-head), four (the tests' and the kit's grouped
/// heads).
const GROUPS: [usize; 2] = [1, 4];

/// Slots of a unit's bias gradient in the backward (`launch_backward`'s `bias_slots`): one (no
/// bias, or ALiBi's slope) and 512 (a T5 table of reach 128, the kit's).
const BIAS_SLOTS: [usize; 2] = [1, 512];

/// Which specializations a run builds.
struct Matrix {
    full: bool,
}

impl Matrix {
    /// Whether `(dtype, width, group)` is built: everything in the full matrix; for the check,
    /// the models' most common head (f16, 64 wide, one and four heads per key/value head), the
    /// widest (f16, 128) and the other two dtypes at 64. NVRTC takes 2-5 s per attention
    /// kernel, so the check's part is what fits its three minutes.
    fn takes(&self, dtype: DType, width: (usize, usize), group: usize) -> bool {
        self.full
            || match (dtype, width) {
                (DType::F16, (64, 64)) => true,
                (DType::F16, (128, 128)) | (DType::BF16 | DType::F32, (64, 64)) => group == 1,
                _ => false,
            }
    }

    /// The backward's bias slots: both in the full matrix, none beyond one for the check.
    fn bias_slots(&self) -> &'static [usize] {
        if self.full {
            &BIAS_SLOTS
        } else {
            &BIAS_SLOTS[..1]
        }
    }
}

/// The attention's specializations for `target`.
pub(crate) fn cases(target: &Target) -> Vec<Case> {
    let matrix = Matrix { full: target.full };
    let mut cases = Vec::new();
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        for width in WIDTHS {
            for group in GROUPS {
                if matrix.takes(dtype, width, group) {
                    forward(target, &mut cases, dtype, width, group);
                    for &bias_slots in matrix.bias_slots() {
                        backward(target, &mut cases, dtype, width, group, bias_slots);
                    }
                }
            }
        }
        let dtypes = storage_types(dtype);
        cases.push(Case::new(
            "attention forward: split keys' combine",
            format!("{dtype:?}"),
            false,
            split::combine_splits_kernel::create_dummy_kernel(
                target.properties.clone(),
                target.target.clone(),
                CubeCount::Static(1, 1, 1),
                elementwise_dim(),
                tensor(4),
                tensor(4),
                tensor(4),
                tensor(4),
                1,
                1,
                2,
                -1.0,
                [dtypes[0], dtypes[1]],
            ),
        ));
    }
    cases
}

/// Long sequences of `group` query heads on one key/value head.
fn sizes(group: usize, (d_head, d_v): (usize, usize)) -> Sizes {
    Sizes {
        batch: 1,
        n_heads: group,
        n_kv_heads: 1,
        seq_q: 4096,
        seq_k: 4096,
        d_head,
        d_v,
    }
}

fn forward(
    target: &Target,
    cases: &mut Vec<Case>,
    dtype: DType,
    width: (usize, usize),
    group: usize,
) {
    let properties = &target.properties;
    let sizes = sizes(group, width);
    let (d_head, d_v) = width;
    let dtypes = storage_types(dtype);
    let name = |what: String| format!("{dtype:?} d{d_head}/{d_v} group {group}: {what}");
    if let Some(emulate) = mma::emulation(properties, dtype)
        && let Some(plan) = mma::plan(&sizes, group, dtype.size(), &properties.hardware, emulate)
    {
        // Both score formulas: `scale q . k` under the causal mask and the window, and the
        // general one (bias, softcap, explicit positions, segments, padding).
        for general in [false, true] {
            let kernel = mma::flash_mma_kernel::create_dummy_kernel(
                properties.clone(),
                target.target.clone(),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(plan.units() as u32),
                inputs(),
                tensor(4),
                tensor(4),
                scalars(),
                group as u32,
                plan.span as u32,
                d_head,
                d_v,
                plan.block,
                plan.m_tiles,
                plan.stages,
                general,
                emulate,
                dtypes,
            );
            cases.push(Case::new(
                "attention forward: tensor cores",
                name(format!(
                    "block {} stages {} rows {}, {} scores{}",
                    plan.block,
                    plan.stages,
                    plan.m_tiles * mma::M_TILE,
                    if general { "general" } else { "plain" },
                    if emulate { " (emulated)" } else { "" }
                )),
                !emulate,
                kernel,
            ));
        }
    }
    // The shared and register kernels take the group at run time, in cubes of the same size
    // for every group: one specialization serves them all (named by the first group).
    if group != GROUPS[0] {
        return;
    }
    let native = mma::emulation(properties, DType::F16) == Some(false);
    for general in [false, true] {
        let Some(plan) = blocked::plan(&sizes, group, properties, general) else {
            continue;
        };
        {
            let kernel = blocked::flash_blocked_kernel::create_dummy_kernel(
                properties.clone(),
                target.target.clone(),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(blocked::UNITS as u32),
                inputs(),
                tensor(4),
                tensor(4),
                scalars(),
                group as u32,
                plan.span as u32,
                d_head,
                d_v,
                plan.tile_rows,
                plan.chunk,
                plan.v_keys,
                general,
                native,
                plan.plane_width,
                dtypes,
            );
            cases.push(Case::new(
                "attention forward: blocked",
                name(format!(
                    "rows {} chunk {} values {}, {} scores",
                    plan.tile_rows,
                    plan.chunk,
                    plan.v_keys,
                    if general { "general" } else { "plain" },
                )),
                false,
                kernel,
            ));
        }
    }
    let plans = [
        shared::plan(&sizes, group, dtype.size(), &properties.hardware),
        Some(registers::plan(&sizes, group)),
    ];
    for plan in plans.into_iter().flatten() {
        let dim = CubeDim::new_1d(plan.units as u32);
        macro_rules! dummy {
            ($kernel:path, $keys:expr) => {
                $kernel(
                    properties.clone(),
                    target.target.clone(),
                    CubeCount::Static(1, 1, 1),
                    dim,
                    inputs(),
                    tensor(4),
                    tensor(4),
                    scalars(),
                    d_head,
                    d_v,
                    plan.per_unit,
                    $keys,
                    dtypes,
                )
            };
        }
        let spec = name(format!(
            "{} rows per unit, {} units",
            plan.per_unit, plan.units
        ));
        cases.push(match plan.stage {
            Some(stage) => Case::new(
                "attention forward: shared",
                format!("{spec}, stage {stage}"),
                false,
                dummy!(shared::flash_shared_kernel::create_dummy_kernel, stage),
            ),
            None => Case::new(
                "attention forward: registers",
                spec,
                false,
                dummy!(
                    registers::flash_registers_kernel::create_dummy_kernel,
                    KEY_BLOCK
                ),
            ),
        });
    }
}

fn backward(
    target: &Target,
    cases: &mut Vec<Case>,
    dtype: DType,
    width: (usize, usize),
    group: usize,
    bias_slots: usize,
) {
    let properties = &target.properties;
    let sizes = sizes(group, width);
    let (d_head, d_v) = width;
    let dtypes = storage_types(dtype);
    let name = |what: String| {
        format!("{dtype:?} d{d_head}/{d_v} group {group} bias slots {bias_slots}: {what}")
    };
    // The tensor-core backward: plain and general scores, and the dQ kernel with a T5 table's
    // gradient (the kit's reach of 128: 512 slots) at every width and group of the check.
    if bias_slots == BIAS_SLOTS[0]
        && let Some(emulate) = mma::emulation(properties, dtype)
        && let Some(plan) = mma_backward::plan(
            &sizes,
            group,
            dtype.size(),
            &properties.hardware,
            emulate,
            0,
        )
    {
        let emulated = if emulate { " (emulated)" } else { "" };
        let units = CubeDim::new_1d(plan.queries.units() as u32);
        let dq = |plan: &mma_backward::MmaBackwardPlan, general: bool, table_slots: usize| {
            let scores = if table_slots > 0 {
                format!("general scores, table gradient of {table_slots} slots")
            } else if general {
                "general scores".to_string()
            } else {
                "plain scores".to_string()
            };
            let kernel = mma_backward::flash_mma_dq_kernel::create_dummy_kernel(
                properties.clone(),
                target.target.clone(),
                CubeCount::Static(1, 1, 1),
                units,
                inputs(),
                tensor(4),
                tensor(4),
                tensor(4),
                tensor(4),
                tensor(4),
                scalars(),
                group as u32,
                plan.queries.span as u32,
                d_head,
                d_v,
                plan.queries.block,
                plan.queries.m_tiles,
                plan.queries.stages,
                general,
                table_slots,
                emulate,
                dtypes,
            );
            Case::new(
                "attention backward: tensor cores, queries",
                name(format!(
                    "block {} stages {} rows {}, {scores}{emulated}",
                    plan.queries.block,
                    plan.queries.stages,
                    plan.queries.m_tiles * mma::M_TILE
                )),
                !emulate,
                kernel,
            )
        };
        let table_slots = BIAS_SLOTS[1];
        if let Some(plan) = mma_backward::plan(
            &sizes,
            group,
            dtype.size(),
            &properties.hardware,
            emulate,
            table_slots,
        ) {
            cases.push(dq(&plan, true, table_slots));
        }
        for general in [false, true] {
            let scores = if general { "general" } else { "plain" };
            let keys = mma_backward_keys::flash_mma_dkv_kernel::create_dummy_kernel(
                properties.clone(),
                target.target.clone(),
                CubeCount::Static(1, 1, 1),
                units,
                inputs(),
                tensor(4),
                tensor(4),
                tensor(4),
                tensor(4),
                tensor(4),
                scalars(),
                group as u32,
                d_head,
                d_v,
                plan.block,
                plan.stages,
                general,
                emulate,
                dtypes,
            );
            cases.push(Case::new(
                "attention backward: tensor cores, keys",
                name(format!(
                    "block {} stages {}, {scores} scores{emulated}",
                    plan.block, plan.stages
                )),
                !emulate,
                keys,
            ));
            cases.push(dq(&plan, general, 0));
        }
    }
    // As the forward's: one specialization of the shared, register and blocked kernels for every
    // group.
    if group != GROUPS[0] {
        return;
    }
    // The blocked backward (no bias gradient: one slot), both score formulas where it takes them.
    if bias_slots == BIAS_SLOTS[0] {
        let native = mma::emulation(properties, DType::F16) == Some(false);
        let dim = CubeDim::new_1d(blocked::UNITS as u32);
        for general in [false, true] {
            let Some(plan) = blocked_backward::plan(d_head, d_v, properties) else {
                continue;
            };
            let scores = if general { "general" } else { "plain" };
            let spec = name(format!(
                "chunk {} rows {}, {scores} scores",
                plan.chunk, plan.b_rows
            ));
            let keys = blocked_backward::flash_blocked_dkv_kernel::create_dummy_kernel(
                properties.clone(),
                target.target.clone(),
                CubeCount::Static(1, 1, 1),
                dim,
                inputs(),
                tensor(4),
                tensor(4),
                tensor(4),
                tensor(4),
                tensor(4),
                scalars(),
                d_head,
                d_v,
                plan.chunk,
                plan.b_rows,
                general,
                native,
                dtypes,
            );
            cases.push(Case::new(
                "attention backward: blocked, keys",
                spec.clone(),
                false,
                keys,
            ));
            let queries = blocked_backward::flash_blocked_dq_kernel::create_dummy_kernel(
                properties.clone(),
                target.target.clone(),
                CubeCount::Static(1, 1, 1),
                dim,
                inputs(),
                tensor(4),
                tensor(4),
                tensor(4),
                tensor(4),
                scalars(),
                d_head,
                d_v,
                plan.chunk,
                plan.b_rows,
                general,
                native,
                dtypes,
            );
            cases.push(Case::new(
                "attention backward: blocked, queries",
                spec,
                false,
                queries,
            ));
        }
    }
    let shared = backward_shared::plan(&sizes, group, dtype.size(), &properties.hardware);
    let register_units = {
        let per_unit = backward::per_unit(&sizes);
        (per_unit, group * super::units_per_head(group))
    };
    let plans = [
        shared.map(|plan| (plan.per_unit, plan.units, plan.stage)),
        Some((register_units.0, register_units.1, None)),
    ];
    for (per_unit, units, stage) in plans.into_iter().flatten() {
        let dim = CubeDim::new_1d(units as u32);
        macro_rules! dummy {
            ($kernel:path $(, $stage:expr)?) => {
                $kernel(
                    properties.clone(),
                    target.target.clone(),
                    CubeCount::Static(1, 1, 1),
                    dim,
                    inputs(),
                    tensor(4),
                    tensor(4),
                    tensor(4),
                    tensor(4),
                    tensor(4),
                    tensor(4),
                    tensor(4),
                    scalars(),
                    d_head,
                    d_v,
                    per_unit,
                    bias_slots,
                    $($stage,)?
                    dtypes,
                )
            };
        }
        let spec = name(format!("{per_unit} rows per unit, {units} units"));
        cases.push(match stage {
            Some(stage) => Case::new(
                "attention backward: shared",
                format!("{spec}, stage {stage}"),
                false,
                dummy!(
                    backward_shared::flash_backward_shared_kernel::create_dummy_kernel,
                    stage
                ),
            ),
            None => Case::new(
                "attention backward: registers",
                spec,
                false,
                dummy!(backward::flash_backward_kernel::create_dummy_kernel),
            ),
        });
    }
}

/// The kernels' `[F, C, I, J, P]` for a CUDA launch: burn's CUDA backend stores ints as i32
/// and bools as u8.
fn storage_types(dtype: DType) -> [cubecl::ir::ElemType; 5] {
    [
        dtype_to_storage_type(dtype),
        dtype_to_storage_type(DType::F32),
        dtype_to_storage_type(DType::I32),
        dtype_to_storage_type(DType::I32),
        dtype_to_storage_type(DType::U8),
    ]
}

/// The attention kernels' inputs for a kernel that is only compiled: q, k, v (rank 4), the bias,
/// the padding, the positions and the segments (rank 2).
fn inputs<F: Float, I: Int, J: Int, P: Numeric>() -> InputsLaunch<F, I, J, P> {
    InputsLaunch::new(
        tensor(4),
        tensor(4),
        tensor(4),
        tensor(2),
        tensor(2),
        tensor(2),
        tensor(2),
    )
}

/// Run-time values for a kernel that is only compiled.
fn scalars() -> ScalarsLaunch {
    ScalarsLaunch::new(1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1.0, 1.0, -1.0, 0, 0, 1)
}

#[cfg(test)]
mod tests {
    use burn::tensor::DType;

    use crate::attention::variant::mma_ready;
    use crate::cuda_check::{A100, H100, Target};

    /// The properties stand for what `cubecl-cuda` reads off the GPUs: `mma.sync` for the
    /// halves (so the tensor-core kernels take the tensor cores, as on the H200 of issue
    /// 61), not f32.
    #[test]
    fn the_gpus_have_tensor_cores_for_halves_only() {
        for gpu in [H100, A100] {
            let target = Target::for_tests(gpu);
            for (dtype, native) in [(DType::F16, true), (DType::BF16, true), (DType::F32, false)] {
                let p = &target.properties;
                assert_eq!(mma_ready(p, dtype), native, "{} {dtype:?} mma", gpu.name);
            }
        }
    }

    /// `Auto` on these GPUs: the tensor-core kernels for the halves, the shared kernel for
    /// f32; a forced variant is kept whatever the dtype.
    #[test]
    fn auto_takes_the_tensor_cores_for_halves_on_the_gpus() {
        use crate::FlashVariant::{Auto, Registers, Shared, TensorCores};
        use crate::attention::variant::resolve;
        for gpu in [H100, A100] {
            let p = &Target::for_tests(gpu).properties;
            for (dtype, auto) in [
                (DType::F16, TensorCores),
                (DType::BF16, TensorCores),
                (DType::F32, Shared),
            ] {
                assert_eq!(resolve(Auto, p, dtype), auto, "{} {dtype:?}", gpu.name);
                for forced in [Registers, Shared, TensorCores, crate::FlashVariant::Blocked] {
                    assert_eq!(resolve(forced, p, dtype), forced, "{} {dtype:?}", gpu.name);
                }
            }
        }
    }

    /// The forward's exception: a decoding step (one query row a head over 4,096 keys) is
    /// split by the shared kernel, so `Auto` leaves it there; the prefill shapes fill
    /// the device with the tensor-core kernel's own tiles.
    #[test]
    fn auto_leaves_decoding_steps_to_the_split_keys() {
        use crate::attention::Sizes;
        let sizes = |heads: usize, kv: usize, seq_q: usize, seq_k: usize, d: usize| Sizes {
            batch: 1,
            n_heads: heads,
            n_kv_heads: kv,
            seq_q,
            seq_k,
            d_head: d,
            d_v: d,
        };
        for gpu in [H100, A100] {
            let hardware = &Target::for_tests(gpu).properties.hardware;
            let splits = |s: Sizes| {
                super::super::split::splits_for_auto(
                    &s,
                    s.n_heads / s.n_kv_heads,
                    2,
                    hardware,
                    None,
                )
            };
            assert!(splits(sizes(8, 8, 1, 4096, 128)), "{}", gpu.name);
            assert!(splits(sizes(32, 8, 1, 4096, 64)), "{}", gpu.name);
            for (heads, seq, d) in [(8, 8192, 32), (32, 2048, 64), (32, 4096, 128)] {
                assert!(
                    !splits(sizes(heads, heads, seq, seq, d)),
                    "{} {seq} {d}",
                    gpu.name
                );
            }
        }
    }

    /// The blocked forward's plans on these GPUs (issue 73): 64 rows a cube under the plain
    /// formula up to values of 64, else 32; the row statistics through plane shuffles (planes of
    /// 32, row groups of 8 or 16); within CUDA's 48 KiB without opting in; a decoding step's
    /// heads packed into one cube (each head's rows at least its queries, 4 at the least).
    #[test]
    fn blocked_plans_fit_the_gpus() {
        use super::super::blocked::{plan, shared_bytes};
        use crate::attention::Sizes;
        let sizes = |heads: usize, seq_q: usize, d: usize| Sizes {
            batch: 1,
            n_heads: heads,
            n_kv_heads: 1,
            seq_q,
            seq_k: 4096,
            d_head: d,
            d_v: d,
        };
        for gpu in [H100, A100] {
            let p = &Target::for_tests(gpu).properties;
            for (d, general, rows) in [
                (32, false, 64),
                (32, true, 64),
                (64, false, 64),
                (64, true, 32),
                (128, false, 32),
                (128, true, 32),
            ] {
                let plan = plan(&sizes(1, 4096, d), 1, p, general).expect("a plan");
                assert_eq!(plan.tile_rows, rows, "{} d{d} general {general}", gpu.name);
                let groups = 128 / (plan.tile_rows / 4);
                assert_eq!(plan.plane_width, groups, "{}: planes of 32", gpu.name);
                assert!(
                    shared_bytes(plan.tile_rows, plan.chunk, plan.v_keys, d) <= 48 * 1024,
                    "{} d{d}",
                    gpu.name
                );
            }
            // One query row of 32 heads a group: 16 heads of 4 rows a cube; of 8, 8 of 8.
            let decode = plan(&sizes(32, 1, 64), 32, p, false).expect("a plan");
            assert_eq!((decode.span, decode.rows()), (16, 4), "{}", gpu.name);
            let decode = plan(&sizes(8, 1, 64), 8, p, false).expect("a plan");
            assert_eq!((decode.span, decode.rows()), (8, 8), "{}", gpu.name);
            // Three heads a group: one a cube (each unit's rows are one head's).
            assert_eq!(plan(&sizes(3, 1, 64), 3, p, false).unwrap().span, 1);
            assert_eq!(plan(&sizes(8, 4096, 64), 8, p, false).unwrap().span, 1);
        }
    }
}
