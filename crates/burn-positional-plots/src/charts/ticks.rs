//! Axis ticks: readable logarithmic tick sets and tick labels.

use plotters::coord::ranged1d::Ranged;
use plotters::coord::types::RangedCoordf64;

/// Most bold ticks (labelled) put on a logarithmic axis.
const MAX_LOG_TICKS: usize = 8;

/// Tick values for a logarithmic axis over `lo..hi` (both > 0): the labelled (bold) ticks and
/// the light grid lines. Plotters' own log ticks start at the first power of ten in the
/// range, leaving e.g. `0.2..4` with the single label `1`; these are the first of the 1..9,
/// 1-2-5, powers-of-ten and every-n-decades sets to fit [`MAX_LOG_TICKS`], or linear ticks
/// when the range is too narrow for any of them to give 3.
pub(super) fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (k0, k1) = (lo.log10().floor() as i32 - 1, hi.log10().ceil() as i32 + 1);
    let inside = |v: f64| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9);
    let ticks = |mantissas: &[f64], every: i32| -> Vec<f64> {
        (k0..=k1)
            .filter(|k| k.rem_euclid(every) == 0)
            .flat_map(|k| mantissas.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|&v| inside(v))
            .collect()
    };
    const ALL: [f64; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
    let candidates: [(&[f64], i32); 9] = [
        (&ALL, 1),
        (&[1.0, 2.0, 5.0], 1),
        (&[1.0], 1),
        (&[1.0], 2),
        (&[1.0], 3),
        (&[1.0], 5),
        (&[1.0], 10),
        (&[1.0], 20),
        (&[1.0], 50),
    ];
    let mut bold = Vec::new();
    for (mantissas, every) in candidates {
        bold = ticks(mantissas, every);
        if bold.len() <= MAX_LOG_TICKS {
            break;
        }
    }
    if bold.len() < 3 && hi / lo < 10.0 {
        bold = RangedCoordf64::from(lo..hi).key_points(6);
    }
    let light = [ticks(&ALL, 1), ticks(&[1.0], 1)]
        .into_iter()
        .find(|t| t.len() <= 200)
        .unwrap_or_default();
    (bold, light)
}

/// Trims trailing zeros after a decimal point, and the point itself (`"2.50"` to `"2.5"`,
/// `"-0.00"` to `"0"`).
fn trim_number(s: &str) -> String {
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    };
    if s == "-0" { "0".into() } else { s.into() }
}

/// Tick labels for a linear axis spanning `span`: enough decimals to tell ticks apart, with
/// trailing zeros dropped (`20` rather than plotters' `20.0`).
pub(super) fn linear_tick(span: f64) -> impl Fn(&f64) -> String {
    let decimals = (3 - span.log10().floor() as i32).clamp(0, 15) as usize;
    move |v| trim_number(&format!("{v:.decimals$}"))
}

/// Tick labels for a logarithmic axis: plain numbers in `[0.001, 10000)`, else `2e-5` style.
pub(super) fn log_tick(v: &f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e4).contains(&a) {
        let s = format!("{v:.5e}");
        let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
        format!("{}e{exponent}", trim_number(mantissa))
    } else {
        let decimals = (8 - a.log10().floor() as i32).clamp(0, 12) as usize;
        trim_number(&format!("{v:.decimals$}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_log_ticks() {
        assert_eq!(log_tick(&0.01), "0.01");
        assert_eq!(log_tick(&1.0), "1");
        assert_eq!(log_tick(&200.0), "200");
        assert_eq!(log_tick(&1e-5), "1e-5");
        assert_eq!(log_tick(&1e6), "1e6");
        assert_eq!(log_tick(&(2.0 * 10f64.powi(-5))), "2e-5");
        assert_eq!(log_tick(&0.0015), "0.0015");
        assert_eq!(log_tick(&(3.0 * 0.1)), "0.3");
        let ticks = linear_tick(200.0);
        assert_eq!(
            (ticks(&20.0), ticks(&-0.0), ticks(&12.5)),
            ("20".into(), "0".into(), "12.5".into())
        );
        assert_eq!(linear_tick(0.02)(&0.0150000001), "0.015");
    }

    #[test]
    fn picks_readable_log_ticks() {
        let (bold, light) = log_ticks(0.2, 4.0);
        assert_eq!(bold.len(), 4, "{bold:?}");
        assert!(
            (bold[0] - 0.2).abs() < 1e-12 && (bold[3] - 2.0).abs() < 1e-12,
            "{bold:?}"
        );
        assert_eq!(light.len(), 12, "{light:?}");
        let (bold, _) = log_ticks(1e-6, 1e6);
        assert_eq!(bold.len(), 7, "{bold:?}");
        // Narrower than a decade and holding at most two 1..9 ticks: linear ticks.
        let (bold, _) = log_ticks(0.95, 1.2);
        assert!(bold.len() >= 3, "{bold:?}");
        assert!(bold.iter().all(|&v| (0.95..=1.2).contains(&v)));
    }
}
