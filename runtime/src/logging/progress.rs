//! A terminal progress bar with live loss, accuracy and throughput.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// An [`indicatif`] progress bar over steps (or scans) that shows loss,
/// accuracy and samples per second. Refresh it when the numbers are already
/// on the host, i.e. once per `scan!` of K steps, never once per step. The
/// bar hides itself when stderr is not a terminal.
///
/// ```
/// use flaxen_runtime::logging::Progress;
///
/// let mut p = Progress::hidden(10, 160);
/// p.update(1, 0.6931, 0.5);
/// assert!(p.message().starts_with("loss 0.6931  acc 50.00%"));
/// p.finish();
/// ```
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    samples_per_unit: u64,
    last: (Instant, u64),
    message: String,
}

impl Progress {
    /// A bar of `total` units (steps or scans); each unit is
    /// `samples_per_unit` examples (batch size, times K for scans).
    pub fn new(total: u64, samples_per_unit: u64) -> Self {
        Self::with_bar(ProgressBar::new(total), samples_per_unit)
    }

    /// Like [`Progress::new`] but never drawn (tests, quiet runs).
    pub fn hidden(total: u64, samples_per_unit: u64) -> Self {
        let bar = ProgressBar::hidden();
        bar.set_length(total);
        Self::with_bar(bar, samples_per_unit)
    }

    fn with_bar(bar: ProgressBar, samples_per_unit: u64) -> Self {
        // The template is a constant; fall back to the default style rather
        // than panic if indicatif ever rejects it.
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{wide_bar:.cyan/blue}] {pos}/{len} {msg} (eta {eta})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Self {
            bar,
            samples_per_unit,
            last: (Instant::now(), 0),
            message: String::new(),
        }
    }

    /// Moves the bar to `position` and shows `loss`, `accuracy` (a fraction)
    /// and the samples per second since the previous update.
    pub fn update(&mut self, position: u64, loss: f32, accuracy: f32) {
        let now = Instant::now();
        let (then, before) = self.last;
        let secs = now.duration_since(then).as_secs_f64();
        let samples = position.saturating_sub(before) * self.samples_per_unit;
        let rate = if secs > 0.0 {
            samples as f64 / secs
        } else {
            0.0
        };
        self.last = (now, position);
        self.message = format!(
            "loss {loss:.4}  acc {:.2}%  {rate:.0} samples/s",
            accuracy * 100.0
        );
        self.bar.set_position(position);
        self.bar.set_message(self.message.clone());
    }

    /// The text shown after the bar.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prints a line above the bar (e.g. an epoch's test accuracy); on
    /// stdout when the bar is hidden, so logs of non-interactive runs keep it.
    pub fn println(&self, line: impl AsRef<str>) {
        if self.bar.is_hidden() {
            println!("{}", line.as_ref());
        } else {
            self.bar.println(line.as_ref());
        }
    }

    /// Leaves the bar at its final state.
    pub fn finish(&self) {
        self.bar.finish();
    }
}
