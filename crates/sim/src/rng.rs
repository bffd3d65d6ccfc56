//! The simulation's randomness: a seeded generator (SplitMix64, no dependency) and the few
//! distributions the model draws from — exponential gaps (Poisson arrivals), uniform and
//! log-uniform ranges, and Zipf ranks from a precomputed table. The same seed gives the same
//! draws, so the same report.

/// SplitMix64: small, fast, and good enough for a simulation's draws.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5EED_0F5A_17C4_DA7A)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Log-uniform in [lo, hi): as many values per decade.
    pub fn log_range(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.unit()).exp()
    }

    /// An exponential gap of mean `mean`.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Uniform index below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Zipf ranks 0..n with exponent `s`: rank k drawn with weight 1 / (k + 1)^s.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n.max(1));
        let mut total = 0.0;
        for k in 0..n.max(1) {
            total += 1.0 / ((k + 1) as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    /// The share of draws that rank `k` gets.
    pub fn share(&self, k: usize) -> f64 {
        let below = if k == 0 {
            0.0
        } else {
            self.cdf.get(k - 1).copied().unwrap_or(1.0)
        };
        self.cdf.get(k).copied().unwrap_or(1.0) - below
    }

    pub fn draw(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|c| *c <= u).min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_and_zipf_ranks_follow_their_weights() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        let z = Zipf::new(100, 1.0);
        let mut rng = Rng::new(1);
        let draws = 200_000;
        let top = (0..draws).filter(|_| z.draw(&mut rng) == 0).count() as f64 / draws as f64;
        assert!(
            (top - z.share(0)).abs() < 0.01,
            "rank 0 drawn {top}, weight {}",
            z.share(0)
        );
        assert!((z.share(0) - 1.0 / 5.187).abs() < 0.001, "H(100) = 5.187");
        let mean = (0..draws).map(|_| rng.exp(2.0)).sum::<f64>() / draws as f64;
        assert!((mean - 2.0).abs() < 0.05, "exponential mean {mean}");
    }
}
