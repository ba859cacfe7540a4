//! Hostile sizes and dtypes on every device: positions so far out that a table grown to them
//! would not fit, windows past a learned table, and tables of two float dtypes. Each is a typed
//! error naming the value, the limit and the fix, from both twins (fused and reference), and the
//! read-free `forward` fails at once on what the host can tell from shapes and offsets.
//!
//! Before issue 24: the far positions aborted the process (`memory allocation of 8589934592
//! bytes failed`) or panicked inside the kernel crate on wgpu; the window error asked for
//! `max_len` 33 where 38 were needed; the twins disagreed on `Offset(1 << 31)`; `forward`
//! returned NaN rows for a sequence longer than a learned table; the reference twin panicked on
//! f16 tokens beside the f32 sinusoid; a record of mixed dtypes loaded and then every forward
//! panicked.

use crate::panic_message;
use std::time::Instant;

use burn::module::{Module, ModuleMapper, Param};
use burn::prelude::*;
use burn::tensor::{DType, FloatDType, TensorData};
use burn_positional::{
    EmbeddingWithPosition, EmbeddingWithPositionConfig, LearnedConfig, PositionError, Positions,
    SinusoidalConfig,
};

/// The default sinusoidal `max_len` at width `d` on `device`: 2^26 values, and no more rows
/// than one buffer of the device holds in f32 (lavapipe states 128 MiB: 2^19 rows at width 64).
fn default_max_len(device: &Device, d: usize) -> usize {
    let rows = (1 << 26) / d;
    match burn_positional_kernels::max_buffer_bytes(device) {
        Some(limit) => rows.min((limit / (d as u64 * 4)) as usize),
        None => rows,
    }
}

/// Both twins refuse `positions` with `want`, and say how long they took (for the record).
fn both_twins_refuse(
    embed: &EmbeddingWithPosition,
    ids: &Tensor<2, Int>,
    positions: Positions,
    want: &PositionError,
) {
    let start = Instant::now();
    let fused = embed.try_forward_at(ids.clone(), positions.clone());
    let reference = embed.try_forward_reference(ids.clone(), positions);
    eprintln!("{want:?}: both twins answered in {:?}", start.elapsed());
    assert_eq!(fused.unwrap_err(), *want, "fused twin");
    assert_eq!(reference.unwrap_err(), *want, "reference twin");
}

/// `try_forward` at an offset of 2e9 on a sinusoidal embedding (d_model 512), and at explicit
/// positions of `i64::MAX` (or `i32::MAX` where the device has no i64), is refused against the
/// sinusoid's `max_len` (2^26 / 512 = 131 072 rows by default, fewer where one buffer of the
/// device holds less), with no table grown.
pub fn far_sinusoid_positions_are_refused_not_allocated(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 512).init(device);
    let ids = Tensor::<2, Int>::ones([1, 4], device);
    let max_len = default_max_len(device, 512);
    both_twins_refuse(
        &embed,
        &ids,
        Positions::Offset(2_000_000_000),
        &PositionError::PositionPastSinusoidLimit {
            position: 2_000_000_000,
            max_len,
            needed: 2_000_000_004,
        },
    );
    let far = if device.supports_dtype(DType::I64) {
        i64::MAX
    } else {
        i32::MAX as i64
    };
    let dtype = if far == i64::MAX {
        DType::I64
    } else {
        DType::I32
    };
    let p = Tensor::<2, Int>::from_data(
        TensorData::new(vec![0i64, 1, far, 3], [1, 4]),
        (device, dtype),
    );
    let ids = Tensor::<2, Int>::from_data(TensorData::new(vec![1i64; 4], [1, 4]), (device, dtype));
    both_twins_refuse(
        &embed,
        &ids,
        Positions::Explicit(p),
        &PositionError::PositionPastSinusoidLimit {
            position: far,
            max_len,
            needed: far as usize + 1,
        },
    );
    let message = PositionError::PositionPastSinusoidLimit {
        position: 2_000_000_000,
        max_len,
        needed: 2_000_000_004,
    }
    .to_string();
    for part in [
        "position 2000000000",
        &format!("max_len = {max_len}"),
        "at least 2000000004",
    ] {
        assert!(message.contains(part), "{part:?} missing: {message}");
    }
    // The read-free forward knows an offset window from the host: it fails at once, same words.
    assert_eq!(
        panic_message(|| drop(embed.forward_at(ids.clone(), Positions::Offset(2_000_000_000)))),
        message
    );
    // The reference twin refuses the same, with no overflow at usize::MAX.
    assert!(matches!(
        embed.try_forward_reference(ids, Positions::Offset(usize::MAX - 1)),
        Err(PositionError::PositionPastSinusoidLimit {
            needed: usize::MAX,
            ..
        })
    ));
}

/// Explicit positions up to 2^20 at width 64 (a 256 MiB table: on lavapipe, a kernel-crate
/// panic `can't allocate buffer` before) are past the default limit of 2^20 rows (2^19 where
/// one buffer holds 128 MiB, as on lavapipe): refused. Under a raised limit they embed, and
/// equal the reference twin.
pub fn explicit_positions_at_the_wgpu_buffer_limit(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 64).init(device);
    let ids = Tensor::<2, Int>::ones([1, 2], device);
    let p = Tensor::<2, Int>::from_data([[0, 1 << 20]], device);
    both_twins_refuse(
        &embed,
        &ids,
        Positions::Explicit(p),
        &PositionError::PositionPastSinusoidLimit {
            position: 1 << 20,
            max_len: default_max_len(device, 64),
            needed: (1 << 20) + 1,
        },
    );
    let small = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(
            SinusoidalConfig::new()
                .with_cache_len(16)
                .with_max_len(Some(64))
                .into(),
        )
        .init(device);
    let p = Tensor::<2, Int>::from_data([[0, 63]], device);
    let fused = small
        .try_forward_at(ids.clone(), Positions::Explicit(p.clone()))
        .unwrap();
    let reference = small
        .try_forward_reference(ids.clone(), Positions::Explicit(p))
        .unwrap();
    fused.into_data().assert_approx_eq::<f32>(
        &reference.into_data(),
        burn::tensor::Tolerance::absolute(1e-6),
    );
    assert!(small.try_forward_at(ids, Positions::Offset(63)).is_err());
}

/// A table the device cannot allocate in one buffer is refused by `try_init`, naming the size,
/// the device's limit and the fix, instead of panicking inside the kernels at the first forward
/// (before: on wgpu, `max_len = 2^20 + 1` at width 64 was accepted, and `try_forward_at` at
/// position 2^20 panicked with "can't allocate buffer of size: 268435712"). The limit is the
/// one the device states (`max_buffer_bytes`); the CPU backends state none.
pub fn tables_past_the_device_buffer_are_refused_at_try_init(device: &Device) {
    let limit = burn_positional_kernels::max_buffer_bytes(device);
    #[allow(deprecated)]
    let on_cpu = matches!(
        device.as_dispatch().clone().inner(),
        burn::backend::DispatchDevice::Flex(_) | burn::backend::DispatchDevice::NdArray(_)
    );
    assert_eq!(limit.is_none(), on_cpu, "{device:?} states {limit:?}");
    let Some(limit) = limit else {
        // No stated limit: the default sinusoidal table keeps its 2^26 values, and a table of
        // 2^20 + 1 rows is accepted (not built: max_len only bounds growth).
        let embed = EmbeddingWithPositionConfig::new(10, 64)
            .with_scheme(
                SinusoidalConfig::new()
                    .with_max_len(Some((1 << 20) + 1))
                    .into(),
            )
            .try_init(device)
            .unwrap();
        assert!(embed.to_string().contains("max_len: 1048577"), "{embed}");
        return;
    };
    let row = 64 * 4; // width 64, f32
    let most = (limit / row) as usize;
    // The default grows only as far as the device holds.
    let default = EmbeddingWithPositionConfig::new(10, 64).init(device);
    let max_len = match &default.position {
        burn_positional::AbsolutePosition::Sinusoidal(table) => table.max_len(),
        other => panic!("the default scheme is sinusoidal, not {other:?}"),
    };
    assert!(
        max_len <= most,
        "default max_len {max_len} past the device's {most} rows"
    );
    for (scheme, field) in [
        (
            SinusoidalConfig::new().with_max_len(Some(most + 1)).into(),
            "SinusoidalConfig::max_len",
        ),
        (
            LearnedConfig::new(most + 1).into(),
            "LearnedConfig::max_len",
        ),
    ] {
        let config = EmbeddingWithPositionConfig::new(10, 64).with_scheme(scheme);
        let err = config.try_init(device).unwrap_err();
        let bytes = (most as u64 + 1) * row;
        assert_eq!(
            err,
            PositionError::TableTooLargeForDevice {
                field,
                rows: most + 1,
                cols: 64,
                bytes,
                limit,
                fix: match &err {
                    PositionError::TableTooLargeForDevice { fix, .. } => fix.clone(),
                    _ => unreachable!(),
                },
            }
        );
        let message = err.to_string();
        for part in [
            bytes.to_string(),
            limit.to_string(),
            most.to_string(),
            field.into(),
        ] {
            assert!(message.contains(&part), "{part:?} missing: {message}");
        }
        // The panicking twin panics with the same message.
        assert_eq!(
            panic_message(|| {
                config.init(device);
            }),
            message
        );
    }
    // The token table too.
    let vocab = EmbeddingWithPositionConfig::new(most + 1, 64)
        .with_scheme(burn_positional::AbsolutePositionConfig::None);
    assert!(matches!(
        vocab.try_init(device),
        Err(PositionError::TableTooLargeForDevice {
            field: "vocab_size",
            ..
        })
    ));
}

/// Offset 30, seq 8, `max_len` 32: the first position without a row is 32, and the window needs
/// `max_len` 38 (before: "at least 33").
pub fn a_window_past_a_learned_table_names_the_window(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(32).into())
        .init(device);
    let ids = Tensor::<2, Int>::ones([2, 8], device);
    let want = PositionError::PositionPastTable {
        position: 32,
        at: None,
        max_len: 32,
        needed: 38,
    };
    both_twins_refuse(&embed, &ids, Positions::Offset(30), &want);
    assert!(want.to_string().contains("at least 38"), "{want}");
    assert_eq!(
        panic_message(|| drop(embed.forward_at(ids, Positions::Offset(30)))),
        want.to_string()
    );
}

/// `Offset(1 << 31)` on a learned table of 8 rows: both twins name the table (before: the fused
/// twin said `OffsetTooLarge { limit: i32::MAX }`, the reference `PositionPastTable`).
pub fn both_twins_name_the_table_for_a_far_offset(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(8).into())
        .init(device);
    let ids = Tensor::<2, Int>::ones([1, 2], device);
    both_twins_refuse(
        &embed,
        &ids,
        Positions::Offset(1 << 31),
        &PositionError::PositionPastTable {
            position: 1 << 31,
            at: None,
            max_len: 8,
            needed: (1 << 31) + 2,
        },
    );
}

/// The read-free `forward` fails at once on a sequence longer than a learned table (known from
/// the shape alone), with `try_forward`'s message; before, it returned NaN rows.
pub fn forward_refuses_a_sequence_longer_than_a_learned_table(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(8).into())
        .init(device);
    let ids = Tensor::<2, Int>::ones([1, 9], device);
    let err = embed.try_forward(ids.clone()).unwrap_err();
    assert_eq!(panic_message(|| drop(embed.forward(ids))), err.to_string());
    assert_eq!(embed.unchecked_forwards(), 0, "nothing deferred");
}

/// Casts the token table alone to f16 (a mapper that maps the first float parameter).
struct TokensToHalf(bool);

impl ModuleMapper for TokensToHalf {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if std::mem::replace(&mut self.0, true) {
            return param;
        }
        param.map(|tensor| tensor.cast(FloatDType::F16))
    }
}

/// f16 token vectors beside the f32 sinusoid table (a constant a mapper leaves alone): both
/// twins embed, and agree. Before, the reference twin panicked with `DTypeMismatch` on wgpu.
pub fn half_tokens_beside_the_f32_sinusoid(device: &Device) {
    if !device.supports_dtype(DType::F16) {
        eprintln!("{device:?} has no f16: nothing to embed in it");
        return;
    }
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .init(device)
        .map(&mut TokensToHalf(false));
    assert_eq!(embed.tokens.val().dtype(), DType::F16);
    let ids = Tensor::<2, Int>::from_data([[1, 2, 3]], device);
    let fused = embed
        .try_forward_at(ids.clone(), Positions::Offset(5))
        .unwrap();
    let reference = embed
        .try_forward_reference(ids, Positions::Offset(5))
        .unwrap();
    assert_eq!(reference.dtype(), DType::F16);
    let f32 = |t: Tensor<3>| t.cast(FloatDType::F32).into_data();
    f32(fused).assert_approx_eq::<f32>(&f32(reference), burn::tensor::Tolerance::absolute(1e-2));
}

/// A record whose token table is f16 and whose learned table is f32 is refused by
/// `try_load_file`, naming both dtypes; so is a forward of such a module, before any kernel.
pub fn a_record_of_two_float_dtypes_is_refused(device: &Device) {
    if !device.supports_dtype(DType::F16) {
        eprintln!("{device:?} has no f16: no such record can be loaded on it");
        return;
    }
    let config = EmbeddingWithPositionConfig::new(10, 8).with_scheme(LearnedConfig::new(8).into());
    let mixed = config.init(device).map(&mut TokensToHalf(false));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.bpk");
    mixed.clone().save_file(&path).unwrap();
    let err = config.init(device).try_load_file(&path).unwrap_err();
    assert!(
        matches!(&err, PositionError::TableDTypeMismatch { tokens, table, .. }
            if tokens == "F16" && table == "F32"),
        "{err}"
    );
    let message = err.to_string();
    for part in ["mixed.bpk", "F16", "F32", "Fix"] {
        assert!(message.contains(part), "{part:?} missing: {message}");
    }
    let ids = Tensor::<2, Int>::ones([1, 2], device);
    assert!(matches!(
        mixed.try_forward(ids),
        Err(PositionError::TableDTypeMismatch { .. })
    ));
}

on_every_device!(
    far_sinusoid_positions_are_refused_not_allocated,
    explicit_positions_at_the_wgpu_buffer_limit,
    tables_past_the_device_buffer_are_refused_at_try_init,
    a_window_past_a_learned_table_names_the_window,
    both_twins_name_the_table_for_a_far_offset,
    forward_refuses_a_sequence_longer_than_a_learned_table,
    half_tokens_beside_the_f32_sinusoid,
    a_record_of_two_float_dtypes_is_refused,
);
