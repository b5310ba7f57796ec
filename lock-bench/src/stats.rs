//! Percentiles of one run, and min/median/max over repetitions.

use std::time::Instant;

use serde::Serialize;

/// Durations in nanoseconds, collected during one run.
#[derive(Debug, Default)]
pub struct Samples {
    values: Vec<u64>,
    sorted: bool,
}

impl Samples {
    pub fn with_capacity(capacity: usize) -> Samples {
        Samples {
            values: Vec::with_capacity(capacity),
            sorted: true,
        }
    }

    pub fn push(&mut self, nanos: u64) {
        self.values.push(nanos);
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The `q`-quantile (0.0..=1.0) in microseconds; NaN when there are no samples.
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        if self.values.is_empty() {
            return f64::NAN;
        }
        if !self.sorted {
            self.values.sort_unstable();
            self.sorted = true;
        }
        let index = ((self.values.len() - 1) as f64 * q).round() as usize;
        self.values[index] as f64 / 1000.0
    }
}

/// One figure measured over several repetitions. NaN runs (nothing measured) are left out;
/// all-NaN gives NaN, shown as `n/a`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut sorted: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return Spread {
                min: f64::NAN,
                median: f64::NAN,
                max: f64::NAN,
            };
        }
        let mid = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        } else {
            sorted[mid]
        };
        Spread {
            min: sorted[0],
            median,
            max: sorted[sorted.len() - 1],
        }
    }

    /// The spread of `figure` over `runs`.
    pub fn pick<R>(runs: &[R], figure: impl Fn(&R) -> f64) -> Spread {
        Spread::of(runs.iter().map(figure))
    }

    /// `median (min–max)` with `digits` decimals, or just the value when all runs agree or
    /// there was one run.
    pub fn show(&self, digits: usize) -> String {
        if !self.median.is_finite() {
            return "n/a".into();
        }
        let value = |v: f64| group_thousands(&format!("{v:.digits$}"));
        if (self.max - self.min).abs() < f64::EPSILON {
            return value(self.median);
        }
        format!(
            "{} ({}–{})",
            value(self.median),
            value(self.min),
            value(self.max)
        )
    }
}

/// The most holds in progress at once, from their sorted entry and leaving instants: a
/// sweep over both (a leaving at the same instant as an entry comes first).
pub fn most_at_once(entries: &[Instant], leavings: &[Instant]) -> usize {
    let (mut j, mut now, mut most) = (0, 0usize, 0);
    for entered in entries {
        while j < leavings.len() && leavings[j] <= *entered {
            now = now.saturating_sub(1);
            j += 1;
        }
        now += 1;
        most = most.max(now);
    }
    most
}

/// The spread of `figure(run) / figure(floor run)` over repetitions, pairing each run with
/// the floor's run of the same repetition (measured in the same interleaved slices, so
/// under the same machine load). Steadier than a ratio of medians when the load changes
/// between repetitions.
pub fn paired<R>(runs: &[R], floor: &[R], figure: impl Fn(&R) -> f64) -> Spread {
    Spread::of(
        runs.iter()
            .zip(floor)
            .map(|(run, floor)| ratio(figure(run), figure(floor))),
    )
}

impl Spread {
    /// `1.03x (0.98–1.07x)`, or `n/a`.
    pub fn show_ratio(&self) -> String {
        if !self.median.is_finite() {
            return "n/a".into();
        }
        if (self.max - self.min).abs() < 0.005 {
            return show_ratio(self.median);
        }
        format!("{:.2}x ({:.2}–{:.2})", self.median, self.min, self.max)
    }
}

/// `median_a / median_b`, or NaN.
pub fn ratio(a: f64, b: f64) -> f64 {
    if a.is_finite() && b.is_finite() && b != 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// `1.234x`, or `n/a`.
pub fn show_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}x")
    } else {
        "n/a".into()
    }
}

/// `12345.6` → `12 345.6` (thin groups keep wide figures readable in tables).
fn group_thousands(number: &str) -> String {
    let (sign, rest) = match number.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", number),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (rest, None),
    };
    if int.len() <= 4 {
        return number.to_owned();
    }
    let mut grouped = String::with_capacity(int.len() + int.len() / 3);
    for (i, digit) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(' ');
        }
        grouped.push(digit);
    }
    match frac {
        Some(frac) => format!("{sign}{grouped}.{frac}"),
        None => format!("{sign}{grouped}"),
    }
}

/// Jain's fairness index of `counts`: 1 when all are equal, 1/n when one takes all.
pub fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&x| x as f64).sum();
    let sum_sq: f64 = counts.iter().map(|&x| (x as f64).powi(2)).sum();
    if sum_sq > 0.0 {
        sum * sum / (counts.len() as f64 * sum_sq)
    } else {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_spreads() {
        let mut samples = Samples::default();
        for n in 1..=100 {
            samples.push(n * 1000);
        }
        assert_eq!(samples.quantile_us(0.5), 51.0);
        assert_eq!(samples.quantile_us(0.99), 99.0);
        let spread = Spread::of([3.0, 1.0, f64::NAN, 2.0]);
        assert_eq!((spread.min, spread.median, spread.max), (1.0, 2.0, 3.0));
        assert_eq!(Spread::of([1.0, 2.0]).median, 1.5);
        assert_eq!(Spread::of([f64::NAN]).show(1), "n/a");
        assert_eq!(
            Spread::of([12345.0, 9.0, 100000.0]).show(0),
            "12 345 (9–100 000)"
        );
        let ratios = paired(&[2.0, 3.0, 8.0], &[1.0, 2.0, 4.0], |v| *v);
        assert_eq!((ratios.min, ratios.median, ratios.max), (1.5, 2.0, 2.0));
        assert_eq!(ratios.show_ratio(), "2.00x (1.50–2.00)");
    }

    #[test]
    fn fairness() {
        assert_eq!(jain(&[5, 5, 5]), 1.0);
        assert!((jain(&[9, 0, 0]) - 1.0 / 3.0).abs() < 1e-9);
    }
}
