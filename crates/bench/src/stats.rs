//! Percentiles (nearest rank) of millisecond samples.

use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pct {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub n: usize,
}

/// The nearest-rank percentile of sorted samples.
fn rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

impl Pct {
    pub fn of(samples: &[f64]) -> Pct {
        let mut s: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        Pct {
            p50: rank(&s, 50.0),
            p90: rank(&s, 90.0),
            p99: rank(&s, 99.0),
            n: s.len(),
        }
    }

    pub fn minus(&self, other: &Pct) -> Pct {
        Pct {
            p50: self.p50 - other.p50,
            p90: self.p90 - other.p90,
            p99: self.p99 - other.p99,
            n: self.n.min(other.n),
        }
    }

    pub fn to_json(self) -> Value {
        let r = |v: f64| {
            if v.is_finite() {
                json!((v * 1000.0).round() / 1000.0)
            } else {
                Value::Null
            }
        };
        json!({"p50": r(self.p50), "p90": r(self.p90), "p99": r(self.p99), "n": self.n})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Pct::of(&v);
        assert_eq!((p.p50, p.p90, p.p99), (50.0, 90.0, 99.0));
        let one = Pct::of(&[3.0]);
        assert_eq!((one.p50, one.p99), (3.0, 3.0));
        assert!(Pct::of(&[]).p50.is_nan());
    }
}
