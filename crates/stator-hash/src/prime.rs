//! Primality helpers for choosing Maglev table sizes.

/// Whether `n` is prime.
///
/// Deterministic Miller–Rabin with bases 2, 7 and 61, which is exact for every `n` below
/// 4,759,123,141 and so for every `u32`.
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    for p in [2u32, 3, 5, 7, 11, 13, 61] {
        if n.is_multiple_of(p) {
            return n == p;
        }
    }
    let n64 = u64::from(n);
    let mut d = n64 - 1;
    let mut s = 0;
    while d.is_multiple_of(2) {
        d /= 2;
        s += 1;
    }
    'witness: for a in [2u64, 7, 61] {
        let mut x = pow_mod(a, d, n64);
        if x == 1 || x == n64 - 1 {
            continue;
        }
        for _ in 1..s {
            x = x * x % n64;
            if x == n64 - 1 {
                continue 'witness;
            }
        }
        return false;
    }
    true
}

/// The smallest prime `>= n`, or `None` if there is none in `u32` (`n > 4,294,967,291`).
pub fn next_prime(n: u32) -> Option<u32> {
    (n..=u32::MAX).find(|&candidate| is_prime(candidate))
}

/// `base^exp mod m` for `m < 2^32` (products fit in `u64`).
fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut result = 1;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            result = result * base % m;
        }
        base = base * base % m;
        exp >>= 1;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial_division(n: u32) -> bool {
        n >= 2
            && (2u64..)
                .take_while(|d| d * d <= u64::from(n))
                .all(|d| u64::from(n) % d != 0)
    }

    #[test]
    fn agrees_with_trial_division_on_small_numbers() {
        for n in 0..100_000 {
            assert_eq!(is_prime(n), trial_division(n), "{n}");
        }
    }

    #[test]
    fn maglev_sizes_and_strong_pseudoprimes() {
        assert!(is_prime(65_537));
        assert!(is_prime(655_373));
        assert!(!is_prime(65_536));
        assert!(!is_prime(655_371));
        // Strong pseudoprimes to some of the bases, and Carmichael numbers.
        for n in [
            2_047u32,
            1_373_653,
            25_326_001,
            3_215_031_751,
            561,
            41_041,
            3_825_123_056,
        ] {
            assert_eq!(is_prime(n), trial_division(n), "{n}");
        }
        assert!(is_prime(4_294_967_291));
        assert!(!is_prime(u32::MAX));
    }

    #[test]
    fn next_prime_finds_the_smallest_prime_at_or_above() {
        assert_eq!(next_prime(0), Some(2));
        assert_eq!(next_prime(2), Some(2));
        assert_eq!(next_prime(65_536), Some(65_537));
        assert_eq!(next_prime(655_360), Some(655_373));
        assert_eq!(next_prime(4_294_967_291), Some(4_294_967_291));
        assert_eq!(next_prime(4_294_967_292), None);
    }
}
