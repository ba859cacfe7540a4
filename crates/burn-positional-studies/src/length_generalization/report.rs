//! The report: [`mean_and_std`], [`summarize`], and [`StudyResults`]' Markdown and files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{CellResult, Measurement, StudyConfig, StudyResults, Summary, Variant};
use crate::checkpoint::write_atomic;
use crate::training::TrainingError;

/// Mean and sample standard deviation of `values` (0 for one value).
pub fn mean_and_std(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = if values.len() > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    Some((mean, std))
}

/// Per task, row (scheme and variant) and length: the mean and spread over seeds.
pub fn summarize(config: &StudyConfig, cells: &[CellResult]) -> Vec<Summary> {
    let mut groups: BTreeMap<(String, String, Variant, usize), Vec<&Measurement>> = BTreeMap::new();
    for m in cells.iter().flat_map(|c| &c.measurements) {
        groups
            .entry((m.task.clone(), m.scheme.clone(), m.variant, m.n))
            .or_default()
            .push(m);
    }
    let mut summary = Vec::new();
    // In the config's order of tasks and schemes, then variant, then length.
    for task in &config.tasks {
        for scheme in &config.schemes {
            for variant in [
                Variant::AsTrained,
                Variant::RopeInterpolation,
                Variant::RopeNtk,
            ] {
                for n in config.test_lengths() {
                    let Some(group) = groups.get(&(task.clone(), scheme.clone(), variant, n))
                    else {
                        continue;
                    };
                    let values: Vec<f64> = group.iter().filter_map(|m| m.exact_match).collect();
                    let stats = mean_and_std(&values);
                    summary.push(Summary {
                        task: task.clone(),
                        row: variant.label(scheme),
                        n,
                        mean: stats.map(|s| s.0),
                        std: stats.map(|s| s.1),
                        seeds: values.len(),
                        refused: if values.is_empty() {
                            group.iter().find_map(|m| m.refused.clone())
                        } else {
                            None
                        },
                    });
                }
            }
        }
    }
    summary
}

impl StudyResults {
    /// One Markdown table per task: a row per scheme (and RoPE variant), a column per test
    /// length, `mean ± sd` exact match in percent over the seeds, or the refusal.
    pub fn markdown(&self) -> String {
        let lengths = self.config.test_lengths();
        let mut out = String::new();
        let l = self.config.train_len;
        for task in &self.config.tasks {
            out.push_str(&format!("**{task}** (exact match, %, mean ± sd over {} seeds; trained on 1..={l} digits)\n\n", self.config.seeds));
            out.push_str("| scheme |");
            for (n, m) in lengths.iter().zip(&self.config.test_multiples) {
                out.push_str(&format!(" n = {n} ({m}L) |"));
            }
            out.push_str("\n| --- |");
            for _ in &lengths {
                out.push_str(" --- |");
            }
            out.push('\n');
            let mut rows: Vec<&str> = Vec::new();
            for s in self.summary.iter().filter(|s| &s.task == task) {
                if !rows.contains(&s.row.as_str()) {
                    rows.push(&s.row);
                }
            }
            for row in rows {
                out.push_str(&format!("| {row} |"));
                for &n in &lengths {
                    let entry = self
                        .summary
                        .iter()
                        .find(|s| &s.task == task && s.row == row && s.n == n);
                    let text = match entry {
                        Some(Summary {
                            mean: Some(mean),
                            std: Some(std),
                            ..
                        }) => format!("{:.1} ± {:.1}", 100.0 * mean, 100.0 * std),
                        Some(Summary {
                            refused: Some(_), ..
                        }) => "refused: past the table".to_string(),
                        _ => "–".to_string(),
                    };
                    out.push_str(&format!(" {text} |"));
                }
                out.push('\n');
            }
            out.push('\n');
        }
        let refusal = self.summary.iter().find_map(|s| s.refused.as_deref());
        if let Some(refusal) = refusal {
            out.push_str(&format!(
                // Double backticks: the message quotes code in single ones.
                "A refusal is the model's own error, for example: `` {refusal} ``\n"
            ));
        }
        out
    }

    /// Writes `results.json` and `results.md` into `out`.
    ///
    /// # Errors
    ///
    /// When a file cannot be written.
    pub fn save(&self, out: &Path) -> Result<Vec<PathBuf>, TrainingError> {
        let json_path = out.join("results.json");
        let md_path = out.join("results.md");
        let json = serde_json::to_vec_pretty(self).expect("results serialize");
        for (path, bytes) in [(&json_path, json), (&md_path, self.markdown().into_bytes())] {
            write_atomic(path, &bytes).map_err(|error| TrainingError::Io {
                path: path.clone(),
                error: error.to_string(),
            })?;
        }
        Ok(vec![json_path, md_path])
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_spread() {
        let (mean, std) = mean_and_std(&[0.2, 0.4, 0.6]).unwrap();
        assert!((mean - 0.4).abs() < 1e-12);
        assert!((std - 0.2).abs() < 1e-12);
        assert_eq!(mean_and_std(&[0.5]), Some((0.5, 0.0)));
        assert_eq!(mean_and_std(&[]), None);
    }
}
