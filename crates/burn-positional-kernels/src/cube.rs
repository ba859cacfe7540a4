//! The extension on `burn_cubecl::CubeBackend` (every CubeCL runtime: wgpu here, CUDA, ROCm,
//! Metal, the CubeCL CPU runtime): each op's launch, from its folder (`embedding/`, `rope/`,
//! `attention/`, `table_grad/`, `skinny/`). The `Fusion` selector of `#[backend_extension]`
//! generates `impl<B: FusionBackend + PositionalKernels> PositionalKernels for Fusion<B>`, which
//! is what `burn::backend::Cube` is when burn's `fusion` is on (wgpu's default): it registers
//! the op lazily with the output shapes from [`crate::embedding::options::meta`] and calls this
//! implementation when the stream executes.

use burn::backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_cubecl::CubeBackend;

use crate::PositionalKernels;
use crate::attention::TileArgs;
use crate::embedding::options::KernelArgs;
use crate::rope::RopeArgs;

impl PositionalKernels for CubeBackend {
    fn fused_embedding(
        tokens: FloatTensor<Self>,
        ids: IntTensor<Self>,
        positions: IntTensor<Self>,
        table: FloatTensor<Self>,
        args: KernelArgs,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        crate::embedding::cube::launch(tokens, ids, positions, table, &args)
    }

    fn fused_rope(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        args: RopeArgs,
    ) -> FloatTensor<Self> {
        crate::rope::cube::launch(x, cos, sin, &args)
    }

    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: BoolTensor<Self>,
        positions: IntTensor<Self>,
        segments: IntTensor<Self>,
        args: TileArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        crate::attention::cube::launch(q, k, v, bias, padding, positions, segments, &args)
    }

    fn flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: BoolTensor<Self>,
        positions: IntTensor<Self>,
        segments: IntTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        args: crate::attention::BackwardArgs,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    ) {
        crate::attention::cube::launch_backward(
            q, k, v, bias, padding, positions, segments, output, lse, grad, &args,
        )
    }

    fn table_grad(
        grad: FloatTensor<Self>,
        index: IntTensor<Self>,
        args: crate::table_grad::TableGradArgs,
    ) -> FloatTensor<Self> {
        crate::table_grad::cube::launch(grad, index, &args)
    }

    fn skinny_matmul(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        args: crate::skinny::SkinnyArgs,
    ) -> FloatTensor<Self> {
        crate::skinny::cube::launch(x, w, &args)
    }
}
