//! Money: USD amounts as integer micro-dollars (1 USD = 1_000_000 µ$).
//!
//! Every stored amount is an `i64` of micro-dollars, kept within ±2^53 so it survives D1's
//! JavaScript number binding exactly.

/// Largest amount D1 can carry exactly (2^53 − 1).
pub const MAX_MICROS: i64 = (1 << 53) - 1;

/// Converts a USD amount from an API body to micro-dollars, rounding to the nearest micro-dollar.
/// `None` for NaN, infinities and amounts outside ±2^53 µ$.
pub fn usd_to_micros(usd: f64) -> Option<i64> {
    if !usd.is_finite() {
        return None;
    }
    let micros = (usd * 1_000_000.0).round();
    if micros.abs() > MAX_MICROS as f64 {
        return None;
    }
    Some(micros as i64)
}

/// Micro-dollars as USD for API responses.
pub fn micros_to_usd(micros: i64) -> f64 {
    micros as f64 / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_and_rounds() {
        assert_eq!(usd_to_micros(1.0), Some(1_000_000));
        assert_eq!(usd_to_micros(0.0000015), Some(2));
        assert_eq!(usd_to_micros(-2.5), Some(-2_500_000));
        assert_eq!(usd_to_micros(f64::NAN), None);
        assert_eq!(usd_to_micros(f64::INFINITY), None);
        assert_eq!(usd_to_micros(1e10), None);
        assert_eq!(micros_to_usd(1_500_000), 1.5);
    }
}
