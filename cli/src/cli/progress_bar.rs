//! The progress bar of `compress` and `decompress`: bytes done on stderr,
//! in the reports' units.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};

/// The template of [`ByteProgress`]'s bar: decimal units (MB, 10^6
/// bytes), as the reports count them (the bar counted MiB while the report
/// said MB).
fn bar_template(verb: &str) -> String {
    format!(
        "{{spinner}} {verb} [{{wide_bar}}] {{decimal_bytes}}/{{decimal_total_bytes}} {{ibp_eta}}"
    )
}

/// A bar of bytes done on stderr, drawn only when stderr is a terminal,
/// fed from the library's `(done, total)` progress hooks.
pub struct ByteProgress {
    bar: indicatif::ProgressBar,
    /// The furthest `done` reported so far.
    ///
    /// Q: why keep a maximum? A: the hooks are called from worker threads
    /// and may arrive out of order; adding only the increase past the
    /// maximum keeps the bar monotonic without a lock.
    max: AtomicU64,
}

impl ByteProgress {
    /// A bar for `total` bytes, labelled with `verb` ("compressing").
    pub fn new(total: u64, verb: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return ByteProgress {
                bar: indicatif::ProgressBar::hidden(),
                max: AtomicU64::new(0),
            };
        }
        let bar = indicatif::ProgressBar::new(total);
        let template = bar_template(verb);
        if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
            // The run's average rate, not indicatif's recent one (see eta.rs).
            bar.set_style(
                style
                    .progress_chars("=> ")
                    .with_key("ibp_eta", super::eta::key),
            );
        }
        // Fitting a large tensor's codebook reports no bytes for a while;
        // the spinner shows that ibp is still at work.
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        ByteProgress {
            bar,
            max: AtomicU64::new(0),
        }
    }

    /// Record that `done` bytes are done.
    pub fn update(&self, done: u64) {
        let prev = self.max.fetch_max(done, Ordering::Relaxed);
        if done > prev {
            self.bar.inc(done - prev);
        }
    }

    /// Remove the bar from the terminal.
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for ByteProgress {
    fn drop(&mut self) {
        // On an error path too: the message must not share a line with a
        // half-drawn bar.
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_counts_in_the_reports_units() {
        let t = bar_template("compressing");
        assert!(t.contains("{decimal_bytes}/{decimal_total_bytes}"), "{t}");
        assert!(
            !t.contains("{bytes}") && !t.contains("{total_bytes}"),
            "{t}"
        );
        // What the bar's key prints for a count is what the report prints.
        for n in [15_520_000u64, 1_234_000_000] {
            assert_eq!(
                indicatif::DecimalBytes(n).to_string(),
                super::super::table::human(n)
            );
        }
    }
}
