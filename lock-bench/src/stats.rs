//! Percentiles and min/median/max over repetitions.

use serde::Serialize;

/// Latency samples in nanoseconds.
#[derive(Debug, Default)]
pub struct Samples(pub Vec<u64>);

impl Samples {
    /// The `q`-quantile (0.0..=1.0) in microseconds.
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.sort_unstable();
        let index = ((self.0.len() - 1) as f64 * q).round() as usize;
        self.0[index] as f64 / 1000.0
    }
}

/// One figure measured over several repetitions.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return Spread {
                min: f64::NAN,
                median: f64::NAN,
                max: f64::NAN,
            };
        }
        Spread {
            min: sorted[0],
            median: sorted[sorted.len() / 2],
            max: sorted[sorted.len() - 1],
        }
    }

    /// `median (min–max)`, with `digits` decimals.
    pub fn show(&self, digits: usize) -> String {
        format!(
            "{:.d$} ({:.d$}–{:.d$})",
            self.median,
            self.min,
            self.max,
            d = digits
        )
    }
}
