//! Checks of `config.json` values several families read (`layer_types`, `sliding_window`, the
//! softcaps), each naming the field, before anything is built.

use crate::ModelError;

/// `layer_types` as transformers' configs hold it: per layer, `true` for `"sliding_attention"`,
/// `false` for `"full_attention"`.
///
/// # Errors
///
/// [`ModelError::Config`] naming `layer_types` when it does not hold one entry per layer
/// (`num_hidden_layers`), or holds another kind (`"chunked_attention"`, a typo).
pub fn sliding_layers(
    types: &[String],
    n_layers: usize,
    path: &str,
) -> Result<Vec<bool>, ModelError> {
    if types.len() != n_layers {
        return Err(ModelError::Config {
            path: path.to_string(),
            detail: format!(
                "`layer_types` has {} entries, but `num_hidden_layers` is {n_layers}: it \
                 needs one \"full_attention\" or \"sliding_attention\" per layer ({n_layers} \
                 entries), or none at all to take the family's pattern",
                types.len()
            ),
        });
    }
    types
        .iter()
        .enumerate()
        .map(|(i, t)| match t.as_str() {
            "sliding_attention" => Ok(true),
            "full_attention" => Ok(false),
            other => Err(ModelError::Config {
                path: path.to_string(),
                detail: format!(
                    "`layer_types[{i}]` is \"{other}\"; this port reads only \
                     \"full_attention\" and \"sliding_attention\""
                ),
            }),
        })
        .collect()
}

/// A `sliding_window` of at least one token.
///
/// # Errors
///
/// [`ModelError::Config`] naming `sliding_window` for 0: a window of no key hides every token,
/// itself included.
pub fn check_window(window: Option<usize>, path: &str) -> Result<Option<usize>, ModelError> {
    if window == Some(0) {
        return Err(ModelError::Config {
            path: path.to_string(),
            detail: "`sliding_window` is 0, a window that hides every key, the query's own \
                     included; it must be at least 1 (the window the checkpoint was trained \
                     with), or null for full attention"
                .into(),
        });
    }
    Ok(window)
}

/// A softcap field (`attn_logit_softcapping`, `final_logit_softcapping`): `null` or a positive
/// finite number.
///
/// # Errors
///
/// [`ModelError::Config`] naming the field for 0, a negative value or a non-finite one, with
/// the layer's rule ([`burn_positional::check_softcap`]).
pub fn check_cap(field: &str, cap: Option<f64>, path: &str) -> Result<Option<f64>, ModelError> {
    if let Some(c) = cap {
        burn_positional::check_softcap(c).map_err(|_| ModelError::Config {
            path: path.to_string(),
            detail: format!(
                "`{field}` is {c}: a softcap divides the scores and bounds them to (-cap, cap), \
                 so it must be a positive finite number, or null to cap nothing"
            ),
        })?;
    }
    Ok(cap)
}

/// The query heads, key/value heads and head width a grouped-query attention reads, as
/// transformers' attention classes take them: `head_dim` when the file gives one, else
/// `hidden_size / num_attention_heads`; `zero_is_absent` for the classes that read
/// `getattr(config, "head_dim", None) or hidden_size // num_attention_heads` (Mistral), where a
/// `head_dim` of 0 takes the quotient.
///
/// # Errors
///
/// [`ModelError::Config`] naming the field and its rule for what transformers fails on: no
/// query head, no key/value head, key/value heads that do not divide the query heads (its
/// `repeat_kv` then leaves keys and queries with different head counts), a head width of 0
/// (its `head_dim**-0.5` divides by zero).
pub fn check_heads(
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: Option<usize>,
    hidden_size: usize,
    zero_is_absent: bool,
    path: &str,
) -> Result<(usize, usize, usize), ModelError> {
    let refuse = |detail: String| ModelError::Config {
        path: path.to_string(),
        detail,
    };
    if n_heads == 0 {
        return Err(refuse(
            "`num_attention_heads` is 0: attention needs at least one query head (transformers \
             divides by the count); set it to the checkpoint's head count"
                .into(),
        ));
    }
    if n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(refuse(format!(
            "`num_key_value_heads` is {n_kv_heads}: each key/value head serves \
             num_attention_heads / num_key_value_heads query heads, so it must be at least 1 \
             and divide `num_attention_heads` ({n_heads}); set it to the checkpoint's count \
             (k_proj.weight has num_key_value_heads x head_dim rows), or leave it out for one \
             per query head"
        )));
    }
    let given = match head_dim {
        Some(0) if zero_is_absent => None,
        other => other,
    };
    let width = given.unwrap_or(hidden_size / n_heads);
    if width == 0 {
        return Err(refuse(match given {
            Some(_) => format!(
                "`head_dim` is 0: each head's query, key and value are head_dim wide and the \
                 scores are scaled by head_dim^-0.5 (transformers fails on 0^-0.5); set it to \
                 the checkpoint's head width (q_proj.weight has num_attention_heads x head_dim \
                 rows; hidden_size / num_attention_heads is {})",
                hidden_size / n_heads
            ),
            None => format!(
                "`hidden_size` / `num_attention_heads` is {hidden_size} / {n_heads} = 0, the \
                 head width when `head_dim` is absent; set `head_dim` to the checkpoint's head \
                 width (q_proj.weight has num_attention_heads x head_dim rows)"
            ),
        }));
    }
    Ok((n_heads, n_kv_heads, width))
}

/// Refuses a `sliding_window` of `null` where transformers needs one at the first forward:
/// `window` is the window the layers marked sliding take (`None`: null, or turned off), and
/// `always` says the family builds the sliding mask whatever `layer_types` says (Gemma 2 and 3,
/// whose models build both masks on every forward), and `off_by` names the flag that nulls the
/// window when false (Qwen 2 and 3: `use_sliding_window`).
///
/// # Errors
///
/// [`ModelError::Config`] naming `sliding_window`, the first sliding layer, and the fix.
pub fn check_sliding_has_window(
    window: Option<usize>,
    sliding: &[bool],
    always: bool,
    off_by: Option<&str>,
    path: &str,
) -> Result<(), ModelError> {
    if window.is_some() {
        return Ok(());
    }
    let first = sliding.iter().position(|&s| s);
    let why = match (first, always) {
        (Some(i), _) => format!(
            "layer {i} is a sliding layer (`layer_types[{i}]` is \"sliding_attention\", or the \
             family's pattern makes it one)"
        ),
        (None, true) => "this family's model builds its sliding-window mask on every forward, \
                         even when no layer slides"
            .into(),
        (None, false) => return Ok(()),
    };
    let null = match off_by {
        Some(flag) => format!("`sliding_window` is null (or `{flag}` is false, which nulls it)"),
        None => "`sliding_window` is null".to_string(),
    };
    Err(ModelError::Config {
        path: path.to_string(),
        detail: format!(
            "{null}, but {why}: transformers fails at the first forward without a window, \
             and running full attention instead would change the model silently; set \
             `sliding_window` to the window the checkpoint was trained with{}{}",
            match off_by {
                Some(flag) => format!(" and `{flag}` to true"),
                None => String::new(),
            },
            if always {
                ""
            } else {
                ", or mark those layers \"full_attention\""
            }
        ),
    })
}
