//! Checkpoints as they are downloaded: bf16 (and f16) weights files, written by transformers
//! from the f32 fixtures (`tools/dtype_fixtures.py`), each with the logits transformers
//! computes from it in its dtype (`logits`) and in f32 (`logits_f32`).
//!
//! On a device that computes in the file's dtype the port runs in it when asked
//! (`with_dtype`), and its logits stay within the distance transformers' run in that dtype
//! keeps from its f32 run (the fixture's `deviation`, relative to the largest f32 logit),
//! measured from either of transformers' runs. By default a CPU backend computes a bf16 or f16
//! file in f32 (faster there), with a notice naming the memory it costs, unless
//! the f32 copy would not fit; a GPU computes in the file's dtype. On a device that cannot
//! (bf16 on wgpu: WGSL has no bf16), the default is f32 with a notice, and asking for the dtype
//! is a typed error at load naming the device, the dtype and the fix, never a panic in a worker
//! thread at the first matmul (what it was).

use burn::tensor::{DType, Device, FloatDType, Tensor};
use burn_positional_models::{
    CausalLm, Checkpoint, ModelError, bert, dtype_name, load_checkpoint, t5,
};

use crate::fixture::{Fixture, ints, max_relative_error, padding};

/// The logits of a fixture's forward with the model `checkpoint` loads: decoder-only families
/// on the left-padded batch at transformers' positions, BERT on its two segments, T5
/// teacher-forced. Returns them (in f32) and the dtype the weights were computed in.
fn logits(
    fx: &Fixture,
    checkpoint: &Checkpoint,
    device: &Device,
) -> Result<(Tensor<3>, DType), ModelError> {
    let family = fx.json["family"].as_str().expect("family");
    let batch = fx.batch();
    let logits = match family {
        "bert" => {
            let model = bert::load(checkpoint, device)?;
            let types = fx.rows("token_type_ids");
            model.forward(
                ints(&batch.ids, device),
                ints(&types, device),
                padding(&batch.mask, device),
            )
        }
        "t5" | "t5_v1_1" => {
            let model = t5::load(checkpoint, device)?;
            let padding = padding(&batch.mask, device);
            let encoded = model.encode(ints(&batch.ids, device), padding.clone());
            model.decode(
                ints(&fx.rows("decoder_input_ids"), device),
                encoded,
                padding,
            )
        }
        _ => load_checkpoint(checkpoint, device)?.forward(&fx.prompt_step(device), None),
    };
    let dtype = logits.dtype();
    Ok((logits.cast(FloatDType::F32), dtype))
}

/// The rows to compare: BERT's and T5's real tokens, every decoder-only position transformers
/// attends (the padded ones are masked rows on both sides, compared too in f32, skipped here).
fn kept(fx: &Fixture) -> Vec<Vec<bool>> {
    let family = fx.json["family"].as_str().expect("family");
    if family.starts_with("t5") {
        let rows = fx.rows("decoder_input_ids");
        vec![vec![true; rows[0].len()]; rows.len()]
    } else {
        fx.batch().mask
    }
}

/// One low-precision fixture on a device that computes in its dtype: by default in f32 on a
/// CPU backend (with the notice) and in the file's dtype elsewhere; asked for, in the file's
/// dtype, matching transformers' run in it.
fn runs_in_its_dtype(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let file = match fx.json["dtype"].as_str() {
        Some("bfloat16") => FloatDType::BF16,
        Some("float16") => FloatDType::F16,
        other => panic!("{source}: dtype {other:?}"),
    };
    let default = fx.checkpoint();
    assert_eq!(default.file_dtype().unwrap(), Some(file), "{source}");
    let chosen = default.compute_dtype(device).unwrap();
    let deviation = fx.json["deviation"].as_f64().expect("deviation");
    if burn_positional::computes_on_host(device) {
        assert_eq!(chosen.dtype, FloatDType::F32, "{source}: f32 on the CPU");
        let notice = chosen.notice.expect("a notice");
        let short = if file == FloatDType::BF16 {
            "bf16"
        } else {
            "f16"
        };
        assert!(
            notice.contains(dtype_name(file))
                && notice.contains("computing in float32 on the CPU")
                && notice.contains(&format!("--dtype {short}"))
                && notice.contains("MiB of weights instead of"),
            "{source}: {notice}"
        );
        // The f32 default from the half-precision weights is as close to transformers' f32 run
        // as its own run in the file's dtype.
        let (ours, dtype) = logits(&fx, &default, device).unwrap();
        assert_eq!(dtype, DType::F32, "{source}");
        let own = max_relative_error(ours, fx.tensor("logits_f32", device), &kept(&fx));
        assert!(
            own <= deviation,
            "{source}: f32 default {own:.3e} > {deviation:.3e}"
        );
        // Without memory for the f32 copy, the file's dtype, and the notice says why.
        let tight = default
            .compute_dtype_with_memory(device, || Some(1))
            .unwrap();
        assert_eq!(tight.dtype, file, "{source}");
        assert!(
            tight
                .notice
                .as_deref()
                .unwrap_or("")
                .contains("would not fit in the"),
            "{source}: {tight:?}"
        );
    } else {
        assert_eq!(
            chosen.dtype, file,
            "{source}: the default is the file's dtype"
        );
        assert!(chosen.notice.is_none(), "{source}");
    }
    let checkpoint = fx.checkpoint().with_dtype(file);
    let (ours, dtype) =
        logits(&fx, &checkpoint, device).unwrap_or_else(|e| panic!("{source}: {e}"));
    assert_eq!(dtype, DType::from(file), "{source}: computed in {dtype:?}");
    let keep = kept(&fx);
    let theirs = fx.tensor::<3>("logits", device);
    let truth = fx.tensor::<3>("logits_f32", device);
    // Relative to the largest f32 logit, as `deviation` is.
    let scale = |t: &Tensor<3>| {
        let max: f32 = t.clone().abs().max().into_scalar();
        max as f64
    };
    let err =
        max_relative_error(ours.clone(), theirs.clone(), &keep) * scale(&theirs) / scale(&truth);
    let own = max_relative_error(ours, truth, &keep);
    // Within transformers' own distance of either of its runs: as close to its run in this
    // dtype as that run is to f32 (the same roundings: norms and activations computed in f32
    // and rounded once, as PyTorch's kernels do), or as close to f32 as its run in this dtype.
    assert!(
        err.min(own) <= deviation,
        "{source}: ours in {file:?} is {err:.3e} from transformers' {file:?} run and {own:.3e} \
         from its f32 run (relative to the largest f32 logit), both more than transformers' \
         {file:?} run is from its f32 run ({deviation:.3e})"
    );
}

/// bf16 on a device that has no bf16 arithmetic: f32 by default with a notice, a typed error
/// when asked for.
fn bf16_is_refused_where_it_cannot_run(device: &Device) {
    let fx = Fixture::open("llama_bf16");
    let checkpoint = fx.checkpoint();
    let chosen = checkpoint.compute_dtype(device).unwrap();
    assert_eq!(chosen.dtype, FloatDType::F32);
    let notice = chosen.notice.expect("a notice");
    assert!(
        notice.contains("bfloat16") && notice.contains("float32"),
        "{notice}"
    );
    // The f32 default runs, and matches transformers' f32 run.
    let (ours, _) = logits(&fx, &checkpoint, device).unwrap();
    let err = max_relative_error(ours, fx.tensor("logits_f32", device), &kept(&fx));
    let deviation = fx.json["deviation"].as_f64().unwrap();
    assert!(err <= deviation, "{err:.3e}");
    // Asked for, bf16 is refused at load, before any tensor runs.
    let err =
        load_checkpoint(&checkpoint.clone().with_dtype(FloatDType::BF16), device).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ModelError::Dtype { .. }), "{message}");
    assert!(
        message.contains("bfloat16") && message.contains("Fix:"),
        "{message}"
    );
    assert!(message.contains("--dtype f32"), "{message}");
}

/// An f32 file computed in a dtype of one's choice (`with_dtype`): every weight cast at load.
fn f32_file_in_f16(device: &Device) {
    let fx = Fixture::open("llama_f16");
    let f32_file = Fixture::open("llama")
        .checkpoint()
        .with_dtype(FloatDType::F16);
    let (ours, dtype) = logits(&fx, &f32_file, device).unwrap();
    assert_eq!(dtype, DType::F16);
    // The f16 file and the f32 file cast to f16 hold the same numbers.
    let (from_file, _) = logits(&fx, &fx.checkpoint().with_dtype(FloatDType::F16), device).unwrap();
    let err = max_relative_error(ours, from_file, &kept(&fx));
    assert!(err == 0.0, "{err:.3e}");
}

/// Gemma 2 in bf16 with softcaps that bite (issue 71, item 6; `tools/softcap_fixtures.py`):
/// three seeds, caps of 3 and 4, 8 and 10, and none, each against transformers' bf16 and f32
/// runs of the same model. transformers rounds each step of the score chain to bf16 (q.k, the
/// scale, / cap, tanh, * cap) and the probabilities before P V; our attention keeps them in f32
/// and rounds its output once. Neither is nearer f32 on every seed: the fixture script's study
/// shows the same spread for that attention inside PyTorch. What holds, and is asserted: ours is
/// within 1.25x of the distance transformers' own bf16 run keeps from its f32 run, on every case,
/// and no further on average.
fn softcap_in_bf16(device: &Device) {
    let fx = Fixture::open("gemma2_softcap");
    let seeds: Vec<u64> = serde_json::from_value(fx.json["seeds"].clone()).unwrap();
    let caps = fx.json["caps"].as_object().unwrap().clone();
    let (mut ratios, mut table) = (Vec::new(), String::new());
    for seed in seeds {
        let weights = fx
            .dir
            .join(fx.json["weights"][seed.to_string()].as_str().unwrap());
        let ids = fx.rows(&format!("s{seed}_input_ids"));
        let mask: Vec<Vec<bool>> = fx
            .rows(&format!("s{seed}_attention_mask"))
            .into_iter()
            .map(|row| row.into_iter().map(|m| m != 0).collect())
            .collect();
        let batch = burn_positional_models::Batch::new(ids, mask.clone());
        let step = burn_positional_models::Step::new(
            &batch.ids,
            &batch.positions(),
            &batch.mask,
            0,
            device,
        );
        for (name, cap) in &caps {
            let dir = tempfile::tempdir().unwrap();
            let mut config: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(weights.join("config.json")).unwrap(),
            )
            .unwrap();
            config["attn_logit_softcapping"] = cap[0].clone();
            config["final_logit_softcapping"] = cap[1].clone();
            std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
            std::fs::copy(
                weights.join("model.safetensors"),
                dir.path().join("model.safetensors"),
            )
            .unwrap();
            let checkpoint = Checkpoint::open(dir.path())
                .unwrap()
                .with_dtype(FloatDType::BF16);
            let model = load_checkpoint(&checkpoint, device).unwrap();
            let ours: Tensor<3> = model.forward(&step, None);
            assert_eq!(ours.dtype(), DType::BF16);
            let ours = ours.cast(FloatDType::F32);
            let case = format!("s{seed}_{name}");
            let theirs = fx.tensor::<3>(&format!("{case}_bf16"), device);
            let truth = fx.tensor::<3>(&format!("{case}_f32"), device);
            let deviation = max_relative_error(theirs.clone(), truth.clone(), &mask);
            let own = max_relative_error(ours.clone(), truth, &mask);
            let err = max_relative_error(ours, theirs, &mask);
            let ratio = own / deviation;
            table += &format!(
                "\n  {case:12} transformers bf16 {deviation:.4}, ours {own:.4} ({ratio:.2}x), \
                 ours from transformers' bf16 {err:.4}"
            );
            ratios.push(ratio);
        }
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    // Printed for the guide (docs/porting.md quotes it with this test's command).
    println!("distance from transformers' f32 run:{table}\n  mean ratio {mean:.2}x");
    assert!(
        ratios.iter().all(|&r| r <= 1.25) && mean <= 1.0,
        "ours in bf16 is further from f32 than transformers' bf16 run allows:{table}\n  mean \
         ratio {mean:.2}x"
    );
}

macro_rules! in_its_dtype {
    ($($name:ident),* $(,)?) => { $( fn $name(device: &Device) { runs_in_its_dtype(stringify!($name), device) } )* };
}
in_its_dtype!(
    gpt2_bf16,
    llama_bf16,
    qwen2_bf16,
    phi3_bf16,
    mistral_bf16,
    bloom_bf16,
    bert_bf16,
    t5_bf16,
    t5_v1_1_bf16,
    qwen3_bf16,
    gemma2_bf16,
    gemma3_bf16,
    gpt_neox_bf16,
    gpt2_f16,
    llama_f16
);

/// flex computes in bf16 and f16: every family from its bf16 file, Llama and GPT-2 from f16.
mod on_flex {
    macro_rules! tests { ($($name:ident),*) => { $( #[test] fn $name() { super::$name(&crate::devices::flex()) } )* }; }
    tests!(
        gpt2_bf16,
        llama_bf16,
        qwen2_bf16,
        phi3_bf16,
        mistral_bf16,
        bloom_bf16,
        bert_bf16,
        t5_bf16,
        t5_v1_1_bf16,
        qwen3_bf16,
        gemma2_bf16,
        gemma3_bf16,
        gpt_neox_bf16,
        gpt2_f16,
        llama_f16,
        f32_file_in_f16,
        softcap_in_bf16
    );
}

/// ndarray: in the file's dtype where it computes in it, else f32 with the notice and the typed
/// error, whichever this build of burn's ndarray backend says (`Device::supports_dtype`).
mod on_ndarray {
    use burn::tensor::FloatDType;

    #[test]
    fn bf16_runs_or_is_refused() {
        let device = crate::devices::ndarray();
        if device.supports_dtype(FloatDType::BF16) {
            super::llama_bf16(&device);
            super::gpt2_bf16(&device);
            super::softcap_in_bf16(&device);
        } else {
            super::bf16_is_refused_where_it_cannot_run(&device);
        }
    }

    #[test]
    fn f16_runs_or_is_refused() {
        let device = crate::devices::ndarray();
        if device.supports_dtype(FloatDType::F16) {
            super::llama_f16(&device);
        } else {
            let fx = super::Fixture::open("llama_f16");
            let chosen = fx.checkpoint().compute_dtype(&device).unwrap();
            assert_eq!(chosen.dtype, FloatDType::F32);
            assert!(chosen.notice.unwrap().contains("float16"));
        }
    }
}

/// wgpu (lavapipe in CI) computes in f16 but not bf16.
mod on_wgpu {
    macro_rules! tests { ($($name:ident),*) => { $( #[test] fn $name() { super::$name(&crate::devices::wgpu()) } )* }; }
    tests!(
        gpt2_f16,
        llama_f16,
        f32_file_in_f16,
        bf16_is_refused_where_it_cannot_run
    );
}
