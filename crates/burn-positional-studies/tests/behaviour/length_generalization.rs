//! The length-generalization harness on every device: cached greedy decoding equals decoding
//! without the cache for every scheme, a learned table refuses a length past it with its error,
//! and a tiny study (a few steps, one seed) writes a well-formed table, resumes from disk and
//! refuses another config in its folder.

use std::sync::{Arc, Mutex};

use burn::prelude::*;
use burn_positional_examples::schemes::Scheme;
use burn_positional_studies::length_generalization::{
    Progress, SCHEMES, StudyConfig, Task, Variant, greedy, run_study, train_cell,
};

/// A small untrained model of `scheme` for the copy task at training length 3.
fn model(
    scheme: Scheme,
    device: &Device,
) -> burn_positional_studies::length_generalization::LanguageModel {
    let config = StudyConfig::new()
        .with_train_len(3)
        .with_d_model(16)
        .with_n_heads(2)
        .with_n_blocks(2);
    device.seed(11);
    config.model_config(Task::Copy, scheme).init(device)
}

fn prompts(device: &Device) -> Tensor<2, Int> {
    let examples = Task::Copy.examples(3, 4, 5);
    let flat: Vec<i64> = examples.iter().flat_map(|e| e.prompt.clone()).collect();
    Tensor::from_data(TensorData::new(flat, [4, 5]), device)
}

/// For every scheme: the logits of token-by-token cached forwards equal the rows of one full
/// forward, and greedy decoding gives the same tokens with and without the cache.
pub fn cached_greedy_decoding_equals_uncached(device: &Device) {
    for scheme in SCHEMES {
        let model = model(scheme, device);
        // The learned table holds Task::Copy.model_len(3) = 8 positions: 5 prompt tokens
        // and 3 answer tokens are read.
        let prompts = prompts(device);
        let cached = greedy(&model, prompts.clone(), 4, true).expect("within the table");
        let uncached = greedy(&model, prompts.clone(), 4, false).expect("within the table");
        assert_eq!(
            cached.to_data(),
            uncached.to_data(),
            "{scheme}: cached greedy decoding differs"
        );
        // Logits: the whole sequence at once against one token at a time.
        let sequence = Tensor::cat(vec![prompts.clone(), cached.slice([0..4, 0..3])], 1);
        let full = model.forward(sequence.clone());
        let mut caches = model.caches();
        let mut rows = vec![model.forward_cache(prompts, &mut caches)];
        for i in 5..8 {
            rows.push(model.forward_cache(sequence.clone().slice([0..4, i..i + 1]), &mut caches));
        }
        let stepped = Tensor::cat(rows, 1);
        // Compared on the host: two plain reads, no reduction kernel on the device.
        let (stepped, full) = (host(stepped), host(full));
        // |a - b| <= atol + rtol * |b| with atol = rtol = 1e-4, as `all_close` has it.
        let worst = stepped
            .iter()
            .zip(&full)
            .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
            .fold(0.0f32, f32::max);
        assert!(
            worst <= 1e-4,
            "{scheme}: cached logits differ from the full forward: |a - b| / (1 + |b|) = {worst}"
        );
    }
}

/// The values of `tensor` as f32, read back once; a failed read panics with the device's error.
fn host(tensor: Tensor<3>) -> Vec<f32> {
    tensor
        .try_into_data()
        .unwrap_or_else(|err| panic!("reading logits back failed: {err}"))
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 after convert")
}

/// Decoding past a learned table is refused with the embedding's error (the position, the
/// table's length and the fix), cached or not; the other schemes decode on.
pub fn decoding_past_a_learned_table_is_refused_with_its_error(device: &Device) {
    let learned = model(Scheme::Learned, device);
    for cached in [true, false] {
        // 5 prompt tokens + 4 read answer tokens = 9 positions > 8.
        let err = greedy(&learned, prompts(device), 5, cached)
            .expect_err("past the table")
            .to_string();
        // Refused before the first forward, naming the whole window the decoding reads.
        assert!(
            err.contains("position 8")
                && err.contains("max_len = 8")
                && err.contains("at least 9")
                && err.contains("Fix"),
            "{err}"
        );
        assert_eq!(learned.body.embed.unchecked_forwards(), 0, "no forward ran");
    }
    let rope = model(Scheme::Rope, device);
    let answers = greedy(&rope, prompts(device), 40, true).expect("RoPE has no length limit");
    assert_eq!(answers.dims(), [4, 40]);
}

/// A tiny study, end to end: a table per task with a row per scheme (and RoPE variant) and a
/// column per test length, the learned table's refusals shown as such, the same results read
/// back from disk on a second run, another config in the folder refused.
pub fn a_tiny_study_writes_a_well_formed_table(device: &Device) {
    let dir = tempfile::tempdir().unwrap();
    let config = StudyConfig::new()
        .with_train_len(2)
        .with_tasks(vec!["copy".into(), "addition".into()])
        .with_schemes(vec!["none".into(), "learned".into(), "rope".into()])
        .with_seeds(1)
        .with_d_model(16)
        .with_n_heads(2)
        .with_n_blocks(1)
        .with_steps(4)
        .with_steps_per_epoch(2)
        .with_batch_size(4)
        .with_test_examples(3);
    let events = Arc::new(Mutex::new(Vec::new()));
    let heard = events.clone();
    let progress = Arc::new(move |event: &Progress| heard.lock().unwrap().push(event.clone()));
    let results = run_study(&config, device, 2, dir.path(), progress.clone()).unwrap();

    assert_eq!(results.cells.len(), 6);
    assert!(results.cells.iter().all(|c| c.steps == 4));
    let steps = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Progress::Step { .. }))
        .count();
    assert_eq!(steps, 6 * 4, "one step event per step of every cell");
    // 2 tasks x (none, learned, rope, rope + PI, rope + NTK) x 4 lengths.
    assert_eq!(results.summary.len(), 2 * 5 * 4);
    assert_eq!(config.test_lengths(), vec![2, 3, 4, 6]);
    for s in &results.summary {
        let past_table = s.row == "learned" && s.n > 2;
        assert_eq!(s.refused.is_some(), past_table, "{s:?}");
        assert_eq!(s.mean.is_some(), !past_table, "{s:?}");
        if let Some(mean) = s.mean {
            assert!((0.0..=1.0).contains(&mean), "{s:?}");
            assert_eq!(s.seeds, 1);
        }
    }
    for m in results.cells.iter().flat_map(|c| &c.measurements) {
        let expected = match m.variant {
            Variant::AsTrained => "None".to_string(),
            Variant::RopeInterpolation => format!("Interpolation({:?})", m.n as f64 / 2.0),
            Variant::RopeNtk => format!("NtkAware({:?})", m.n as f64 / 2.0),
        };
        assert_eq!(m.scaling, expected, "the knob's setting is in the output");
    }
    let markdown = results.markdown();
    for task in ["copy", "addition"] {
        assert!(markdown.contains(&format!("**{task}**")), "{markdown}");
    }
    let header = "| scheme | n = 2 (1L) | n = 3 (1.5L) | n = 4 (2L) | n = 6 (3L) |";
    assert_eq!(markdown.matches(header).count(), 2, "{markdown}");
    let learned_row = markdown
        .lines()
        .find(|l| l.starts_with("| learned |"))
        .unwrap();
    assert_eq!(
        learned_row.matches("refused: past the table").count(),
        3,
        "{learned_row}"
    );
    for row in [
        "| none |",
        "| rope |",
        "| rope + PI (s = n/L) |",
        "| rope + NTK (s = n/L) |",
    ] {
        let line = markdown.lines().find(|l| l.starts_with(row)).unwrap();
        assert_eq!(line.matches(" ± ").count(), 4, "{line}");
    }
    let written = results.save(dir.path()).unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&written[0]).unwrap()).unwrap();
    assert_eq!(json["summary"].as_array().unwrap().len(), 40);

    // A second run reads every cell from disk and measures the same.
    events.lock().unwrap().clear();
    let again = run_study(&config, device, 1, dir.path(), progress.clone()).unwrap();
    assert_eq!(again.summary, results.summary);
    let from_disk = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| {
            matches!(
                e,
                Progress::Done {
                    from_disk: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(from_disk, 6);
    // Another config in the same folder is refused with the fix.
    let err = run_study(
        &config.clone().with_steps(6),
        device,
        1,
        dir.path(),
        progress,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("another config") && err.contains("--fresh"),
        "{err}"
    );
}

/// A cell stopped after its first epoch resumes from that checkpoint: the resumed run hears
/// only the remaining steps, numbered on. (That a resumed burn-train run ends where an
/// uninterrupted one does is `tests/crash.rs`'s; here the model's first draw could differ, as
/// other tests draw from flex's one process-wide generator meanwhile.)
pub fn a_cell_resumes_from_its_last_checkpoint(device: &Device) {
    let config = StudyConfig::new()
        .with_train_len(3)
        .with_d_model(16)
        .with_n_heads(2)
        .with_n_blocks(1)
        .with_steps(3)
        .with_steps_per_epoch(3)
        .with_batch_size(4);
    let longer = config.clone().with_steps(6);
    let (straight_dir, resumed_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let train = |config: &StudyConfig, dir: &std::path::Path| {
        let steps = Arc::new(Mutex::new(Vec::new()));
        let heard = steps.clone();
        let (model, _) = train_cell(
            config,
            Task::Sort,
            Scheme::Alibi,
            4,
            device,
            dir,
            move |s, _| heard.lock().unwrap().push(s),
        )
        .unwrap();
        let steps = steps.lock().unwrap().clone();
        (model, steps)
    };
    let (_, steps) = train(&longer, straight_dir.path());
    assert_eq!(steps, (1..=6).collect::<Vec<_>>());
    // Stopped after the first epoch, then run to the end.
    let (_, first) = train(&config, resumed_dir.path());
    assert_eq!(first, vec![1, 2, 3]);
    let (_, rest) = train(&longer, resumed_dir.path());
    assert_eq!(
        rest,
        vec![4, 5, 6],
        "resumed at the checkpoint, not from scratch"
    );
    // A done run resumed again trains nothing more.
    let (_, none) = train(&longer, resumed_dir.path());
    assert!(none.is_empty(), "{none:?}");
}

mod on_flex_resume {
    #[test]
    fn a_cell_resumes_from_its_last_checkpoint() {
        super::a_cell_resumes_from_its_last_checkpoint(&crate::devices::flex())
    }
}
mod on_ndarray_resume {
    #[test]
    fn a_cell_resumes_from_its_last_checkpoint() {
        super::a_cell_resumes_from_its_last_checkpoint(&crate::devices::ndarray())
    }
}

on_every_device!(
    cached_greedy_decoding_equals_uncached,
    decoding_past_a_learned_table_is_refused_with_its_error
);

mod on_wgpu_study {
    #[test]
    fn a_tiny_study_writes_a_well_formed_table() {
        super::a_tiny_study_writes_a_well_formed_table(&crate::devices::wgpu())
    }
}
mod on_ndarray_study {
    #[test]
    fn a_tiny_study_writes_a_well_formed_table() {
        super::a_tiny_study_writes_a_well_formed_table(&crate::devices::ndarray())
    }
}
mod on_flex_study {
    #[test]
    fn a_tiny_study_writes_a_well_formed_table() {
        super::a_tiny_study_writes_a_well_formed_table(&crate::devices::flex())
    }
}
