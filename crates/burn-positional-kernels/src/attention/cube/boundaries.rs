//! Where each kernel's walk changes with the lengths, read from the plans themselves: the
//! cases a test (and the GPU kit's check) must take on both sides of, so that a new plan gets
//! its cases without anyone remembering to add them.

use std::collections::BTreeSet;

use cubecl::ir::DeviceProperties;

use super::backward::per_unit as backward_per_unit;
use super::{
    KEY_BLOCK, backward_shared, blocked, blocked_backward, blocked_tiles, mma_backward, registers,
    shared, split,
};
use crate::attention::Sizes;
use crate::attention::boundaries::{FlashBoundaries, LONG};
use crate::attention::variant::FlashVariant;

fn around(set: &mut BTreeSet<usize>, n: usize) {
    for m in [n.saturating_sub(1), n, n + 1, 2 * n + 1] {
        if m > 0 {
            set.insert(m);
        }
    }
}

/// The boundaries of `variant` (resolved: not `Auto`) for heads of `d_head` and `d_v` in
/// groups of `group`, with `elem_size`-byte floats, on a device with `properties`; `mma` how the
/// tensor-core kernels run (`mma::emulation`: native, emulated with its exchange space, or not
/// at all). `key_splits` is a forced split count (the tests'), else the device's
/// `multiprocessors` decide.
#[allow(clippy::too_many_arguments)]
pub(crate) fn boundaries(
    variant: FlashVariant,
    group: usize,
    d_head: usize,
    d_v: usize,
    elem_size: usize,
    properties: &DeviceProperties,
    mma: Option<bool>,
    key_splits: Option<usize>,
) -> FlashBoundaries {
    let hardware = &properties.hardware;
    // A long call: the plans' choices that do not depend on the length.
    let sizes = |seq_q: usize, seq_k: usize| Sizes {
        batch: 1,
        n_heads: group,
        n_kv_heads: 1,
        seq_q,
        seq_k,
        d_head,
        d_v,
    };
    let long = sizes(4096, 4096);
    let mut queries = BTreeSet::from([1]);
    let mut keys: BTreeSet<usize> = LONG.into_iter().collect();
    // No plan's walk meets llvmpipe's loop limit at the lengths the tests take (the
    // tensor-core forward's one run-time loop walks blocks of keys).
    let loop_limit_keys = None;
    let mut fits = true;
    // The backward's register kernel is every variant's fallback: its blocks always apply.
    let per_unit = backward_per_unit(&long);
    around(&mut queries, per_unit);
    match variant {
        FlashVariant::TensorCores => {
            let forward = mma
                .and_then(|emulate| super::mma::plan(&long, group, elem_size, hardware, emulate));
            let backward = mma.and_then(|emulate| {
                mma_backward::plan(&long, group, elem_size, hardware, emulate, 0)
            });
            fits = forward.is_some() && backward.is_some();
            // The forward's one run-time loop walks blocks: llvmpipe's loop limit is millions of
            // keys away.
            if let Some(plan) = forward {
                around(&mut queries, plan.rows());
                around(&mut queries, plan.m_tiles * super::mma::M_TILE);
                around(&mut keys, plan.block);
                around(&mut keys, plan.stages * plan.block);
            }
            // The dQ kernel's tiles and blocks of keys; the dK/dV kernel's cubes of keys and
            // steps of rows.
            if let Some(plan) = backward {
                around(&mut queries, plan.queries.rows());
                around(&mut queries, plan.queries.m_tiles * super::mma::M_TILE);
                around(&mut keys, plan.queries.block);
                around(&mut keys, plan.queries.stages * plan.queries.block);
                around(&mut keys, mma_backward::KEYS_PER_CUBE);
                around(&mut queries, plan.block);
                around(&mut queries, plan.stages * plan.block);
            }
        }
        FlashVariant::Blocked => {
            // The forward's cubes of rows (64 or 32 by the formula), its block of keys and
            // stage of values. Its backward: cubes of 32 rows (dQ) and of 32 keys (dK/dV),
            // blocks of 64 keys and of 64 rows, stages of `b_rows`; the shared one's where a
            // bias's gradient is wanted, or the heads are wider than 64.
            let plans: Vec<_> = [false, true]
                .into_iter()
                .filter_map(|general| blocked::plan(&long, group, properties, general))
                .collect();
            let backward = blocked_backward::plan(d_head, d_v, properties);
            let shared_backward = backward_shared::plan(&long, group, elem_size, hardware);
            // The forward's plan decides whether the forced kernel runs (a backward that does not
            // fit falls back to the shared or register one).
            fits = !plans.is_empty();
            for plan in plans {
                around(&mut queries, plan.rows());
                around(&mut queries, 4);
                around(&mut keys, blocked::BLOCK);
                around(&mut keys, plan.v_keys);
            }
            for n in [1, 2, split::MAX_SPLITS] {
                around(
                    &mut keys,
                    key_splits.unwrap_or(n * split::MIN_KEYS_PER_SPLIT),
                );
            }
            if let Some(plan) = backward {
                for n in [blocked_tiles::ROWS, blocked::BLOCK, plan.b_rows] {
                    around(&mut queries, n);
                    around(&mut keys, n);
                }
            }
            if let Some(plan) = shared_backward {
                around(&mut queries, plan.rows);
                around(&mut keys, plan.stage.unwrap_or(KEY_BLOCK));
            }
        }
        FlashVariant::Shared => {
            let forward = shared::plan(&long, group, elem_size, hardware);
            let backward = backward_shared::plan(&long, group, elem_size, hardware);
            fits = forward.is_some() && backward.is_some();
            if let Some(plan) = forward {
                around(&mut queries, plan.rows);
                around(&mut queries, plan.per_unit);
                around(&mut keys, plan.stage.unwrap_or(KEY_BLOCK));
                // Key splits: a forced count applies from that many keys on; the device's own
                // change every `MIN_KEYS_PER_SPLIT` keys up to the most splits.
                match key_splits {
                    Some(n) => around(&mut keys, n),
                    None => {
                        for n in [1, 2, split::MAX_SPLITS] {
                            around(&mut keys, n * split::MIN_KEYS_PER_SPLIT);
                        }
                    }
                }
            }
            if let Some(plan) = backward {
                around(&mut queries, plan.rows);
                around(&mut keys, plan.stage.unwrap_or(KEY_BLOCK));
            }
        }
        _ => {
            let plan = registers::plan(&long, group);
            around(&mut queries, plan.rows);
            around(&mut queries, plan.per_unit);
            around(&mut keys, KEY_BLOCK);
        }
    }
    // The register backward's key cubes hold `units x per_unit` keys.
    let units = group * super::units_per_head(group);
    around(&mut keys, units * per_unit);
    FlashBoundaries {
        queries: queries.into_iter().collect(),
        keys: keys.into_iter().collect(),
        loop_limit_keys,
        fits,
    }
}
