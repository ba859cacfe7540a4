//! Records and configs from outside, mutated at random: `try_load_file`, `read_record` and
//! the config loaders must never panic, hang or allocate without bound. Every input either
//! loads or gets an error; a panic fails the property (proptest reports it with the smallest
//! input it can find), an allocation failure aborts the test binary, and a watchdog fails the
//! run if an input hangs.
//!
//! The mutations: truncation at any length, flipped bytes anywhere, bytes of the header
//! overwritten with huge sizes, random bytes, and valid records of another shape, another
//! dtype and other tensor names.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use burn::config::Config as _;
use burn::module::{Module, ModuleMapper, Param};
use burn::nn::LinearConfig;
use burn::prelude::*;
use burn::tensor::FloatDType;
use burn_positional::training::read_record;
use burn_positional::{EmbeddingWithPosition, EmbeddingWithPositionConfig, LearnedConfig};
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_studies::checkpoint::RunRecord;
use burn_positional_studies::copy_back::CopyBackConfig;
use burn_positional_studies::tagger::TokenTaggerConfig;
use burn_positional_studies::training::TrainingConfig;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Records tried.
static TRIED: AtomicUsize = AtomicUsize::new(0);
/// Cases per property: bounded so CI stays within its time.
const CASES: u32 = 400;

fn module(device: &Device) -> EmbeddingWithPosition {
    device.seed(1);
    EmbeddingWithPositionConfig::new(50, 16)
        .with_scheme(LearnedConfig::new(24).into())
        .init(device)
}

fn record_bytes(module: impl Module, dir: &Path, name: &str) -> Vec<u8> {
    let path = dir.join(name);
    module.save_file(&path).unwrap();
    std::fs::read(&path).unwrap()
}

/// The valid record the mutations start from, and three valid records that do not fit it.
fn originals() -> (Vec<u8>, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let good = record_bytes(module(&device), dir.path(), "good.bpk");
    let other_shape = record_bytes(
        EmbeddingWithPositionConfig::new(51, 16)
            .with_scheme(LearnedConfig::new(24).into())
            .init(&device),
        dir.path(),
        "shape.bpk",
    );
    let other_dtype = record_bytes(module(&device).map(&mut Half), dir.path(), "dtype.bpk");
    let other_names = record_bytes(
        LinearConfig::new(16, 50).init(&device),
        dir.path(),
        "names.bpk",
    );
    (good, vec![other_shape, other_dtype, other_names])
}

/// Casts every float parameter to f16: a record of another dtype.
struct Half;

impl ModuleMapper for Half {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        param.map(|tensor| tensor.cast(FloatDType::F16))
    }
}

/// Loads `bytes` every way the library reads a record; never panics (the property).
fn load_every_way(bytes: &[u8]) {
    TRIED.fetch_add(1, Ordering::Relaxed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.bpk");
    std::fs::write(&path, bytes).unwrap();
    let device = Device::flex();
    let _ = read_record(&path);
    if let Ok(loaded) = module(&device).try_load_file(&path) {
        // What loads must also run.
        let ids = Tensor::<2, Int>::from_data([[0, 1, 2]], &device);
        let _ = loaded.try_forward_at(ids, Default::default());
    }
}

fn watchdog() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(600));
            eprintln!("hostile inputs: still running after 600 s; an input hangs");
            std::process::exit(101);
        });
    });
}

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip(Vec<(usize, u8)>),
    Huge {
        offset: usize,
        width: usize,
        value: u64,
    },
    Random(Vec<u8>),
    Splice {
        start: usize,
        bytes: Vec<u8>,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        prop::collection::vec((any::<usize>(), 1u8..=255), 1..8).prop_map(Mutation::Flip),
        (
            0usize..64,
            prop::sample::select(vec![1usize, 2, 4, 8]),
            prop::sample::select(vec![
                u64::MAX,
                u64::MAX / 2,
                u32::MAX as u64,
                1 << 40,
                1 << 31,
                0,
            ])
        )
            .prop_map(|(offset, width, value)| Mutation::Huge {
                offset,
                width,
                value
            }),
        prop::collection::vec(any::<u8>(), 0..512).prop_map(Mutation::Random),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 0..32))
            .prop_map(|(start, bytes)| Mutation::Splice { start, bytes }),
    ]
}

fn apply(original: &[u8], mutation: &Mutation) -> Vec<u8> {
    let mut bytes = original.to_vec();
    match mutation {
        Mutation::Truncate(len) => bytes.truncate(len % (original.len() + 1)),
        Mutation::Flip(flips) => {
            for &(at, mask) in flips {
                let at = at % bytes.len();
                bytes[at] ^= mask;
            }
        }
        Mutation::Huge {
            offset,
            width,
            value,
        } => {
            let le = value.to_le_bytes();
            for i in 0..*width {
                if let Some(byte) = bytes.get_mut(offset + i) {
                    *byte = le[i];
                }
            }
        }
        Mutation::Random(random) => bytes = random.clone(),
        Mutation::Splice { start, bytes: new } => {
            let start = start % (bytes.len() + 1);
            let end = (start + new.len()).min(bytes.len());
            bytes.splice(start..end, new.iter().copied());
        }
    }
    bytes
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Sizes small enough to build in a test: a config may ask for any table, and validation
/// refuses only sizes that cannot exist (overflowing a usize).
fn small(config: &EmbeddingWithPositionConfig) -> bool {
    config.vocab_size.saturating_mul(config.d_model) <= 1 << 20
}

#[test]
fn mutated_records_load_or_fail_cleanly() {
    watchdog();
    let (good, others) = originals();
    let before = TRIED.load(Ordering::Relaxed);
    runner()
        .run(&(mutation(), 0usize..4), |(mutation, which)| {
            let original = if which == 0 {
                &good
            } else {
                &others[which - 1]
            };
            load_every_way(&apply(original, &mutation));
            Ok(())
        })
        .unwrap();
    // Valid records of the wrong shape, dtype and names, as they are.
    for other in &others {
        load_every_way(other);
    }
    println!(
        "{} hostile records tried: none panicked",
        TRIED.load(Ordering::Relaxed) - before
    );
}

#[test]
fn mutated_configs_load_or_fail_cleanly() {
    watchdog();
    let training = TrainingConfig::new(
        TokenTaggerConfig::new(EncoderConfig::new(16, LearnedConfig::new(32).into())),
        CopyBackConfig::new(),
    );
    let configs = [
        serde_json::to_vec_pretty(&training).unwrap(),
        serde_json::to_vec_pretty(
            &EmbeddingWithPositionConfig::new(100, 16).with_scheme(LearnedConfig::new(8).into()),
        )
        .unwrap(),
        serde_json::to_vec_pretty(&RunRecord {
            config: training.clone(),
            workers: 2,
            dtype: FloatDType::F32,
        })
        .unwrap(),
    ];
    let tried = AtomicUsize::new(0);
    runner()
        .run(&(mutation(), 0usize..3), |(mutation, which)| {
            let bytes = apply(&configs[which], &mutation);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("config.json");
            std::fs::write(&path, &bytes).unwrap();
            let device = Device::flex();
            if let Ok(config) = TrainingConfig::load(&path) {
                // Checked before anything is built: every value either passes or is named.
                let embedding = EmbeddingWithPositionConfig::new(
                    config.model.encoder.vocab_size,
                    config.model.encoder.d_model,
                );
                if config.validate().is_ok() && small(&embedding) {
                    let _ = config.model.init(&device);
                }
            }
            if let Ok(config) = EmbeddingWithPositionConfig::load(&path) {
                if small(&config) {
                    if let Ok(module) = config.try_init(&device) {
                        let ids = Tensor::<2, Int>::from_data([[0, 1]], &device);
                        let _ = module.try_forward_at(ids, Default::default());
                    }
                } else {
                    let _ = config.validate();
                }
            }
            let _ = RunRecord::load(&path);
            tried.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    println!(
        "{} hostile configs tried: none panicked",
        tried.load(Ordering::Relaxed)
    );
}

/// Offsets at the end of `usize`: `offset + seq` must not overflow anywhere; each is the typed
/// error naming the table's limit, for learned and sinusoidal tables.
#[test]
fn offsets_near_usize_max_are_refused() {
    let device = Device::flex();
    let learned = module(&device);
    let sinusoidal = EmbeddingWithPositionConfig::new(50, 16).init(&device);
    for offset in [usize::MAX, usize::MAX - 1, usize::MAX - 3, 1 << 63] {
        for embed in [&learned, &sinusoidal] {
            let err = embed
                .try_forward_at(
                    Tensor::<2, Int>::ones([1, 3], &device),
                    burn_positional::Positions::Offset(offset),
                )
                .expect_err("past every table");
            assert!(
                matches!(
                    err,
                    burn_positional::PositionError::PositionPastTable { .. }
                        | burn_positional::PositionError::PositionPastSinusoidLimit { .. }
                ),
                "offset {offset}: {err}"
            );
        }
    }
}

/// Sizes that cannot exist, or whose tables would pass the documented ceiling
/// (`MAX_TABLE_VALUES`, 2^32 values), are `InvalidConfig` naming the field at `try_init`, before
/// any allocation (before issue 24: an overflow panic in `d_token + d_position`, and allocations
/// of 2^40-row tables that aborted the process).
#[test]
fn impossible_sizes_are_refused_at_init() {
    use burn_positional::{
        Combine, PositionError, RopeConfig, SelfAttentionConfig, SinusoidalConfig,
    };
    let device = Device::flex();
    let huge = 1usize << 40;
    let field_of = |err: PositionError| match err {
        PositionError::InvalidConfig { field, .. } => field.to_string(),
        PositionError::ConcatSizeMismatch { .. } => "combine".to_string(),
        other => panic!("not a config error: {other}"),
    };
    let embedding = |config: EmbeddingWithPositionConfig| {
        let start = std::time::Instant::now();
        let err = config.try_init(&device).expect_err("refused");
        eprintln!("{err}: refused in {:?}", start.elapsed());
        field_of(err)
    };
    let concat = EmbeddingWithPositionConfig::new(10, 8).with_combine(Combine::Concat {
        d_token: usize::MAX,
        d_position: 2,
    });
    assert_eq!(embedding(concat), "combine");
    let cache_len = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(SinusoidalConfig::new().with_cache_len(huge).into());
    assert_eq!(embedding(cache_len), "SinusoidalConfig::cache_len");
    let max_len =
        EmbeddingWithPositionConfig::new(10, 8).with_scheme(LearnedConfig::new(huge).into());
    assert_eq!(embedding(max_len), "LearnedConfig::max_len");
    assert_eq!(
        embedding(EmbeddingWithPositionConfig::new(huge, 8)),
        "vocab_size"
    );
    let limit = EmbeddingWithPositionConfig::new(10, 8).with_scheme(
        SinusoidalConfig::new()
            .with_cache_len(64)
            .with_max_len(Some(32))
            .into(),
    );
    assert_eq!(embedding(limit), "SinusoidalConfig::max_len");
    let rope = RopeConfig::new(8).with_cache_len(huge);
    assert_eq!(
        field_of(rope.validate().unwrap_err()),
        "RopeConfig::cache_len"
    );
    for (config, field) in [
        (
            SelfAttentionConfig::new(huge, 1),
            "SelfAttentionConfig::d_model",
        ),
        (
            SelfAttentionConfig::new(64, 4).with_d_ff(Some(huge)),
            "SelfAttentionConfig::d_ff",
        ),
    ] {
        let err = config.try_init(&device).expect_err("refused");
        assert!(err.to_string().contains(&huge.to_string()), "{err}");
        assert_eq!(field_of(err), field);
    }
}
