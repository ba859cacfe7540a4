//! Learned absolute positions: a trainable `[max_len, d_position]` table, one row per
//! position, as in BERT ([Devlin et al. 2019](https://arxiv.org/abs/1810.04805)) and GPT
//! ([Radford et al. 2018](https://cdn.openai.com/research-covers/language-unsupervised/language_understanding_paper.pdf)).
//!
//! The table has no row past `max_len - 1`; asking for one is an error, never a silent read.

use crate::training::materialize;
use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay, Param};
use burn::nn::Initializer;
use burn::tensor::module::embedding;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::grid::{PatchGridConfig, resize_matrices, resize_table};
use super::{SinusoidalConfig, sinusoid_rows};
use crate::PositionError;
use crate::cache::{DeviceKey, Grown};
use crate::limits::{device_fits, table_fits};
use burn_positional_kernels::Grid;

/// How a learned table starts.
#[derive(Config, Debug, PartialEq)]
pub enum LearnedInit {
    /// Drawn from an initializer (BERT and GPT-2 use `N(0, 0.02)`).
    Random(Initializer),
    /// The sinusoidal table with this base (10 000 in the paper), then trained: a learned
    /// table that starts smooth and relative-aware.
    Sinusoidal {
        /// The wavelength base.
        base: f64,
    },
}

/// Configuration of a learned position table. Its width comes from the embedding it belongs to.
#[derive(Config, Debug, PartialEq)]
pub struct LearnedConfig {
    /// Rows in the table: the longest sequence (or largest position + 1) it can embed.
    pub max_len: usize,
    /// How the table starts. `N(0, 0.02)` by default, the initialization of BERT and GPT-2.
    #[config(default = "LearnedInit::Random(Initializer::Normal { mean: 0.0, std: 0.02 })")]
    pub init: LearnedInit,
    /// The table is a patch grid (a vision transformer's): prefix rows, then one row per patch
    /// of the trained grid, resized to other grids by [`LearnedPosition::on_grid`]. None by
    /// default (one row per position of a sequence).
    #[config(default = "None")]
    pub grid: Option<PatchGridConfig>,
}

/// A trainable table of position vectors. Built by [`LearnedConfig::init`].
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::LearnedConfig;
///
/// let device = Device::flex();
/// let table = LearnedConfig::new(128).init(32, &device);
/// assert_eq!(table.rows(10, 20).dims(), [20, 32]);
/// assert!(table.check(127).is_ok());
/// assert!(table.check(128).is_err()); // no row 128: a clear error, never a stray read
/// ```
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct LearnedPosition {
    /// `[max_len, d_position]`, trained and saved.
    pub table: Param<Tensor<2>>,
    /// The patch-grid layout of the table, if it has one.
    #[module(skip)]
    grid: Option<PatchGridConfig>,
    /// The resize matrices of the last grid asked for, kept on the device.
    #[module(skip)]
    resize: Grown<Vec<Tensor<2>>, (DeviceKey, Grid)>,
}

impl ModuleDisplay for LearnedPosition {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [max_len, d_position] = self.table.shape().dims();
        content
            .add("max_len", &max_len)
            .add("d_position", &d_position)
            .optional()
    }
}

impl LearnedConfig {
    /// Checks the config for a table `d_position` wide.
    pub fn validate(&self, d_position: usize) -> Result<(), PositionError> {
        if self.max_len == 0 {
            return Err(PositionError::InvalidConfig {
                field: "LearnedConfig::max_len",
                value: "0".into(),
                rule: "a learned table needs at least one row",
                fix: "set max_len to the longest sequence the model will see".into(),
            });
        }
        table_fits("LearnedConfig::max_len", self.max_len, d_position, || {
            "set max_len to the longest sequence the model will see".into()
        })?;
        if let Some(grid) = &self.grid {
            grid.validate(self.max_len)?;
        }
        if let LearnedInit::Sinusoidal { base } = self.init {
            SinusoidalConfig::new()
                .with_base(base)
                .validate(d_position)?;
        }
        Ok(())
    }

    /// Builds the table with `d_position` columns.
    ///
    /// # Panics
    ///
    /// If `max_len` is 0, or the table starts sinusoidal and `d_position` is odd.
    pub fn init(&self, d_position: usize, device: &Device) -> LearnedPosition {
        self.try_init(d_position, device)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// Checks the config ([`validate`](Self::validate)) and that `device` can hold the table
    /// in one buffer, then builds it.
    pub fn try_init(
        &self,
        d_position: usize,
        device: &Device,
    ) -> Result<LearnedPosition, PositionError> {
        self.validate(d_position)?;
        device_fits(
            device,
            "LearnedConfig::max_len",
            self.max_len,
            d_position,
            |most| {
                format!(
                    "lower max_len to at most {most} rows on this device, or use the sinusoidal \
                 scheme, whose rows are computed rather than stored"
                )
            },
        )?;
        let table = match &self.init {
            LearnedInit::Random(initializer) => {
                initializer.init([self.max_len, d_position], device)
            }
            LearnedInit::Sinusoidal { base } => {
                let rows = sinusoid_rows(0..self.max_len as u64, d_position, *base);
                Param::from_data(TensorData::new(rows, [self.max_len, d_position]), device)
            }
        };
        Ok(materialize(LearnedPosition {
            table,
            grid: self.grid.clone(),
            resize: Grown::default(),
        }))
    }
}

impl LearnedPosition {
    /// The number of rows.
    pub fn max_len(&self) -> usize {
        self.table.shape().dims::<2>()[0]
    }

    /// Refuses a largest position that has no row.
    pub fn check(&self, max_position: i64) -> Result<(), PositionError> {
        let max_len = self.max_len();
        if max_position >= max_len as i64 {
            return Err(PositionError::PositionPastTable {
                position: max_position,
                at: None,
                max_len,
                needed: (max_position as usize).saturating_add(1),
            });
        }
        Ok(())
    }

    /// Rows `offset..offset + seq`, already checked to exist.
    ///
    /// # Panics
    ///
    /// If `offset + seq > max_len` (call [`check`](Self::check) first).
    ///
    /// # Shapes
    ///
    /// - output: `[seq, d_position]`
    pub fn rows(&self, offset: usize, seq: usize) -> Tensor<2> {
        let [_, d_position] = self.table.shape().dims();
        self.table
            .val()
            .slice([offset..offset + seq, 0..d_position])
    }

    /// The rows at explicit positions, already checked to exist. Unchecked here: on wgpu a
    /// position past the table would read stray data, so call [`check`](Self::check) first.
    ///
    /// # Shapes
    ///
    /// - positions: `[batch, seq]`
    /// - output: `[batch, seq, d_position]`
    pub fn gather(&self, positions: Tensor<2, Int>) -> Tensor<3> {
        embedding(self.table.val(), positions)
    }

    /// The patch-grid layout of the table ([`LearnedConfig::grid`]), if it has one.
    pub fn patch_grid(&self) -> Option<&PatchGridConfig> {
        self.grid.as_ref()
    }

    /// This table read as a patch grid: the same parameter, with the layout of
    /// [`PatchGridConfig`] (a checkpoint's table loaded into a plain learned table).
    ///
    /// # Errors
    ///
    /// If the table's rows are not `prefix + trained patches`.
    pub fn with_patch_grid(mut self, grid: PatchGridConfig) -> Result<Self, PositionError> {
        grid.validate(self.max_len())?;
        self.grid = Some(grid);
        self.resize = Grown::default();
        Ok(self)
    }

    /// This table with `table`'s values (a checkpoint's, read by the caller), as a fresh trained
    /// parameter: taken out of any autodiff graph it came from (a tensor squeezed or cast on an
    /// autodiff device is no leaf, and only a leaf trains), in its own dtype.
    ///
    /// # Shapes
    ///
    /// - table: `[max_len, d_position]`, this table's shape
    ///
    /// # Errors
    ///
    /// If `table` has another shape, naming both.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::LearnedConfig;
    ///
    /// let device = Device::flex().autodiff();
    /// // A checkpoint stores ViT's table as [1, rows, d]: squeezed, it is no leaf any more.
    /// let stored = Tensor::<3>::ones([1, 5, 4], &device).require_grad();
    /// let table = LearnedConfig::new(5).init(4, &device).with_table(stored.squeeze_dim(0)).unwrap();
    /// let grads = table.table.val().sum().backward();
    /// assert!(table.table.val().grad(&grads).is_some());
    /// ```
    pub fn with_table(mut self, table: Tensor<2>) -> Result<Self, PositionError> {
        let expected = self.table.shape().dims::<2>();
        if table.dims() != expected {
            return Err(PositionError::ShapeMismatch {
                what: "LearnedPosition::with_table",
                expected: expected.to_vec(),
                got: table.dims().to_vec(),
                fix: "give the table [max_len, d_position] rows as the config sizes it (a \
                      checkpoint's [1, rows, d] table squeezed to [rows, d])",
            });
        }
        self.table = Param::from_tensor(table.detach().set_require_grad(false));
        Ok(self)
    }

    /// The rows before the grid (a class token's, DeiT's distillation token's), never resized.
    ///
    /// # Shapes
    ///
    /// - output: `[prefix, d_position]` (`[0, d_position]` without a grid)
    pub fn prefix_rows(&self) -> Tensor<2> {
        let [_, d_position] = self.table.shape().dims();
        let prefix = self.grid.as_ref().map_or(0, |g| g.prefix);
        self.table.val().slice([0..prefix, 0..d_position])
    }

    /// The vectors of the patches of `target`, row-major: the trained grid's rows when
    /// `target` is that grid, otherwise the trained grid resized to it
    /// ([`GridResize`](super::GridResize): transformers' bicubic by default), on the device,
    /// in f32, with gradients reaching the table. The resize matrices depend on the sizes
    /// only: built once per target grid and kept on the device.
    ///
    /// transformers' families skip the resize when the patch count equals the trained one and
    /// the image is square (in pixels); a port does that test itself, as it alone knows the
    /// pixels.
    ///
    /// # Shapes
    ///
    /// - output: `[target.len(), d_position]`
    ///
    /// # Errors
    ///
    /// A table with no grid layout, a target with another number of axes, or a target whose
    /// table would not fit the device.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::absolute::PatchGridConfig;
    /// use burn_positional::{Grid, LearnedConfig};
    ///
    /// let device = Device::flex();
    /// // ViT at 224 with 16-pixel patches: a class row and a 14 x 14 grid.
    /// let table = LearnedConfig::new(1 + 14 * 14)
    ///     .with_grid(Some(PatchGridConfig::new(vec![14, 14])))
    ///     .init(32, &device);
    /// // The same model on a 384 x 256 image: a 24 x 16 grid.
    /// let patches = table.on_grid(&Grid::new([24, 16])).unwrap();
    /// assert_eq!(patches.dims(), [24 * 16, 32]);
    /// assert_eq!(table.prefix_rows().dims(), [1, 32]);
    /// ```
    pub fn on_grid(&self, target: &Grid) -> Result<Tensor<2>, PositionError> {
        let Some(layout) = &self.grid else {
            return Err(PositionError::InvalidConfig {
                field: "LearnedConfig::grid",
                value: "None".into(),
                rule: "a table without a patch-grid layout has no rows and columns to resize",
                fix: "build it with LearnedConfig::with_grid(Some(PatchGridConfig::new(trained \
                      grid))), or call LearnedPosition::with_patch_grid"
                    .into(),
            });
        };
        let trained = layout.grid()?;
        if target.axes() != trained.axes() {
            return Err(PositionError::GridAxes {
                scheme: format!("a learned table trained on a {trained} grid"),
                expected: trained.axes(),
                got: target.axes(),
                fix: "give a grid with as many axes as the trained one",
            });
        }
        let [max_len, d_position] = self.table.shape().dims();
        let device = self.table.device();
        check_resized_fits(&device, &trained, target, d_position)?;
        let grid_rows = self
            .table
            .val()
            .slice([layout.prefix..max_len, 0..d_position]);
        if *target == trained {
            return Ok(grid_rows);
        }
        let key = (
            DeviceKey::new(&device, burn::tensor::DType::F32),
            target.clone(),
        );
        let matrices = self.resize.with(&key, |slot| {
            slot.get_or_insert_with(|| resize_matrices(&trained, target, &layout.resize, &device))
                .clone()
        });
        Ok(resize_table(grid_rows, &trained, &matrices))
    }

    /// The position rows of an image `pixels = [height, width]` cut into patches
    /// `patch = [rows, columns]` pixels each, as transformers' vision families
    /// (`interpolate_pos_encoding` of ViT, DeiT, DINOv2, CLIP, SigLIP) return them: the prefix
    /// rows, then the rows of the grid `[height / rows, width / columns]` (floor division:
    /// pixels past the last whole patch are cut, as the patch convolution cuts them), resized
    /// by [`on_grid`](Self::on_grid); the table unchanged when the image has the trained number
    /// of patches and is square in pixels (their early return, kept to the letter: a
    /// non-square image with the trained count is resized).
    ///
    /// # Shapes
    ///
    /// - output: `[prefix + (height / rows) * (width / columns), d_position]`
    ///
    /// # Errors
    ///
    /// A patch of 0 pixels on an axis, an image smaller than one patch (naming the pixels and
    /// the patch), and what [`on_grid`](Self::on_grid) refuses.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::absolute::PatchGridConfig;
    /// use burn_positional::LearnedConfig;
    ///
    /// let device = Device::flex();
    /// let table = LearnedConfig::new(1 + 4 * 4)
    ///     .with_grid(Some(PatchGridConfig::new(vec![4, 4])))
    ///     .init(8, &device);
    /// // 17 x 23 pixels in patches of 4: a 4 x 5 grid, after the class row.
    /// assert_eq!(table.on_image([17, 23], [4, 4]).unwrap().dims(), [1 + 20, 8]);
    /// let err = table.on_image([3, 16], [4, 4]).unwrap_err();
    /// assert!(err.to_string().contains("`image height` = 3 pixels (patches of 4 x 4)"));
    /// // A patch of no pixels is the patch's fault, not the image's.
    /// let err = table.on_image([16, 16], [0, 6]).unwrap_err();
    /// assert!(err.to_string().contains("`patch` = 0 x 6 pixels"), "{err}");
    /// ```
    pub fn on_image(
        &self,
        pixels: [usize; 2],
        patch: [usize; 2],
    ) -> Result<Tensor<2>, PositionError> {
        let [height, width] = pixels;
        if patch.contains(&0) {
            return Err(PositionError::InvalidConfig {
                field: "patch",
                value: format!("{} x {} pixels", patch[0], patch[1]),
                rule: "a patch is at least one pixel on each axis",
                fix: "give the patch size the model cuts images into (its config's patch_size, \
                      e.g. [16, 16])"
                    .into(),
            });
        }
        for (axis, (&size, &p)) in pixels.iter().zip(&patch).enumerate() {
            if size < p {
                return Err(PositionError::InvalidConfig {
                    field: if axis == 0 {
                        "image height"
                    } else {
                        "image width"
                    },
                    value: format!("{size} pixels (patches of {} x {})", patch[0], patch[1]),
                    rule: "an image holds at least one whole patch on each axis",
                    fix: format!(
                        "resize the image to at least {} x {} pixels",
                        patch[0], patch[1]
                    ),
                });
            }
        }
        let grid = Grid::try_new([height / patch[0], width / patch[1]])?;
        let trained_len = self
            .grid
            .as_ref()
            .map(|g| g.trained.iter().product::<usize>());
        if Some(grid.len()) == trained_len && height == width {
            return Ok(self.table.val());
        }
        let rows = self.on_grid(&grid)?;
        Ok(Tensor::cat(vec![self.prefix_rows(), rows], 0))
    }
}

/// Refuses a target grid whose resized table would not fit the device, naming the largest axis
/// and the most patches it could have beside the others.
fn check_resized_fits(
    device: &Device,
    trained: &Grid,
    target: &Grid,
    d_position: usize,
) -> Result<(), PositionError> {
    let most_rows = crate::limits::device_rows(device, d_position, 4)
        .unwrap_or(usize::MAX)
        .min(crate::limits::MAX_TABLE_VALUES / d_position.max(1));
    if target.len() <= most_rows {
        return Ok(());
    }
    let (axis, &size) = target
        .sizes()
        .iter()
        .enumerate()
        .rev()
        .max_by_key(|(_, s)| **s)
        .expect("a grid has an axis");
    let others = target.len() / size;
    Err(PositionError::GridTooLarge {
        axis,
        size,
        trained: trained.sizes()[axis],
        limit: most_rows / others.max(1),
    })
}
