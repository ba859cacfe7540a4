//! T5's relative position bias, from [Exploring the Limits of Transfer Learning with a Unified
//! Text-to-Text Transformer](https://arxiv.org/abs/1910.10683) (Raffel et al. 2020): the
//! distance from query to key falls in one of `num_buckets` buckets (exact for small distances,
//! log-spaced up to `max_distance`, one last bucket beyond), and each head learns one scalar per
//! bucket, added to its scores. Share one [`T5Bias`] across layers (as T5 does) by computing the
//! bias once and passing it to every block.
//!
//! The buckets depend on whether attention is causal (T5's decoder buckets only keys before the
//! query, its encoder both sides apart), and that is the attention block's to say: there is no
//! direction in [`T5BiasConfig`], and every call takes the block's `causal`.

use crate::training::materialize;
use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay, Param};
use burn::nn::Initializer;
use burn::tensor::{DType, Device, Int, Shape, Tensor, TensorData};

use super::distance::{distance_index, relative};
use crate::PositionError;
use crate::cache::{DeviceKey, Grown, ShapeCache};

/// Configuration of [`T5Bias`].
#[derive(Config, Debug, PartialEq)]
pub struct T5BiasConfig {
    /// Number of attention heads (one learned scalar per head and bucket).
    pub n_heads: usize,
    /// Buckets (T5 uses 32).
    #[config(default = 32)]
    pub num_buckets: usize,
    /// Distances at or past this share the last bucket (T5 uses 128).
    #[config(default = 128)]
    pub max_distance: usize,
    /// Initializer of the `[num_buckets, n_heads]` table.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 0.02 }")]
    pub initializer: Initializer,
}

/// T5's bucketed relative bias. Built by [`T5BiasConfig::init`].
///
/// Bucket ids are computed on the device and cached by shape, in a cache this module owns
/// (shared by its clones, freed with the last of them); each call gathers the learned scalars
/// for them, so gradients reach the table.
///
/// Every call takes `causal`, the flag of the attention block the bias is for
/// ([`SelfAttention::causal`](crate::SelfAttention::causal)): decoder-style buckets (only keys
/// before the query count) when it is set, encoder-style (keys before and after the query in
/// separate buckets) otherwise. A block that owns its `T5Bias` passes its own flag, so no
/// config can disagree with the block; a table shared by blocks is asked with theirs.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::T5BiasConfig;
///
/// let device = Device::flex();
/// let t5 = T5BiasConfig::new(8).init(&device);
/// let causal = false; // the blocks' `causal`
/// assert_eq!(t5.bias(0, 6, 6, causal).dims(), [1, 8, 6, 6]); // [1, n_heads, seq_q, seq_k]
/// ```
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct T5Bias {
    /// `[num_buckets, n_heads]`, trained and saved.
    pub table: Param<Tensor<2>>,
    /// Distances at or past this share the last bucket.
    pub max_distance: usize,
    /// Bucket ids by shape and direction, shared by clones.
    #[module(skip)]
    buckets: ShapeCache<Tensor<2, Int>, (Bucketing, DeviceKey)>,
    /// The bucket of each clamped distance (`-max_distance..=max_distance`), for the tiled
    /// attention's compact form; shared by clones.
    #[module(skip)]
    distance_buckets: Grown<Tensor<1, Int>, (Bucketing, DeviceKey)>,
}

impl ModuleDisplay for T5Bias {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [num_buckets, n_heads] = self.table.shape().dims();
        content
            .add("n_heads", &n_heads)
            .add("num_buckets", &num_buckets)
            .add("max_distance", &self.max_distance)
            .optional()
    }
}

/// What cached bucket ids depend on besides the device: the direction, and the table's size
/// and `max_distance` as they were when the ids were built (both can change after `init`: a
/// loaded record, an assignment to the public field).
#[derive(Clone, Debug, PartialEq)]
struct Bucketing {
    causal: bool,
    num_buckets: usize,
    max_distance: usize,
}

/// T5's bucket of `relative_position = key_position - query_position`, transcribed from
/// `T5Attention._relative_position_bucket` (Hugging Face transformers, after Mesh TensorFlow):
/// the log is taken in f32, as there.
pub fn t5_bucket(
    relative_position: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> usize {
    let mut num_buckets = num_buckets as i64;
    let mut bucket = 0i64;
    let mut n = relative_position;
    if bidirectional {
        num_buckets /= 2;
        if n > 0 {
            bucket += num_buckets;
        }
        n = n.abs();
    } else {
        n = -n.min(0);
    }
    let max_exact = num_buckets / 2;
    if n < max_exact {
        return (bucket + n) as usize;
    }
    // `torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)`:
    // the first log in f32 (a tensor), the second in Python's f64, rounded to f32 by the
    // division with the f32 tensor.
    let denominator = (max_distance as f64 / max_exact as f64).ln() as f32;
    let log_ratio = (n as f32 / max_exact as f32).ln() / denominator;
    let large = max_exact + (log_ratio * (num_buckets - max_exact) as f32) as i64;
    (bucket + large.min(num_buckets - 1)) as usize
}

impl T5BiasConfig {
    /// Checks the config: at least one head, at least 4 buckets (two halves of at least two
    /// for the bidirectional case), and `max_distance` past the exact range.
    pub fn validate(&self) -> Result<(), PositionError> {
        if self.n_heads == 0 {
            return Err(PositionError::InvalidConfig {
                field: "T5BiasConfig::n_heads",
                value: "0".into(),
                rule: "the table has one column per head, so it needs at least one head",
                fix: "set n_heads to the attention block's number of heads".into(),
            });
        }
        if self.num_buckets < 4 {
            return Err(PositionError::InvalidConfig {
                field: "T5BiasConfig::num_buckets",
                value: self.num_buckets.to_string(),
                rule: "T5 splits the buckets into halves, each with exact and log-spaced buckets",
                fix: "use at least 4 buckets (T5 uses 32)".into(),
            });
        }
        if self.max_distance <= self.num_buckets / 2 {
            return Err(PositionError::InvalidConfig {
                field: "T5BiasConfig::max_distance",
                value: self.max_distance.to_string(),
                rule: "it must exceed num_buckets / 2, where the log-spaced buckets begin",
                fix: format!(
                    "set max_distance above {} (T5 uses 128 with 32 buckets)",
                    self.num_buckets / 2
                ),
            });
        }
        Ok(())
    }

    /// Checks the config ([`validate`](Self::validate)) and builds the table.
    pub fn try_init(&self, device: &Device) -> Result<T5Bias, PositionError> {
        self.validate()?;
        Ok(materialize(T5Bias {
            table: self
                .initializer
                .init([self.num_buckets, self.n_heads], device),
            max_distance: self.max_distance,
            buckets: ShapeCache::default(),
            distance_buckets: Grown::default(),
        }))
    }

    /// Builds the table.
    ///
    /// # Panics
    ///
    /// If [`validate`](Self::validate) fails (no heads, fewer than 4 buckets, or `max_distance`
    /// within the exact range), with [`try_init`](Self::try_init)'s message.
    pub fn init(&self, device: &Device) -> T5Bias {
        self.try_init(device).unwrap_or_else(|err| panic!("{err}"))
    }
}

impl T5Bias {
    /// Bucket ids `[seq_q, seq_k]` for queries at `offset..offset + seq_q` and keys at `0..seq_k`,
    /// for a causal block if `causal` is set (see [`T5Bias`]).
    ///
    /// Computed on the device and cached: `key - query` from `arange`, clamped to
    /// `±max_distance` (every farther distance is in the last bucket of its side), and looked up
    /// in the `2 * max_distance + 1` buckets [`t5_bucket`] gives for those distances. The lookup
    /// is exact by construction: the device never evaluates the log itself.
    pub fn buckets(
        &self,
        offset: usize,
        seq_q: usize,
        seq_k: usize,
        causal: bool,
    ) -> Tensor<2, Int> {
        let device = self.table.device();
        if seq_q == 0 || seq_k == 0 {
            return Tensor::zeros(Shape::new([seq_q, seq_k]), &device);
        }
        let (bucketing, key) = self.bucketing(causal, &device);
        self.buckets.get(key, offset, seq_q, seq_k, |n| {
            build_buckets(&bucketing, n, &device)
        })
    }

    /// The score bias for queries at positions `offset..offset + seq_q` against keys at
    /// `0..seq_k`, for a causal block if `causal` is set (see [`T5Bias`]); gradients flow into
    /// the table. No length limit: far distances share the last bucket.
    ///
    /// Per call: one gather of `n_heads * seq_q * seq_k` scalars from the table, at cached
    /// bucket ids. Share it across blocks (T5 does) by calling it once and passing the result
    /// to each block.
    ///
    /// # Shapes
    ///
    /// - output: `[1, n_heads, seq_q, seq_k]`
    pub fn bias(&self, offset: usize, seq_q: usize, seq_k: usize, causal: bool) -> Tensor<4> {
        let [_, n_heads] = self.table.shape().dims();
        let table = self.table.val();
        if seq_q == 0 || seq_k == 0 {
            return Tensor::zeros(
                Shape::new([1, n_heads, seq_q, seq_k]),
                (&table.device(), table.dtype()),
            );
        }
        let buckets = self
            .buckets(offset, seq_q, seq_k, causal)
            .reshape([seq_q * seq_k]);
        // [n_heads, num_buckets] gathered along the buckets: [n_heads, seq_q * seq_k].
        table
            .transpose()
            .select(1, buckets)
            .reshape([1, n_heads, seq_q, seq_k])
    }
}

impl T5Bias {
    /// What cached bucket ids depend on, and the cache key for them on `device` (int tensors
    /// come in the device's int dtype; the key needs only to be constant).
    fn bucketing(&self, causal: bool, device: &Device) -> (Bucketing, (Bucketing, DeviceKey)) {
        let [num_buckets, _] = self.table.shape().dims();
        let bucketing = Bucketing {
            causal,
            num_buckets,
            max_distance: self.max_distance,
        };
        let key = (bucketing.clone(), DeviceKey::new(device, DType::I64));
        (bucketing, key)
    }

    /// The bias of every relative distance `key - query` clamped to `±max_distance` (farther
    /// ones share the last bucket of their side), for a causal block if `causal` is set:
    /// `[n_heads, 2 max_distance + 1]`, entry `clamp(key - query) + max_distance`. The compact
    /// form the tiled attention looks up in each tile; one gather from the table per call, so
    /// gradients reach it.
    pub(crate) fn bias_by_distance(&self, causal: bool) -> Tensor<2> {
        let device = self.table.device();
        let (bucketing, key) = self.bucketing(causal, &device);
        let lookup = self.distance_buckets.with(&key, |slot| {
            slot.get_or_insert_with(|| distance_lookup(&bucketing, &device))
                .clone()
        });
        self.table.val().transpose().select(1, lookup)
    }

    /// The table in the compact form [`attend`](crate::attend) takes: the bias of every
    /// clamped relative distance, `[n_heads, 2 max_distance + 1]` (one gather from the table,
    /// so gradients reach it), decoder-style buckets if `causal` is set.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{AttendOptions, T5BiasConfig, attend};
    ///
    /// let device = Device::flex();
    /// let t5 = T5BiasConfig::new(4).init(&device);
    /// let q = Tensor::<4>::ones([1, 4, 6, 8], &device);
    /// // T5 does not scale its scores: its weights absorb 1 / sqrt(d_head).
    /// let options = AttendOptions::new().bias(t5.by_distance(false)).scale(1.0);
    /// assert_eq!(attend(q.clone(), q.clone(), q, &options).dims(), [1, 4, 6, 8]);
    /// ```
    pub fn by_distance(&self, causal: bool) -> crate::AttentionBias {
        crate::AttentionBias::ByDistance {
            bias: self.bias_by_distance(causal),
            reach: self.max_distance,
        }
    }
}

/// The bucket of each distance in `-max_distance..=max_distance`, on the device.
fn distance_lookup(bucketing: &Bucketing, device: &Device) -> Tensor<1, Int> {
    let reach = bucketing.max_distance as i64;
    let lookup: Vec<i64> = (-reach..=reach)
        .map(|rel| {
            t5_bucket(
                rel,
                !bucketing.causal,
                bucketing.num_buckets,
                bucketing.max_distance,
            ) as i64
        })
        .collect();
    Tensor::<1, Int>::from_data(TensorData::new(lookup, [2 * reach as usize + 1]), device)
}

/// Bucket ids for queries and keys at `0..n`.
fn build_buckets(bucketing: &Bucketing, n: usize, device: &Device) -> Tensor<2, Int> {
    let lookup = distance_lookup(bucketing, device);
    let index = distance_index(relative(0, n, n, device), bucketing.max_distance);
    lookup.select(0, index).reshape([n, n])
}

#[cfg(test)]
mod tests {
    use super::t5_bucket;

    /// Every bucket boundary of `T5Attention._relative_position_bucket` (transformers 5.24.0,
    /// torch 2.6.0) on relative positions -3000..=3000, for 250 (num_buckets, max_distance,
    /// direction) triples: `tools/hf_t5_bucket_fixtures.py` wrote the places where the bucket
    /// changes, so between two entries every position has the earlier entry's bucket.
    #[test]
    fn buckets_equal_transformers_on_a_grid() {
        let text = include_str!("../../tests/fixtures/hf/t5_buckets.json");
        let fixture: serde_json::Value = serde_json::from_str(text).expect("the fixture parses");
        let reach = fixture["reach"].as_i64().expect("reach");
        let mut wrong = Vec::new();
        for case in fixture["cases"].as_array().expect("cases") {
            let num_buckets = case["num_buckets"].as_u64().expect("num_buckets") as usize;
            let max_distance = case["max_distance"].as_u64().expect("max_distance") as usize;
            let bidirectional = case["bidirectional"].as_bool().expect("bidirectional");
            let changes: Vec<(i64, i64)> = case["changes"]
                .as_array()
                .expect("changes")
                .iter()
                .map(|c| (c[0].as_i64().unwrap(), c[1].as_i64().unwrap()))
                .collect();
            let mut next = 0;
            let mut expected = changes[0].1;
            for rel in -reach..=reach {
                if next < changes.len() && changes[next].0 == rel {
                    expected = changes[next].1;
                    next += 1;
                }
                let ours = t5_bucket(rel, bidirectional, num_buckets, max_distance) as i64;
                if ours != expected {
                    wrong.push(format!(
                        "num_buckets {num_buckets}, max_distance {max_distance}, \
                         bidirectional {bidirectional}, relative position {rel}: \
                         ours {ours}, transformers {expected}"
                    ));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{} buckets differ from transformers, first: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
}
