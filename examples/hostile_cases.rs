//! The hostile cases of issue 24, each run in a child process of its own under a memory limit,
//! with what it returned (a value, a typed error, a panic message or the signal that killed it)
//! and how long it took. Written against the API both before and after the fixes, so the same
//! program gives the "before" and "after" columns of the reliability notes.
//!
//! ```sh
//! cargo run --release --example hostile_cases                 # every case, flex and wgpu
//! cargo run --release --example hostile_cases -- --case far-offset
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::Command;
use std::time::{Duration, Instant};

use burn::module::{Module, ModuleMapper, Param};
use burn::prelude::*;
use burn::tensor::{DType, FloatDType, TensorData};
use burn_positional::{
    AttentionInput, Combine, EmbeddingWithPositionConfig, KvCache, LearnedConfig, Positions,
    SelfAttentionConfig,
};
use burn_positional_examples::device::{DeviceChoice, open};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Run this case only, in this process (what the parent does for each child).
    #[arg(long)]
    case: Option<String>,
    /// The child's address-space limit in MiB (`ulimit -v`).
    #[arg(long, default_value_t = 6144)]
    limit_mib: u64,
}

type Case = (&'static str, &'static str, fn() -> String);

const CASES: &[Case] = &[
    (
        "far-offset",
        "flex: sinusoidal d_model 512, try_forward at Offset(2e9)",
        far_offset,
    ),
    (
        "far-explicit",
        "flex: sinusoidal d_model 512, try_forward at explicit i64::MAX",
        far_explicit,
    ),
    (
        "wgpu-explicit",
        "wgpu: sinusoidal d_model 64, try_forward at explicit 2^20",
        wgpu_explicit,
    ),
    (
        "concat-overflow",
        "try_init Concat { d_token: usize::MAX, d_position: 2 }",
        concat_overflow,
    ),
    (
        "huge-vocab",
        "try_init vocab_size 2^40 (d_model 64)",
        huge_vocab,
    ),
    (
        "huge-max-len",
        "try_init learned max_len 2^40 (d_model 64)",
        huge_max_len,
    ),
    (
        "huge-block",
        "SelfAttentionConfig::try_init d_model 2^40",
        huge_block,
    ),
    (
        "window",
        "learned max_len 32: try_forward offset 30, seq 8",
        window,
    ),
    (
        "twins",
        "learned max_len 8: Offset(1 << 31), fused vs reference",
        twins,
    ),
    (
        "forward-past-table",
        "learned max_len 8: forward of seq 9",
        forward_past_table,
    ),
    (
        "half-reference",
        "wgpu: f16 tokens beside the f32 sinusoid, try_forward_reference",
        half_reference,
    ),
    (
        "mixed-ids",
        "flex: forward i32 bad id, forward i64, check twice",
        mixed_ids,
    ),
    (
        "threads",
        "flex: A forwards id 11, B forwards good ids and checks, then A checks",
        threads,
    ),
    (
        "kv-two-blocks",
        "flex: a KvCache filled by block A, passed to block B",
        kv_two_blocks,
    ),
    (
        "kv-batch",
        "flex: a KvCache of batch 2, then an input of batch 1",
        kv_batch,
    ),
];

fn main() {
    let args = Args::parse();
    if let Some(name) = &args.case {
        let (_, _, run) = CASES
            .iter()
            .find(|(n, _, _)| n == name)
            .unwrap_or_else(|| panic!("no case {name}"));
        let answer = catch_unwind(run).unwrap_or_else(|payload| {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("PANIC: {}", message.replace('\n', " "))
        });
        println!("{answer}");
        return;
    }
    let exe = std::env::current_exe().expect("this program's path");
    println!("| case | what | answer | time |\n| --- | --- | --- | --- |");
    for (name, what, _) in CASES {
        let start = Instant::now();
        let output = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "ulimit -v {}; RUST_BACKTRACE=0 exec timeout 120 {:?} --case {name}",
                args.limit_mib * 1024,
                exe
            ))
            .output()
            .expect("the child runs");
        let took = start.elapsed();
        let answer = answer_of(&output);
        println!("| {name} | {what} | {answer} | {} |", seconds(took));
    }
}

/// The child's last line, or how it died (the allocator's or the panic's words on stderr).
fn answer_of(output: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let said = lines
        .iter()
        .position(|l| l.contains("panicked at"))
        .and_then(|i| lines.get(i + 1))
        .or_else(|| lines.iter().find(|l| l.contains("memory allocation")))
        .map(|l| l.trim().to_string())
        .unwrap_or_default();
    let answer = match (output.status.success(), stdout.lines().last()) {
        (true, Some(line)) => line.to_string(),
        _ => format!("DIED ({}): {said}", output.status),
    };
    answer.replace('|', "/").chars().take(300).collect()
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn wgpu() -> Device {
    open(DeviceChoice::Wgpu).expect("a wgpu adapter").device
}

fn far_offset() -> String {
    let device = Device::flex();
    let embed = EmbeddingWithPositionConfig::new(10, 512).init(&device);
    let ids = Tensor::<2, Int>::ones([1, 4], &device);
    format!(
        "{:?}",
        embed
            .try_forward_at(ids, Positions::Offset(2_000_000_000))
            .map(|t| t.dims())
    )
}

fn far_explicit() -> String {
    let device = Device::flex();
    let embed = EmbeddingWithPositionConfig::new(10, 512).init(&device);
    let ids = Tensor::<2, Int>::ones([1, 2], &device);
    let p = Tensor::<2, Int>::from_data(
        TensorData::new(vec![0i64, i64::MAX], [1, 2]),
        (&device, DType::I64),
    );
    format!(
        "{:?}",
        embed
            .try_forward_at(ids, Positions::Explicit(p))
            .map(|t| t.dims())
    )
}

fn wgpu_explicit() -> String {
    let device = wgpu();
    let embed = EmbeddingWithPositionConfig::new(10, 64).init(&device);
    let ids = Tensor::<2, Int>::ones([1, 2], &device);
    let p = Tensor::<2, Int>::from_data([[0, 1 << 20]], &device);
    format!(
        "{:?}",
        embed
            .try_forward_at(ids, Positions::Explicit(p))
            .map(|t| t.dims())
    )
}

fn init(config: EmbeddingWithPositionConfig) -> String {
    let device = Device::flex();
    format!("{:?}", config.try_init(&device).map(|e| e.d_model()))
}

fn concat_overflow() -> String {
    init(
        EmbeddingWithPositionConfig::new(10, 8).with_combine(Combine::Concat {
            d_token: usize::MAX,
            d_position: 2,
        }),
    )
}

fn huge_vocab() -> String {
    init(EmbeddingWithPositionConfig::new(1 << 40, 64))
}

fn huge_max_len() -> String {
    init(EmbeddingWithPositionConfig::new(10, 64).with_scheme(LearnedConfig::new(1 << 40).into()))
}

fn huge_block() -> String {
    let device = Device::flex();
    let block = SelfAttentionConfig::new(1 << 40, 1).try_init(&device);
    format!("{:?}", block.map(|b| b.d_model()))
}

fn learned(max_len: usize, device: &Device) -> burn_positional::EmbeddingWithPosition {
    EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(max_len).into())
        .init(device)
}

fn window() -> String {
    let device = Device::flex();
    let ids = Tensor::<2, Int>::ones([1, 8], &device);
    format!(
        "{:?}",
        learned(32, &device)
            .try_forward_at(ids, Positions::Offset(30))
            .map(|t| t.dims())
    )
}

fn twins() -> String {
    let device = Device::flex();
    let embed = learned(8, &device);
    let ids = Tensor::<2, Int>::ones([1, 2], &device);
    let fused = embed.try_forward_at(ids.clone(), Positions::Offset(1 << 31));
    let reference = embed.try_forward_reference(ids, Positions::Offset(1 << 31));
    format!(
        "fused: {:?}; reference: {:?}",
        fused.map(|t| t.dims()),
        reference.map(|t| t.dims())
    )
}

fn forward_past_table() -> String {
    let device = Device::flex();
    let out = learned(8, &device).forward(Tensor::<2, Int>::ones([1, 9], &device));
    let nan = out.clone().is_nan().any().into_scalar::<bool>();
    format!("returned {:?}, NaN rows: {nan}", out.dims())
}

struct TokensToHalf(bool);

impl ModuleMapper for TokensToHalf {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if std::mem::replace(&mut self.0, true) {
            return param;
        }
        param.map(|tensor| tensor.cast(FloatDType::F16))
    }
}

fn half_reference() -> String {
    let device = wgpu();
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .init(&device)
        .map(&mut TokensToHalf(false));
    let ids = Tensor::<2, Int>::from_data([[1, 2, 3]], &device);
    let out = embed.try_forward_reference(ids, Positions::default());
    format!("{:?}", out.map(|t| (t.dims(), t.dtype())))
}

fn mixed_ids() -> String {
    let device = Device::flex();
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(&device);
    let ids = |values: Vec<i64>, dtype| {
        Tensor::<2, Int>::from_data(TensorData::new(values, [1, 3]), (&device, dtype))
    };
    embed.forward(ids(vec![1, 11, 2], DType::I32));
    embed.forward(ids(vec![1, 2, 3], DType::I64));
    let first = catch_unwind(AssertUnwindSafe(|| format!("{:?}", embed.check_inputs())))
        .unwrap_or_else(|_| "PANIC".into());
    format!(
        "first check: {first}; second check: {:?}",
        embed.check_inputs()
    )
}

fn threads() -> String {
    let device = Device::flex();
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(&device);
    let good = Tensor::<2, Int>::from_data([[1, 2, 3]], &device);
    let bad = Tensor::<2, Int>::from_data([[1, 11, 3]], &device);
    let (forwarded, checked) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            let mine = embed.clone();
            mine.forward(bad.clone());
            forwarded.wait();
            checked.wait();
            mine.check_inputs()
        });
        let b = scope.spawn(|| {
            let mine = embed.clone();
            mine.forward(good.clone());
            forwarded.wait();
            let result = mine.check_inputs();
            checked.wait();
            result
        });
        let (b, a) = (b.join().unwrap(), a.join().unwrap());
        format!(
            "B's check: {:?}; A's check: {:?}",
            b.err().map(|e| e.to_string()),
            a.err().map(|e| e.to_string())
        )
    })
}

fn kv_two_blocks() -> String {
    let device = Device::flex();
    device.seed(1);
    let config = SelfAttentionConfig::new(16, 2).with_causal(true);
    let (a, b) = (config.init(&device), config.init(&device));
    let x = Tensor::<3>::ones([1, 3, 16], &device);
    let mut cache = KvCache::new();
    a.forward_cache(AttentionInput::new(x.clone()), &mut cache);
    let out = b.forward_cache(AttentionInput::new(x.slice([0..1, 0..1])), &mut cache);
    format!(
        "returned {:?}, cache now {} tokens",
        out.dims(),
        cache.len()
    )
}

fn kv_batch() -> String {
    let device = Device::flex();
    let block = SelfAttentionConfig::new(16, 2)
        .with_causal(true)
        .init(&device);
    let mut cache = KvCache::new();
    block.forward_cache(
        AttentionInput::new(Tensor::<3>::ones([2, 3, 16], &device)),
        &mut cache,
    );
    let tried = catch_unwind(AssertUnwindSafe(|| {
        block.forward_cache(
            AttentionInput::new(Tensor::<3>::ones([1, 1, 16], &device)),
            &mut cache,
        )
    }));
    let said = match tried {
        Ok(out) => format!("returned {:?}", out.dims()),
        Err(payload) => format!(
            "PANIC: {}",
            payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default()
                .replace('\n', " ")
        ),
    };
    format!("{said}; cache after: {} tokens", cache.len())
}
