//! Multi-threaded Rust implementation for the CPU backends (flex and ndarray): the extension's
//! dispatch to each op's host code, in its folder (`embedding/`, `rope/`, `attention/`,
//! `table_grad/`, `skinny/`; what they share is `crate::host_io`).

#[cfg(feature = "flex")]
use burn::backend::Flex;
use burn::backend::tensor::{BoolTensor, FloatTensor, IntTensor};

use crate::PositionalKernels;
use crate::attention::TileArgs;
use crate::embedding::options::KernelArgs;
use crate::rope::RopeArgs;

/// The extension on a [`HostTensors`] backend: the op goes to [`run`].
macro_rules! host_extension {
    ($backend:ty) => {
        impl PositionalKernels for $backend {
            fn fused_embedding(
                tokens: FloatTensor<Self>,
                ids: IntTensor<Self>,
                positions: IntTensor<Self>,
                table: FloatTensor<Self>,
                args: KernelArgs,
            ) -> (FloatTensor<Self>, IntTensor<Self>) {
                crate::embedding::host::run::<Self>(&tokens, &ids, &positions, &table, &args)
            }

            fn fused_rope(
                x: FloatTensor<Self>,
                cos: FloatTensor<Self>,
                sin: FloatTensor<Self>,
                args: RopeArgs,
            ) -> FloatTensor<Self> {
                crate::rope::host::run::<Self>(&x, &cos, &sin, &args)
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
                crate::attention::host::run::<Self>(
                    &q, &k, &v, &bias, &padding, &positions, &segments, &args,
                )
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
                crate::attention::host_backward::run::<Self>(
                    &q,
                    &k,
                    &v,
                    &bias,
                    &padding,
                    &positions,
                    &segments,
                    &output,
                    &lse,
                    &grad,
                    &args.tile,
                    args.wanted,
                )
            }

            fn table_grad(
                grad: FloatTensor<Self>,
                index: IntTensor<Self>,
                args: crate::table_grad::TableGradArgs,
            ) -> FloatTensor<Self> {
                crate::table_grad::host::run::<Self>(&grad, &index, &args)
            }
        }
    };
}

#[cfg(feature = "flex")]
host_extension!(Flex);

#[cfg(feature = "ndarray")]
#[allow(deprecated)]
mod ndarray_extension {
    use super::*;
    host_extension!(burn::backend::NdArray);
}
