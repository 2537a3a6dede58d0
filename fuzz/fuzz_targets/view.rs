//! `capsule_wire::view::Reader` driven by a small op-code program: the first half of the
//! input is the program, the second half the data it reads.
//!
//! Properties: a read that fails does not move the reader; a read that succeeds moves it by
//! exactly its width and returns the bytes at the old position; `remaining`, `rest` and
//! `is_empty` agree with the position; a `Short` error's `end()` is past the data.
#![no_main]

use capsule_wire::view::{Endian, Reader, VarintError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let (prog, data) = input.split_at(input.len() / 2);
    let mut r = Reader::new(data);
    let mut ops = prog.iter().copied();
    while let Some(op) = ops.next() {
        let before = r;
        let pos = r.position();
        // The width a successful read moves by, or None when it failed (and must not move).
        let moved: Option<usize> = match op % 20 {
            0 => r.u8().ok().map(|v| {
                assert_eq!(v, data[pos]);
                1
            }),
            1 => r.u16_le().ok().map(|v| {
                assert_eq!(v.to_le_bytes(), data[pos..pos + 2]);
                2
            }),
            2 => r.u16_be().ok().map(|v| {
                assert_eq!(v.to_be_bytes(), data[pos..pos + 2]);
                2
            }),
            3 => r.u32_le().ok().map(|v| {
                assert_eq!(v.to_le_bytes(), data[pos..pos + 4]);
                4
            }),
            4 => r.u32_be().ok().map(|v| {
                assert_eq!(v.to_be_bytes(), data[pos..pos + 4]);
                4
            }),
            5 => r.u64_le().ok().map(|v| {
                assert_eq!(v.to_le_bytes(), data[pos..pos + 8]);
                8
            }),
            6 => r.u64_be().ok().map(|v| {
                assert_eq!(v.to_be_bytes(), data[pos..pos + 8]);
                8
            }),
            7 => r.u16_in(Endian::Little).ok().map(|_| 2),
            8 => r.u32_in(Endian::Big).ok().map(|_| 4),
            9 => r.u64_in(Endian::Little).ok().map(|_| 8),
            10 => {
                let n = usize::from(ops.next().unwrap_or(0));
                match r.take(n) {
                    Ok(b) => {
                        assert_eq!(b, &data[pos..pos + n]);
                        Some(n)
                    }
                    Err(e) => {
                        assert!(e.end() > data.len(), "{e:?}");
                        None
                    }
                }
            }
            11 => {
                let n = usize::from(ops.next().unwrap_or(0));
                r.skip(n).ok().map(|()| n)
            }
            12 => r.array::<3>().ok().map(|a| {
                assert_eq!(a, data[pos..pos + 3]);
                3
            }),
            13 => r.view::<5>().ok().map(|_| 5),
            14 => {
                let ok = r.peek::<6>().is_ok();
                assert_eq!(ok, r.remaining() >= 6);
                Some(0)
            }
            15 => match r.varint() {
                Ok(_) => Some(r.position() - pos),
                Err(VarintError::TooLong { offset }) => {
                    assert_eq!(offset, pos);
                    None
                }
                Err(e) => {
                    let _ = format!("{e:?}");
                    None
                }
            },
            16 => {
                // Jump anywhere, past the end included.
                let to = usize::from(ops.next().unwrap_or(0));
                r = r.at(to);
                assert_eq!(r.position(), to);
                continue;
            }
            17 => {
                let rest = r.rest();
                assert_eq!(rest.len(), r.remaining());
                assert_eq!(rest, data.get(pos..).unwrap_or_default());
                Some(0)
            }
            18 => {
                assert_eq!(r.is_empty(), r.remaining() == 0);
                Some(0)
            }
            _ => {
                let jump = usize::from(ops.next().unwrap_or(0)) * 1000 + usize::MAX / 2;
                // A take of a huge length must fail, not overflow.
                assert!(r.take(jump).is_err());
                None
            }
        };
        match moved {
            Some(n) => {
                assert_eq!(r.position(), pos + n, "op {op}");
                assert!(pos + n <= data.len() || n == 0, "op {op} read past the end");
            }
            None => assert_eq!(r, before, "a failed op {op} moved the reader"),
        }
        assert_eq!(r.remaining(), data.len().saturating_sub(r.position()));
    }
});
