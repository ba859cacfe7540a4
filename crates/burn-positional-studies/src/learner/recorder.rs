//! burn-train's renderer and logger interfaces turned into the [`Event`]s a [`Listener`](super::Listener)
//! receives: one place that knows how burn-train reports a step (one entry per worker and
//! metric) and the end of a split.

use std::collections::HashMap;

use burn::train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn::train::metric::{MetricDefinition, NumericEntry};
use burn::train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};

use super::Event;
use crate::training::Metrics;

/// burn-train's renderer interface turned into [`Event`]s: burn-train reports every metric of
/// every processed batch (one per worker) and the end of every split.
pub(crate) struct Recorder {
    steps_per_epoch: usize,
    workers: usize,
    on_event: Box<dyn FnMut(&Event) + Send + Sync>,
    names: HashMap<String, String>,
    /// Loss and accuracy of the batches of the step being assembled.
    pending: Vec<Metrics>,
    /// The epoch's steps.
    epoch_steps: Vec<Metrics>,
    valid: Metrics,
    in_valid: bool,
    epoch: usize,
    epochs: usize,
    step: usize,
}

impl Recorder {
    pub(crate) fn new(
        steps_per_epoch: usize,
        workers: usize,
        on_event: Box<dyn FnMut(&Event) + Send + Sync>,
    ) -> Self {
        Self {
            steps_per_epoch,
            workers,
            on_event,
            names: HashMap::new(),
            pending: Vec::new(),
            epoch_steps: Vec::new(),
            valid: Metrics {
                loss: f32::NAN,
                accuracy: f32::NAN,
            },
            in_valid: false,
            epoch: 0,
            epochs: 0,
            step: 0,
        }
    }

    /// The per-batch value of a loss or accuracy entry: `(is_loss, value)`, accuracy as a
    /// fraction (burn-train's is a percentage). burn-train sends a batch's mean as `Value` or
    /// `Aggregated` (with the number of items), and at the end of an epoch the epoch's mean as
    /// `Final`, which is not a batch and is skipped.
    fn value(&self, state: &MetricState) -> Option<(bool, f32)> {
        let MetricState::Numeric(entry, Some(numeric)) = state else {
            return None;
        };
        let value = match numeric {
            NumericEntry::Value(value) => *value,
            NumericEntry::Aggregated {
                aggregated_value, ..
            } => *aggregated_value,
            NumericEntry::Final(_) => return None,
        };
        let name = self.names.get(&format!("{:?}", entry.metric_id))?;
        if name.contains("Loss") {
            Some((true, value as f32))
        } else if name.contains("Accuracy") {
            Some((false, value as f32 / 100.0))
        } else {
            None
        }
    }

    fn mean(metrics: &[Metrics]) -> Metrics {
        let n = metrics.len().max(1) as f32;
        Metrics {
            loss: metrics.iter().map(|m| m.loss).sum::<f32>() / n,
            accuracy: metrics.iter().map(|m| m.accuracy).sum::<f32>() / n,
        }
    }
}

impl MetricsRendererTraining for Recorder {
    fn update_train(&mut self, state: MetricState) {
        // Loss comes first for each batch (registered first), then accuracy.
        match self.value(&state) {
            Some((true, loss)) => self.pending.push(Metrics {
                loss,
                accuracy: f32::NAN,
            }),
            Some((false, accuracy)) => {
                if let Some(last) = self.pending.last_mut() {
                    last.accuracy = accuracy;
                }
                if self.pending.len() == self.workers {
                    let train = Self::mean(&self.pending);
                    self.pending.clear();
                    self.step += 1;
                    self.epoch_steps.push(train);
                    (self.on_event)(&Event::Step {
                        step: self.step,
                        train,
                    });
                }
            }
            None => {}
        }
    }

    fn update_valid(&mut self, state: MetricState) {
        match self.value(&state) {
            Some((true, loss)) => self.valid.loss = loss,
            Some((false, accuracy)) => self.valid.accuracy = accuracy,
            None => {}
        }
    }
}

impl MetricsRendererEvaluation for Recorder {
    fn update_test(&mut self, _name: EvaluationName, _state: MetricState) {}
}

impl TrainingProgressLogger for Recorder {
    fn start(
        &mut self,
        epochs: usize,
        starting_epoch: usize,
        _items: Option<usize>,
        _label: Option<&str>,
    ) {
        self.epochs = epochs;
        self.epoch = starting_epoch;
        self.step = (starting_epoch - 1) * self.steps_per_epoch;
    }

    fn update_epoch(&mut self, _epoch: usize) {}

    fn start_split(&mut self, split: &str, _total_items: usize) {
        self.in_valid = split.to_ascii_lowercase().contains("valid");
    }

    fn update_split(&mut self, _items_processed: usize) {}

    fn end_split(&mut self) {
        if self.in_valid {
            (self.on_event)(&Event::Validated {
                epoch: self.epoch,
                epochs: self.epochs,
                step: self.step,
                train: Self::mean(&self.epoch_steps),
                valid: self.valid,
            });
            self.epoch_steps.clear();
            self.epoch += 1;
        }
    }

    fn end(&mut self) {}

    fn log_event_training(&mut self, _event: String) {}
}

impl EvaluationProgressLogger for Recorder {
    fn start_global_progress(&mut self, _total_tests: usize) {}
    fn start_test(&mut self, _name: &str, _total_items: usize) {}
    fn update_test_progress(&mut self, _items_processed: usize) {}
    fn end_test(&mut self) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, _event: String) {}
}

impl MetricsRenderer for Recorder {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(
            format!("{:?}", definition.metric_id),
            definition.name.to_string(),
        );
    }
}
