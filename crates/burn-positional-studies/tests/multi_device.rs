//! burn-train's multi-device strategy on our modules: two workers on the CPU
//! (`MultiDevice(vec![flex, flex])`, as burn's own data-split test does, since flex has one
//! device id) train the copy-back tagger, and the parameters equal a single-device run on the
//! combined batches. This exercises our modules (and the fused embedding's hand-written
//! backward) under burn-train's cloning, `fork` and worker threads.
//!
//! Why the runs agree: burn splits the training set into one contiguous half per worker; step
//! `s` gives worker `w` batch `s` of its half, and the main device sums the two workers'
//! gradients before one optimizer step. Each worker's loss is a mean over its batch, so the sum
//! is twice the gradient of the mean over the combined batch: with plain SGD, the single-device
//! run on the combined batches at twice the learning rate takes the same steps.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::data::dataset::{Dataset, DatasetError};
use burn::module::{ModuleVisitor, Param};
use burn::optim::SgdConfig;
use burn::optim::lr_scheduler::constant::ConstantLr;
use burn::prelude::*;
use burn::train::metric::LossMetric;
use burn::train::renderer::CliMetricsRenderer;
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, LearnerModel,
    MultiDeviceOptim, SupervisedTraining, TrainStep,
};
use burn_positional::SinusoidalConfig;
use burn_positional::{AbsolutePositionConfig, LearnedConfig, ScoreBiasConfig, T5BiasConfig};
use burn_positional_examples::classifier::SequenceClassifierConfig;
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_examples::who_bites_whom::{self, SentenceBatcher};
use burn_positional_studies::copy_back::{
    CopyBackBatch, CopyBackBatcher, CopyBackConfig, CopyBackDataset,
};
use burn_positional_studies::tagger::{TokenTagger, TokenTaggerConfig};

const BATCH: usize = 4; // per worker
const STEPS: usize = 3;
const LEARNING_RATE: f64 = 0.05; // per worker; the single-device run takes twice this

fn task() -> CopyBackConfig {
    CopyBackConfig::new()
        .with_vocab_size(8)
        .with_seq(12)
        .with_k(2)
}

/// A tagger with a learned position table and a T5 bias: three tables a user may freeze.
fn config() -> TokenTaggerConfig {
    let scheme: AbsolutePositionConfig = LearnedConfig::new(16).into();
    TokenTaggerConfig::new(
        EncoderConfig::new(task().vocab_size, scheme)
            .with_d_model(16)
            .with_n_heads(2)
            .with_n_blocks(1)
            .with_score_bias(Some(ScoreBiasConfig::T5(T5BiasConfig::new(2)))),
    )
}

/// Which tables train.
#[derive(Debug, Clone, Copy)]
struct Frozen {
    tokens: bool,
    positions: bool,
    t5: bool,
}

/// The same initial parameters for every run: built once, read into a record (which draws
/// every lazily initialized table), and loaded into each run's model.
fn initial_model(device: &Device, frozen: Frozen) -> TokenTagger {
    device.seed(7);
    let record = config().init(device).into_record();
    let mut model = config().init(device).load_record(record);
    if frozen.tokens {
        model.encoder.embed.tokens = model.encoder.embed.tokens.set_require_grad(false);
    }
    if frozen.positions {
        let burn_positional::AbsolutePosition::Learned(learned) = &mut model.encoder.embed.position
        else {
            unreachable!("a learned table")
        };
        learned.table = learned.table.clone().set_require_grad(false);
    }
    if frozen.t5 {
        let Some(burn_positional::ScoreBias::T5(t5)) = &mut model.encoder.score_bias else {
            unreachable!("a T5 bias")
        };
        t5.table = t5.table.clone().set_require_grad(false);
    }
    model
}

/// Items `order[i]` of the training set, in that order.
struct Reordered {
    inner: CopyBackDataset,
    order: Vec<usize>,
}

impl Dataset<Vec<i64>> for Reordered {
    fn get(&self, index: usize) -> Result<Vec<i64>, DatasetError> {
        self.inner.get(self.order[index])
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

fn loader(order: Vec<usize>, batch_size: usize) -> Arc<dyn DataLoader<CopyBackBatch>> {
    let inner = CopyBackDataset {
        task: task(),
        len: 2 * BATCH * STEPS,
        seed: 11,
    };
    DataLoaderBuilder::new(CopyBackBatcher { k: task().k })
        .batch_size(batch_size)
        .build(Reordered { inner, order })
}

/// One epoch of the copy-back tagger under burn-train's `SupervisedTraining`, plain SGD.
fn train(
    dir: &Path,
    model: TokenTagger,
    strategy: ExecutionStrategy,
    order: Vec<usize>,
    batch_size: usize,
    learning_rate: f64,
) -> TokenTagger {
    let valid = loader((0..BATCH).collect(), BATCH);
    fit(
        dir,
        model,
        strategy,
        loader(order, batch_size),
        valid,
        learning_rate,
    )
}

/// One epoch of any of our models under burn-train's `SupervisedTraining`, plain SGD.
fn fit<M, I>(
    dir: &Path,
    model: M,
    strategy: ExecutionStrategy,
    train: Arc<dyn DataLoader<I>>,
    valid: Arc<dyn DataLoader<I>>,
    learning_rate: f64,
) -> M
where
    I: Send + 'static,
    M: LearnerModel
        + TrainStep<Input = I, Output = ClassificationOutput>
        + InferenceStep<Input = I, Output = ClassificationOutput>,
{
    let learner = Learner::new(
        model,
        SgdConfig::new().init(),
        ConstantLr::new(learning_rate),
    );
    SupervisedTraining::new(dir, train, valid)
        .with_training_strategy(strategy.into())
        .num_epochs(1)
        .metric_train_numeric(LossMetric::new())
        .renderer(Box::new(CliMetricsRenderer::new()))
        .with_application_logger(None)
        .launch(learner)
        .model
}

/// burn-train's `MultiDevice` with two workers on one device (flex has a single device id, as in
/// burn's own data-split test), the optimizer on the first.
fn two_workers_on(device: &Device) -> ExecutionStrategy {
    ExecutionStrategy::multi(
        vec![device.clone(), device.clone()],
        MultiDeviceOptim::OptimMainDevice,
    )
}

/// Every float parameter, flattened, in visiting order.
fn parameters<M: Module>(model: &M) -> Vec<Vec<f32>> {
    struct Collect(Vec<Vec<f32>>);
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let values = param.val().into_data().convert::<f32>();
            self.0.push(values.try_to_vec::<f32>().unwrap());
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

/// The two runs from the same start: two workers on halves of the data, and one device on the
/// combined batches (step `s`: batch `s` of the first half, then batch `s` of the second).
fn both_runs(frozen: Frozen) -> (TokenTagger, TokenTagger, TokenTagger) {
    let device = Device::flex().autodiff();
    let start = initial_model(&device, frozen);
    let half = BATCH * STEPS;
    let dir = tempfile::tempdir().unwrap();

    let two_workers = train(
        &dir.path().join("multi"),
        start.clone(),
        two_workers_on(&device),
        (0..2 * half).collect(),
        BATCH,
        LEARNING_RATE,
    );
    let combined: Vec<usize> = (0..STEPS)
        .flat_map(|s| (s * BATCH..(s + 1) * BATCH).chain(half + s * BATCH..half + (s + 1) * BATCH))
        .collect();
    let one_device = train(
        &dir.path().join("single"),
        start.clone(),
        ExecutionStrategy::single(device),
        combined,
        2 * BATCH,
        2.0 * LEARNING_RATE,
    );
    (start, two_workers, one_device)
}

/// Largest absolute difference between two parameter lists.
fn max_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

/// Runs `f` on a thread and fails (rather than hanging CI) if it takes longer than `limit`:
/// a gradient a worker never sends would stall a synchronizing strategy forever.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || send.send(f()));
    receive
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("the run did not finish within {limit:?}"))
}

/// Two workers equal one device on the combined batches, within 1e-5: the f32 sums of the
/// workers' gradients and of the combined batch differ only in rounding order.
#[test]
fn two_workers_equal_one_device_on_the_combined_batches() {
    let (start, two_workers, one_device) = within(Duration::from_secs(300), || {
        let (start, a, b) = both_runs(Frozen {
            tokens: false,
            positions: false,
            t5: false,
        });
        (parameters(&start), parameters(&a), parameters(&b))
    });
    let moved = max_difference(&start, &two_workers);
    assert!(moved > 1e-3, "training moved nothing (max change {moved})");
    let difference = max_difference(&two_workers, &one_device);
    eprintln!(
        "largest change by training: {moved}; largest difference between the runs: {difference}"
    );
    assert!(
        difference < 1e-5,
        "two workers and one device differ by {difference} (training moved parameters by up to {moved})"
    );
}

/// Every combination of frozen and trained tables (token table, learned positions, T5 bias)
/// completes under the multi-device strategy, leaves the frozen tables as they were, and still
/// equals the single-device run.
#[test]
fn every_combination_of_frozen_tables_trains_on_two_workers() {
    for bits in 0..8u8 {
        let frozen = Frozen {
            tokens: bits & 1 != 0,
            positions: bits & 2 != 0,
            t5: bits & 4 != 0,
        };
        let (start, worker_tables, two_workers, one_device) =
            within(Duration::from_secs(300), move || {
                let (start, a, b) = both_runs(frozen);
                let tables = |m: &TokenTagger| {
                    let burn_positional::AbsolutePosition::Learned(learned) =
                        &m.encoder.embed.position
                    else {
                        unreachable!()
                    };
                    let Some(burn_positional::ScoreBias::T5(t5)) = &m.encoder.score_bias else {
                        unreachable!()
                    };
                    [
                        m.encoder.embed.tokens.val().into_data(),
                        learned.table.val().into_data(),
                        t5.table.val().into_data(),
                    ]
                };
                (tables(&start), tables(&a), parameters(&a), parameters(&b))
            });
        let flags = [frozen.tokens, frozen.positions, frozen.t5];
        for ((before, after), frozen_table) in start.iter().zip(&worker_tables).zip(flags) {
            if frozen_table {
                assert_eq!(before, after, "{frozen:?}: a frozen table moved");
            } else {
                assert_ne!(before, after, "{frozen:?}: a trained table did not move");
            }
        }
        let difference = max_difference(&two_workers, &one_device);
        assert!(
            difference < 1e-5,
            "{frozen:?}: two workers and one device differ by {difference}"
        );
    }
}

/// The who-bites-whom classifier too: two workers on halves of the training sentences equal
/// one device on the combined batches.
#[test]
fn classifier_on_two_workers_equals_one_device() {
    let (start, two_workers, one_device) = within(Duration::from_secs(300), || {
        let device = Device::flex().autodiff();
        device.seed(5);
        let config = SequenceClassifierConfig::new(
            EncoderConfig::new(
                who_bites_whom::vocabulary().len(),
                SinusoidalConfig::new().into(),
            )
            .with_d_model(16)
            .with_n_heads(2)
            .with_n_blocks(1),
            who_bites_whom::NOUNS.len(),
        );
        let record = config.init(&device).into_record();
        let start = config.init(&device).load_record(record);
        let sentences = who_bites_whom::split(3, 5).0;
        let half = BATCH * STEPS;
        let loader = |items: Vec<_>, batch_size| -> Arc<dyn DataLoader<_>> {
            DataLoaderBuilder::new(SentenceBatcher)
                .batch_size(batch_size)
                .build(InMemDataset::new(items))
        };
        let dir = tempfile::tempdir().unwrap();
        let two_workers = fit(
            &dir.path().join("multi"),
            start.clone(),
            two_workers_on(&device),
            loader(sentences[..2 * half].to_vec(), BATCH),
            loader(sentences[..BATCH].to_vec(), BATCH),
            LEARNING_RATE,
        );
        let combined = (0..STEPS)
            .flat_map(|s| {
                let first = &sentences[s * BATCH..(s + 1) * BATCH];
                let second = &sentences[half + s * BATCH..half + (s + 1) * BATCH];
                first.iter().chain(second).copied().collect::<Vec<_>>()
            })
            .collect();
        let one_device = fit(
            &dir.path().join("single"),
            start.clone(),
            ExecutionStrategy::single(device),
            loader(combined, 2 * BATCH),
            loader(sentences[..BATCH].to_vec(), BATCH),
            2.0 * LEARNING_RATE,
        );
        (
            parameters(&start),
            parameters(&two_workers),
            parameters(&one_device),
        )
    });
    let moved = max_difference(&start, &two_workers);
    assert!(moved > 1e-3, "training moved nothing (max change {moved})");
    let difference = max_difference(&two_workers, &one_device);
    assert!(
        difference < 1e-5,
        "two workers and one device differ by {difference} (training moved parameters by up to {moved})"
    );
}
