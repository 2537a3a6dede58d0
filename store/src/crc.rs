//! CRC-32C (Castagnoli), the checksum of every frame, metadata record and index record the
//! store writes (docs/format.md).
//!
//! Computed with `crc-fast`, which folds 64 bytes at a time with carry-less multiplication
//! (VPCLMULQDQ on AVX-512 machines, PCLMULQDQ otherwise, detected at run time): about 110
//! GB/s on the development VM, where the `crc32c` crate's three interleaved CRC32
//! instructions reach 22-28 GB/s. The checksum is the same function, so files written by
//! either read with the other (the tests below compare them on random input).
//!
//! Values are finished checksums (the conventional initial and final inversion applied), so
//! [`crc32c_append`] continues one as if its input had been longer.

use crc_fast::{CrcAlgorithm::Crc32Iscsi, Digest};

/// CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// CRC-32C of the bytes `crc` was taken over followed by `data`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut d = Crc32c::resume(crc);
    d.update(data);
    d.value()
}

/// CRC-32C of `a` followed by `b`, from `crc_a` of `a`, `crc_b` of `b` and `b`'s length:
/// a frame's checksum from its head and the checksum its body was given as it was built.
///
/// `crc_a` times x^(8 len_b) modulo the polynomial, plus `crc_b` (the initial and final
/// inversions cancel out): one multiplication per set bit of the length, from a table of
/// x^(2^k), about a microsecond. Written here because `crc-fast`'s `checksum_combine` took
/// tens of microseconds for a 1 MiB block (7.6% of a capture's samples at the sender's
/// ceiling, `perf record`).
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    let mut p = 1u32 << 31; // x^0
    let (mut n, mut k) = (len_b, 3usize); // x^(8 n) = x^(2^3 n)
    while n != 0 {
        if n & 1 == 1 {
            p = mul_mod(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    mul_mod(p, crc_a) ^ crc_b
}

/// The CRC-32C polynomial, reflected (bit 31 is x^0).
const POLY: u32 = 0x82F6_3B78;

/// a times b modulo [`POLY`], both reflected.
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// x^(2^k) modulo [`POLY`], reflected, for k in 0..32.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p = 1u32 << 30; // x^1
    t[0] = p;
    let mut k = 1;
    while k < 32 {
        p = mul_mod(p, p);
        t[k] = p;
        k += 1;
    }
    t
};

/// A CRC-32C taken over pieces given one after the other.
#[derive(Clone)]
pub struct Crc32c(Digest);

impl std::fmt::Debug for Crc32c {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Crc32c({:#010x})", self.value())
    }
}

impl Default for Crc32c {
    fn default() -> Self {
        Crc32c::resume(0)
    }
}

impl Crc32c {
    /// Continues a finished checksum (0: of nothing).
    #[inline]
    pub fn resume(crc: u32) -> Self {
        // The running state of the reflected CRC is the finished value inverted.
        Crc32c(Digest::new_with_init_state(Crc32Iscsi, u64::from(!crc)))
    }

    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The checksum of everything given so far.
    #[inline]
    pub fn value(&self) -> u32 {
        self.0.finalize() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn combine_of_a_megabyte_and_of_nothing() {
        let data: Vec<u8> = (0..(1u32 << 20) + 77)
            .map(|i| ((i * 31) >> 3) as u8)
            .collect();
        let (a, b) = data.split_at(9);
        assert_eq!(
            crc32c_combine(crc32c(a), crc32c(b), b.len() as u64),
            crc32c(&data)
        );
        assert_eq!(crc32c_combine(crc32c(&data), 0, 0), crc32c(&data));
        assert_eq!(
            crc32c_combine(0, crc32c(&data), data.len() as u64),
            crc32c(&data)
        );
    }

    #[test]
    fn known_values() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
        assert_eq!(crc32c_append(0, b"123456789"), 0xE306_9283);
    }

    proptest! {
        /// The same function as the `crc32c` crate (what earlier builds wrote with), in one
        /// piece and continued over any split, for lengths on both sides of the folding
        /// kernels' thresholds.
        #[test]
        fn agrees_with_the_crc32c_crate(
            data in proptest::collection::vec(any::<u8>(), 0..20_000),
            cut in any::<prop::sample::Index>(),
            seed in any::<u32>(),
        ) {
            let at = cut.index(data.len() + 1);
            prop_assert_eq!(crc32c(&data), ::crc32c::crc32c(&data));
            prop_assert_eq!(
                crc32c_append(crc32c(&data[..at]), &data[at..]),
                ::crc32c::crc32c(&data)
            );
            prop_assert_eq!(
                crc32c_append(seed, &data),
                ::crc32c::crc32c_append(seed, &data)
            );
            prop_assert_eq!(
                crc32c_combine(crc32c(&data[..at]), crc32c(&data[at..]), (data.len() - at) as u64),
                ::crc32c::crc32c(&data)
            );
            let mut d = Crc32c::resume(seed);
            d.update(&data[..at]);
            d.update(&data[at..]);
            prop_assert_eq!(d.value(), ::crc32c::crc32c_append(seed, &data));
        }
    }
}
