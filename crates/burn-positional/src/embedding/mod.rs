//! [`EmbeddingWithPosition`]: token ids in, position-aware vectors out.

use burn::config::Config;
use burn::module::{Content, Module, ModuleDisplay, Param};
use burn::nn::{Dropout, DropoutConfig, Initializer};
use burn::tensor::{Device, Int, Tensor};

use burn_positional_kernels::{
    Combine, FusedEmbeddingError, FusedEmbeddingOptions, InputStatus, fused_embedding,
};

use crate::limits::{device_fits, table_fits};
use crate::training::{read_record, record_detail};
use crate::{AbsolutePosition, AbsolutePositionConfig, PositionError, SinusoidalConfig};
use status::StatusLog;

mod ids;
mod reference;
pub(crate) mod status;

pub use burn_positional_kernels::Positions;
pub use ids::check_token_ids;

/// Configuration of [`EmbeddingWithPosition`].
#[derive(Config, Debug, PartialEq)]
pub struct EmbeddingWithPositionConfig {
    /// Rows in the token table; token ids must lie in `0..vocab_size`.
    pub vocab_size: usize,
    /// Width of each output vector.
    pub d_model: usize,
    /// The absolute position scheme. Sinusoidal with base 10 000 by default, as in the paper.
    #[config(default = "AbsolutePositionConfig::Sinusoidal(SinusoidalConfig::new())")]
    pub scheme: AbsolutePositionConfig,
    /// Add (default) or concatenate.
    #[config(default = "Combine::Add")]
    pub combine: Combine,
    /// Multiply token vectors by `sqrt(d_model)` before combining (Vaswani et al. 2017,
    /// section 3.4). Off by default.
    #[config(default = false)]
    pub scale_tokens: bool,
    /// A token id whose row of the token table receives no gradient, as PyTorch's
    /// `nn.Embedding(padding_idx=..)`: the row is zero at init, and the forward returns the
    /// row as stored (so a checkpoint's non-zero padding row comes out as it does in PyTorch).
    /// Its position vector is still added. None by default.
    #[config(default = "None")]
    pub padding_idx: Option<usize>,
    /// Dropout probability on the output, active only on autodiff devices. 0 by default.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Initializer of the token table: `N(0, 1)` by default, as burn's `Embedding`.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 1.0 }")]
    pub token_initializer: Initializer,
}

/// Token embedding and absolute position in one module.
///
/// Drop-in for burn's `Embedding` followed by `PositionalEncoding`, with no fixed length limit
/// for sinusoidal positions (a configurable ceiling bounds the device table), learned tables, concatenation, offsets and explicit positions, and
/// token ids checked on every backend (an unchecked gather on wgpu returns stray data).
///
/// # Bad input
///
/// [`forward`](Self::forward) never reads from the device, so it never stalls a GPU queue.
/// A token whose id is outside `0..vocab_size` (or whose position is outside a learned table)
/// comes out as NaN, so any loss computed from it is NaN, and its status is kept on the device:
/// [`check_inputs`](Self::check_inputs), run when you choose (every N steps, at the end of an
/// epoch, when a loss turns NaN), names the first bad token. [`try_forward`](Self::try_forward)
/// checks at once, for input from outside (serving, user text).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig};
///
/// let device = Device::flex();
/// let embed = EmbeddingWithPositionConfig::new(1000, 64)
///     .with_scheme(LearnedConfig::new(128).into())
///     .init(&device);
/// let ids = Tensor::<2, Int>::from_data([[1, 2, 3], [4, 5, 6]], &device);
/// assert_eq!(embed.forward(ids).dims(), [2, 3, 64]);
/// ```
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct EmbeddingWithPosition {
    /// `[vocab_size, d_token]`, trained and saved.
    pub tokens: Param<Tensor<2>>,
    /// The position scheme.
    pub position: AbsolutePosition,
    /// Output dropout.
    pub dropout: Dropout,
    /// Multiplier of the token vectors (1 or `sqrt(d_model)`).
    pub token_scale: f64,
    /// The padding token id, if any.
    pub padding_idx: Option<usize>,
    /// How the two parts combine.
    #[module(skip)]
    pub combine: Combine,
    /// Statuses of the forwards not yet checked (see [`check_inputs`](Self::check_inputs)).
    #[module(skip)]
    status: StatusLog,
}

impl ModuleDisplay for EmbeddingWithPosition {
    fn custom_content(&self, content: Content) -> Option<Content> {
        content
            .add("vocab_size", &self.vocab_size())
            .add("d_model", &self.d_model())
            .add("combine", &format!("{:?}", self.combine))
            .add("token_scale", &self.token_scale)
            .add("padding_idx", &format!("{:?}", self.padding_idx))
            .add("position", &self.position)
            .add("dropout", &self.dropout)
            .optional()
    }
}

impl EmbeddingWithPositionConfig {
    /// The widths of the token part and the position part.
    fn widths(&self) -> (usize, usize) {
        match self.combine {
            Combine::Add => (self.d_model, self.d_model),
            Combine::Concat {
                d_token,
                d_position,
            } => (d_token, d_position),
        }
    }

    /// Checks the config, naming the value, the limit and the fix.
    pub fn validate(&self) -> Result<(), PositionError> {
        let invalid = |field, value: String, rule, fix: &str| PositionError::InvalidConfig {
            field,
            value,
            rule,
            fix: fix.into(),
        };
        if self.vocab_size == 0 {
            return Err(invalid(
                "vocab_size",
                "0".into(),
                "the token table needs a row",
                "set it to the tokenizer's vocabulary size",
            ));
        }
        if self.d_model == 0 {
            return Err(invalid(
                "d_model",
                "0".into(),
                "vectors need a width",
                "choose a positive width, such as 512",
            ));
        }
        if let Combine::Concat {
            d_token,
            d_position,
        } = self.combine
        {
            let Some(sum) = d_token.checked_add(d_position) else {
                return Err(invalid(
                    "combine",
                    format!("Concat {{ d_token: {d_token}, d_position: {d_position} }}"),
                    "d_token + d_position overflows a usize: these widths cannot exist",
                    &format!("choose d_token + d_position = d_model = {}", self.d_model),
                ));
            };
            if sum != self.d_model {
                return Err(PositionError::ConcatSizeMismatch {
                    d_token,
                    d_position,
                    sum,
                    d_model: self.d_model,
                    suggest_token: self.d_model.saturating_sub(d_position),
                });
            }
            if d_token == 0 || d_position == 0 || self.scheme == AbsolutePositionConfig::None {
                return Err(invalid(
                    "combine",
                    format!("Concat {{ d_token: {d_token}, d_position: {d_position} }}"),
                    "concatenation needs a token part, a position part and a position scheme",
                    "give both parts a positive width and choose a scheme, or use Combine::Add",
                ));
            }
        }
        let (d_token, _) = self.widths();
        table_fits("vocab_size", self.vocab_size, d_token, || {
            "set it to the tokenizer's vocabulary size".into()
        })?;
        if let Some(idx) = self.padding_idx
            && idx >= self.vocab_size
        {
            return Err(invalid(
                "padding_idx",
                idx.to_string(),
                "the padding id must be a row of the token table",
                &format!("use an id below vocab_size = {}", self.vocab_size),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(invalid(
                "dropout",
                self.dropout.to_string(),
                "a dropout probability lies in [0, 1)",
                "use a value such as 0.1",
            ));
        }
        let (_, d_position) = self.widths();
        let what = match self.combine {
            Combine::Add => "d_model",
            Combine::Concat { .. } => "d_position",
        };
        self.scheme.validate(d_position).map_err(|err| match err {
            PositionError::OddDimension { value, .. } => PositionError::odd(what, value),
            other => other,
        })
    }

    /// Builds the module, or says why the config cannot be built.
    pub fn try_init(&self, device: &Device) -> Result<EmbeddingWithPosition, PositionError> {
        self.validate()?;
        let (d_token, d_position) = self.widths();
        device_fits(device, "vocab_size", self.vocab_size, d_token, |most| {
            format!(
                "this device holds at most {most} token rows of width {d_token} in one buffer: \
                 use a smaller vocabulary or width, or a device with larger buffers"
            )
        })?;
        let mut tokens = self
            .token_initializer
            .init([self.vocab_size, d_token], device);
        // Drawn here, before the position table, so a seed then `init` fixes both (see
        // `materialize`).
        let _ = tokens.base();
        if let Some(idx) = self.padding_idx {
            // The padding row starts at zero, as PyTorch's; it gets no gradient, so training
            // leaves it there.
            let zero_row = Tensor::zeros([1, d_token], device);
            let table = tokens
                .val()
                .slice_assign([idx..idx + 1, 0..d_token], zero_row)
                .detach();
            tokens = Param::from_tensor(table);
        }
        let position = self.scheme.try_init(d_position, device)?;
        Ok(EmbeddingWithPosition {
            tokens,
            position,
            dropout: DropoutConfig::new(self.dropout).init(),
            token_scale: if self.scale_tokens {
                (self.d_model as f64).sqrt()
            } else {
                1.0
            },
            padding_idx: self.padding_idx,
            combine: self.combine.clone(),
            status: StatusLog::default(),
        })
    }

    /// Builds the module.
    ///
    /// # Panics
    ///
    /// With the message of [`validate`](Self::validate) if the config is invalid: odd width for
    /// sinusoidal positions, concatenation sizes that do not add up to `d_model`, `padding_idx`
    /// outside the vocabulary, zero sizes, dropout outside `[0, 1)`.
    pub fn init(&self, device: &Device) -> EmbeddingWithPosition {
        self.try_init(device).unwrap_or_else(|err| panic!("{err}"))
    }
}

impl EmbeddingWithPosition {
    /// Embeds token ids at positions `0..seq`, with no device-to-host read.
    ///
    /// Bad tokens come out as NaN and are reported by [`check_inputs`](Self::check_inputs);
    /// see [Bad input](Self#bad-input).
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - output: `[batch, seq, d_model]`
    ///
    /// # Panics
    ///
    /// On what the host can tell without a read: a sequence longer than a learned table's
    /// `max_len` or the sinusoidal table's limit (see [`forward_at`](Self::forward_at)).
    pub fn forward(&self, ids: Tensor<2, Int>) -> Tensor<3> {
        self.forward_at(ids, Positions::Offset(0))
    }

    /// Embeds token ids at the given positions (an offset, or explicit position ids), with no
    /// device-to-host read.
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - `Positions::Explicit`: `[batch, seq]` (or `[1, seq]`, shared by the batch)
    /// - output: `[batch, seq, d_model]`
    ///
    /// # Panics
    ///
    /// With the message of [`try_forward_at`](Self::try_forward_at) on what the host can tell without
    /// a read: explicit positions of another shape, and an offset window `offset..offset + seq`
    /// that passes a learned table's `max_len` or the sinusoidal table's
    /// [`max_len`](crate::SinusoidalConfig::max_len). Explicit positions past a table are known
    /// only on the device: NaN rows, named by [`check_inputs`](Self::check_inputs).
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{EmbeddingWithPositionConfig, Positions};
    ///
    /// let device = Device::flex();
    /// let embed = EmbeddingWithPositionConfig::new(100, 16).init(&device);
    /// // Incremental decoding: the next token sits at position 7.
    /// let next = Tensor::<2, Int>::from_data([[42]], &device);
    /// assert_eq!(embed.forward_at(next, Positions::Offset(7)).dims(), [1, 1, 16]);
    /// // A left-padded batch (pad id 0): real tokens start at position 0.
    /// let ids = Tensor::<2, Int>::from_data([[5, 6, 7], [0, 5, 6]], &device);
    /// let positions = Tensor::<2, Int>::from_data([[0, 1, 2], [0, 0, 1]], &device);
    /// assert_eq!(embed.forward_at(ids, Positions::Explicit(positions)).dims(), [2, 3, 16]);
    /// // A bad id: NaN now, named by the check later.
    /// let bad = Tensor::<2, Int>::from_data([[1, 100]], &device);
    /// let out = embed.forward(bad);
    /// assert!(out.is_nan().any().into_scalar::<bool>());
    /// assert!(embed.check_inputs().unwrap_err().to_string().contains("token id 100"));
    /// ```
    pub fn forward_at(&self, ids: Tensor<2, Int>, positions: Positions) -> Tensor<3> {
        let (output, status) = self
            .forward_fused(ids, positions, None)
            .unwrap_or_else(|err| panic!("{err}"));
        if let Some(status) = status {
            self.status.push(status);
        }
        self.dropout.forward(output)
    }

    /// Reads back the statuses of the forwards since the last check and names the first bad
    /// token (its id or position, its place, the limit and the fix); clears them either way.
    /// One transfer per device and id dtype: call it when a stall is acceptable (every N
    /// steps, at the end of an epoch, when a loss turns NaN).
    ///
    /// # Which forwards a check covers
    ///
    /// Clones of a module share their pending statuses (a training step maps the model into a
    /// new value, and the step before must still be checked), kept apart per thread. A check
    /// covers the forwards made on the calling thread, through this module or any clone of
    /// it, and those made on threads that have since exited (burn-train's workers, once
    /// joined): it never consumes the report of a forward running on another live thread,
    /// which that thread's own check receives. A check that fails while reading (a device
    /// error) puts the statuses back, so a later check still reports them.
    ///
    /// The last 64 forwards are kept in full detail; older ones are folded (on the device, no
    /// read) into a count of bad tokens, reported as
    /// [`PositionError::BadInputInOlderForwards`].
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::EmbeddingWithPositionConfig;
    ///
    /// let device = Device::flex();
    /// let embed = EmbeddingWithPositionConfig::new(10, 8).init(&device);
    /// for _ in 0..3 {
    ///     embed.forward(Tensor::<2, Int>::from_data([[1, 2, 3]], &device));
    /// }
    /// assert!(embed.check_inputs().is_ok());
    /// ```
    pub fn check_inputs(&self) -> Result<(), PositionError> {
        self.status.check(|err| self.position.name_error(err))
    }

    /// How many forwards wait for [`check_inputs`](Self::check_inputs).
    pub fn unchecked_forwards(&self) -> usize {
        self.status.len()
    }

    /// Embeds token ids at positions `0..seq`, or says why the input was refused: an id outside
    /// `0..vocab_size`, or a sequence longer than a learned table's `max_len`. One read-back
    /// of the per-token status; see [`try_forward_at`](Self::try_forward_at).
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - output: `[batch, seq, d_model]`
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig};
    ///
    /// let device = Device::flex();
    /// let embed = EmbeddingWithPositionConfig::new(100, 16)
    ///     .with_scheme(LearnedConfig::new(4).into())
    ///     .init(&device);
    /// let ids = Tensor::<2, Int>::from_data([[1, 2, 3, 4, 5]], &device);
    /// let err = embed.try_forward(ids).unwrap_err();
    /// assert!(err.to_string().contains("max_len = 4"));
    /// ```
    pub fn try_forward(&self, ids: Tensor<2, Int>) -> Result<Tensor<3>, PositionError> {
        self.try_forward_at(ids, Positions::Offset(0))
    }

    /// Embeds token ids at the given positions, or says why the input was refused: an id
    /// outside `0..vocab_size`, a negative position, a position past a learned table or past
    /// the sinusoidal table's [`max_len`](crate::SinusoidalConfig::max_len), explicit positions
    /// whose shape is neither the ids' nor `[1, seq]`. Never panics on input, and refuses a far position
    /// before allocating anything for it.
    ///
    /// One fused pass computes the output and a per-token status, and one read-back of that status (`batch * seq` small
    /// ints) is the whole check; the error comes from that status. Explicit positions past a
    /// sinusoidal table grow it (one more read, of their maximum) and run again.
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - `Positions::Explicit`: `[batch, seq]` (or `[1, seq]`, shared by the batch)
    /// - output: `[batch, seq, d_model]`
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig, Positions};
    ///
    /// let device = Device::flex();
    /// let embed = EmbeddingWithPositionConfig::new(100, 16)
    ///     .with_scheme(LearnedConfig::new(4).into())
    ///     .init(&device);
    /// let ids = Tensor::<2, Int>::from_data([[1, 2, 3]], &device);
    /// let err = embed.try_forward_at(ids, Positions::Offset(2)).unwrap_err();
    /// assert!(err.to_string().contains("max_len = 4"));
    /// ```
    pub fn try_forward_at(
        &self,
        ids: Tensor<2, Int>,
        positions: Positions,
    ) -> Result<Tensor<3>, PositionError> {
        let (output, status) = self.forward_fused(ids.clone(), positions.clone(), None)?;
        let Some(status) = status else {
            return Ok(self.dropout.forward(output));
        };
        let err = match status.check() {
            Ok(()) => return Ok(self.dropout.forward(output)),
            Err(err) => err,
        };
        // Explicit positions past the table of a scheme that grows (sinusoidal): grow it to
        // the largest position (under its limit, checked before anything is allocated), then
        // run again.
        if let (FusedEmbeddingError::PositionPastTable { .. }, Positions::Explicit(p)) =
            (&err, &positions)
        {
            let max = p.clone().max().into_scalar::<i64>();
            if let Some(rows) = self.position.grow_to(max)? {
                let (output, status) = self.forward_fused(ids, positions, Some(rows))?;
                if let Some(status) = status {
                    status
                        .check()
                        .map_err(|err| self.position.name_error(err))?;
                }
                return Ok(self.dropout.forward(output));
            }
        }
        Err(self.position.name_error(err))
    }

    /// The fused pass and its status (`None` for an empty batch), with no read. Explicit
    /// positions see `explicit_rows` rows of a table that grows (`None`: what a forward that
    /// does not read them sees, the same whatever came before).
    fn forward_fused(
        &self,
        ids: Tensor<2, Int>,
        positions: Positions,
        explicit_rows: Option<usize>,
    ) -> Result<(Tensor<3>, Option<InputStatus>), PositionError> {
        let [batch, seq] = ids.dims();
        if batch * seq == 0 {
            return Ok((self.empty_output(batch, seq), None));
        }
        let positions = positions.on_sequence(seq)?;
        if let Positions::Offset(offset) = &positions {
            self.position.check_window(*offset, seq)?;
        }
        self.check_dtypes("this module")?;
        let tokens = self.tokens.val();
        let table = self
            .position
            .fused_table(&positions, seq, tokens.dtype(), explicit_rows);
        let options = FusedEmbeddingOptions {
            scale: self.token_scale as f32,
            padding_idx: self.padding_idx,
            combine: self.combine,
        };
        let (output, status) = fused_embedding(tokens, ids, positions, table, &options)
            .map_err(|err| self.position.name_error(err))?;
        Ok((output, Some(status)))
    }

    /// The output of an empty batch: no values, in the tables' dtype, on their device.
    pub(super) fn empty_output(&self, batch: usize, seq: usize) -> Tensor<3> {
        let tokens = self.tokens.val();
        Tensor::zeros(
            [batch, seq, self.d_model()],
            (&tokens.device(), tokens.dtype()),
        )
    }

    /// Rows in the token table.
    pub fn vocab_size(&self) -> usize {
        self.tokens.shape().dims::<2>()[0]
    }

    /// Width of the output vectors.
    pub fn d_model(&self) -> usize {
        match self.combine {
            Combine::Add => self.tokens.shape().dims::<2>()[1],
            Combine::Concat {
                d_token,
                d_position,
            } => d_token + d_position,
        }
    }

    /// Loads a record saved with `save_file` (`.bpk`), or says why it does not fit: unreadable
    /// bytes, or tensors whose shapes differ from this module's (built from another config).
    pub fn try_load_file(self, path: impl AsRef<std::path::Path>) -> Result<Self, PositionError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let record = read_record(path).map_err(|err| PositionError::RecordUnreadable {
            path: shown.clone(),
            detail: record_detail(err),
        })?;
        let loaded = self
            .try_load_record(record)
            .map_err(|err| PositionError::RecordMismatch {
                path: shown.clone(),
                detail: record_detail(err),
            })?;
        loaded.check_dtypes(&format!("the record {shown}"))?;
        Ok(loaded)
    }

    /// Refuses a token table and a learned position table of two float dtypes (a record saved
    /// that way, or a module half cast), which no forward can combine. No read: dtypes are
    /// known on the host.
    pub(crate) fn check_dtypes(&self, origin: &str) -> Result<(), PositionError> {
        let tokens = self.tokens.val().dtype();
        let Some(table) = self
            .position
            .trained_dtype()
            .filter(|&table| table != tokens)
        else {
            return Ok(());
        };
        Err(PositionError::TableDTypeMismatch {
            origin: origin.to_string(),
            tokens: format!("{tokens:?}"),
            table: format!("{table:?}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LearnedConfig;

    #[test]
    fn display_names_the_sizes_and_the_scheme() {
        let device = Device::flex();
        let d = 16;
        // The default sinusoidal limit: `GROWN_TABLE_VALUES / d` rows.
        let sinusoid_limit = crate::limits::GROWN_TABLE_VALUES / d;
        let cases: [(AbsolutePositionConfig, String, usize); 3] = [
            (AbsolutePositionConfig::None, "None".into(), 1000 * d),
            (
                SinusoidalConfig::new().with_cache_len(64).into(),
                format!(
                    "SinusoidalPosition {{d_position: 16, base: 10000, cache_len: 64, max_len: \
                     {sinusoid_limit}}}"
                ),
                1000 * d,
            ),
            (
                LearnedConfig::new(128).into(),
                format!(
                    "LearnedPosition {{max_len: 128, d_position: 16, params: {}}}",
                    128 * d
                ),
                1000 * d + 128 * d,
            ),
        ];
        for (scheme, position, params) in cases {
            let embed = EmbeddingWithPositionConfig::new(1000, d)
                .with_scheme(scheme)
                .with_padding_idx(Some(0))
                .with_scale_tokens(true)
                .init(&device);
            assert_eq!(embed.position.to_string(), position);
            let want = format!(
                "EmbeddingWithPosition {{\n  vocab_size: 1000\n  d_model: 16\n  combine: Add\n  \
                 token_scale: 4\n  padding_idx: Some(0)\n  position: {position}\n  dropout: \
                 Dropout {{prob: 0}}\n  params: {params}\n}}"
            );
            assert_eq!(embed.to_string(), want);
        }
        let concat = EmbeddingWithPositionConfig::new(10, 8)
            .with_combine(Combine::Concat {
                d_token: 6,
                d_position: 2,
            })
            .init(&device);
        assert!(
            concat
                .to_string()
                .contains("combine: Concat { d_token: 6, d_position: 2 }"),
            "{concat}"
        );
    }
}
