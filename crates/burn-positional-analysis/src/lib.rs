//! Measurements of what a position scheme does, on a table of position vectors read back to
//! the host (`table[p]` is the vector of position `p`). Each answers one row of seed 002's
//! table of desirable properties with a number:
//!
//! | property | measurement |
//! | --- | --- |
//! | unique | [`min_pairwise_distance`]: the closest two positions |
//! | bounded | [`max_norm`]: the largest vector |
//! | smooth | [`neighbour_and_far_cosine`]: neighbours against positions far apart |
//! | relative-aware | [`shift_map_residual`]: how well one fixed linear map takes `PE(p)` to `PE(p + k)` |

use nalgebra::DMatrix;

/// The smallest Euclidean distance between the vectors of two different positions, and the
/// pair that has it.
///
/// # Panics
///
/// If the table has fewer than two rows.
pub fn min_pairwise_distance(table: &[Vec<f32>]) -> (f64, (usize, usize)) {
    assert!(
        table.len() >= 2,
        "need at least two positions, got {}",
        table.len()
    );
    let mut best = (f64::INFINITY, (0, 1));
    for p in 0..table.len() {
        for q in p + 1..table.len() {
            let d = distance(&table[p], &table[q]);
            if d < best.0 {
                best = (d, (p, q));
            }
        }
    }
    best
}

/// The largest Euclidean norm of a position vector.
pub fn max_norm(table: &[Vec<f32>]) -> f64 {
    table.iter().map(|row| norm(row)).fold(0.0, f64::max)
}

/// Mean cosine similarity of neighbouring positions (`p`, `p + 1`), and of positions at least
/// `far` apart.
///
/// # Panics
///
/// If no pair is at least `far` apart.
pub fn neighbour_and_far_cosine(table: &[Vec<f32>], far: usize) -> (f64, f64) {
    let n = table.len();
    let mean = |v: Vec<f64>| {
        assert!(!v.is_empty(), "no pairs to average");
        v.iter().sum::<f64>() / v.len() as f64
    };
    let near = mean(
        (0..n.saturating_sub(1))
            .map(|p| cosine(&table[p], &table[p + 1]))
            .collect(),
    );
    let far = mean(
        (0..n)
            .flat_map(|p| (p + far..n).map(move |q| (p, q)))
            .map(|(p, q)| cosine(&table[p], &table[q]))
            .collect(),
    );
    (near, far)
}

/// How far the best single linear map `W` is from taking every `PE(p)` to `PE(p + k)`: the
/// least-squares residual `||X W - Y|| / ||Y||` (Frobenius norms), with `X` the rows `0..n-k`
/// and `Y` the rows `k..n`. Zero means "shifting by `k` is one fixed linear map", which seed
/// 002 claims for sinusoidal positions (it is a rotation); a table with no such structure and
/// more rows than columns leaves a large residual.
///
/// # Panics
///
/// If `k` is not below the number of rows.
pub fn shift_map_residual(table: &[Vec<f32>], k: usize) -> f64 {
    let n = table.len();
    assert!(k < n, "shift {k} needs more than {n} rows");
    let d = table[0].len();
    let rows = |range: std::ops::Range<usize>| {
        DMatrix::from_fn(range.len(), d, |r, c| table[range.start + r][c] as f64)
    };
    let (x, y) = (rows(0..n - k), rows(k..n));
    let w = x
        .clone()
        .svd(true, true)
        .solve(&y, 1e-12)
        .expect("SVD with both factors");
    (x * w - &y).norm() / y.norm()
}

/// Cosine similarity of every pair of positions, `[n, n]` (for pictures).
pub fn cosine_matrix(table: &[Vec<f32>]) -> Vec<Vec<f32>> {
    table
        .iter()
        .map(|a| table.iter().map(|b| cosine(a, b) as f32).collect())
        .collect()
}

fn norm(a: &[f32]) -> f64 {
    a.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt()
}

fn distance(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum::<f64>()
        .sqrt()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    dot / (norm(a) * norm(b)).max(1e-300)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn_positional_layer::sinusoid_rows;

    fn sinusoidal(n: usize, d: usize) -> Vec<Vec<f32>> {
        sinusoid_rows(0..n as u64, d, 10_000.0)
            .chunks(d)
            .map(<[f32]>::to_vec)
            .collect()
    }

    /// A table with no structure: uniform noise from a 64-bit LCG.
    fn random(n: usize, d: usize) -> Vec<Vec<f32>> {
        let mut state = 7u64;
        (0..n)
            .map(|_| {
                (0..d)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn shifting_sinusoids_is_one_linear_map_and_noise_is_not() {
        let (n, d) = (128, 16);
        for k in [1, 3, 10] {
            let sin = shift_map_residual(&sinusoidal(n, d), k);
            let noise = shift_map_residual(&random(n, d), k);
            assert!(sin < 1e-5, "sinusoidal residual {sin} at k = {k}");
            assert!(noise > 0.5, "random residual only {noise} at k = {k}");
        }
    }

    #[test]
    fn sinusoids_are_bounded_unique_and_smooth() {
        let table = sinusoidal(512, 32);
        // Every row has norm sqrt(d / 2) = 4: bounded, and no position grows.
        assert!((max_norm(&table) - 4.0).abs() < 1e-5);
        let (closest, (p, q)) = min_pairwise_distance(&table);
        assert!(
            closest > 0.1,
            "positions {p} and {q} are only {closest} apart"
        );
        let (near, far) = neighbour_and_far_cosine(&table, 8);
        assert!(
            near > far,
            "neighbours {near} not closer than far positions {far}"
        );
    }

    fn cosine_of(a: &[f32], b: &[f32]) -> f64 {
        let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
        dot / (norm(a) * norm(b))
    }

    #[test]
    fn duplicate_positions_have_distance_zero() {
        let mut table = random(10, 4);
        table[7] = table[2].clone();
        assert_eq!(min_pairwise_distance(&table), (0.0, (2, 7)));
    }
}
