//! PyTorch's `scalar ** f32_tensor` on the CPU, bit for bit: what transformers'
//! `base ** (torch.arange(0, dim, 2).float() / dim)` returns.
//!
//! ATen's `pow` kernel (`pow_tensor_tensor`, through `cpu_kernel_vec`) runs its vectorized loop
//! over chunks of `2 * Vectorized<float>::size()` elements, where each element is SLEEF's
//! `Sleef_powf16_u10` (AVX512; `Sleef_powf8_u10` on AVX2), and computes the remaining tail
//! with the scalar `std::pow(float, float)`, glibc's `powf`. SLEEF's pow is accurate to 1 ulp
//! but not correctly rounded, so for rows of at least one chunk (RoPE widths of 64 and up) a
//! few entries differ from a correctly rounded pow by 1 ulp, which at positions of thousands
//! turns the angle by more than 1e-5 relative. [`pow_row`] reproduces both halves:
//! [`sleef_powf`] on the chunks and [`f32::powf`] (glibc's `powf` on Linux, as torch's tail) on
//! the rest.
//!
//! [`sleef_powf`] is a port of SLEEF 3.6's `xpowf` (`src/libm/sleefsimdsp.c`, with `logkf`,
//! `expkf`, `vldexp_vf_vf_vi2` and the double-float helpers of `src/common/df.h`) as compiled
//! for AVX512F: fused multiply-adds where SLEEF's FMA configuration uses them
//! (`vfma`/`vmla`/`vfmapn`/`vfmanp`, here [`f32::mul_add`]), and `vgetexp`/`vgetmant` in
//! `logkf`. Checked bitwise against torch 2.6.0 on an AVX512 machine for every even RoPE width
//! 2..=512 over 91 bases, and for 224 000 random `(x, y)` pairs.
//!
//! SLEEF: Copyright Naoki Shibata and contributors 2010 - 2023, distributed under the Boost
//! Software License, Version 1.0 (<http://www.boost.org/LICENSE_1_0.txt>), which permits this
//! derived work; the notice is kept here as that license asks for source distributions.

// The constants are spelled as in SLEEF's source, digits past f32's precision included.
#![allow(clippy::excessive_precision)]

/// Elements of one step of ATen's vectorized loop: `2 * Vectorized<float>::size()`. 32 on
/// AVX512, the CPU capability torch picks on this project's machines
/// (`torch.backends.cpu.get_cpu_capability()`); 16 on an AVX2 machine (`ATEN_CPU_CAPABILITY=avx2`),
/// whose rows would split differently (and whose SLEEF `logkf` takes `vilogb2k`/`vldexp3`,
/// identical for the positive normal bases of RoPE).
pub(crate) const TORCH_VECTOR_CHUNK: usize = 32;

/// torch's `base ** exponents` for a contiguous f32 row: SLEEF on the whole chunks of
/// [`TORCH_VECTOR_CHUNK`], glibc's `powf` on the tail.
pub(crate) fn pow_row(base: f32, exponents: &[f32]) -> Vec<f32> {
    let vectorized = exponents.len() - exponents.len() % TORCH_VECTOR_CHUNK;
    exponents
        .iter()
        .enumerate()
        .map(|(i, &e)| {
            if i < vectorized {
                sleef_powf(base, e)
            } else {
                base.powf(e)
            }
        })
        .collect()
}

/// A double-float: the unevaluated sum `x + y`, `|y|` below half an ulp of `x`.
#[derive(Clone, Copy)]
struct Df {
    x: f32,
    y: f32,
}

const fn df(x: f32, y: f32) -> Df {
    Df { x, y }
}

// df.h, FMA configuration. `vfmapn(a, b, c) = a * b - c`, `vfmanp(a, b, c) = c - a * b`, each
// rounded once.

fn add2_ff(x: f32, y: f32) -> Df {
    let s = x + y;
    let v = s - x;
    df(s, (x - (s - v)) + (y - v))
}

fn add2_df(x: Df, y: f32) -> Df {
    let s = x.x + y;
    let v = s - x.x;
    let t = (x.x - (s - v)) + (y - v);
    df(s, t + x.y)
}

fn add_fd(x: f32, y: Df) -> Df {
    let s = x + y.x;
    df(s, ((x - s) + y.x) + y.y)
}

fn add_dd(x: Df, y: Df) -> Df {
    let s = x.x + y.x;
    df(s, (((x.x - s) + y.x) + x.y) + y.y)
}

fn add2_dd(x: Df, y: Df) -> Df {
    let s = x.x + y.x;
    let v = s - x.x;
    let t = (x.x - (s - v)) + (y.x - v);
    df(s, t + (x.y + y.y))
}

fn scale(d: Df, s: f32) -> Df {
    df(d.x * s, d.y * s)
}

fn normalize(t: Df) -> Df {
    let s = t.x + t.y;
    df(s, (t.x - s) + t.y)
}

fn div_dd(n: Df, d: Df) -> Df {
    let t = 1.0 / d.x;
    let s = n.x * t;
    let u = t.mul_add(n.x, -s);
    let v = (-d.y).mul_add(t, (-d.x).mul_add(t, 1.0));
    df(s, s.mul_add(v, n.y.mul_add(t, u)))
}

fn squ(x: Df) -> Df {
    let s = x.x * x.x;
    df(s, (x.x + x.x).mul_add(x.y, x.x.mul_add(x.x, -s)))
}

fn mul_dd(x: Df, y: Df) -> Df {
    let s = x.x * y.x;
    df(s, x.x.mul_add(y.y, x.y.mul_add(y.x, x.x.mul_add(y.x, -s))))
}

fn mul_df(x: Df, y: f32) -> Df {
    let s = x.x * y;
    df(s, x.y.mul_add(y, x.x.mul_add(y, -s)))
}

/// `_mm512_getexp_ps`: `floor(log2(|d|))` as a float (subnormals normalized), `-inf` for 0,
/// `+inf` for infinities, NaN for NaN.
fn getexp(d: f32) -> f32 {
    let a = d.abs();
    if a.is_nan() {
        return f32::NAN;
    }
    if a == 0.0 {
        return f32::NEG_INFINITY;
    }
    if a.is_infinite() {
        return f32::INFINITY;
    }
    let bits = a.to_bits();
    let biased = (bits >> 23) as i32;
    if biased == 0 {
        // Subnormal: the exponent of the leading bit.
        let lead = 31 - bits.leading_zeros() as i32; // bit index in 0..23
        return (lead - 23 - 126) as f32;
    }
    (biased - 127) as f32
}

/// `_mm512_getmant_ps(d, _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_nan)` for the non-negative
/// finite inputs `logkf` can meet: the significand scaled into `[0.75, 1.5)`.
fn getmant(d: f32) -> f32 {
    if d.is_nan() || d < 0.0 {
        return f32::NAN;
    }
    if d == 0.0 || d.is_infinite() {
        // Zero stays zero; SLEEF's pow handles both cases after the fact.
        return if d == 0.0 { 0.0 } else { 1.0 };
    }
    let mut bits = d.to_bits();
    if bits >> 23 == 0 {
        // Normalize a subnormal: its fraction shifted up to the implicit bit.
        let shift = bits.leading_zeros() - 8;
        bits = (bits << shift) & 0x007f_ffff;
    }
    let fraction = bits & 0x007f_ffff;
    // A significand of at least 1.5 (top fraction bit set) is halved into [0.75, 1).
    let exponent = if fraction & 0x0040_0000 != 0 {
        126
    } else {
        127
    };
    f32::from_bits((exponent << 23) | fraction)
}

/// SLEEF's `logkf`, AVX512F variant: `ln(d)` as a double-float.
fn logkf(d: f32) -> Df {
    let e = getexp(d * (1.0f32 / 0.75f32));
    let e = if e == f32::INFINITY { 128.0 } else { e };
    let m = getmant(d);

    let x = div_dd(add2_ff(-1.0, m), add2_ff(1.0, m));
    let x2 = squ(x);

    let mut t = 0.240_320_354_700_088_500_976_562_f32;
    t = t.mul_add(x2.x, 0.285_112_679_004_669_189_453_125);
    t = t.mul_add(x2.x, 0.400_007_992_982_864_379_882_812);
    let c = df(
        0.666_666_626_930_236_816_406_25,
        3.691_838_612_596_143_320_843_11e-9,
    );

    let mut s = mul_df(
        df(0.693_147_182_464_599_609_38, -1.904_654_323_148_236_017e-9),
        e,
    );
    s = add_dd(s, scale(x, 2.0));
    add_dd(s, mul_dd(mul_dd(x2, x), add2_dd(mul_df(x2, t), c)))
}

/// `_mm512_cvtps_epi32` under the default rounding: nearest, ties to even; `i32::MIN` (the
/// "integer indefinite") out of range or for NaN.
fn rint(u: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&u) {
        u.round_ties_even() as i32
    } else {
        i32::MIN
    }
}

/// SLEEF's `vldexp_vf_vf_vi2`: `x * 2^q` in steps that neither overflow nor flush early.
fn ldexp(x: f32, q: i32) -> f32 {
    let mut m = q >> 31;
    m = (((m.wrapping_add(q)) >> 6).wrapping_sub(m)) << 4;
    let q = q.wrapping_sub(m << 2);
    m = m.wrapping_add(0x7f);
    m = if m > 0 { m } else { 0 };
    m = if m > 0xff { 0xff } else { m };
    let u = f32::from_bits((m << 23) as u32);
    let x = x * u * u * u * u;
    let u = f32::from_bits((q.wrapping_add(0x7f) << 23) as u32);
    x * u
}

const R_LN2F: f32 = std::f32::consts::LOG2_E;
const L2UF: f32 = 0.693_145_751_953_125;
const L2LF: f32 = 1.428_606_765_330_187_045e-6;

/// SLEEF's `expkf`: `e^(d.x + d.y)`.
fn expkf(d: Df) -> f32 {
    let u = (d.x + d.y) * R_LN2F;
    let q = rint(u);

    let mut s = add2_df(d, q as f32 * -L2UF);
    s = add2_df(s, q as f32 * -L2LF);
    s = normalize(s);

    let mut u = 0.001_363_246_468_827_128_410_339_36_f32;
    u = u.mul_add(s.x, 0.008_365_969_173_610_210_418_701_17);
    u = u.mul_add(s.x, 0.041_671_082_377_433_776_855_468_8);
    u = u.mul_add(s.x, 0.166_665_524_244_308_471_679_688);
    u = u.mul_add(s.x, 0.499_999_850_988_388_061_523_438);

    let t = add_dd(s, mul_df(squ(s), u));
    let t = add_fd(1.0, t);
    let u = ldexp(t.x + t.y, q);
    if d.x < -104.0 { 0.0 } else { u }
}

/// `x` with the sign of `x` flipped where `y` is negative (SLEEF's `vmulsign`).
fn mulsign(x: f32, y: f32) -> f32 {
    f32::from_bits(x.to_bits() ^ (y.to_bits() & 0x8000_0000))
}

/// SLEEF's `xpowf` (the `Sleef_powf16_u10` torch's AVX512 kernel calls), special cases
/// included.
pub(crate) fn sleef_powf(x: f32, y: f32) -> f32 {
    const TWO_24: f32 = 16_777_216.0;
    let yisint = y.trunc() == y || y.abs() > TWO_24;
    // `_mm512_cvttps_epi32`: truncation, `i32::MIN` out of range.
    let truncated = if y.abs() < 2_147_483_648.0 {
        y as i32
    } else {
        i32::MIN
    };
    let yisodd = truncated & 1 == 1 && yisint && y.abs() < TWO_24;

    let mut result = expkf(mul_df(logkf(x.abs()), y));
    if result.is_nan() {
        result = f32::INFINITY;
    }
    result *= if x > 0.0 {
        1.0
    } else if yisint {
        if yisodd { -1.0 } else { 1.0 }
    } else {
        f32::NAN
    };

    let efx = mulsign(x.abs() - 1.0, y);
    if y.is_infinite() {
        result = if efx < 0.0 {
            0.0
        } else if efx == 0.0 {
            1.0
        } else {
            f32::INFINITY
        };
    }
    if x.is_infinite() || x == 0.0 {
        let magnitude = if y.is_sign_negative() ^ (x == 0.0) {
            0.0
        } else {
            f32::INFINITY
        };
        result = mulsign(magnitude, if yisodd { x } else { 1.0 });
    }
    if x.is_nan() || y.is_nan() {
        result = f32::from_bits(u32::MAX);
    }
    if y == 0.0 || x == 1.0 {
        result = 1.0;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(base, dim, pair, bits)`: entry `pair` of torch's
    /// `base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim)`,
    /// recorded as f32 bits with torch 2.6.0 on an AVX512 CPU
    /// (`torch.backends.cpu.get_cpu_capability() == "AVX512"`) for this test.
    const IN_CHUNKS: [(f32, usize, usize, u32); 4] = [
        // All four are 1 ulp below the correctly rounded power (and glibc's `powf`).
        (1e6, 256, 74, 0x4537_eba2),
        (10_000.0, 256, 111, 0x4537_eba2),
        (500_000.0, 512, 7, 0x3fb7_3fb2),
        (10_000.0, 96, 20, 0x4239_a9dd),
    ];

    /// As [`IN_CHUNKS`], entries past the last chunk of 32 (glibc's `powf`); the last two are
    /// 1 ulp above the correctly rounded power.
    const IN_TAILS: [(f32, usize, usize, u32); 3] = [
        (10_000.0, 96, 47, 0x4600_f82c),
        (5985.0, 100, 42, 0x44ba_0e5a),
        (23_931.0, 100, 43, 0x45b6_498d),
    ];

    fn torch_row(base: f32, dim: usize) -> Vec<f32> {
        let exponents: Vec<f32> = (0..dim)
            .step_by(2)
            .map(|j| (j as f64 / dim as f64) as f32)
            .collect();
        pow_row(base, &exponents)
    }

    #[test]
    fn vector_chunks_match_torchs_sleef_bit_for_bit() {
        for (base, dim, pair, bits) in IN_CHUNKS {
            assert!(pair < dim / 2 - (dim / 2) % TORCH_VECTOR_CHUNK);
            let got = torch_row(base, dim)[pair];
            assert_eq!(got.to_bits(), bits, "{base} ** ({}/{dim})", 2 * pair);
            // What the port is for: a correctly rounded pow is 1 ulp away.
            let exponent = ((2 * pair) as f64 / dim as f64) as f32;
            let rounded = (base as f64).powf(exponent as f64) as f32;
            assert_eq!(
                rounded.to_bits(),
                bits + 1,
                "{base} ** ({}/{dim})",
                2 * pair
            );
        }
    }

    /// The tail is the platform's `powf`: glibc's on Linux, as torch's scalar loop.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn tails_match_torchs_glibc_powf_bit_for_bit() {
        for (base, dim, pair, bits) in IN_TAILS {
            assert!(pair >= dim / 2 - (dim / 2) % TORCH_VECTOR_CHUNK);
            let got = torch_row(base, dim)[pair];
            assert_eq!(got.to_bits(), bits, "{base} ** ({}/{dim})", 2 * pair);
        }
    }

    /// SLEEF's special cases, as `torch.pow` of f32 tensors of 32 elements returns them.
    #[test]
    fn special_cases_follow_sleef() {
        let inf = f32::INFINITY;
        for (x, y, want) in [
            (0.0, -1.0, inf),
            (-0.0, -1.0, -inf),
            (0.0, 0.5, 0.0),
            (-2.0, 3.0, -8.0),
            (-2.0, 2.0, 4.0),
            (1.0, f32::NAN, 1.0),
            (f32::NAN, 0.0, 1.0),
            (inf, -0.5, 0.0),
            (-inf, 3.0, -inf),
            (0.5, inf, 0.0),
            (2.0, -inf, 0.0),
            (-1.0, inf, 1.0),
            (10_000.0, 0.0, 1.0),
            (10_000.0, 1.0, 10_000.0),
        ] {
            let got = sleef_powf(x, y);
            assert_eq!(got.to_bits(), want.to_bits(), "{x} ** {y}: {got}");
        }
        assert!(sleef_powf(-2.0, 0.5).is_nan());
        assert!(sleef_powf(f32::NAN, 1.0).is_nan());
    }
}
