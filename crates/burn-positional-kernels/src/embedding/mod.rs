//! The fused embedding: the user-facing calls, on `Tensor<D>` (no backend type parameter in
//! burn 0.22), whose `Device` selects the implementation through `Dispatch`.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | the calls, their checks and errors |
//! | `options.rs` | the options, the kernels' arguments and their shape checks |
//! | `cube.rs` | the CubeCL kernel and its launch (wgpu, CUDA), its CUDA compile check's cases |
//! | `host.rs` | the host twin on flex and ndarray |
//! | `reference.rs` | the slow reference: plain tensor ops, on any backend |

use std::cell::Cell;

use burn::backend::Dispatch;
use burn::tensor::{DType, Device, Int, Tensor};

use crate::{Grid, PositionalKernels};
use options::{
    FusedEmbeddingOptions, KernelArgs, PositionMode, STATUS_BAD_ID, STATUS_BAD_POSITION,
};

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod cube;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub(crate) mod host;
pub(crate) mod options;
pub(crate) mod reference;

/// Where each token sits: the one positions type of the layer and the kernels.
// Built per call and moved once, like burn's own tensor arguments.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Positions {
    /// Positions `offset..offset + seq` for every row of the batch. `Offset(0)` is the default;
    /// `Offset(k)` serves incremental decoding: the forward at offset `k` equals rows `k..` of
    /// the forward of the whole sequence. Computed in the kernel: no position tensor is built.
    Offset(usize),
    /// One position per token, `[batch, seq]`, for example for left-padded batches; or one row
    /// `[1, seq]` shared by every row of the batch.
    Explicit(Tensor<2, Int>),
    /// The tokens of a grid (image patches: rows, columns; video: frames, rows, columns), in
    /// row-major order: token `i` sits at [`Grid::coordinates`]' row `i`. `seq` must equal
    /// `grid.len()`. Computed from the sizes: no position tensor is built per call. A 1-axis
    /// grid is `Offset(0)`.
    Grid(Grid),
    /// Explicit positions on several axes, `[batch or 1, seq, axes]` (Qwen2-VL's M-RoPE ids,
    /// transposed from its `[3, batch, seq]`; a patch order of a family's own). One axis is
    /// `Explicit`.
    Axes(Tensor<3, Int>),
}

impl Positions {
    /// How many axes a position has: 1 for `Offset` and `Explicit`, the grid's or the tensor's
    /// last dimension otherwise.
    pub fn axes(&self) -> usize {
        match self {
            Self::Offset(_) | Self::Explicit(_) => 1,
            Self::Grid(grid) => grid.axes(),
            Self::Axes(p) => p.dims()[2],
        }
    }

    /// These positions as one-axis positions for `seq` tokens, where they have one axis (a
    /// 1-axis grid of `seq` tokens is `Offset(0)`; `[n, seq, 1]` axes are `Explicit`), or why
    /// not: the grid holds another number of tokens, or there is more than one axis.
    pub fn on_sequence(self, seq: usize) -> Result<Self, FusedEmbeddingError> {
        match self {
            Self::Grid(grid) if grid.len() != seq => Err(FusedEmbeddingError::GridLength {
                grid: grid.to_string(),
                tokens: grid.len(),
                seq,
            }),
            Self::Grid(grid) if grid.axes() == 1 => Ok(Self::Offset(0)),
            Self::Axes(p) if p.dims()[2] == 1 => {
                let [n, s, _] = p.dims();
                Ok(Self::Explicit(p.reshape([n, s])))
            }
            Self::Grid(_) | Self::Axes(_) => {
                Err(FusedEmbeddingError::PositionsOnGrid { axes: self.axes() })
            }
            one_axis => Ok(one_axis),
        }
    }
}

impl Default for Positions {
    fn default() -> Self {
        Self::Offset(0)
    }
}

/// Bad input, found by the op's status output or, where no read is needed, before the launch.
///
/// A bad token's place is `at: [batch, index]`: its batch row and its index along `seq`.
/// `position` is always a position (a row of the position table), never an index.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FusedEmbeddingError {
    /// A token id outside `0..vocab_size`.
    #[error(
        "token id {id} at [batch {batch}, index {index}] is outside the vocabulary \
         0..{vocab_size}; fix the tokenizer output or enlarge vocab_size",
        batch = .at[0],
        index = .at[1]
    )]
    TokenIdOutOfRange {
        /// The id.
        id: i64,
        /// Its place: `[batch, index along seq]`.
        at: [usize; 2],
        /// Rows of the token table.
        vocab_size: usize,
    },
    /// A position at or past the end of the position table.
    #[error(
        "position {position} at [batch {batch}, index {index}] is past the position table \
         (max_len = {max_len}): positions must be in 0..{max_len}; shorten the input or enlarge \
         max_len",
        batch = .at[0],
        index = .at[1]
    )]
    PositionPastTable {
        /// The position.
        position: i64,
        /// Its place: `[batch, index along seq]`.
        at: [usize; 2],
        /// Rows of the position table.
        max_len: usize,
    },
    /// A negative explicit position.
    #[error(
        "position {position} at [batch {batch}, index {index}] is negative; positions start \
         at 0",
        batch = .at[0],
        index = .at[1]
    )]
    NegativePosition {
        /// The position.
        position: i64,
        /// Its place: `[batch, index along seq]`.
        at: [usize; 2],
    },
    /// An offset whose positions do not fit the kernels' 32-bit position arithmetic.
    #[error(
        "positions {offset}..{offset}+{seq} pass {limit}, the largest position the kernels \
         compute with; use a smaller offset"
    )]
    OffsetTooLarge {
        /// The offset.
        offset: usize,
        /// Tokens per row.
        seq: usize,
        /// The largest position (`i32::MAX`).
        limit: i64,
    },
    /// A grid whose number of tokens is not the number of tokens given.
    #[error(
        "the grid {grid} holds {tokens} tokens but {seq} were given; give the grid of the \
         patches actually embedded (rows = height / patch size, columns = width / patch size), \
         or slice off the tokens that are not on it (a class token) before"
    )]
    GridLength {
        /// The grid, `rows x columns`.
        grid: String,
        /// Its number of tokens.
        tokens: usize,
        /// The tokens given.
        seq: usize,
    },
    /// Positions on several axes given to a one-axis table.
    #[error(
        "positions on {axes} axes have no row in a one-axis position table; embed patches with \
         a grid scheme (`AbsolutePosition::on_grid`: MAE's 2D sin-cos, a learned grid resized), \
         or give one position per token"
    )]
    PositionsOnGrid {
        /// The axes given.
        axes: usize,
    },
    /// Explicit positions whose shape is neither the ids' nor `[1, seq]`.
    #[error(
        "explicit positions are {got:?} but the ids are {expected:?}; give one position per \
         token, or one row [1, seq] shared by the batch"
    )]
    PositionsShape {
        /// The ids' shape.
        expected: [usize; 2],
        /// The positions' shape.
        got: [usize; 2],
    },
}

/// The per-token status of one fused call, kept on the device until someone asks.
///
/// `codes[b, s]` is 0 for a good token, [`STATUS_BAD_ID`] | [`STATUS_BAD_POSITION`] for a bad
/// one. Holding an `InputStatus` keeps the ids (and explicit positions) alive, so that a later
/// [`check`](Self::check) can name the offending value.
#[derive(Clone, Debug)]
pub struct InputStatus {
    codes: Tensor<2, Int>,
    ids: Tensor<2, Int>,
    positions: Positions,
    vocab_size: usize,
    /// Rows of the position table, if there is one.
    max_len: Option<usize>,
}

impl InputStatus {
    /// The codes, `[batch, seq]`, in the ids' dtype, on the ids' device.
    pub fn codes(&self) -> &Tensor<2, Int> {
        &self.codes
    }

    /// Reads the codes back (one transfer) and names the first bad token. A second read, of
    /// the ids or the positions, happens on the error path only.
    pub fn check(&self) -> Result<(), FusedEmbeddingError> {
        Self::check_all(std::slice::from_ref(self))
    }

    /// Checks many statuses with one read per device and ids' dtype: the codes are concatenated
    /// on their device and read back together. Reports the first bad token of the first bad status, in
    /// the order given.
    pub fn check_all(statuses: &[InputStatus]) -> Result<(), FusedEmbeddingError> {
        // One read per (device, dtype): codes come in their ids' dtype (i32 or i64), and one
        // concatenation takes one dtype.
        let mut groups: Vec<(Device, DType)> = Vec::new();
        for status in statuses {
            let group = (status.codes.device(), status.codes.dtype());
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
        // (index in `statuses`, flat index of the first bad token, its code).
        let mut first: Option<(usize, usize, i64)> = None;
        for group in groups {
            let mine: Vec<usize> = (0..statuses.len())
                .filter(|&i| (statuses[i].codes.device(), statuses[i].codes.dtype()) == group)
                .collect();
            let flat: Vec<Tensor<1, Int>> = mine
                .iter()
                .map(|&i| statuses[i].codes.clone().flatten(0, 1))
                .collect();
            let codes = Tensor::cat(flat, 0).into_data();
            let mut codes = codes.iter::<i64>();
            for &i in &mine {
                let [batch, seq] = statuses[i].codes.dims();
                let bad = codes
                    .by_ref()
                    .take(batch * seq)
                    .enumerate()
                    .find(|&(_, c)| c != 0);
                if let Some((index, code)) = bad {
                    if first.is_none_or(|(j, _, _)| i < j) {
                        first = Some((i, index, code));
                    }
                    break;
                }
            }
        }
        match first {
            None => Ok(()),
            Some((i, index, code)) => Err(statuses[i].name(index, code)),
        }
    }

    /// The error for the token at flat `index` with status `code` (reads its value back).
    fn name(&self, index: usize, code: i64) -> FusedEmbeddingError {
        let [_, seq] = self.codes.dims();
        let at = [index / seq, index % seq];
        let value_at = |t: &Tensor<2, Int>| {
            t.clone()
                .flatten::<1>(0, 1)
                .slice(index..index + 1)
                .into_data()
                .iter::<i64>()
                .next()
                .expect("one value")
        };
        if code & STATUS_BAD_ID != 0 {
            return FusedEmbeddingError::TokenIdOutOfRange {
                id: value_at(&self.ids),
                at,
                vocab_size: self.vocab_size,
            };
        }
        debug_assert!(code & STATUS_BAD_POSITION != 0);
        let position = match &self.positions {
            Positions::Explicit(p) => {
                let [rows, _] = p.dims();
                value_at(&if rows == 1 {
                    p.clone().expand([self.codes.dims()[0], seq])
                } else {
                    p.clone()
                })
            }
            Positions::Offset(offset) => (*offset + at[1]) as i64,
            // `embed_with` kept one-axis positions only (`Positions::on_sequence`).
            Positions::Grid(_) | Positions::Axes(_) => unreachable!("positions on a grid"),
        };
        if position < 0 {
            return FusedEmbeddingError::NegativePosition { position, at };
        }
        FusedEmbeddingError::PositionPastTable {
            position,
            at,
            max_len: self.max_len.unwrap_or(0),
        }
    }
}

thread_local! {
    static FUSED_CALLS: Cell<u64> = const { Cell::new(0) };
}

/// How many times the calling thread has launched the fused extension (through
/// [`fused_embedding`] with a position table). A diagnostic: tests use it to prove that a layer
/// took the fused path rather than a fallback (per thread, so tests running beside each other
/// do not count each other's calls). Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn fused_calls() -> u64 {
    FUSED_CALLS.with(Cell::get)
}

/// The arguments every entry point checks on the host, without reading anything back.
fn kernel_args(
    ids: &Tensor<2, Int>,
    positions: &Positions,
    has_table: bool,
    options: &FusedEmbeddingOptions,
) -> Result<KernelArgs, FusedEmbeddingError> {
    let [batch, seq] = ids.dims();
    let mode = match positions {
        Positions::Offset(offset) => {
            let limit = i32::MAX as i64;
            // Without a table positions are never read: any offset will do.
            if has_table && (*offset as u128 + seq as u128) > limit as u128 + 1 {
                return Err(FusedEmbeddingError::OffsetTooLarge {
                    offset: *offset,
                    seq,
                    limit,
                });
            }
            PositionMode::Sequential {
                offset: *offset as i64,
            }
        }
        Positions::Explicit(p) => {
            let got = p.dims();
            if got != [batch, seq] && got != [1, seq] {
                return Err(FusedEmbeddingError::PositionsShape {
                    expected: [batch, seq],
                    got,
                });
            }
            PositionMode::Explicit
        }
        Positions::Grid(_) | Positions::Axes(_) => unreachable!("positions on a grid"),
    };
    Ok(KernelArgs {
        options: options.clone(),
        mode,
    })
}

/// The positions argument of the extension: the explicit positions, or (unread) the ids.
fn positions_arg(ids: &Tensor<2, Int>, positions: &Positions) -> Tensor<2, Int> {
    match positions {
        Positions::Explicit(p) => p.clone(),
        Positions::Offset(_) => ids.clone(),
        Positions::Grid(_) | Positions::Axes(_) => unreachable!("positions on a grid"),
    }
}

/// One fused pass: `tokens[ids] * scale` combined with `table[positions]` (or the token rows
/// alone without a table), and the per-token status, with no device-to-host read. Bad tokens
/// are NaN in the output (the token part for a bad id, the position part for a bad position)
/// and flagged in the status; check it now, later or never.
///
/// Without a table the op is made of burn tensor ops (the reference body), still read-free.
///
/// # Shapes
///
/// - tokens: `[vocab_size, d_token]`
/// - ids: `[batch, seq]`, i32 or i64
/// - `Positions::Explicit`: `[batch, seq]` or `[1, seq]`
/// - table: `[max_len, d_position]`, the tokens' dtype
/// - output: `[batch, seq, d_out]`
///
/// # Errors
///
/// What the host can tell without a read: explicit positions of another shape, an offset past
/// `i32::MAX`.
///
/// # Panics
///
/// On inconsistent widths or dtypes (programming errors; see the extension's docs).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::{FusedEmbeddingOptions, Positions, fused_embedding};
///
/// let device = Device::flex();
/// let tokens = Tensor::<2>::ones([10, 4], &device);
/// let table = Tensor::<2>::zeros([8, 4], &device);
/// let ids = Tensor::<2, Int>::from_data([[1, 2, 3]], &device);
/// let (out, status) = fused_embedding(
///     tokens, ids, Positions::Offset(0), Some(table), &FusedEmbeddingOptions::default(),
/// ).unwrap();
/// assert_eq!(out.dims(), [1, 3, 4]);
/// assert!(status.check().is_ok());
/// ```
pub fn fused_embedding(
    tokens: Tensor<2>,
    ids: Tensor<2, Int>,
    positions: Positions,
    table: Option<Tensor<2>>,
    options: &FusedEmbeddingOptions,
) -> Result<(Tensor<3>, InputStatus), FusedEmbeddingError> {
    embed_with(
        tokens,
        ids,
        positions,
        table,
        options,
        |tokens, ids, positions, table, args| {
            let table = match table {
                Some(table) if fused_covers(&tokens.device()) => table,
                table => return run_reference(tokens, ids, positions, table, &args),
            };
            FUSED_CALLS.with(|calls| calls.set(calls.get() + 1));
            let (output, codes) = <Dispatch as PositionalKernels>::fused_embedding(
                tokens.into_dispatch(),
                ids.into_dispatch(),
                positions.into_dispatch(),
                table.into_dispatch(),
                args,
            );
            (Tensor::from_dispatch(output), Tensor::from_dispatch(codes))
        },
    )
}

/// Whether [`fused_embedding`] runs the fused implementation on `device`: this crate was built
/// with the device's backend feature (`flex`, `ndarray`, `wgpu` or `cuda`; every CubeCL runtime
/// counts as `wgpu`/`cuda`'s) and, for an autodiff device, with `autodiff`. On any other device
/// (a backend the features leave out, or one burn adds that this crate does not know)
/// [`fused_embedding`] takes the reference path instead: the same outputs, status and errors
/// from plain burn tensor ops, never a panic.
///
/// ```
/// use burn::prelude::*;
///
/// assert!(burn_positional_kernels::fused_covers(&Device::flex())); // the default features
/// ```
pub fn fused_covers(device: &Device) -> bool {
    if device.is_autodiff() && !cfg!(feature = "autodiff") {
        return false;
    }
    #[allow(unreachable_patterns)]
    match device.as_dispatch().clone().inner() {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        burn::backend::DispatchDevice::Cube(_) => true,
        #[cfg(feature = "flex")]
        burn::backend::DispatchDevice::Flex(_) => true,
        #[cfg(feature = "ndarray")]
        burn::backend::DispatchDevice::NdArray(_) => true,
        _ => false,
    }
}

/// Whether `device` computes on the host CPU (flex, ndarray; autodiff on either), where the
/// kernels run as host passes and memory is the machine's own. `false` for the CubeCL backends
/// and for backends this crate was built without.
///
/// ```
/// use burn::prelude::*;
///
/// assert!(burn_positional_kernels::computes_on_host(&Device::flex())); // the default features
/// ```
pub fn computes_on_host(device: &Device) -> bool {
    #[allow(unreachable_patterns)]
    match device.as_dispatch().clone().inner() {
        #[cfg(feature = "flex")]
        burn::backend::DispatchDevice::Flex(_) => true,
        #[cfg(feature = "ndarray")]
        burn::backend::DispatchDevice::NdArray(_) => true,
        _ => false,
    }
}

/// The largest buffer, in bytes, that `device` allocates in one piece, where its backend states
/// one: the CubeCL backends (wgpu: the adapter's storage-buffer binding limit, 256 MiB by
/// default on many adapters; CUDA). `None` on the CPU backends, which are bounded by host
/// memory alone, and on backends this crate was built without.
///
/// ```
/// use burn::prelude::*;
///
/// assert_eq!(burn_positional_kernels::max_buffer_bytes(&Device::flex()), None);
/// ```
pub fn max_buffer_bytes(device: &Device) -> Option<u64> {
    #[allow(unreachable_patterns)]
    match device.as_dispatch().clone().inner() {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        burn::backend::DispatchDevice::Cube(device) => {
            Some(device.client().properties().memory.max_page_size)
        }
        _ => None,
    }
}

/// What both entry points share: the host checks, the positions argument, and the status that
/// keeps what a later check needs to name a bad token.
fn embed_with(
    tokens: Tensor<2>,
    ids: Tensor<2, Int>,
    positions: Positions,
    table: Option<Tensor<2>>,
    options: &FusedEmbeddingOptions,
    op: impl FnOnce(
        Tensor<2>,
        Tensor<2, Int>,
        Tensor<2, Int>,
        Option<Tensor<2>>,
        KernelArgs,
    ) -> (Tensor<3>, Tensor<2, Int>),
) -> Result<(Tensor<3>, InputStatus), FusedEmbeddingError> {
    let positions = positions.on_sequence(ids.dims()[1])?;
    let args = kernel_args(&ids, &positions, table.is_some(), options)?;
    let [vocab_size, _] = tokens.dims();
    let max_len = table.as_ref().map(|t| t.dims()[0]);
    let positions_tensor = positions_arg(&ids, &positions);
    let (output, codes) = op(tokens, ids.clone(), positions_tensor, table, args);
    let status = InputStatus {
        codes,
        ids,
        positions,
        vocab_size,
        max_len,
    };
    Ok((output, status))
}

/// [`fused_embedding`], then one read-back of the status: `Err` names the first bad token.
///
/// # Shapes
///
/// As [`fused_embedding`].
pub fn try_fused_embedding(
    tokens: Tensor<2>,
    ids: Tensor<2, Int>,
    positions: Positions,
    table: Option<Tensor<2>>,
    options: &FusedEmbeddingOptions,
) -> Result<Tensor<3>, FusedEmbeddingError> {
    let (output, status) = fused_embedding(tokens, ids, positions, table, options)?;
    status.check()?;
    Ok(output)
}

/// The reference twin of [`fused_embedding`]: the extension's default body (plain burn tensor
/// ops, several kernels) run on the tensors' device, whatever the backend. Same outputs, same
/// status, same errors; the oracle the fused implementations are tested against.
///
/// # Shapes
///
/// As [`fused_embedding`].
pub fn reference_embedding(
    tokens: Tensor<2>,
    ids: Tensor<2, Int>,
    positions: Positions,
    table: Option<Tensor<2>>,
    options: &FusedEmbeddingOptions,
) -> Result<(Tensor<3>, InputStatus), FusedEmbeddingError> {
    embed_with(
        tokens,
        ids,
        positions,
        table,
        options,
        |tokens, ids, positions, table, args| run_reference(tokens, ids, positions, table, &args),
    )
}

fn run_reference(
    tokens: Tensor<2>,
    ids: Tensor<2, Int>,
    positions: Tensor<2, Int>,
    table: Option<Tensor<2>>,
    args: &KernelArgs,
) -> (Tensor<3>, Tensor<2, Int>) {
    let (output, codes) = reference::fused_embedding::<Dispatch>(
        tokens.into_dispatch(),
        ids.into_dispatch(),
        positions.into_dispatch(),
        table.map(Tensor::into_dispatch),
        args,
    );
    (Tensor::from_dispatch(output), Tensor::from_dispatch(codes))
}
