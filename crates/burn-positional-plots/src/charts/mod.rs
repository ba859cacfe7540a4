//! Line, point and arrow charts: grids of panels with axes, labels, legends and an optional
//! logarithmic y axis (training curves, learned positions in two dimensions, drift of a point
//! from one state to another).
//!
//! - `chart`: [`Chart`], [`Series`], [`SeriesKind`] (what a chart holds, and its checks);
//! - `draw`: [`draw_charts`] and the drawing of one panel;
//! - `ticks`: tick values and labels; `clip`: cutting data to the axis ranges.

mod chart;
mod clip;
mod draw;
mod ticks;

pub use chart::{Chart, Series, SeriesKind};
pub use draw::draw_charts;
