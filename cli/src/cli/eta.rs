//! The time left on a byte progress bar, from the run's average rate.
//!
//! Q: why not indicatif's own `{eta}`?
//! A: indicatif extrapolates the rate of the last ~15 s of updates, and
//! `ibp compress` reports bytes only as they are encoded: fitting a group's
//! codebook, a third or more of the work, reports nothing. So during the
//! first fit the bar showed "0s" (no rate yet), after it the encoder's burst
//! rate (several times the real one, and a raw piece added at once counts as
//! infinitely fast), and each later fit froze the estimate while time went
//! on. The average over the whole run counts the fits in proportion to the
//! bytes fitted so far, so it settles on the real rate, and it grows while
//! a fit holds the bar still.

use std::fmt::Write as _;
use std::time::Duration;

/// Time left to process `total` bytes when `done` took `elapsed`, at the
/// run's average rate; `None` until there is a rate to go by.
pub fn eta(elapsed: Duration, done: u64, total: u64) -> Option<Duration> {
    if done >= total {
        return Some(Duration::ZERO);
    }
    // Q: why wait for 2% of the bytes? A: the first group's fit reports
    // nothing, and a few small raw tensors done before it make a rate of
    // kilobytes a minute: the bar read 66–168 hours during the fit of a
    // file that took minutes. Under 2% done, no rate is worth showing.
    if done == 0 || elapsed.is_zero() || done < total / 50 {
        return None;
    }
    let left = elapsed.as_secs_f64() * (total - done) as f64 / done as f64;
    // A week stands for "a very long time"; it also keeps the conversion
    // from f64 in range.
    Some(Duration::from_secs_f64(left.min(7.0 * 86_400.0)))
}

/// A short "ETA …" label for [`eta`]'s answer: "ETA 42s", "ETA 3m05s",
/// "ETA 1h02m"; "ETA -" while there is no estimate.
pub fn label(eta: Option<Duration>) -> String {
    let Some(d) = eta else {
        return "ETA -".into();
    };
    let s = d.as_secs_f64().round() as u64;
    let mut out = String::from("ETA ");
    // Writing to a String cannot fail.
    let _ = match s {
        0..60 => write!(out, "{s}s"),
        60..3600 => write!(out, "{}m{:02}s", s / 60, s % 60),
        3600..86_400 => write!(out, "{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => write!(out, "over a day"),
    };
    out
}

/// The `{ibp_eta}` key of a progress bar's template.
pub fn key(state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write) {
    let total = state.len().unwrap_or(0);
    let _ = w.write_str(&label(eta(state.elapsed(), state.pos(), total)));
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn no_estimate_before_the_first_byte() {
        // indicatif showed "0s" here: the first fit reports no bytes.
        assert_eq!(eta(S(30), 0, 1000), None);
        assert_eq!(eta(Duration::ZERO, 10, 1000), None);
        assert_eq!(label(eta(S(30), 0, 1000)), "ETA -");
    }

    #[test]
    fn average_rate_over_the_whole_run() {
        // A quarter done in 10 s: 30 s left.
        assert_eq!(eta(S(10), 250, 1000), Some(S(30)));
        // Half done in 1 min: 1 min left.
        assert_eq!(eta(S(60), 500, 1000), Some(S(60)));
    }

    #[test]
    fn a_fit_that_holds_the_bar_still_raises_the_estimate() {
        // A quarter done after 10 s, then a 20 s fit that reports nothing:
        // the estimate grows from 30 s to 90 s instead of freezing.
        let before = eta(S(10), 250, 1000).unwrap_or_default();
        let after = eta(S(30), 250, 1000).unwrap_or_default();
        assert_eq!((before, after), (S(30), S(90)));
    }

    #[test]
    fn done_means_zero_left() {
        assert_eq!(eta(S(5), 1000, 1000), Some(Duration::ZERO));
        assert_eq!(eta(S(5), 1200, 1000), Some(Duration::ZERO));
        assert_eq!(eta(Duration::ZERO, 0, 0), Some(Duration::ZERO));
    }

    #[test]
    fn a_crawl_is_capped_at_a_week() {
        assert_eq!(
            eta(S(100_000), u64::MAX / 40, u64::MAX),
            Some(S(7 * 86_400))
        );
        assert_eq!(label(Some(S(7 * 86_400))), "ETA over a day");
    }

    #[test]
    fn no_estimate_from_the_first_two_percent() {
        // Issue 36: 1 kB of raw tensors done in 60 s, then the first fit of
        // a 500 MB file: the bar said 66-168 hours. Now it says nothing
        // until 2% is done.
        assert_eq!(eta(S(60), 1000, 500_000_000), None);
        assert_eq!(eta(S(60), 9_999_999, 500_000_000), None);
        assert_eq!(eta(S(60), 10_000_000, 500_000_000), Some(S(60 * 49)));
    }

    #[test]
    fn labels() {
        let l = |s| label(Some(S(s)));
        assert_eq!(l(0), "ETA 0s");
        assert_eq!(l(42), "ETA 42s");
        assert_eq!(l(185), "ETA 3m05s");
        assert_eq!(l(3600 + 125), "ETA 1h02m");
        assert_eq!(label(Some(Duration::from_millis(59_600))), "ETA 1m00s");
    }
}
