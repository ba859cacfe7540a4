//! The launch's run-time values ([`Scalars`]) as the host computes them, and the kernels'
//! element types: what every attention launch (forward and backward) passes besides its
//! tensors and comptime sizes.

use burn::backend::{TensorMetadata, cubecl::dtype_to_storage_type};
use burn::tensor::DType;
use burn_cubecl::tensor::CubeTensor;

use super::{
    ALIBI, BY_DISTANCE, CAPPED, CAUSAL, EXPLICIT, PADDED, POSITION_LIMIT, SEGMENTED, ScalarsLaunch,
    WINDOW,
};
use crate::attention::tile::{BiasKind, TileArgs};

/// The launch's run-time values ([`Scalars`]) for `sizes` and `args`, checked against the
/// kernels' limits.
pub(super) struct ScalarValues {
    pub(super) n_heads: u32,
    pub(super) group: u32,
    pub(super) seq_q: u32,
    pub(super) seq_k: u32,
    pub(super) rows: u32,
    pub(super) query_offset: i32,
    pub(super) key_offset: i32,
    pub(super) before: i32,
    pub(super) after: i32,
    pub(super) reach: i32,
    pub(super) positions_shared: u32,
    pub(super) scale: f32,
    pub(super) softcap: f32,
    pub(super) lowest: f32,
    pub(super) flags: u32,
    pub(super) key_tiles: u32,
    pub(super) splits: u32,
}

impl ScalarValues {
    /// # Panics
    ///
    /// Where a size exceeds u32 or a position reaches [`POSITION_LIMIT`].
    pub(super) fn new(
        sizes: &crate::attention::Sizes,
        args: &TileArgs,
        rows: usize,
        positions: &CubeTensor,
        dtype: DType,
        key_tiles: usize,
    ) -> Self {
        let limit = |v: usize, what: &str| {
            assert!(
                v < POSITION_LIMIT,
                "tiled_attention: {what} = {v} reaches the kernel's position limit {POSITION_LIMIT}"
            );
            v as i32
        };
        let u32_of = |v: usize, what: &str| {
            u32::try_from(v).unwrap_or_else(|_| panic!("tiled_attention: {what} = {v} exceeds u32"))
        };
        limit(args.query_offset + sizes.seq_q, "the last query position");
        limit(args.key_offset + sizes.seq_k, "the last key position");
        let window = args.window;
        let clamp = |w: usize| w.min(POSITION_LIMIT) as i32;
        let (alibi, by_distance, reach) = match args.kind {
            BiasKind::None => (false, false, 0),
            BiasKind::Alibi => (true, false, 0),
            BiasKind::ByDistance { reach } => (false, true, limit(reach, "the bias's reach")),
        };
        let flags = [
            (alibi, ALIBI),
            (by_distance, BY_DISTANCE),
            (args.causal, CAUSAL),
            (window.is_some(), WINDOW),
            (args.explicit, EXPLICIT),
            (args.segments, SEGMENTED),
            (args.padded, PADDED),
            (args.softcap.is_some(), CAPPED),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .fold(0, |flags, (_, bit)| flags | bit);
        Self {
            n_heads: u32_of(sizes.n_heads, "n_heads"),
            group: u32_of(sizes.n_heads / sizes.n_kv_heads.max(1), "the group"),
            seq_q: u32_of(sizes.seq_q, "seq_q"),
            seq_k: u32_of(sizes.seq_k, "seq_k"),
            rows: u32_of(rows, "rows"),
            query_offset: limit(args.query_offset, "the first query position"),
            key_offset: limit(args.key_offset, "the first key position"),
            before: window.map_or(0, |w| clamp(w.before)),
            after: window.map_or(0, |w| clamp(w.after)),
            reach,
            positions_shared: u32::from(args.explicit && positions.shape().dims::<2>()[0] == 1),
            scale: args.scale as f32,
            softcap: args.softcap.unwrap_or(1.0) as f32,
            lowest: dtype.finfo().map_or(f32::MIN, |f| f.min as f32),
            flags,
            key_tiles: u32_of(key_tiles, "the key tiles"),
            splits: 1,
        }
    }

    pub(super) fn launch(&self) -> ScalarsLaunch {
        ScalarsLaunch::new(
            self.n_heads,
            self.group,
            self.seq_q,
            self.seq_k,
            self.rows,
            self.query_offset,
            self.key_offset,
            self.before,
            self.after,
            self.reach,
            self.positions_shared,
            self.scale,
            self.softcap,
            self.lowest,
            self.flags,
            self.key_tiles,
            self.splits,
        )
    }
}

/// The kernels' `[F, C, I, J, P]`: the storage float, f32 to compute in, the positions',
/// segments' and padding's element types.
pub(super) fn storage_types(
    dtype: DType,
    positions: &CubeTensor,
    segments: &CubeTensor,
    padding: &CubeTensor,
) -> [cubecl::ir::ElemType; 5] {
    let int_type = |t: &CubeTensor| dtype_to_storage_type(t.dtype);
    [
        dtype_to_storage_type(dtype),
        dtype_to_storage_type(DType::F32),
        int_type(positions),
        int_type(segments),
        int_type(padding),
    ]
}
