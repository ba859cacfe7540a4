//! The grid: [`run_study`] runs every cell, `jobs` at a time, resuming where it stopped.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use burn::prelude::*;

use super::{CellResult, Progress, StudyConfig, StudyResults, Task, run_cell, summarize};
use crate::checkpoint::{last_complete_epoch, write_atomic};
use crate::schemes::Scheme;
use crate::training::TrainingError;

/// Runs the grid on `device`, `jobs` cells at a time, in `out`: each cell trains in
/// `out/cells/<task>-<scheme>-seed<k>` and writes `result.json` there when done, so a run
/// stopped anywhere resumes from the cell's last checkpoint, and done cells are read, not rerun.
/// `out/study.json` records the config; another config in the same folder is refused.
///
/// # Errors
///
/// An invalid config, a folder made with another config, an unwritable folder.
pub fn run_study(
    config: &StudyConfig,
    device: &Device,
    jobs: usize,
    out: &Path,
    progress: Arc<dyn Fn(&Progress) + Send + Sync>,
) -> Result<StudyResults, TrainingError> {
    config.validate()?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error: std::io::Error| TrainingError::Io {
            path: path.clone(),
            error: error.to_string(),
        }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let study_path = out.join("study.json");
    if study_path.exists() {
        let before = StudyConfig::load(&study_path).map_err(|err| TrainingError::Unsupported {
            what: format!("{} cannot be read ({err})", study_path.display()),
            fix: "start fresh (--fresh, or delete the folder)".into(),
        })?;
        if before != *config {
            return Err(TrainingError::Unsupported {
                what: format!(
                    "{} holds a study made with another config ({})",
                    out.display(),
                    study_path.display()
                ),
                fix: "pass the same settings to resume it, or start fresh (--fresh, or another \
                      --out)"
                    .into(),
            });
        }
    }
    let json = serde_json::to_vec_pretty(config).expect("a config serializes");
    write_atomic(&study_path, &json).map_err(io(&study_path))?;

    let mut cells = Vec::new();
    for task in config.task_list()? {
        for scheme in config.scheme_list()? {
            for seed in 0..config.seeds {
                cells.push((task, scheme, seed));
            }
        }
    }
    let queue = Mutex::new(cells.clone().into_iter());
    let results = Mutex::new(BTreeMap::new());
    let first_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((task, scheme, seed)) = next else {
                        return;
                    };
                    let outcome = cell(config, task, scheme, seed, device, out, progress.clone());
                    match outcome {
                        Ok(result) => {
                            results
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert((task, scheme.to_string(), seed), result);
                        }
                        Err(err) => {
                            first_error
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(err);
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(err) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(err);
    }
    let by_key = results.into_inner().unwrap_or_else(|e| e.into_inner());
    // In the grid's order.
    let cells: Vec<CellResult> = cells
        .iter()
        .filter_map(|(task, scheme, seed)| by_key.get(&(*task, scheme.to_string(), *seed)).cloned())
        .collect();
    let summary = summarize(config, &cells);
    Ok(StudyResults {
        config: config.clone(),
        device: format!("{device:?}"),
        cells,
        summary,
    })
}

/// One cell of [`run_study`]: read from disk when done, else trained (resumed) and evaluated.
fn cell(
    config: &StudyConfig,
    task: Task,
    scheme: Scheme,
    seed: u64,
    device: &Device,
    out: &Path,
    progress: Arc<dyn Fn(&Progress) + Send + Sync>,
) -> Result<CellResult, TrainingError> {
    let label = format!("{task}/{scheme}/seed {seed}");
    let dir = out
        .join("cells")
        .join(format!("{task}-{scheme}-seed{seed}"));
    let done = dir.join("result.json");
    if let Ok(bytes) = std::fs::read(&done)
        && let Ok(result) = serde_json::from_slice::<CellResult>(&bytes)
    {
        progress(&Progress::Done {
            cell: label,
            steps: result.steps,
            from_disk: true,
            valid_accuracy: result.valid_accuracy,
        });
        return Ok(result);
    }
    let resumed_at =
        last_complete_epoch(&dir.join("checkpoint")).map(|epoch| epoch * config.steps_per_epoch);
    progress(&Progress::Started {
        cell: label.clone(),
        resumed_at,
    });
    let heard = progress.clone();
    let step_label = label.clone();
    let result = run_cell(
        config,
        task,
        scheme,
        seed,
        device,
        &dir,
        move |step, loss| {
            heard(&Progress::Step {
                cell: step_label.clone(),
                step,
                loss,
            })
        },
    )?;
    let json = serde_json::to_vec_pretty(&result).expect("a result serializes");
    write_atomic(&done, &json).map_err(|error| TrainingError::Io {
        path: done.clone(),
        error: error.to_string(),
    })?;
    // The checkpoints served their purpose; the result is what is kept.
    let _ = std::fs::remove_dir_all(dir.join("checkpoint"));
    progress(&Progress::Done {
        cell: label,
        steps: result.steps,
        from_disk: false,
        valid_accuracy: result.valid_accuracy,
    });
    Ok(result)
}
