//! Measurements of what a position scheme does, on a table of position vectors read back to
//! the host (`table[p]` is the vector of position `p`). Each answers one row of the
//! table of desirable properties with a number:
//!
//! | property | measurement |
//! | --- | --- |
//! | unique | [`min_pairwise_distance`]: the closest two positions |
//! | bounded | [`max_norm`]: the largest vector |
//! | smooth | [`neighbour_and_far_cosine`]: neighbours against positions far apart |
//! | smooth | [`neighbour_and_far_distance`]: the same, as distances |
//! | relative-aware | [`shift_map_residual`]: how well one fixed linear map takes `PE(p)` to `PE(p + k)` |
//! | relative-aware | [`toeplitz_deviation`]: how much scores depend on absolute position, not only on `q - p` |
//!
//! And the question "can two (token, position) pairs collide?", whether a token at one position can land on another token at
//! another position: [`closest_combination`].

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
/// more rows than columns leaves a large residual. With `n - k` rows or fewer than columns the
/// question is empty: a map fitting any linearly independent rows exists, so every table
/// scores zero. Measure over more positions than the table is wide.
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

/// Mean Euclidean distance of neighbouring positions (`p`, `p + 1`), and of positions at least
/// `far` apart. A smooth scheme has the first well below the second.
///
/// # Panics
///
/// If no pair is at least `far` apart.
pub fn neighbour_and_far_distance(table: &[Vec<f32>], far: usize) -> (f64, f64) {
    let n = table.len();
    assert!(far >= 1 && far < n, "no pair is {far} apart among {n} rows");
    let near = (0..n - 1)
        .map(|p| distance(&table[p], &table[p + 1]))
        .sum::<f64>()
        / (n - 1) as f64;
    let pairs: Vec<f64> = (0..n)
        .flat_map(|p| (p + far..n).map(move |q| (p, q)))
        .map(|(p, q)| distance(&table[p], &table[q]))
        .collect();
    (near, pairs.iter().sum::<f64>() / pairs.len() as f64)
}

/// How much a square matrix of scores `scores[p][q]` (query position `p`, key position `q`)
/// depends on the absolute positions rather than only on the offset `q - p`: the root mean
/// square, over every diagonal `q - p = k` with at least two entries, of the spread of that
/// diagonal around its own mean, divided by the spread of all entries around their mean.
///
/// Zero for a matrix whose every diagonal is constant (a Toeplitz matrix): scores that are a
/// function of `q - p` alone, as RoPE's, ALiBi's and T5's are by construction and as the dot
/// products of sinusoidal vectors are (`PE(p)·PE(p+k) = Σᵢ cos(k ωᵢ)`). Near one when the
/// diagonals vary as much as the whole matrix (a random table). Zero for a constant matrix.
///
/// # Panics
///
/// If `scores` is not square or has fewer than two rows.
pub fn toeplitz_deviation(scores: &[Vec<f64>]) -> f64 {
    let n = scores.len();
    assert!(n >= 2, "need at least a 2x2 matrix, got {n} rows");
    assert!(
        scores.iter().all(|row| row.len() == n),
        "scores must be square ({n} rows)"
    );
    let all_mean = scores.iter().flatten().sum::<f64>() / (n * n) as f64;
    let all_var = scores
        .iter()
        .flatten()
        .map(|v| (v - all_mean).powi(2))
        .sum::<f64>()
        / (n * n) as f64;
    let (mut within, mut count) = (0.0, 0usize);
    for k in -(n as i64 - 2)..=(n as i64 - 2) {
        let diagonal: Vec<f64> = (0..n as i64)
            .filter(|&p| (0..n as i64).contains(&(p + k)))
            .map(|p| scores[p as usize][(p + k) as usize])
            .collect();
        let mean = diagonal.iter().sum::<f64>() / diagonal.len() as f64;
        within += diagonal.iter().map(|v| (v - mean).powi(2)).sum::<f64>();
        count += diagonal.len();
    }
    if all_var == 0.0 {
        return 0.0;
    }
    (within / count as f64 / all_var).sqrt()
}

/// The closest two distinct (token, position) combinations `token[t] + position[p]`, as found
/// by [`closest_combination`].
#[derive(Debug, Clone, PartialEq)]
pub struct Collision {
    /// Euclidean distance between the two combinations.
    pub distance: f64,
    /// The first combination, `(token, position)`.
    pub first: (usize, usize),
    /// The second combination, `(token, position)`.
    pub second: (usize, usize),
    /// The closest two combinations of *different* tokens (the question's case: token A at one
    /// position against token B at another), as `(distance, first, second)`.
    pub different_tokens: (f64, (usize, usize), (usize, usize)),
    /// Mean distance over every pair of distinct combinations: what "typical" means.
    pub mean_distance: f64,
    /// The closest two token vectors (the closest pair at one shared position).
    pub closest_tokens: f64,
    /// The closest two position vectors (the closest pair with one shared token).
    pub closest_positions: f64,
    /// Number of combinations compared (`tokens x positions`).
    pub combinations: usize,
}

/// "Can two (token, position) pairs collide?", answered by search: over every token vector `tokens[t]` and position
/// vector `positions[p]`, the two distinct combinations `tokens[t] + positions[p]` that lie
/// closest together, with the typical distance beside it.
///
/// Exhaustive: all `(V·N)²/2` pairs, through the Gram matrix in blocks
/// (`|a-b|² = |a|² + |b|² - 2a·b`, in f64, the winners' distances recomputed directly), on
/// every core. At `V·N = 16 384` combinations of width 64 this takes seconds.
///
/// # Panics
///
/// If there are fewer than two combinations, or the widths differ.
pub fn closest_combination(tokens: &[Vec<f32>], positions: &[Vec<f32>]) -> Collision {
    let (v, n) = (tokens.len(), positions.len());
    assert!(
        v * n >= 2,
        "need two combinations, have {v} tokens x {n} positions"
    );
    let d = tokens[0].len();
    assert!(
        tokens.iter().chain(positions).all(|r| r.len() == d),
        "token and position vectors must all be {d} wide"
    );
    let m = v * n;
    // Row i = t * n + p.
    let combos = DMatrix::from_fn(m, d, |i, c| {
        tokens[i / n][c] as f64 + positions[i % n][c] as f64
    });
    let norms: Vec<f64> = (0..m).map(|i| combos.row(i).norm_squared()).collect();
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let block = 256;
    let blocks: Vec<usize> = (0..m).step_by(block).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Per thread: the best pair, the best pair of different tokens (squared distance, i, j),
    // and the sum of distances.
    type Best = (f64, usize, usize);
    let results: Vec<(Best, Best, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut best: Best = (f64::INFINITY, 0, 1);
                    let mut different: Best = (f64::INFINITY, 0, 1);
                    let mut sum = 0.0;
                    loop {
                        let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&start) = blocks.get(b) else { break };
                        let end = (start + block).min(m);
                        // Pairs (i, j) with i in this block and j > i.
                        let rows = combos.rows(start, end - start);
                        let right = combos.rows(start, m - start);
                        // [m - start, end - start], column-major: j runs down a column.
                        let gram = right * rows.transpose();
                        for i in start..end {
                            let column = gram.column(i - start);
                            for j in i + 1..m {
                                let sq = (norms[i] + norms[j] - 2.0 * column[j - start]).max(0.0);
                                sum += sq.sqrt();
                                if sq < best.0 {
                                    best = (sq, i, j);
                                }
                                if sq < different.0 && i / n != j / n {
                                    different = (sq, i, j);
                                }
                            }
                        }
                    }
                    (best, different, sum)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    let total: f64 = results.iter().map(|r| r.2).sum();
    let pick = |which: fn(&(Best, Best, f64)) -> Best| {
        results
            .iter()
            .map(which)
            // Ties broken by the pair, not by which worker found it (workers take blocks in
            // whatever order they get to them), so the same input names the same pair.
            .min_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))))
            .expect("at least one worker")
    };
    let exact = |i: usize, j: usize| {
        (0..d)
            .map(|c| (combos[(i, c)] - combos[(j, c)]).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let (_, i, j) = pick(|r| r.0);
    let (best_different, k, l) = pick(|r| r.1);
    let different_tokens = if best_different.is_finite() {
        (exact(k, l), (k / n, k % n), (l / n, l % n))
    } else {
        (f64::INFINITY, (0, 0), (0, 0))
    };
    let closest_of = |rows: &[Vec<f32>]| {
        if rows.len() < 2 {
            f64::INFINITY
        } else {
            min_pairwise_distance(rows).0
        }
    };
    Collision {
        distance: exact(i, j),
        first: (i / n, i % n),
        second: (j / n, j % n),
        different_tokens,
        mean_distance: total / (m * (m - 1) / 2) as f64,
        closest_tokens: closest_of(tokens),
        closest_positions: closest_of(positions),
        combinations: m,
    }
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
    use burn_positional::absolute::sinusoid_rows;

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

    #[test]
    fn with_fewer_rows_than_columns_any_table_fits() {
        assert!(shift_map_residual(&random(20, 32), 1) < 1e-9);
    }

    #[test]
    fn duplicate_positions_have_distance_zero() {
        let mut table = random(10, 4);
        table[7] = table[2].clone();
        assert_eq!(min_pairwise_distance(&table), (0.0, (2, 7)));
    }

    fn sinusoid_scores(n: usize, d: usize) -> Vec<Vec<f64>> {
        let table = sinusoidal(n, d);
        table
            .iter()
            .map(|a| {
                table
                    .iter()
                    .map(|b| a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn sinusoidal_dot_products_depend_only_on_the_offset_and_random_ones_do_not() {
        // PE(p)·PE(q) = Σᵢ cos((q - p) ωᵢ): constant along diagonals up to f32 rounding.
        let sin = toeplitz_deviation(&sinusoid_scores(96, 32));
        assert!(sin < 1e-5, "sinusoidal deviation {sin}");
        let table = random(96, 32);
        let scores: Vec<Vec<f64>> = table
            .iter()
            .map(|a| {
                table
                    .iter()
                    .map(|b| a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum())
                    .collect()
            })
            .collect();
        let noise = toeplitz_deviation(&scores);
        assert!(noise > 0.5, "random deviation only {noise}");
        // A pure function of q - p (an ALiBi-like matrix) has none; nor does a constant one.
        let linear: Vec<Vec<f64>> = (0..20)
            .map(|p| {
                (0..20)
                    .map(|q| -0.25 * (q as f64 - p as f64).abs())
                    .collect()
            })
            .collect();
        assert_eq!(toeplitz_deviation(&linear), 0.0);
        assert_eq!(toeplitz_deviation(&vec![vec![3.0; 5]; 5]), 0.0);
    }

    #[test]
    fn neighbours_of_sinusoids_are_nearer_than_far_positions() {
        let (near, far) = neighbour_and_far_distance(&sinusoidal(128, 32), 16);
        assert!(near * 3.0 < far, "neighbour {near}, far {far}");
        let (near, far) = neighbour_and_far_distance(&random(128, 32), 16);
        assert!(
            (near / far - 1.0).abs() < 0.1,
            "random: neighbour {near}, far {far}"
        );
    }

    #[test]
    fn seed_000_constructed_collision_is_found_exactly() {
        // The question's example: token A = [0.5, 0], B = [1, 0]; PE(1) = [1, 0], PE(2) = [0.5, 0], so
        // A + PE(1) = B + PE(2) = [1.5, 0]. PE(0) = [0, 1] keeps that the only collision.
        let tokens = vec![vec![0.5, 0.0], vec![1.0, 0.0]];
        let positions = vec![vec![0.0, 1.0], vec![1.0, 0.0], vec![0.5, 0.0]];
        let found = closest_combination(&tokens, &positions);
        assert_eq!(found.distance, 0.0);
        assert_eq!((found.first, found.second), ((0, 1), (1, 2)));
        assert_eq!(found.combinations, 6);
        assert_eq!(found.closest_tokens, 0.5);
        assert_eq!(found.different_tokens, (0.0, (0, 1), (1, 2)));
    }

    #[test]
    fn closest_combination_agrees_with_brute_force() {
        let tokens = random(37, 6);
        let positions: Vec<Vec<f32>> = sinusoidal(29, 6)
            .into_iter()
            .map(|r| r.into_iter().map(|v| v * 0.3).collect())
            .collect();
        let combos: Vec<Vec<f32>> = tokens
            .iter()
            .flat_map(|t| {
                positions
                    .iter()
                    .map(move |p| t.iter().zip(p).map(|(a, b)| a + b).collect())
            })
            .collect();
        let (closest, (i, j)) = min_pairwise_distance(&combos);
        let n = positions.len();
        let mut different = (f64::INFINITY, 0, 0);
        for a in 0..combos.len() {
            for b in a + 1..combos.len() {
                let dist = distance(&combos[a], &combos[b]);
                if a / n != b / n && dist < different.0 {
                    different = (dist, a, b);
                }
            }
        }
        let (mut sum, mut pairs) = (0.0, 0);
        for a in 0..combos.len() {
            for b in a + 1..combos.len() {
                sum += distance(&combos[a], &combos[b]);
                pairs += 1;
            }
        }
        let found = closest_combination(&tokens, &positions);
        assert!(
            (found.distance - closest).abs() < 1e-6,
            "{found:?} vs {closest}"
        );
        let (dist, a, b) = different;
        assert!((found.different_tokens.0 - dist).abs() < 1e-6);
        assert_eq!(
            (found.different_tokens.1, found.different_tokens.2),
            ((a / n, a % n), (b / n, b % n))
        );
        assert_eq!(
            (found.first, found.second),
            ((i / n, i % n), (j / n, j % n))
        );
        assert!((found.mean_distance - sum / pairs as f64).abs() < 1e-9 * sum);
    }
}
