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
