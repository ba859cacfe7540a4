//! The register-blocked SIMT kernels (issue 73) against the slow twin: the flash cases of
//! [`super`] with `FlashVariant::Blocked` forced.

use burn::tensor::Device;
use burn_positional_kernels::{
    FlashVariant, flash_attention_backward_calls, flash_variant_backward_launches,
    set_thread_flash_variant,
};

use super::{Bias, Case, FROZEN_BIAS, cases, check_cases, check_variant, wgpu_devices};

/// The register-blocked kernels (issue 73), forced, forward and backward (the shared backward
/// where a bias's gradient is wanted): every case below 1,000 tokens (the 63- and 65-token ones cross a block of 64 keys and a tile of 64
/// rows; the 1-token ones take several heads a cube) and the 1000-token window (tiles whose keys
/// start past 0, blocks every row sees whole beside partial ones), the wide heads (64 and 40:
/// stages of 32 and 16 dimensions, values padded to 64) and the half-precision check; then the
/// keys split into 3 runs and combined on the 63- and 65-token cases; then the biased cases
/// below 1,000 tokens with the bias not trained, whose backward is the blocked one's (a trained
/// bias's gradient takes the shared backward).
#[test]
fn blocked_kernel_equals_the_slow_twin() {
    let extra = check_variant(
        FlashVariant::Blocked,
        None,
        |case| case.seq_q < 1000 || case.window.is_some(),
        true,
    );
    assert_eq!(extra, 0, "blocked launches from elsewhere");
    let extra = check_variant(
        FlashVariant::Blocked,
        Some(3),
        |case| (63..1000).contains(&case.seq_q),
        false,
    );
    assert_eq!(extra, 0, "blocked launches from elsewhere");
    // A bias applied but not trained: its backward is the blocked one's, every call (the shared
    // backward sums a trained bias's gradient).
    FROZEN_BIAS.with(|frozen| frozen.set(true));
    let _forcing = crate::forcing(FlashVariant::Blocked);
    set_thread_flash_variant(Some(FlashVariant::Blocked));
    let before = flash_variant_backward_launches(FlashVariant::Blocked);
    let calls_before = flash_attention_backward_calls();
    let biased: Vec<Case> = cases()
        .into_iter()
        .filter(|case| case.seq_q < 1000 && !matches!(case.bias, Bias::None))
        .collect();
    let autodiff: Vec<Device> = wgpu_devices()
        .into_iter()
        .filter(|d| d.is_autodiff())
        .collect();
    check_cases(&autodiff, &biased);
    set_thread_flash_variant(None);
    FROZEN_BIAS.with(|frozen| frozen.set(false));
    let calls = flash_attention_backward_calls() - calls_before;
    assert!(
        calls > 0 && flash_variant_backward_launches(FlashVariant::Blocked) - before == calls,
        "the blocked backward ran {} of {calls} calls with a bias not trained",
        flash_variant_backward_launches(FlashVariant::Blocked) - before
    );
}
