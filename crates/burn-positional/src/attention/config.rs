//! [`SelfAttentionConfig`]: the block's configuration, its checks and its `init`.

use burn::config::Config;
use burn::nn::transformer::PositionWiseFeedForwardConfig;
use burn::nn::{DropoutConfig, LayerNormConfig, LinearConfig};
use burn::tensor::Device;

use super::SelfAttention;
use super::kv_cache::BlockId;
use super::mask::CausalMasks;
use crate::ScoreBiasConfig;
use crate::limits::table_fits;
use crate::training::materialize;
use crate::{AlibiConfig, PositionError, RopeConfig, T5BiasConfig};

/// Configuration of [`SelfAttention`].
///
/// The position parts can be sized from the block itself, so nothing is said twice:
/// [`with_rotary`](Self::with_rotary), [`with_alibi`](Self::with_alibi) and
/// [`with_t5`](Self::with_t5). Parts given by hand are checked against the block at
/// [`try_init`](Self::try_init).
#[derive(Config, Debug, PartialEq)]
pub struct SelfAttentionConfig {
    /// Width of the token vectors.
    pub d_model: usize,
    /// Number of heads; must divide `d_model` (each head is `d_head = d_model / n_heads` wide).
    pub n_heads: usize,
    /// Hidden width of the feed-forward. `4 * d_model` when `None` (the default), as in the
    /// original Transformer.
    #[config(default = "None")]
    pub d_ff: Option<usize>,
    /// Dropout on the attention weights, inside the feed-forward and on each residual branch.
    /// 0 by default.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Mask attention to later tokens (decoder style). Off by default. The one place this is
    /// decided: the score biases follow it (T5's buckets are decoder-style when it is set).
    #[config(default = false)]
    pub causal: bool,
    /// Epsilon of the layer norms.
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    /// Rotary positions on queries and keys (RoPE). None by default.
    #[config(default = "None")]
    pub rope: Option<RopeConfig>,
    /// A score bias this block computes itself (ALiBi, or a T5 table of its own). None by
    /// default; to share one T5 table across blocks, pass its bias in
    /// [`AttentionInput`](super::AttentionInput) instead.
    #[config(default = "None")]
    pub score_bias: Option<ScoreBiasConfig>,
    /// Query rows per tile of the tiled attention, which computes a block's own ALiBi or T5
    /// bias inside each tile instead of materializing the `seq x seq` bias, and on autodiff
    /// devices runs as one graph node whose backward recomputes each tile (memory linear in
    /// the sequence in training). `None` (the default): tiles of at most 2^22 scores
    /// (`batch x n_heads x rows x keys`, 16 MiB in f32), for ALiBi, T5, grouped heads, a window
    /// and packed rows everywhere and for every scheme on autodiff devices (without autodiff a block without a bias runs burn's
    /// fused attention, already tiled). On the devices the kernels cover (flex, ndarray, wgpu,
    /// CUDA) the forward is one flash kernel call with tiles of its own, so `rows` sets only
    /// the backward's tiles there. `Some(rows)` takes the tiled path on every device and
    /// for every scheme, except in the two cases that never take it: a score bias passed in
    /// from outside ([`AttentionInput::score_bias`](crate::AttentionInput::score_bias), a
    /// dense tensor), and training with dropout (dropout acts on the attention weights, which
    /// the tiles never hold).
    #[config(default = "None")]
    pub tile_rows: Option<usize>,
    /// Key and value heads (grouped-query attention): the query heads form `n_kv_heads`
    /// groups of `n_heads / n_kv_heads` that share one key and value head, so the key and
    /// value projections and the [`KvCache`](crate::KvCache) are `n_kv_heads` heads wide and
    /// never repeated. `None` (the default): `n_heads` (multi-head); 1: multi-query. Must
    /// divide `n_heads`.
    #[config(default = "None")]
    pub n_kv_heads: Option<usize>,
    /// A sliding window, as transformers' `sliding_window = w` (Mistral, Gemma 2/3, gpt-oss):
    /// a query sees itself and the `w - 1` tokens before it (and, in a block that is not
    /// causal, the `w - 1` tokens after it). A [`KvCache`](crate::KvCache) of a windowed block
    /// keeps only the last `w - 1` keys, so decoding memory stays bounded. `None` (the
    /// default): every token. Must be at least 1.
    #[config(default = "None")]
    pub sliding_window: Option<usize>,
    /// How a [`KvCache`](crate::KvCache) holds keys under a rope whose frequencies follow the
    /// sequence's length (`RopeScaling::Dynamic`, `RopeScaling::LongRope`). `false` (the
    /// default): unrotated, every cached key re-rotated with the current frequencies at each
    /// step, so decoding equals one forward over the whole sequence (what a model trained or
    /// evaluated with full forwards saw). `true`: each key as it was rotated when it was
    /// cached, as transformers, vLLM and Phi-3's own code do (after a switch old keys keep
    /// the short factors): what a port must do to generate the tokens transformers generates.
    /// No effect for other ropes, where both are the same.
    #[config(default = false)]
    pub cache_rotated_keys: bool,
}

impl SelfAttentionConfig {
    /// This config with RoPE sized from the block (`d_head = d_model / n_heads`), default
    /// base and layout. Set `d_model` and `n_heads` first.
    pub fn with_rotary(self) -> Self {
        let rope = RopeConfig::new(self.d_model / self.n_heads.max(1));
        self.with_rope(Some(rope))
    }

    /// This config with ALiBi for this block's heads (masked by the block when it is causal).
    pub fn with_alibi(self) -> Self {
        let alibi = AlibiConfig::new(self.n_heads);
        self.with_score_bias(Some(ScoreBiasConfig::Alibi(alibi)))
    }

    /// This config with a T5 table of its own for this block's heads: decoder-style buckets
    /// when the block is causal, encoder-style otherwise, whenever `causal` is set.
    pub fn with_t5(self) -> Self {
        let t5 = T5BiasConfig::new(self.n_heads);
        self.with_score_bias(Some(ScoreBiasConfig::T5(t5)))
    }

    /// Checks the config and that its position parts fit the block.
    pub fn validate(&self) -> Result<(), PositionError> {
        let Self {
            d_model, n_heads, ..
        } = *self;
        if n_heads == 0 || d_model == 0 || d_model % n_heads != 0 {
            let divisors: Vec<String> = (1..=d_model.min(64))
                .filter(|h| d_model % h == 0)
                .map(|h| h.to_string())
                .collect();
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::n_heads",
                value: format!("{n_heads} (with d_model = {d_model})"),
                rule: "n_heads must be positive and divide d_model: each head gets \
                       d_model / n_heads dimensions",
                fix: format!(
                    "choose n_heads among the divisors of d_model ({})",
                    if divisors.is_empty() {
                        "d_model must be positive".to_string()
                    } else {
                        divisors.join(", ")
                    }
                ),
            });
        }
        if let Some(n_kv_heads) = self.n_kv_heads
            && (n_kv_heads == 0 || n_heads % n_kv_heads != 0)
        {
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::n_kv_heads",
                value: format!("Some({n_kv_heads}) (with n_heads = {n_heads})"),
                rule: "the query heads must form whole groups, one per key/value head",
                fix: format!(
                    "choose n_kv_heads among the divisors of n_heads ({}), or None for one key \
                     and value head per query head",
                    super::attend::divisors(n_heads)
                ),
            });
        }
        if self.sliding_window == Some(0) {
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::sliding_window",
                value: "Some(0)".into(),
                rule: "a window holds at least the query itself",
                fix: "use None (every token) or the checkpoint's `sliding_window`".into(),
            });
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::dropout",
                value: self.dropout.to_string(),
                rule: "a dropout probability lies in [0, 1)",
                fix: "use 0 (no dropout) or a probability such as 0.1".into(),
            });
        }
        if self.d_ff == Some(0) {
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::d_ff",
                value: "Some(0)".into(),
                rule: "the feed-forward needs a hidden width",
                fix: format!(
                    "use None (4 * d_model = {}) or a positive width",
                    d_model.saturating_mul(4)
                ),
            });
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::norm_eps",
                value: self.norm_eps.to_string(),
                rule: "the layer norms' epsilon must be a positive finite number",
                fix: "use the default 1e-5".into(),
            });
        }
        // The projections are at most d_model x d_model, the feed-forward d_model x d_ff.
        let fix = || "use the width of the model's token vectors".to_string();
        table_fits("SelfAttentionConfig::d_model", d_model, d_model, fix)?;
        table_fits(
            "SelfAttentionConfig::d_ff",
            self.d_ff.unwrap_or(4 * d_model),
            d_model,
            || "use None (4 * d_model) or the feed-forward width of the checkpoint".to_string(),
        )?;
        let d_head = d_model / n_heads;
        if let Some(rope) = &self.rope {
            rope.validate()?;
            if rope.d_head != d_head {
                return Err(PositionError::PartDoesNotFitBlock {
                    part: "RopeConfig",
                    field: "d_head",
                    value: rope.d_head,
                    block: d_head,
                    fix: "build it with `SelfAttentionConfig::with_rotary`, or set \
                          `RopeConfig::d_head` to d_model / n_heads",
                });
            }
        }
        if let Some(bias) = &self.score_bias {
            bias.validate()?;
            if bias.n_heads() != n_heads {
                return Err(PositionError::PartDoesNotFitBlock {
                    part: match bias {
                        ScoreBiasConfig::Alibi(_) => "AlibiConfig",
                        ScoreBiasConfig::T5(_) => "T5BiasConfig",
                    },
                    field: "n_heads",
                    value: bias.n_heads(),
                    block: n_heads,
                    fix: "build it with `SelfAttentionConfig::with_alibi` or `with_t5`, or give \
                          the bias the block's n_heads",
                });
            }
        }
        Ok(())
    }

    /// Builds the block, or says which setting is wrong and how to fix it.
    pub fn try_init(&self, device: &Device) -> Result<SelfAttention, PositionError> {
        self.validate()?;
        let d_model = self.d_model;
        let d_ff = self.d_ff.unwrap_or(4 * d_model); // checked by `validate`
        let linear = |d_in, d_out| LinearConfig::new(d_in, d_out).init(device);
        let n_kv_heads = self.n_kv_heads.unwrap_or(self.n_heads);
        let d_kv = n_kv_heads * (d_model / self.n_heads);
        let window = self.sliding_window.map(|w| {
            let reach = w - 1;
            super::Window {
                before: reach,
                after: if self.causal { 0 } else { reach },
            }
        });
        let norm = || {
            LayerNormConfig::new(d_model)
                .with_epsilon(self.norm_eps)
                .init(device)
        };
        Ok(materialize(SelfAttention {
            norm_attention: norm(),
            query: linear(d_model, d_model),
            key: linear(d_model, d_kv),
            value: linear(d_model, d_kv),
            output: linear(d_model, d_model),
            norm_feed_forward: norm(),
            feed_forward: PositionWiseFeedForwardConfig::new(d_model, d_ff)
                .with_dropout(self.dropout)
                .init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            n_heads: self.n_heads,
            n_kv_heads,
            causal: self.causal,
            window,
            rope: self.rope.as_ref().map(|rope| rope.init(device)),
            score_bias: self.score_bias.as_ref().map(|bias| bias.init(device)),
            id: BlockId::next(),
            causal_masks: CausalMasks::default(),
            tile_rows: self.tile_rows,
            cache_rotated_keys: self.cache_rotated_keys,
        }))
    }

    /// Builds the block.
    ///
    /// # Panics
    ///
    /// With [`try_init`](Self::try_init)'s message if the config is invalid: `n_heads` is 0 or
    /// does not divide `d_model`, dropout is outside `[0, 1)`, or a position part was built for
    /// another head count or width.
    pub fn init(&self, device: &Device) -> SelfAttention {
        self.try_init(device).unwrap_or_else(|err| panic!("{err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(config: SelfAttentionConfig) -> String {
        config.validate().expect_err("must be refused").to_string()
    }

    #[test]
    fn heads_that_do_not_divide_d_model_are_refused_with_the_divisors() {
        let message = refusal(SelfAttentionConfig::new(512, 12));
        assert!(message.contains("12 (with d_model = 512)"), "{message}");
        assert!(message.contains("1, 2, 4, 8, 16, 32, 64"), "{message}");
        assert!(refusal(SelfAttentionConfig::new(16, 0)).contains("n_heads"));
        assert!(refusal(SelfAttentionConfig::new(0, 4)).contains("d_model = 0"));
    }

    #[test]
    fn parts_built_for_another_block_are_refused_at_init() {
        let alibi = SelfAttentionConfig::new(32, 4)
            .with_score_bias(Some(ScoreBiasConfig::Alibi(AlibiConfig::new(8))));
        let message = refusal(alibi);
        assert!(
            message.contains("`AlibiConfig` has n_heads = 8")
                && message.contains("block has n_heads = 4"),
            "{message}"
        );
        let t5 = SelfAttentionConfig::new(32, 4)
            .with_score_bias(Some(ScoreBiasConfig::T5(T5BiasConfig::new(2))));
        assert!(refusal(t5).contains("`T5BiasConfig` has n_heads = 2"));
        let rope = SelfAttentionConfig::new(32, 4).with_rope(Some(RopeConfig::new(16)));
        let message = refusal(rope);
        assert!(
            message.contains("d_head = 16") && message.contains("d_head = 8"),
            "{message}"
        );
        let odd = SelfAttentionConfig::new(36, 4).with_rotary();
        assert!(refusal(odd).contains("rotary_dims is 9"));
        let dropout = SelfAttentionConfig::new(32, 4).with_dropout(1.0);
        assert!(refusal(dropout).contains("dropout"));
        let buckets = SelfAttentionConfig::new(32, 4).with_score_bias(Some(ScoreBiasConfig::T5(
            T5BiasConfig::new(4).with_num_buckets(2),
        )));
        assert!(refusal(buckets).contains("num_buckets"));
    }

    #[test]
    fn the_causal_masks_are_shared_by_clones_and_freed_with_them() {
        use crate::AttentionInput;
        use burn::tensor::Tensor;
        let device = Device::flex();
        let block = SelfAttentionConfig::new(8, 2)
            .with_causal(true)
            .init(&device);
        let x = Tensor::<3>::zeros([1, 4, 8], &device);
        let _ = block.forward_weights(AttentionInput::new(x.clone()));
        let built = crate::cache::shape_cache_builds();
        let clone = block.clone();
        let _ = clone.forward_weights(AttentionInput::new(x));
        assert_eq!(
            crate::cache::shape_cache_builds(),
            built,
            "the clone's mask is cached"
        );
        let masks = block.causal_masks.watch();
        drop((block, clone));
        assert!(masks.upgrade().is_none(), "freed with the last clone");
    }

    #[test]
    fn parts_sized_from_the_block_fit_it() {
        let base = SelfAttentionConfig::new(48, 6);
        for config in [
            base.clone().with_rotary(),
            base.clone().with_alibi(),
            base.clone().with_causal(true).with_t5(),
        ] {
            config.validate().expect("sized from the block");
        }
        let t5 = base.with_causal(true).with_t5();
        assert!(matches!(
            t5.score_bias,
            Some(ScoreBiasConfig::T5(T5BiasConfig { n_heads: 6, .. }))
        ));
    }
}
