//! Rotary position embedding, from [RoFormer](https://arxiv.org/abs/2104.09864) (Su et al.
//! 2021): queries and keys are rotated pair by pair by an angle proportional to their position,
//! so `q_i · k_j` depends on `i - j` only.
//!
//! ```text
//! angle(p, j) = p * base^(-2j / rotary_dims)        for pair j in 0..rotary_dims / 2
//! (a, b) -> (a cos - b sin, a sin + b cos)
//! ```
//!
//! Two checkpoint layouts pair the dimensions differently; pick the one your weights use:
//!
//! | [`RopeLayout`] | pairs | used by |
//! | --- | --- | --- |
//! | `Interleaved` | `(x[2j], x[2j+1])` | GPT-J, Meta's LLaMA code, burn's `RotaryEncoding` |
//! | `HalfSplit` | `(x[j], x[j + rotary_dims/2])` | GPT-NeoX, Hugging Face's `rotate_half` |
//!
//! Partial rotation (`rotary_dims < d_head`, as in GPT-J and GPT-NeoX) rotates the first
//! `rotary_dims` dimensions of each head and passes the rest through.
//!
//! # Arithmetic, caches and length
//!
//! The angles of positions `0..cache_len` are computed on the host at init and uploaded as
//! `cos` and `sin` tables (f32). How they are rounded is [`RopeArithmetic`]'s choice:
//!
//! - `Exact` (the default): in f64, rounded once to f32, so far positions stay accurate.
//! - `Transformers` (what [`RopeConfig::from_hf_config`] picks): rounded to f32 where transformers
//!   rounds, `inv_freq` and the product `position * inv_freq` included. That product carries
//!   the f32 rounding of a large angle (up to half an ulp of `position * inv_freq`, 2^-9 rad at
//!   position 2^16), as the checkpoint was trained; positions past 2^24 are rounded to f32
//!   before the product, as torch's `position_ids.float()` does.
//!
//! Any `usize` position is accepted (there is no length limit). Past `cache_len` the angles
//! are computed on demand and cached, not computed per call: a table grown by doubling when a
//! sequence walks past it (so decoding token by token computes each row once), shared by
//! clones, for one device at a time, up to 2^26 values (256 MiB in f32, both tables); a
//! jump far past it, or a table that would pass that ceiling, is computed for the call's window
//! alone.
//!
//! `Dynamic` past `max_position_embeddings` has frequencies of its own for every length, so
//! its angles are computed on the device for the positions of each call, from the
//! frequencies of that length (the only upload: one row of `rotary_dims / 2` values), in f32 as
//! transformers' rotary modules compute them, in both arithmetics (`Exact` then rounds only
//! the frequencies once, and the product to f32 as `Transformers` does).
//!
//! [`RopeScaling`] stretches a model trained on short sequences to longer ones without
//! training: position interpolation (Chen et al. 2023), NTK-aware base scaling (bloc97 2023),
//! and every variant Hugging Face checkpoints configure (`linear`, `dynamic`, `yarn`,
//! `longrope`, `llama3`, `proportional`), with their attention factor on cos and sin. The
//! tables are constants, so a trained model takes it at test time through [`Rope::rescaled`];
//! [`RopeConfig::from_hf_config`] reads it from a checkpoint's `config.json`.
//!
//! # Positions on grids
//!
//! Image patches and video frames sit on a grid of 2 or 3 axes. [`RopeAxes`] deals the pairs to
//! the axes (axial 2D as Qwen2-VL's vision encoder and Pixtral, M-RoPE's sections as Qwen2-VL's
//! text model, Qwen3-VL's interleaving), and [`Rope::apply_positions`] takes any
//! [`Positions`](crate::Positions): a `Grid` (angles built once per grid, kept on the device) or
//! explicit `Axes` (angles on the device, in f32). The rotation itself is the same fused pass as
//! text's. [`mrope_positions`] builds M-RoPE's ids for a prompt of text, images and video, as
//! transformers' `get_rope_index` does.
//!
//! # Length-dependent variants and cached decoding
//!
//! `Dynamic` and `LongRope` pick their frequencies from the length of the sequence being
//! attended, `L = offset + seq` (transformers' `max(position_ids) + 1`): `LongRope` switches
//! from `short_factor` to `long_factor` once `L` passes `original_max_position_embeddings`,
//! `Dynamic` recomputes its base for every `L` past `max_position_embeddings` and uses the
//! trained frequencies below it. [`Rope::apply`] picks them from `offset + seq` on every call,
//! with no state carried from earlier calls (transformers keeps the frequencies of the longest
//! call so far until a call falls below the limit; the two agree on every call of a fresh
//! module and on every call that shortens below the limit).
//!
//! When the frequencies switch during cached decoding, the keys already in a
//! [`KvCache`](crate::KvCache) were rotated with the old ones. A
//! [`SelfAttention`](crate::SelfAttention) block with a length-dependent rope therefore caches
//! its keys *before* rotation and rotates all of them with the current frequencies at every
//! step: decoding token by token gives exactly what one forward over the whole sequence gives
//! (transformers caches rotated keys, so its decoding past the switch attends to keys rotated
//! with the short frequencies). The cost is one rotation of the cached keys per step.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay};
use burn::tensor::{Device, Tensor, TensorData};

mod at;
mod axes;
mod grid;
pub mod hf_config;
mod mrope;
mod scaling;
mod torch_pow;

pub use axes::RopeAxes;
pub use mrope::{Modality, MropeIndexConfig, MropePositions, mrope_positions};
use scaling::Regime;
pub use scaling::{
    DynamicScaling, Llama3Scaling, LongRopeScaling, ProportionalScaling, RopeArithmetic,
    RopeScaling, YarnScaling,
};

use crate::PositionError;
use crate::cache::{DeviceKey, Grown, count_host_table};
use crate::limits::{GROWN_TABLE_VALUES, table_fits};
use burn_positional_kernels::{RotaryLayout, fused_rope};

/// Which dimensions form a rotated pair.
#[derive(Config, Debug, PartialEq, Copy)]
pub enum RopeLayout {
    /// `(x[2j], x[2j+1])`: GPT-J, Meta's LLaMA code, burn's `RotaryEncoding`.
    Interleaved,
    /// `(x[j], x[j + rotary_dims/2])`: GPT-NeoX, Hugging Face's `rotate_half`.
    HalfSplit,
}

/// Configuration of [`Rope`].
#[derive(Config, Debug, PartialEq)]
pub struct RopeConfig {
    /// Width of one attention head.
    pub d_head: usize,
    /// Wavelength base (10 000 in the paper; LLaMA 3 uses 500 000).
    #[config(default = "10_000.0")]
    pub base: f64,
    /// Rotate only the first `rotary_dims` dimensions of each head; all of them when `None`.
    #[config(default = "None")]
    pub rotary_dims: Option<usize>,
    /// The checkpoint layout. Interleaved by default, as in the paper.
    #[config(default = "RopeLayout::Interleaved")]
    pub layout: RopeLayout,
    /// Positions whose angles are precomputed at init. Past it they are computed when first
    /// asked for and cached in a table grown by doubling (see the
    /// [module docs](self#arithmetic-caches-and-length)); any position is accepted.
    #[config(default = "4096")]
    pub cache_len: usize,
    /// Context extension applied to the angles. None by default.
    #[config(default = "RopeScaling::None")]
    pub scaling: RopeScaling,
    /// How the angle tables are rounded: exactly (f64, once) by default, or step by step as
    /// transformers does ([`RopeArithmetic::Transformers`], what
    /// [`from_hf_config`](Self::from_hf_config) picks).
    #[config(default = "RopeArithmetic::Exact")]
    pub arithmetic: RopeArithmetic,
    /// Which axis of a position (frame, row, column) turns each pair: one axis for text (the
    /// default), M-RoPE sections or an axial layout for images and video ([`RopeAxes`]).
    #[config(default = "RopeAxes::Sequence")]
    pub axes: RopeAxes,
}

/// Rotary position embedding for queries and keys. Built by [`RopeConfig::init`]; constant.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::{RopeConfig, RopeLayout};
///
/// let device = Device::flex();
/// let rope = RopeConfig::new(16).with_layout(RopeLayout::HalfSplit).init(&device);
/// let q = Tensor::<4>::ones([2, 4, 10, 16], &device); // [batch, n_heads, seq, d_head]
/// assert_eq!(rope.apply(q, 100_000).dims(), [2, 4, 10, 16]);
/// ```
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct Rope {
    // Private, with accessors: the tables and the grown caches are built from these values
    // and keyed without them, so changing one in place would mix old angles with new ones.
    // [`Rope::rescaled`] and `config().with_..().init(..)` build a consistent rope instead.
    /// `[cache_len, rotary_dims / 2]` cosines of the angles.
    cos: Tensor<2>,
    /// `[cache_len, rotary_dims / 2]` sines of the angles.
    sin: Tensor<2>,
    /// Width of one head.
    d_head: usize,
    /// Dimensions rotated.
    rotary_dims: usize,
    /// Wavelength base.
    base: f64,
    /// Pairing of dimensions.
    #[module(skip)]
    layout: RopeLayout,
    /// Context extension applied to the angles.
    #[module(skip)]
    scaling: RopeScaling,
    /// How the angle tables are rounded.
    #[module(skip)]
    arithmetic: RopeArithmetic,
    /// How the pairs are dealt to the axes of a position.
    #[module(skip)]
    axes: RopeAxes,
    /// The angles of the last grid asked for (`cos`, `sin`, `[grid.len(), pairs]`), computed
    /// on the host once per grid and kept on the device.
    #[module(skip)]
    grid_angles: Grown<(Tensor<2>, Tensor<2>), (DeviceKey, burn_positional_kernels::Grid)>,
    /// The axis of each pair, `[pairs]`, for angles computed on the device from explicit
    /// positions on several axes.
    #[module(skip)]
    pair_axes: Grown<Tensor<1, burn::tensor::Int>>,
    /// Angles past `cache_len`, and the tables of the other frequency sets of a
    /// length-dependent scaling, grown on demand and shared by clones.
    #[module(skip)]
    grown: GrownAngles,
    /// Positions `0..n` as an f32 column, for the angles computed on the device (`Dynamic`
    /// past its limit); grown on demand and shared by clones.
    #[module(skip)]
    positions: Grown<Tensor<2>>,
    /// The `inv_freq` `[1, pairs]` and attention factor of the last frequency set `apply_at`
    /// computed on the device (the trained one, or the set of a length).
    #[module(skip)]
    frequencies: Grown<(Tensor<2>, f32), (DeviceKey, Regime)>,
}

impl ModuleDisplay for Rope {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [cache_len, _] = self.cos.dims();
        content
            .add("d_head", &self.d_head)
            .add("rotary_dims", &self.rotary_dims)
            .add("base", &self.base)
            .add("layout", &format!("{:?}", self.layout))
            .add("scaling", &self.scaling.rope_type().to_string())
            .add("axes", &self.axes.name())
            .add("cache_len", &cache_len)
            .optional()
    }
}

/// Angle tables longer than the precomputed ones, and those of `LongRope`'s long set:
/// `(cos, sin)`, each `[rows, pairs]`, keyed by device and [`Regime`] (never
/// [`Regime::Length`], whose angles are computed on the device per call).
/// Grown by doubling when a sequence walks past them (cached decoding), so the host computes
/// each row once, not once per step; never past [`GROWN_TABLE_VALUES`] values.
type GrownAngles = Grown<(Tensor<2>, Tensor<2>), (DeviceKey, Regime)>;

/// `attention * cos` and `attention * sin` of `p * inv_freq[j]`, row-major `[positions, pairs]`,
/// rounded as `arithmetic` says: once from f64 (`Exact`), or at every step transformers rounds
/// to f32 (`position * inv_freq`, cos, the product with the attention factor).
fn angle_rows(
    positions: std::ops::Range<u64>,
    inv_freq: &[f64],
    attention: f64,
    arithmetic: RopeArithmetic,
) -> (Vec<f32>, Vec<f32>) {
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in positions {
        for &w in inv_freq {
            match arithmetic {
                RopeArithmetic::Exact => {
                    let (s, c) = (p as f64 * w).sin_cos();
                    cos.push((c * attention) as f32);
                    sin.push((s * attention) as f32);
                }
                RopeArithmetic::Transformers => {
                    let angle = (p as f32 * w as f32) as f64;
                    let (s, c) = angle.sin_cos();
                    let a = attention as f32;
                    cos.push(c as f32 * a);
                    sin.push(s as f32 * a);
                }
            }
        }
    }
    (cos, sin)
}

/// The inverse frequency of each pair (dealt to the axes as `axes` says) and the attention
/// factor of a sequence of length `len`: the one place the rotary code asks the scaling.
fn pair_frequencies(
    scaling: &RopeScaling,
    axes: &RopeAxes,
    base: f64,
    rotary_dims: usize,
    len: usize,
    arithmetic: RopeArithmetic,
) -> (Vec<f64>, f64) {
    let mut attention = 1.0;
    let inv_freq = axes.pair_frequencies(rotary_dims, |width| {
        let (inv_freq, factor) = scaling.frequencies(base, width, len, arithmetic);
        attention = factor;
        inv_freq
    });
    (inv_freq, attention)
}

impl RopeConfig {
    /// The formula width of the rotation: `rotary_dims`, or `d_head` when it is `None` or the
    /// scaling is [`RopeScaling::Proportional`] (which pairs over the whole head).
    fn formula_dims(&self) -> usize {
        if self.scaling.pairs_whole_head() {
            self.d_head
        } else {
            self.rotary_dims.unwrap_or(self.d_head)
        }
    }

    /// Checks the config: the rotated width must be even (or, with
    /// [`RopeArithmetic::Transformers`], round up to whole pairs), positive and at most
    /// `d_head`, and the scaling's parameters valid for it.
    pub fn validate(&self) -> Result<(), PositionError> {
        let rotary_dims = self.formula_dims();
        if rotary_dims % 2 == 1 && self.arithmetic == RopeArithmetic::Exact {
            return Err(PositionError::odd("rotary_dims", rotary_dims));
        }
        let width = 2 * RopeScaling::pairs(rotary_dims);
        if rotary_dims == 0 || width > self.d_head {
            return Err(PositionError::InvalidConfig {
                field: "RopeConfig::rotary_dims",
                value: rotary_dims.to_string(),
                rule: "rotary dimensions must lie in 1..=d_head",
                fix: format!(
                    "choose an even number of dimensions up to d_head = {}",
                    self.d_head
                ),
            });
        }
        table_fits("RopeConfig::cache_len", self.cache_len, width, || {
            "lower it to the longest context the model serves".into()
        })?;
        self.axes.validate(rotary_dims, width / 2, &self.scaling)?;
        self.scaling.validate(rotary_dims)
    }

    /// Builds the angle tables.
    ///
    /// # Panics
    ///
    /// If the rotated width is odd, zero or wider than `d_head`, or the scaling's parameters
    /// are invalid (a factor below 1 or not finite, a longrope factor list of the wrong length,
    /// ...): the message of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Rope {
        self.try_init(device).unwrap_or_else(|err| panic!("{err}"))
    }

    /// Checks the config ([`validate`](Self::validate)) and builds the rotation with its
    /// precomputed angles.
    pub fn try_init(&self, device: &Device) -> Result<Rope, PositionError> {
        self.validate()?;
        let rotary_dims = self.formula_dims();
        let (inv_freq, attention) = pair_frequencies(
            &self.scaling,
            &self.axes,
            self.base,
            rotary_dims,
            0,
            self.arithmetic,
        );
        let (cos, sin) = angle_rows(
            0..self.cache_len as u64,
            &inv_freq,
            attention,
            self.arithmetic,
        );
        let shape = [self.cache_len, inv_freq.len()];
        Ok(Rope {
            cos: Tensor::from_data(TensorData::new(cos, shape), device),
            sin: Tensor::from_data(TensorData::new(sin, shape), device),
            d_head: self.d_head,
            rotary_dims,
            base: self.base,
            layout: self.layout,
            scaling: self.scaling.clone(),
            arithmetic: self.arithmetic,
            axes: self.axes.clone(),
            grid_angles: Grown::default(),
            pair_axes: Grown::default(),
            grown: Grown::default(),
            positions: Grown::default(),
            frequencies: Grown::default(),
        })
    }
}

impl Rope {
    /// The config this rope was built from.
    pub fn config(&self) -> RopeConfig {
        RopeConfig {
            d_head: self.d_head,
            base: self.base,
            rotary_dims: Some(self.rotary_dims),
            layout: self.layout,
            cache_len: self.cos.dims()[0],
            scaling: self.scaling.clone(),
            arithmetic: self.arithmetic,
            axes: self.axes.clone(),
        }
    }

    /// How the pairs are dealt to the axes of a position.
    pub fn axes(&self) -> &RopeAxes {
        &self.axes
    }

    /// The inverse frequencies and attention factor of a sequence of length `len`, one per
    /// pair as [`RopeAxes`] deals them.
    fn frequencies(&self, len: usize) -> (Vec<f64>, f64) {
        pair_frequencies(
            &self.scaling,
            &self.axes,
            self.base,
            self.rotary_dims,
            len,
            self.arithmetic,
        )
    }

    /// Width of one head.
    pub fn d_head(&self) -> usize {
        self.d_head
    }

    /// The formula width of the rotation: `rotary_dims`, or `d_head` when the config gave
    /// none or the scaling is [`RopeScaling::Proportional`]. Whole pairs of it are rotated.
    pub fn rotary_dims(&self) -> usize {
        self.rotary_dims
    }

    /// Wavelength base (`rope_theta`).
    pub fn base(&self) -> f64 {
        self.base
    }

    /// Pairing of dimensions.
    pub fn layout(&self) -> RopeLayout {
        self.layout
    }

    /// Context extension applied to the angles. To change it, build another rope with
    /// [`rescaled`](Self::rescaled).
    pub fn scaling(&self) -> &RopeScaling {
        &self.scaling
    }

    /// How the angle tables are rounded.
    pub fn arithmetic(&self) -> RopeArithmetic {
        self.arithmetic
    }

    /// Positions whose angles were precomputed at init.
    pub fn cache_len(&self) -> usize {
        self.cos.dims()[0]
    }

    /// The inverse frequencies of the trained set (`inv_freq` after transformers' `__init__`):
    /// pair `j` of position `p` turns by `p * inv_freq[j]`. One per rotated pair.
    pub fn inv_freq(&self) -> Vec<f64> {
        self.inv_freq_at(0)
    }

    /// The inverse frequencies a sequence of length `len` (its last position plus one) is
    /// rotated with: the trained set, except for [`RopeScaling::Dynamic`] past
    /// `max_position_embeddings` and [`RopeScaling::LongRope`] past
    /// `original_max_position_embeddings`.
    pub fn inv_freq_at(&self, len: usize) -> Vec<f64> {
        self.frequencies(len).0
    }

    /// The factor cos and sin are multiplied by (transformers' `attention_scaling`): 1 except
    /// for `yarn` and `longrope`.
    pub fn attention_factor(&self) -> f64 {
        self.frequencies(0).1
    }

    /// This rope with another context extension, its tables rebuilt on the same device: the
    /// test-time knob for a trained model (the tables are constants, nothing trained is lost).
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{RopeConfig, RopeScaling};
    ///
    /// let device = Device::flex();
    /// let trained = RopeConfig::new(16).init(&device);
    /// let stretched = trained.rescaled(RopeScaling::Interpolation(2.0));
    /// let q = Tensor::<4>::ones([1, 2, 8, 16], &device); // [batch, n_heads, seq, d_head]
    /// // Position 6 under interpolation by 2 is rotated as position 3 was.
    /// let a = stretched.apply(q.clone(), 6).slice([0..1, 0..2, 0..1, 0..16]);
    /// let b = trained.apply(q, 3).slice([0..1, 0..2, 0..1, 0..16]);
    /// assert!(a.all_close(b, None, Some(1e-6)));
    /// ```
    ///
    /// # Panics
    ///
    /// As [`RopeConfig::init`], for a factor below 1 or not finite.
    pub fn rescaled(&self, scaling: RopeScaling) -> Rope {
        self.config().with_scaling(scaling).init(&self.cos.device())
    }

    /// `cos` and `sin` (times the attention factor) for positions `offset..offset + seq`, each
    /// `[seq, pairs]`, from the frequency set of a sequence of length `offset + seq`.
    ///
    /// Within `cache_len` and the trained set: slices of the precomputed tables. Otherwise from
    /// a grown table of that set when the sequence walks on from what is there (doubled, so
    /// decoding token by token computes each row once); a far jump is computed for its window
    /// alone. `Dynamic` past its limit: on the device ([`angles_on_device`](Self::angles_on_device)).
    fn angles(&self, offset: usize, seq: usize) -> (Tensor<2>, Tensor<2>) {
        let [cache_len, pairs] = self.cos.dims();
        let end = offset.checked_add(seq).unwrap_or_else(|| {
            panic!(
                "rope: positions {offset}..{offset} + {seq} pass usize::MAX. Fix: restart \
                 positions from 0 (a window of the sequence)"
            )
        });
        let regime = self.scaling.regime(end);
        let rows = [offset..end, 0..pairs];
        if regime == Regime::Trained && end <= cache_len {
            return (
                self.cos.clone().slice(rows.clone()),
                self.sin.clone().slice(rows),
            );
        }
        let device = self.cos.device();
        if let Regime::Length(len) = regime {
            return self.angles_on_device(offset, end, len, &device);
        }
        // The frequencies are computed only when a table is built, not on every call.
        let upload = |range: std::ops::Range<usize>| {
            let (inv_freq, attention) = self.frequencies(self.scaling.length_of(regime));
            let (cos, sin) = angle_rows(
                range.start as u64..range.end as u64,
                &inv_freq,
                attention,
                self.arithmetic,
            );
            let shape = [range.len(), pairs];
            count_host_table();
            (
                Tensor::<2>::from_data(TensorData::new(cos, shape), &device),
                Tensor::<2>::from_data(TensorData::new(sin, shape), &device),
            )
        };
        let key = (DeviceKey::new(&device, self.cos.dtype()), regime);
        // Grown tables stop at GROWN_TABLE_VALUES values (both tables together): past that,
        // each call computes its own window, which costs `seq` rows, not the whole prefix.
        let max_rows = (GROWN_TABLE_VALUES / (2 * pairs.max(1))).max(cache_len);
        // The trained set starts from the precomputed rows; another set from none.
        let precomputed = if regime == Regime::Trained {
            cache_len
        } else {
            0
        };
        let window = self.grown.with(&key, |grown| {
            let current = grown.as_ref().map_or(precomputed, |(cos, _)| cos.dims()[0]);
            if end > current {
                let doubled = if current == 0 {
                    end.max(cache_len).next_power_of_two()
                } else {
                    2 * current
                };
                if end > doubled || doubled > max_rows {
                    // A jump far past the tables, or a table that would pass its ceiling.
                    return None;
                }
                *grown = Some(upload(0..doubled));
            }
            grown.as_ref().map(|(cos, sin)| {
                (
                    cos.clone().slice(rows.clone()),
                    sin.clone().slice(rows.clone()),
                )
            })
        });
        window.unwrap_or_else(|| upload(offset..end))
    }

    /// `cos` and `sin` for positions `offset..end` from the frequencies of a sequence of
    /// length `len` ([`RopeScaling::Dynamic`] past `max_position_embeddings`, a set of its own
    /// for every length), computed on the device as transformers' rotary modules do: the
    /// `inv_freq` of that length (a row of `pairs` values, the only upload per call) times the
    /// positions in f32, then cos and sin in f32, times the attention factor. The positions
    /// come from a column grown by doubling, so decoding token by token builds no table on the
    /// host per step, and the trained tables stay cached.
    fn angles_on_device(
        &self,
        offset: usize,
        end: usize,
        len: usize,
        device: &Device,
    ) -> (Tensor<2>, Tensor<2>) {
        let (inv_freq, attention) = self.frequencies(len);
        let pairs = inv_freq.len();
        // transformers holds `inv_freq` in f32 (rounded already for `Transformers`).
        let inv_freq: Vec<f32> = inv_freq.into_iter().map(|w| w as f32).collect();
        let inv_freq = Tensor::<2>::from_data(TensorData::new(inv_freq, [1, pairs]), device);
        // `position_ids.float() @ inv_freq`: one f32 product per entry, as on the host.
        let angles = self.positions(offset, end, device) * inv_freq;
        let (cos, sin) = (angles.clone().cos(), angles.sin());
        if attention == 1.0 {
            return (cos, sin);
        }
        let attention = attention as f32;
        (cos.mul_scalar(attention), sin.mul_scalar(attention))
    }

    /// Positions `offset..end` as an f32 column `[end - offset, 1]` on `device`: a window of a
    /// column grown by doubling (built on the host log(n) times while decoding), or, past
    /// [`GROWN_TABLE_VALUES`] rows, the window alone.
    fn positions(&self, offset: usize, end: usize, device: &Device) -> Tensor<2> {
        let column = |range: std::ops::Range<usize>| {
            count_host_table();
            // `p as f32` rounds to nearest, as torch's int64 to float32 cast does.
            let values: Vec<f32> = range.clone().map(|p| p as f32).collect();
            Tensor::<2>::from_data(TensorData::new(values, [range.len(), 1]), device)
        };
        let key = DeviceKey::new(device, burn::tensor::DType::F32);
        let window = self.positions.with(&key, |grown| {
            let current = grown.as_ref().map_or(0, |column| column.dims()[0]);
            if end > current {
                let doubled = end.max(2 * current).next_power_of_two();
                if doubled > GROWN_TABLE_VALUES {
                    return None;
                }
                *grown = Some(column(0..doubled));
            }
            grown
                .as_ref()
                .map(|column| column.clone().slice([offset..end, 0..1]))
        });
        window.unwrap_or_else(|| column(offset..end))
    }

    /// Rotates queries or keys whose first token sits at position `offset`.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, n_heads, seq, d_head]`
    /// - output: `[batch, n_heads, seq, d_head]`
    ///
    /// # Panics
    ///
    /// If the last dimension of `x` is not `d_head`.
    pub fn apply(&self, x: Tensor<4>, offset: usize) -> Tensor<4> {
        let [_, _, seq, d_head] = x.dims();
        assert_eq!(
            d_head, self.d_head,
            "rope built for d_head {} got heads {d_head} wide",
            self.d_head
        );
        let (cos, sin) = self.angles(offset, seq);
        // [seq, half] -> [1, 1, seq, half], broadcast over batch and heads.
        self.rotate(x, cos.unsqueeze::<4>(), sin.unsqueeze::<4>())
    }

    /// `x` rotated by angles whose `cos` and `sin` are `[batch or 1, 1, seq, pairs]`, in one
    /// pass (the kernels' [`fused_rope`](burn_positional_kernels::fused_rope): a CubeCL kernel
    /// on wgpu and CUDA, multi-threaded loops on flex and ndarray, the op-by-op twin on other
    /// backends), in the dtype of `x` (f16, bf16 models).
    fn rotate(&self, x: Tensor<4>, cos: Tensor<4>, sin: Tensor<4>) -> Tensor<4> {
        let [n, _, seq, pairs] = cos.dims();
        let layout = match self.layout {
            RopeLayout::Interleaved => RotaryLayout::Interleaved,
            RopeLayout::HalfSplit => RotaryLayout::HalfSplit,
        };
        fused_rope(
            x,
            cos.reshape([n, seq, pairs]),
            sin.reshape([n, seq, pairs]),
            layout,
        )
    }
}

#[cfg(test)]
mod tests;
