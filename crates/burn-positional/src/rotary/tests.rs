//! Unit tests of the rotation: the papers' formulas in f64, the config pattern, cached
//! decoding of the length-dependent types.

/// One config pattern: `try_init` returns what `validate` finds, `init` panics with it.
#[test]
fn try_init_returns_what_validate_finds_and_init_panics_with_it() {
    let device = Device::flex();
    for config in [
        RopeConfig::new(7),
        RopeConfig::new(8).with_rotary_dims(Some(10)),
    ] {
        let err = config.validate().unwrap_err();
        assert_eq!(config.try_init(&device).unwrap_err(), err);
        let panic = std::panic::catch_unwind(|| config.init(&device)).unwrap_err();
        assert_eq!(panic.downcast_ref::<String>(), Some(&err.to_string()));
    }
    assert_eq!(RopeConfig::new(8).try_init(&device).unwrap().d_head(), 8);
}

/// Positions at the end of `usize` are a panic naming the positions and the fix, not an
/// arithmetic overflow inside the angle lookup (issue 24).
#[test]
fn positions_past_usize_max_name_the_fix() {
    let device = Device::flex();
    let rope = RopeConfig::new(4).with_cache_len(8).init(&device);
    let q = Tensor::<4>::ones([1, 1, 4, 4], &device);
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rope.apply(q, usize::MAX - 1)
    }))
    .expect_err("past usize::MAX");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("usize::MAX") && message.contains("Fix"),
        "{message}"
    );
}

use super::*;

/// `(cos, sin)` of the angle of pair `j` at position `p`, straight from the papers' formulas
/// in f64: Chen et al. 2023 (eq. 4) divide the position by the factor; bloc97's NTK-aware
/// scaling multiplies the base by `s^(d / (d - 2))`.
fn reference(p: f64, j: usize, d: usize, base: f64, scaling: &RopeScaling) -> (f64, f64) {
    let (p, base) = match *scaling {
        RopeScaling::None => (p, base),
        RopeScaling::Interpolation(s) => (p / s, base),
        RopeScaling::NtkAware(s) => (p, base * s.powf(d as f64 / (d as f64 - 2.0))),
        _ => unreachable!("the papers' variants only"),
    };
    let angle = p / base.powf(2.0 * j as f64 / d as f64);
    (angle.cos(), angle.sin())
}

#[test]
fn scaled_angles_follow_the_papers_formulas() {
    let d = 8;
    for scaling in [
        RopeScaling::None,
        RopeScaling::Interpolation(2.0),
        RopeScaling::Interpolation(3.5),
        RopeScaling::NtkAware(2.0),
        RopeScaling::NtkAware(4.0),
    ] {
        let (inv_freq, attention) = scaling.frequencies(10_000.0, d, 0, RopeArithmetic::Exact);
        assert_eq!(attention, 1.0);
        let (cos, sin) = angle_rows(0..50, &inv_freq, attention, RopeArithmetic::Exact);
        for p in 0..50 {
            for j in 0..d / 2 {
                let (c, s) = reference(p as f64, j, d, 10_000.0, &scaling);
                let i = p * d / 2 + j;
                assert!((cos[i] as f64 - c).abs() < 1e-6, "{scaling:?} p {p} j {j}");
                assert!((sin[i] as f64 - s).abs() < 1e-6, "{scaling:?} p {p} j {j}");
            }
        }
    }
}

#[test]
fn ntk_scaling_slows_the_lowest_frequency_by_the_factor_and_keeps_the_highest() {
    let (d, base, s) = (16, 10_000.0, 3.0);
    let exact = RopeArithmetic::Exact;
    let plain = RopeScaling::None.frequencies(base, d, 0, exact).0;
    assert_eq!(plain, crate::absolute::sinusoid_frequencies(d, base));
    let ntk = RopeScaling::NtkAware(s).frequencies(base, d, 0, exact).0;
    assert!((ntk[0] - plain[0]).abs() < 1e-12, "highest frequency kept");
    let last = d / 2 - 1;
    assert!(
        (plain[last] / ntk[last] - s).abs() < 1e-9,
        "lowest slowed by s"
    );
    // Interpolation slows every frequency by s.
    let pi = RopeScaling::Interpolation(s)
        .frequencies(base, d, 0, exact)
        .0;
    for (p, w) in pi.iter().zip(&plain) {
        assert!((p * s - w).abs() < 1e-15);
    }
}

#[test]
fn bad_factors_are_refused_with_the_fix() {
    for scaling in [
        RopeScaling::Interpolation(0.5),
        RopeScaling::NtkAware(f64::NAN),
        RopeScaling::Interpolation(f64::INFINITY),
    ] {
        let err = RopeConfig::new(8)
            .with_scaling(scaling)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("RopeConfig::scaling") && err.contains("factor"),
            "{err}"
        );
    }
    let err = RopeConfig::new(2)
        .with_scaling(RopeScaling::NtkAware(2.0))
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("rotary_dims = 2"), "{err}");
    RopeConfig::new(8)
        .with_scaling(RopeScaling::NtkAware(1.0))
        .validate()
        .unwrap();
}

#[test]
fn rescaling_keeps_the_config_and_the_tables_past_the_cache() {
    let device = Device::flex();
    let rope = RopeConfig::new(8).with_cache_len(4).init(&device);
    let stretched = rope.rescaled(RopeScaling::Interpolation(2.0));
    assert_eq!(
        stretched.config(),
        rope.config().with_scaling(RopeScaling::Interpolation(2.0))
    );
    // Past the precomputed 4 rows the grown tables are scaled too: position 10 at factor 2
    // is position 5 unscaled.
    let q = Tensor::<4>::ones([1, 1, 1, 8], &device);
    let a = stretched.apply(q.clone(), 10);
    let b = rope.apply(q, 5);
    assert!(a.all_close(b, None, Some(1e-6)));
}
/// `[1, 2, seq, d_head]` queries, the same for every call of a test.
fn queries(seq: usize, d_head: usize, device: &Device) -> Tensor<4> {
    let values: Vec<f32> = (0..2 * seq * d_head)
        .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
        .collect();
    Tensor::from_data(TensorData::new(values, [1, 2, seq, d_head]), device)
}

/// Decoding token by token with `dynamic` past `max_position_embeddings` computes no host
/// table per step (the angles of the step's positions come from the frequencies of its
/// length, on the device), keeps the trained rows grown past `cache_len`, and rotates each
/// step as one forward over the whole prefix and as the host's rounding of that length's
/// frequencies would.
#[test]
fn dynamic_decoding_past_the_limit_builds_no_table_per_step() {
    let device = Device::flex();
    let (d_head, max_position_embeddings, steps) = (16, 64, 50);
    let end = max_position_embeddings + steps;
    for arithmetic in [RopeArithmetic::Transformers, RopeArithmetic::Exact] {
        let rope = RopeConfig::new(d_head)
            .with_cache_len(16)
            .with_layout(RopeLayout::HalfSplit)
            .with_arithmetic(arithmetic)
            .with_scaling(RopeScaling::Dynamic(DynamicScaling::new(
                2.0,
                max_position_embeddings,
            )))
            .init(&device);
        let x = queries(end, d_head, &device);
        let step = |t: usize| rope.apply(x.clone().slice([0..1, 0..2, t..t + 1]), t);
        // Prefill within the limit, past `cache_len`: the trained rows are grown (doubled
        // to 32) once.
        let _ = rope.apply(x.clone().slice([0..1, 0..2, 0..32]), 0);
        let before = crate::cache::host_table_builds();
        for t in max_position_embeddings..end {
            let got = step(t);
            // The same length's frequencies over the whole prefix give the same last row.
            let full = rope
                .apply(x.clone().slice([0..1, 0..2, 0..t + 1]), 0)
                .slice([0..1, 0..2, t..t + 1]);
            assert!(
                got.clone().all_close(full, Some(1e-6), Some(1e-6)),
                "{arithmetic:?}: step {t} differs from the forward over 0..={t}"
            );
            // And the host's rows of that length's frequencies, as the arithmetic rounds them.
            let (inv_freq, attention) =
                rope.scaling
                    .frequencies(rope.base, rope.rotary_dims, t + 1, arithmetic);
            let (cos, sin) = angle_rows(t as u64..t as u64 + 1, &inv_freq, attention, arithmetic);
            let pairs = inv_freq.len();
            let cos = Tensor::<2>::from_data(TensorData::new(cos, [1, pairs]), &device);
            let sin = Tensor::<2>::from_data(TensorData::new(sin, [1, pairs]), &device);
            let (cos, sin) = (cos.unsqueeze::<4>(), sin.unsqueeze::<4>());
            let q = x.clone().slice([0..1, 0..2, t..t + 1]);
            let a = q.clone().slice([0..1, 0..2, 0..1, 0..pairs]);
            let b = q.slice([0..1, 0..2, 0..1, pairs..2 * pairs]);
            let want = Tensor::cat(
                vec![
                    a.clone() * cos.clone() - b.clone() * sin.clone(),
                    a * sin + b * cos,
                ],
                3,
            );
            // Transformers' rounding is the host's to an ulp of cos; `Exact` rounds the
            // product to f32 on the device in this regime (see the module docs).
            let tolerance = match arithmetic {
                RopeArithmetic::Transformers => 1e-5,
                RopeArithmetic::Exact => 1e-4,
            };
            assert!(
                got.all_close(want, Some(tolerance), Some(tolerance)),
                "{arithmetic:?}: step {t} differs from the host's rows"
            );
        }
        let built = crate::cache::host_table_builds() - before;
        assert!(
            built <= 2,
            "{arithmetic:?}: {built} host tables built over {steps} decoding steps past the \
             limit"
        );
        // The trained rows grown by the prefill are still there.
        let before = crate::cache::host_table_builds();
        let _ = rope.apply(x.clone().slice([0..1, 0..2, 0..1]), 20);
        assert_eq!(
            crate::cache::host_table_builds(),
            before,
            "{arithmetic:?}: the trained table grown past cache_len was evicted"
        );
    }
}
