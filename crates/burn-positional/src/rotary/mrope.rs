//! M-RoPE's position ids for a prompt that mixes text, images and video (Qwen2-VL, Qwen2.5-VL):
//! transformers' `get_rope_index` (`modeling_qwen2_vl.py`, `modeling_qwen2_5_vl.py`, v5), step for
//! step, on the host (it reads token types and grid sizes, which a processor gives on the host
//! anyway).
//!
//! Each row's unpadded tokens are cut into runs of one modality. A text run of `n` tokens takes
//! positions `p..p + n` on all three axes. A vision run takes the next grid of its modality
//! (`image_grid_thw` or `video_grid_thw`, in order), merged `spatial_merge_size` times on rows
//! and columns: its tokens sit at `(p + t * interval, p + row, p + column)`, and the run moves
//! `p` on by `max(rows, columns)` (not by its token count). `interval` is 1, or for Qwen2.5-VL's
//! videos `tokens_per_second * second_per_grid_t`, truncated after the product as torch's
//! `.long()` does. Padded tokens get 0 on every axis.

use burn::config::Config;
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_positional_kernels::Grid;

use crate::{PositionError, Positions};

/// What a token of a multimodal prompt is (transformers' `mm_token_type_ids`: 0, 1, 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Modality {
    /// Text (and the vision start and end markers).
    Text,
    /// A patch of an image.
    Image,
    /// A patch of a video.
    Video,
}

impl Modality {
    /// The modality of each id: `image_token_id` and `video_token_id` mark vision patches,
    /// everything else is text (as Qwen2-VL's processor writes `mm_token_type_ids`).
    pub fn of_ids(ids: &[i64], image_token_id: i64, video_token_id: i64) -> Vec<Self> {
        ids.iter()
            .map(|&id| match id {
                id if id == image_token_id => Self::Image,
                id if id == video_token_id => Self::Video,
                _ => Self::Text,
            })
            .collect()
    }
}

/// Settings of [`mrope_positions`], from a checkpoint's `vision_config`.
#[derive(Config, Debug, PartialEq)]
pub struct MropeIndexConfig {
    /// `spatial_merge_size`: patches merged per token along rows and along columns. 2 in
    /// every Qwen2-VL and Qwen2.5-VL checkpoint.
    #[config(default = 2)]
    pub spatial_merge_size: usize,
    /// `tokens_per_second` (Qwen2.5-VL): a video's frames are spaced by this times its
    /// `second_per_grid_t`. `None` for Qwen2-VL, whose frames are spaced by 1.
    #[config(default = "None")]
    pub tokens_per_second: Option<f64>,
    /// Qwen3-VL: each video is cut into its frames first (`repeat_interleave` of
    /// `video_grid_thw` by `t`, then `t = 1`), as its processor separates frames by timestamp
    /// tokens: each frame is a run of its own. False by default (Qwen2-VL, Qwen2.5-VL).
    #[config(default = false)]
    pub split_video_frames: bool,
}

/// The position ids of a batch, `[batch, seq, 3]` row-major (frame, row, column), and each
/// row's `mrope_position_deltas` (its largest position plus one, minus its unpadded length:
/// what decoding adds to the cache position of each new token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MropePositions {
    /// `[batch, seq, 3]`, row-major.
    pub ids: Vec<i64>,
    /// One per row.
    pub deltas: Vec<i64>,
    /// Rows.
    pub batch: usize,
    /// Tokens per row.
    pub seq: usize,
}

impl MropePositions {
    /// The ids as [`Positions::Axes`] on `device`, for [`Rope::apply_positions`](crate::Rope::apply_positions).
    pub fn to_positions(&self, device: &Device) -> Positions {
        Positions::Axes(Tensor::<3, Int>::from_data(
            TensorData::new(self.ids.clone(), [self.batch, self.seq, 3]),
            device,
        ))
    }

    /// The ids on one axis (0: frame, 1: row, 2: column), `[batch, seq]` row-major: the layout
    /// of one plane of transformers' `[3, batch, seq]`.
    pub fn axis(&self, axis: usize) -> Vec<i64> {
        self.ids.iter().skip(axis).step_by(3).copied().collect()
    }
}

/// transformers' `get_rope_index` for a batch. Each row's unpadded tokens are cut into runs of
/// one modality. A text run of `n` tokens takes positions `p..p + n` on all three axes. A
/// vision run takes the next grid of its modality (`image_grid_thw` or `video_grid_thw`, in
/// order), merged `spatial_merge_size` times on rows and columns: its tokens sit at
/// `(p + t * interval, p + row, p + column)`, and the run moves `p` on by `max(rows, columns)`
/// (not by its token count). `interval` is 1, or for Qwen2.5-VL's videos
/// `tokens_per_second * second_per_grid_t`, truncated after the f32 product as torch's
/// `.long()` does. Padded tokens get 0 on every axis.
///
/// - `modalities`: one row per sequence, one [`Modality`] per token (padded tokens included);
/// - `attention_mask`: `false` for padded tokens (any side), or `None` when nothing is padded;
/// - `image_grids`, `video_grids`: `image_grid_thw` and `video_grid_thw`, in prompt order;
/// - `second_per_grid`: Qwen2.5-VL's `second_per_grid_ts`, one per video (1 when empty).
///
/// # Errors
///
/// A grid with a size of 0 or below, a vision run with no grid left for it, or a run whose
/// token count is not its merged grid's (`t * (h / m) * (w / m)`), a mask of another shape:
/// each named with the value, the limit and the fix.
///
/// ```
/// use burn_positional::rotary::{MropeIndexConfig, Modality, mrope_positions};
///
/// use Modality::{Image, Text};
/// // Two text tokens, a 1 x 4 x 4 image merged 2 x 2 into 4 tokens, one text token.
/// let row = vec![Text, Text, Image, Image, Image, Image, Text];
/// let ids = mrope_positions(&[row], None, &[[1, 4, 4]], &[], &[], &MropeIndexConfig::new())
///     .unwrap();
/// assert_eq!(ids.axis(1), [0, 1, 2, 2, 3, 3, 4]); // rows: the image's start at 2
/// assert_eq!(ids.axis(2), [0, 1, 2, 3, 2, 3, 4]); // columns
/// assert_eq!(ids.deltas, [-2]); // 5 positions for 7 tokens
/// ```
pub fn mrope_positions(
    modalities: &[Vec<Modality>],
    attention_mask: Option<&[Vec<bool>]>,
    image_grids: &[[i64; 3]],
    video_grids: &[[i64; 3]],
    second_per_grid: &[f64],
    config: &MropeIndexConfig,
) -> Result<MropePositions, PositionError> {
    let batch = modalities.len();
    let seq = modalities.first().map_or(0, Vec::len);
    let merge = config.spatial_merge_size.max(1) as i64;
    let mut ids = vec![0i64; batch * seq * 3];
    let mut deltas = Vec::with_capacity(batch);
    // Every grid checked first: a size of 0 or below is named, never wrapped or dropped.
    for grid in image_grids.iter().chain(video_grids) {
        Grid::from_signed(grid)?;
    }
    let frames: Vec<[i64; 3]>;
    let video_grids = if config.split_video_frames {
        frames = video_grids
            .iter()
            .flat_map(|&[t, h, w]| std::iter::repeat_n([1, h, w], t.max(0) as usize))
            .collect();
        &frames[..]
    } else {
        video_grids
    };
    let (mut images, mut videos, mut seconds) = (
        image_grids.iter(),
        video_grids.iter(),
        second_per_grid.iter(),
    );
    for (b, row) in modalities.iter().enumerate() {
        let mask = attention_mask.map(|m| m.get(b));
        let kept: Vec<usize> = match mask {
            Some(Some(m)) if m.len() == row.len() && row.len() == seq => {
                (0..seq).filter(|&s| m[s]).collect()
            }
            Some(m) => {
                return Err(PositionError::ShapeMismatch {
                    what: "mrope_positions: the attention mask",
                    expected: vec![batch, seq],
                    got: vec![attention_mask.map_or(0, <[_]>::len), m.map_or(0, Vec::len)],
                    fix: "give one mask row per sequence, one flag per token",
                });
            }
            None if row.len() != seq => {
                return Err(PositionError::ShapeMismatch {
                    what: "mrope_positions: the rows of token types",
                    expected: vec![seq],
                    got: vec![row.len()],
                    fix: "pad every row to one length",
                });
            }
            None => (0..seq).collect(),
        };
        let mut positions: Vec<[i64; 3]> = Vec::with_capacity(kept.len());
        let mut current = 0i64;
        let mut i = 0;
        while i < kept.len() {
            let modality = row[kept[i]];
            let run = kept[i..]
                .iter()
                .take_while(|&&s| row[s] == modality)
                .count();
            match modality {
                Modality::Text => {
                    positions.extend((0..run as i64).map(|k| [current + k; 3]));
                    current += run as i64;
                }
                Modality::Image | Modality::Video => {
                    let (grid, interval) = if modality == Modality::Image {
                        (images.next(), 1.0f32)
                    } else {
                        let second = seconds.next().copied().unwrap_or(1.0);
                        let interval = config
                            .tokens_per_second
                            .map_or(1.0, |t| t as f32 * second as f32);
                        (videos.next(), interval)
                    };
                    let Some(&[t, h, w]) = grid else {
                        return Err(PositionError::InvalidConfig {
                            field: if modality == Modality::Image {
                                "image_grid_thw"
                            } else {
                                "video_grid_thw"
                            },
                            value: format!(
                                "{} grids, all taken before a vision run of row {b}",
                                if modality == Modality::Image {
                                    image_grids.len()
                                } else {
                                    video_grids.len()
                                }
                            ),
                            rule: "every run of vision tokens takes the next grid of its \
                                   modality",
                            fix: "give one grid per image or video in the prompt, in order".into(),
                        });
                    };
                    let (gt, gh, gw) = (t, h / merge, w / merge);
                    let tokens = (gt * gh * gw) as usize;
                    if tokens != run {
                        return Err(PositionError::GridLength {
                            grid: format!("{t}x{h}x{w} merged {merge}x{merge} ({gt}x{gh}x{gw})"),
                            tokens,
                            seq: run,
                        });
                    }
                    for f in 0..gt {
                        // `(arange(t) * time_interval).long()`: an f32 product, truncated.
                        let time = (f as f32 * interval) as i64 + current;
                        for r in 0..gh {
                            for c in 0..gw {
                                positions.push([time, current + r, current + c]);
                            }
                        }
                    }
                    current += gh.max(gw);
                }
            }
            i += run;
        }
        for (&s, p) in kept.iter().zip(&positions) {
            ids[(b * seq + s) * 3..(b * seq + s + 1) * 3].copy_from_slice(p);
        }
        let max = positions.iter().flatten().copied().max().unwrap_or(-1);
        deltas.push(max + 1 - kept.len() as i64);
    }
    Ok(MropePositions {
        ids,
        deltas,
        batch,
        seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Modality::{Image, Text, Video};

    #[test]
    fn a_run_of_the_wrong_length_is_named() {
        let row = vec![Text, Image, Image, Image, Text];
        let err = mrope_positions(
            &[row],
            None,
            &[[1, 4, 4]],
            &[],
            &[],
            &MropeIndexConfig::new(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("holds 4 tokens but 3 were given"),
            "{err}"
        );
    }

    #[test]
    fn a_vision_run_without_a_grid_is_named() {
        let row = vec![Text, Video, Video];
        let err =
            mrope_positions(&[row], None, &[], &[], &[], &MropeIndexConfig::new()).unwrap_err();
        assert!(err.to_string().contains("video_grid_thw"), "{err}");
    }

    #[test]
    fn negative_grids_are_refused() {
        let row = vec![Text, Image];
        let err = mrope_positions(
            &[row],
            None,
            &[[1, -2, 2]],
            &[],
            &[],
            &MropeIndexConfig::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("size -2"), "{err}");
    }

    #[test]
    fn qwen2_5_spaces_video_frames() {
        // 2 frames of 2 x 2 (merged to 1 x 1): frame 1 sits at 1 * 2 * 0.5 = 1 past the start.
        let row = vec![Text, Video, Video];
        let config = MropeIndexConfig::new().with_tokens_per_second(Some(2.0));
        let ids = mrope_positions(&[row], None, &[], &[[2, 2, 2]], &[0.75], &config).unwrap();
        // 1 * (2 * 0.75) = 1.5, truncated to 1.
        assert_eq!(ids.axis(0), [0, 1, 2]);
        assert_eq!(ids.axis(1), [0, 1, 1]);
    }
}
