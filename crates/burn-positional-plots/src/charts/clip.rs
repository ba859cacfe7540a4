//! [`Clip`]: cuts points and segments to the axis ranges.

/// Cuts points and segments to the axis ranges, so nothing is drawn outside the plot (plotters
/// would otherwise pile outside points up on its edge). Works in axis space: y is `log10(y)` on
/// a logarithmic axis, so a cut line keeps the direction it has on the picture.
pub(super) struct Clip {
    x: (f64, f64),
    y: (f64, f64),
    log_y: bool,
}

impl Clip {
    pub(super) fn new(x: std::ops::Range<f64>, y: std::ops::Range<f64>, log_y: bool) -> Self {
        let mut clip = Self {
            x: (x.start, x.end),
            y: (0.0, 0.0),
            log_y,
        };
        clip.y = (clip.value_to_axis(y.start), clip.value_to_axis(y.end));
        clip
    }

    pub(super) fn value_to_axis(&self, y: f64) -> f64 {
        if self.log_y { y.log10() } else { y }
    }

    pub(super) fn axis_to_value(&self, y: f64) -> f64 {
        if self.log_y { 10f64.powf(y) } else { y }
    }

    /// Where `p` lies on the plot, from `(0, 0)` at the lower left to `(1, 1)` at the upper
    /// right.
    pub(super) fn normalized(&self, (x, y): (f64, f64)) -> (f64, f64) {
        (
            (x - self.x.0) / (self.x.1 - self.x.0),
            (self.value_to_axis(y) - self.y.0) / (self.y.1 - self.y.0),
        )
    }

    /// The inverse of [`Clip::normalized`].
    pub(super) fn denormalized(&self, (u, v): (f64, f64)) -> (f64, f64) {
        (
            self.x.0 + u * (self.x.1 - self.x.0),
            self.axis_to_value(self.y.0 + v * (self.y.1 - self.y.0)),
        )
    }

    pub(super) fn contains(&self, (x, y): (f64, f64)) -> bool {
        let y = self.value_to_axis(y);
        (self.x.0..=self.x.1).contains(&x) && (self.y.0..=self.y.1).contains(&y)
    }

    /// The part of the segment inside the ranges as parameters `0 <= t0 <= t1 <= 1`
    /// (Liang–Barsky), or `None` when none of it is.
    pub(super) fn params(&self, a: (f64, f64), b: (f64, f64)) -> Option<(f64, f64)> {
        let (ay, by) = (self.value_to_axis(a.1), self.value_to_axis(b.1));
        let (dx, dy) = (b.0 - a.0, by - ay);
        let (mut t0, mut t1) = (0.0f64, 1.0f64);
        for (p, q) in [
            (-dx, a.0 - self.x.0),
            (dx, self.x.1 - a.0),
            (-dy, ay - self.y.0),
            (dy, self.y.1 - ay),
        ] {
            if p == 0.0 {
                if q < 0.0 {
                    return None;
                }
            } else {
                let t = q / p;
                if p < 0.0 {
                    t0 = t0.max(t);
                } else {
                    t1 = t1.min(t);
                }
            }
        }
        (t0 <= t1).then_some((t0, t1))
    }

    pub(super) fn at(&self, a: (f64, f64), b: (f64, f64), t: f64) -> (f64, f64) {
        if t == 0.0 {
            return a;
        }
        if t == 1.0 {
            return b;
        }
        let (ay, by) = (self.value_to_axis(a.1), self.value_to_axis(b.1));
        (
            a.0 + (b.0 - a.0) * t,
            self.axis_to_value(ay + (by - ay) * t),
        )
    }

    /// The part of the segment `a`–`b` inside the ranges.
    pub(super) fn segment(&self, a: (f64, f64), b: (f64, f64)) -> Option<((f64, f64), (f64, f64))> {
        let (t0, t1) = self.params(a, b)?;
        Some((self.at(a, b, t0), self.at(a, b, t1)))
    }

    /// The visible runs of the polyline through `points`.
    pub(super) fn polyline(&self, points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
        let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
        let mut open = false;
        for pair in points.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            match self.params(a, b) {
                Some((t0, t1)) => {
                    if !(open && t0 == 0.0) {
                        runs.push(vec![self.at(a, b, t0)]);
                    }
                    if let Some(run) = runs.last_mut() {
                        run.push(self.at(a, b, t1));
                    }
                    open = t1 == 1.0;
                }
                None => open = false,
            }
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clips_lines_at_the_range_edges() {
        let clip = Clip::new(0.0..1.0, 0.0..1.0, false);
        let runs = clip.polyline(&[(-1.0, 0.5), (0.5, 0.5), (2.0, 0.5), (3.0, 0.5), (0.5, 0.25)]);
        let near = |a: &[(f64, f64)], b: &[(f64, f64)]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(p, q)| (p.0 - q.0).abs() < 1e-12 && (p.1 - q.1).abs() < 1e-12)
        };
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert!(
            near(&runs[0], &[(0.0, 0.5), (0.5, 0.5), (1.0, 0.5)]),
            "{runs:?}"
        );
        assert!(near(&runs[1], &[(1.0, 0.3), (0.5, 0.25)]), "{runs:?}");
        assert_eq!(clip.segment((2.0, 2.0), (3.0, 3.0)), None);
        let log = Clip::new(0.0..1.0, 1.0..100.0, true);
        let (a, b) = log.segment((0.0, 1.0), (1.0, 10_000.0)).unwrap();
        assert_eq!(a, (0.0, 1.0));
        assert!(
            (b.0 - 0.5).abs() < 1e-12 && (b.1 - 100.0).abs() < 1e-9,
            "{b:?}"
        );
    }
}
