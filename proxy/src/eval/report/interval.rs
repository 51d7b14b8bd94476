//! Confidence intervals for shares and their differences: Wilson's score
//! interval for one share, Newcombe's hybrid score interval (his method
//! 10, built on Wilson's) for the difference of two.

use serde::{Deserialize, Serialize};

/// The normal quantile of a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// A confidence interval, `low` to `high`.
///
/// ```
/// use refusal_guard_proxy::eval::wilson;
///
/// let interval = wilson(0, 10).unwrap();
/// assert_eq!(interval.low, 0.0);
/// assert!(interval.contains(0.1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Interval {
    /// The lower bound.
    pub low: f64,
    /// The upper bound.
    pub high: f64,
}

impl Interval {
    /// Whether `value` lies in it, bounds included.
    ///
    /// ```
    /// use refusal_guard_proxy::eval::newcombe;
    ///
    /// // 12 of 40 against 30 of 40: the interval of the difference misses 0.
    /// assert!(!newcombe((12, 40), (30, 40)).unwrap().contains(0.0));
    /// ```
    pub fn contains(&self, value: f64) -> bool {
        self.low <= value && value <= self.high
    }
}

/// Wilson's 95% score interval for a share of `successes` in `trials`;
/// `None` for no trials. Unlike the textbook `p ± z·se`, it stays within 0
/// and 1 and keeps its coverage for small samples and shares near 0 or 1.
///
/// ```
/// use refusal_guard_proxy::eval::wilson;
///
/// let interval = wilson(8, 10).unwrap();
/// assert!((interval.low - 0.4902).abs() < 1e-4);
/// assert!((interval.high - 0.9433).abs() < 1e-4);
/// assert!(wilson(0, 0).is_none());
/// ```
pub fn wilson(successes: u64, trials: u64) -> Option<Interval> {
    if trials == 0 || successes > trials {
        return None;
    }
    let n = trials as f64;
    let p = successes as f64 / n;
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    // At 0 or all the bound is exactly 0 or 1; computed, it may miss by
    // a rounding.
    Some(Interval {
        low: if successes == 0 {
            0.0
        } else {
            (centre - half).max(0.0)
        },
        high: if successes == trials {
            1.0
        } else {
            (centre + half).min(1.0)
        },
    })
}

/// Newcombe's 95% interval for `b`'s share minus `a`'s, each given as
/// `(successes, trials)`; `None` when either has no trials. It treats the
/// two as independent samples; two variants run on the same prompts are
/// positively correlated, which makes this interval wider than a paired
/// one would be: a difference it calls real is real.
///
/// ```
/// use refusal_guard_proxy::eval::newcombe;
///
/// let difference = newcombe((56, 70), (48, 80)).unwrap();
/// // Newcombe (1998), table II, example (a): 0.0524 to 0.3339, as a − b.
/// assert!((difference.low + 0.3339).abs() < 1e-4);
/// assert!((difference.high + 0.0524).abs() < 1e-4);
/// assert!(!difference.contains(0.0));
/// ```
pub fn newcombe(a: (u64, u64), b: (u64, u64)) -> Option<Interval> {
    let (wa, wb) = (wilson(a.0, a.1)?, wilson(b.0, b.1)?);
    let (pa, pb) = (a.0 as f64 / a.1 as f64, b.0 as f64 / b.1 as f64);
    let difference = pb - pa;
    let low = difference - ((pb - wb.low).powi(2) + (wa.high - pa).powi(2)).sqrt();
    let high = difference + ((wb.high - pb).powi(2) + (pa - wa.low).powi(2)).sqrt();
    Some(Interval {
        low: low.max(-1.0),
        high: high.min(1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newcombes_worked_examples() {
        // Newcombe (1998), "Interval estimation for the difference between
        // independent proportions", table II, method 10, as a − b.
        for (a, b, low, high) in [
            ((56, 70), (48, 80), 0.0524, 0.3339),
            ((9, 10), (3, 10), 0.1705, 0.8090),
            ((6, 7), (2, 7), 0.0582, 0.8062),
            ((5, 56), (0, 29), -0.0381, 0.1926),
            ((0, 10), (0, 20), -0.1611, 0.2775),
            ((10, 10), (0, 20), 0.6791, 1.0000),
        ] {
            let interval = newcombe(b, a).unwrap();
            assert!(
                (interval.low - low).abs() < 1e-4,
                "{a:?} {b:?}: {interval:?}"
            );
            assert!(
                (interval.high - high).abs() < 1e-4,
                "{a:?} {b:?}: {interval:?}"
            );
        }
    }

    #[test]
    fn wilson_at_the_edges() {
        let all = wilson(10, 10).unwrap();
        assert_eq!(all.high, 1.0);
        assert!((all.low - 0.7225).abs() < 1e-4);
        assert!(wilson(3, 2).is_none());
    }
}
