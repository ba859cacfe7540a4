//! Where each flash kernel's walk changes with the lengths ([`flash_boundaries`]), read from the
//! plans themselves (`cube/boundaries.rs`): the lengths a test, and the GPU kit's check, take
//! on both sides of, so that a new plan gets its cases without anyone remembering to add them.

use burn::tensor::{DType, Device};

use super::variant::FlashVariant;

/// The lengths the long cases take whatever the plan: a power of two and one past it, twice,
/// and a few thousand (the lengths the tensor-core forward first failed at, issue 61).
pub(crate) const LONG: [usize; 5] = [1024, 1025, 2048, 2049, 3000];

/// Where one variant's plan changes how its kernels walk a call, on one device: every length
/// on both sides of each block the plan chose (`n - 1`, `n`, `n + 1` and one past two blocks),
/// with 1,024, 1,025, 2,048, 2,049 and 3,000 among the keys. Sorted, without repeats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlashBoundaries {
    /// Query rows: one (a decoding step) and the rows of a cube (forward and backward) and of a
    /// unit.
    pub queries: Vec<usize>,
    /// Keys: the stages and key blocks of the forward and of the backward, the key splits' and
    /// the long lengths.
    pub keys: Vec<usize>,
    /// On a CPU adapter running the tensor-core products emulated: the most keys one query row
    /// may walk before the forward leaves the launch to the shared kernel (llvmpipe's loop
    /// limit, llvmpipe's 65,535 iterations); `None` elsewhere.
    pub loop_limit_keys: Option<usize>,
    /// Whether the variant's own kernels run these heads on this device (a plan fits its
    /// shared memory); where not, its fallback's boundaries are what the lists hold.
    pub fits: bool,
}

/// Where `variant`'s kernels change how they walk an attention call on `device` (the plans it
/// would choose there for `n_heads` query heads over `n_kv_heads`, heads of `d_head` and `d_v`,
/// inputs of `dtype`): the lengths to test on both sides of. `Auto` is resolved as a call would
/// resolve it. Devices that run no CubeCL kernel (flex, ndarray) answer the long lengths alone.
/// For tests and the GPU kit's check, not for models.
///
/// # Panics
///
/// When `n_kv_heads` is 0 or does not divide `n_heads`.
///
/// ```
/// use burn::prelude::*;
/// use burn::tensor::DType;
/// use burn_positional_kernels::{FlashVariant, flash_boundaries};
///
/// let b = flash_boundaries(&Device::flex(), FlashVariant::Auto, DType::F32, 4, 2, 64, 64);
/// assert!(b.keys.contains(&1025) && b.queries.contains(&1));
/// ```
pub fn flash_boundaries(
    device: &Device,
    variant: FlashVariant,
    dtype: DType,
    n_heads: usize,
    n_kv_heads: usize,
    d_head: usize,
    d_v: usize,
) -> FlashBoundaries {
    assert!(
        n_kv_heads > 0 && n_heads % n_kv_heads == 0,
        "flash_boundaries: n_kv_heads = {n_kv_heads} must divide n_heads = {n_heads}"
    );
    let group = n_heads / n_kv_heads;
    #[allow(unreachable_patterns)]
    match device.as_dispatch().clone().inner() {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        burn::backend::DispatchDevice::Cube(device) => {
            let client = device.client();
            let properties = client.properties();
            let resolved = super::variant::pick(variant, &client, dtype);
            let mma = super::cube::mma_emulation(&properties, dtype);
            super::cube::boundaries::boundaries(
                resolved,
                group,
                d_head,
                d_v,
                dtype.size(),
                properties,
                mma,
                super::variant::requested_key_splits(),
            )
        }
        _ => {
            let _ = (variant, dtype, group, d_head, d_v);
            FlashBoundaries {
                queries: vec![1],
                keys: LONG.to_vec(),
                loop_limit_keys: None,
                fits: false,
            }
        }
    }
}
