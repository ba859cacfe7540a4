//! The reference twin of [`EmbeddingWithPosition`]'s fused forward: the same computation as
//! plain burn tensor ops (a gather, a scale, the position rows, an add or a concatenation),
//! checked on the host first. The fused pass is tested against it, and the benches time it
//! beside the fused one.

use burn::tensor::module::embedding;
use burn::tensor::{Int, Tensor};

use super::ids::{check_ids_in, value_ranges};
use crate::{Combine, EmbeddingWithPosition, PositionError, Positions};

impl EmbeddingWithPosition {
    /// The unfused forward, made of burn tensor ops: a gather, a scale, the position rows and
    /// an add or a concatenation, after an id check that reads the ids' minimum and maximum
    /// back once. The reference the fused pass is tested against (the slow twin). Dropout included.
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - `Positions::Explicit`: `[batch, seq]` (or `[1, seq]`, shared by the batch)
    /// - output: `[batch, seq, d_model]`
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{EmbeddingWithPositionConfig, Positions};
    ///
    /// let device = Device::flex();
    /// let embed = EmbeddingWithPositionConfig::new(100, 16).with_scale_tokens(true).init(&device);
    /// let ids = Tensor::<2, Int>::from_data([[1, 2, 3]], &device);
    /// let fused = embed.try_forward(ids.clone()).unwrap();
    /// let reference = embed.try_forward_reference(ids, Positions::default()).unwrap();
    /// assert_eq!(reference.dims(), [1, 3, 16]);
    /// fused.into_data().assert_approx_eq::<f32>(&reference.into_data(), Default::default());
    /// ```
    pub fn try_forward_reference(
        &self,
        ids: Tensor<2, Int>,
        positions: Positions,
    ) -> Result<Tensor<3>, PositionError> {
        let [batch, seq] = ids.dims();
        let positions = positions.on_sequence(seq)?;
        let explicit = match &positions {
            Positions::Explicit(p) if p.dims() != [batch, seq] && p.dims() != [1, seq] => {
                return Err(PositionError::positions_shape([batch, seq], p.dims()));
            }
            Positions::Explicit(p) => Some(p),
            // `on_sequence` kept one-axis positions only.
            _ => None,
        };
        if batch * seq == 0 {
            return Ok(self.empty_output(batch, seq));
        }
        let ranges = value_ranges(
            &[Some(&ids), explicit]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>(),
        );
        check_ids_in(&ids, ranges[0], self.vocab_size())?;
        self.check_dtypes("this module")?;

        let tokens = self.token_vectors(ids);
        let position = match positions {
            Positions::Offset(offset) => {
                self.position.check_window(offset, seq)?;
                self.position
                    .rows(offset, seq)
                    .map(|rows| rows.unsqueeze::<3>())
            }
            Positions::Explicit(p) => {
                let (min, max) = ranges[1];
                if min < 0 {
                    let (position, at) = super::ids::first_where(&p, |position| position < 0)
                        .expect("the range check saw a negative position");
                    return Err(PositionError::NegativePosition { position, at });
                }
                self.position.check(max)?;
                self.position.gather(p, max.max(0) as usize)
            }
            Positions::Grid(_) | Positions::Axes(_) => unreachable!("positions on a grid"),
        };
        Ok(self.dropout.forward(self.combine(tokens, position)))
    }

    /// Token vectors, scaled. A padding id's vector is its stored row, cut from the gradient
    /// (PyTorch's `padding_idx`).
    fn token_vectors(&self, ids: Tensor<2, Int>) -> Tensor<3> {
        let mut tokens = embedding(self.tokens.val(), ids.clone()); // [batch, seq, d_token]
        if let Some(idx) = self.padding_idx {
            // 1 for padding, 0 for real tokens: [batch, seq, 1], broadcast over d_token.
            let pad = ids.equal_elem(idx as i64).float().unsqueeze_dim::<3>(2);
            let keep = pad.clone().neg().add_scalar(1.0);
            tokens = tokens.clone() * keep + (tokens * pad).detach();
        }
        if self.token_scale != 1.0 {
            tokens = tokens.mul_scalar(self.token_scale);
        }
        tokens
    }

    fn combine(&self, tokens: Tensor<3>, position: Option<Tensor<3>>) -> Tensor<3> {
        let Some(position) = position else {
            return tokens;
        };
        // A constant table (the sinusoid's, f32) beside tokens cast to f16 or bf16.
        let position = if position.dtype() == tokens.dtype() {
            position
        } else {
            position.cast(tokens.dtype())
        };
        match self.combine {
            Combine::Add => tokens + position,
            Combine::Concat { d_position, .. } => {
                let [batch, seq, _] = tokens.dims();
                let position = position.expand([batch, seq, d_position]);
                Tensor::cat(vec![tokens, position], 2)
            }
        }
    }
}
