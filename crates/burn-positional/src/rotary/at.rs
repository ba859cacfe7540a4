//! [`Rope::apply_at`] and [`Rope::apply_at_len`]: rotation at explicit positions, one per token.

use burn::tensor::{Int, Tensor, TensorData};

use super::Rope;
use super::scaling::Regime;
use crate::cache::DeviceKey;

impl Rope {
    /// Rotates queries or keys at explicit positions, one per token (packed documents, left
    /// padding): inside the precomputed table its rows (the numbers [`apply`](Self::apply)
    /// uses), past it computed on the device in f32 from the trained frequencies, as
    /// transformers computes every position. No read from the device. Frequencies that follow
    /// the length (`Dynamic`, `LongRope`) are the trained set's: transformers reads
    /// `max(position_ids) + 1` to pick them, which this call never does; a caller who knows that
    /// length passes it to [`apply_at_len`](Self::apply_at_len). A negative position rotates as
    /// position 0.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, n_heads, seq, d_head]`
    /// - positions: `[batch or 1, seq]`
    /// - output: `[batch, n_heads, seq, d_head]`
    ///
    /// # Panics
    ///
    /// If the last dimension of `x` is not `d_head`, or `positions` is not `[batch or 1, seq]`.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::RopeConfig;
    ///
    /// let device = Device::flex();
    /// let rope = RopeConfig::new(8).init(&device);
    /// let x = Tensor::<4>::ones([1, 2, 4, 8], &device);
    /// // Two documents packed in one row: positions restart at the second.
    /// let positions = Tensor::<2, Int>::from_data([[0, 1, 0, 1]], &device);
    /// let rotated = rope.apply_at(x.clone(), positions);
    /// assert_eq!(rotated.dims(), [1, 2, 4, 8]);
    /// let first = rope.apply(x.slice([0..1, 0..2, 0..2, 0..8]), 0);
    /// assert!(rotated.slice([0..1, 0..2, 2..4, 0..8]).all_close(first, None, Some(1e-6)));
    /// ```
    pub fn apply_at(&self, x: Tensor<4>, positions: Tensor<2, Int>) -> Tensor<4> {
        self.rotate_at(x, positions, Regime::Trained)
    }

    /// Rotates queries or keys at explicit positions with the frequencies of a sequence of
    /// length `len`: what transformers' rotary modules do with `position_ids`, where a
    /// frequency set that follows the length is chosen from `len = max(position_ids) + 1`
    /// (`LongRope` switches to its long factors past `original_max_position_embeddings`,
    /// `Dynamic` rescales past `max_position_embeddings`). The caller passes `len` (known on
    /// the host when it built the positions), so nothing is read from the device. For every
    /// other scaling this is [`apply_at`](Self::apply_at).
    ///
    /// Decoding with a cache of keys rotated this way keeps each key as it was rotated when it
    /// was cached, as transformers, vLLM and Phi-3's own code do: after a switch, old keys keep
    /// the short factors and new ones get the long ones. [`SelfAttention`](crate::SelfAttention)
    /// instead re-rotates every key at each step, so that decoding equals one forward over the
    /// whole sequence.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, n_heads, seq, d_head]`
    /// - positions: `[batch or 1, seq]`
    /// - output: `[batch, n_heads, seq, d_head]`
    ///
    /// # Panics
    ///
    /// As [`apply_at`](Self::apply_at).
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{LongRopeScaling, RopeConfig, RopeScaling};
    ///
    /// let device = Device::flex();
    /// let scaling = LongRopeScaling::new(vec![1.0; 4], vec![4.0; 4], 16, 4.0);
    /// let rope = RopeConfig::new(8).with_scaling(RopeScaling::LongRope(scaling)).init(&device);
    /// let x = Tensor::<4>::ones([1, 1, 1, 8], &device);
    /// let at = Tensor::<2, Int>::from_data([[10]], &device);
    /// // Position 10 of a 12-token sequence: short factors; of a 40-token one: long factors.
    /// let short = rope.apply_at_len(x.clone(), at.clone(), 12);
    /// let long = rope.apply_at_len(x, at, 40);
    /// assert_eq!(long.dims(), [1, 1, 1, 8]);
    /// assert!(!short.all_close(long, None, Some(1e-3)));
    /// ```
    pub fn apply_at_len(&self, x: Tensor<4>, positions: Tensor<2, Int>, len: usize) -> Tensor<4> {
        self.rotate_at(x, positions, self.scaling.regime(len))
    }

    /// The inverse frequencies `[1, pairs]` (f32, as transformers holds them) and attention
    /// factor of the frequency set `regime`, on the rope's device: uploaded once per set.
    pub(super) fn device_frequencies(&self, regime: Regime) -> (Tensor<2>, f32) {
        let device = self.cos.device();
        let pairs = self.cos.dims()[1];
        let key = (DeviceKey::new(&device, burn::tensor::DType::F32), regime);
        self.frequencies.with(&key, |slot| {
            slot.get_or_insert_with(|| {
                let len = self.scaling.length_of(regime);
                let (w, a) = self.frequencies(len);
                let w: Vec<f32> = w.into_iter().map(|w| w as f32).collect();
                (
                    Tensor::from_data(TensorData::new(w, [1, pairs]), &device),
                    a as f32,
                )
            })
            .clone()
        })
    }

    /// Rotates `x` at `positions` with the frequency set `regime`: the precomputed tables'
    /// rows where they hold it (the trained set inside `cache_len`), computed on the device in
    /// f32 elsewhere.
    fn rotate_at(&self, x: Tensor<4>, positions: Tensor<2, Int>, regime: Regime) -> Tensor<4> {
        let [batch, _, seq, d_head] = x.dims();
        assert_eq!(
            d_head, self.d_head,
            "rope built for d_head {} got heads {d_head} wide",
            self.d_head
        );
        let [n, len] = positions.dims();
        assert!(
            len == seq && (n == 1 || n == batch),
            "rope: positions must be [batch {batch} or 1, seq {seq}], got {:?}. Fix: one \
             position per token",
            positions.dims()
        );
        let [cache_len, pairs] = self.cos.dims();
        let flat = positions.reshape([n * seq]);
        let (inv_freq, attention) = self.device_frequencies(regime);
        let angles = flat.clone().clamp_min(0).float().reshape([n * seq, 1]) * inv_freq;
        let (cos, sin) = (
            angles.clone().cos().mul_scalar(attention),
            angles.sin().mul_scalar(attention),
        );
        let (cos, sin) = if regime == Regime::Trained {
            // Inside the table, its rows (the numbers `apply` uses).
            let index = flat.clone().clamp(0, cache_len as i64 - 1);
            let table_cos = self.cos.clone().select(0, index.clone());
            let table_sin = self.sin.clone().select(0, index);
            let past = flat
                .greater_equal_elem(cache_len as i64)
                .reshape([n * seq, 1])
                .expand([n * seq, pairs]);
            (
                table_cos.mask_where(past.clone(), cos),
                table_sin.mask_where(past, sin),
            )
        } else {
            (cos, sin)
        };
        // [n * seq, half] -> [n, 1, seq, half], broadcast over heads (and batch when n is 1).
        let shape = [n, 1, seq, pairs];
        self.rotate(x, cos.reshape(shape), sin.reshape(shape))
    }
}
