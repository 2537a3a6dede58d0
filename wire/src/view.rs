//! Checked views over untrusted bytes: the one way capsule reads a packet, a capture file, a
//! segment's metadata or an index file.
//!
//! Two types, in the smoltcp style, and one error:
//!
//! * [`View<N>`](View) is a fixed-size header: exactly `N` bytes, whose length is checked once
//!   when the view is made ([`View::split`], [`View::at`], [`Reader::view`]). Its accessors
//!   take the field offset as a const parameter and check it against `N` at compile time, so a
//!   read from a view cannot fail, panic or cost a bounds check at run time.
//! * [`Reader`] is a cursor for variable-length data (options, records, varints): every read
//!   checks what is left and returns [`Short`] when the bytes run out, without moving.
//! * [`Short`] says where the read started, how many bytes it needed and how many were there.
//!   No read here makes up a value (a 0, an empty slice) for bytes that are not there.
//!
//! Multi-byte fields come in three forms: `_be` (network byte order, most protocol headers),
//! `_le` (capsule's own formats) and `_in(Endian)` for formats whose byte order is only known
//! at run time (a pcap file, each pcapng section). Everything is `#[inline]`, allocates
//! nothing and never panics.

/// The byte order of a multi-byte field, when it is only known at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endian {
    /// Least significant byte first.
    Little,
    /// Most significant byte first (network byte order).
    Big,
}

impl Endian {
    /// The byte order of this machine: for structures the kernel shares in memory (packet
    /// ring headers, the XDP program's metadata record).
    #[cfg(target_endian = "little")]
    pub const NATIVE: Endian = Endian::Little;
    /// The byte order of this machine: for structures the kernel shares in memory (packet
    /// ring headers, the XDP program's metadata record).
    #[cfg(target_endian = "big")]
    pub const NATIVE: Endian = Endian::Big;
}

/// A read that needs more bytes than there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("need {needed} bytes at offset {offset}, found {found}")]
pub struct Short {
    /// Where the read starts, from the start of the bytes the view or reader was made over.
    pub offset: usize,
    /// How many bytes the read needs.
    pub needed: usize,
    /// How many bytes there are from `offset` on: fewer than `needed`, or 0 when `offset` is
    /// past the end (see [`Reader::at`]).
    pub found: usize,
}

impl Short {
    /// The error of a read of `needed` bytes at `offset` in `len` bytes.
    #[inline]
    fn of(offset: usize, needed: usize, len: usize) -> Short {
        Short {
            offset,
            needed,
            found: len.saturating_sub(offset),
        }
    }

    /// How long the bytes must be for the read to succeed: `offset + needed`.
    #[inline]
    pub fn end(&self) -> usize {
        self.offset.saturating_add(self.needed)
    }
}

/// A varint that could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum VarintError {
    /// The bytes end inside the varint.
    #[error(transparent)]
    Short(#[from] Short),
    /// The varint has more than the 10 bytes a `u64` can take.
    #[error("varint at offset {offset} is longer than 10 bytes")]
    TooLong {
        /// Where the varint starts.
        offset: usize,
    },
}

/// A checked view of a fixed-size header: exactly `N` bytes, checked once when the view is
/// made. Every accessor takes its offset `AT` as a const parameter and asserts at compile time
/// that the field lies inside `N`, so reads cannot fail at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct View<'a, const N: usize>(&'a [u8; N]);

impl<'a, const N: usize> View<'a, N> {
    /// The size of the header, `N`.
    pub const LEN: usize = N;

    /// The view of `bytes`.
    #[inline(always)]
    pub const fn new(bytes: &'a [u8; N]) -> Self {
        View(bytes)
    }

    /// The view of the first `N` bytes of `bytes`, and the bytes after them.
    #[inline(always)]
    pub fn split(bytes: &'a [u8]) -> Result<(Self, &'a [u8]), Short> {
        match bytes.split_first_chunk::<N>() {
            Some((head, rest)) => Ok((View(head), rest)),
            None => Err(Short::of(0, N, bytes.len())),
        }
    }

    /// The view of the `N` bytes of `bytes` at `offset`.
    #[inline(always)]
    pub fn at(bytes: &'a [u8], offset: usize) -> Result<Self, Short> {
        bytes
            .get(offset..)
            .and_then(|b| b.first_chunk::<N>())
            .map(View)
            .ok_or(Short::of(offset, N, bytes.len()))
    }

    /// The bytes of the header.
    #[inline(always)]
    pub const fn bytes(self) -> &'a [u8; N] {
        self.0
    }

    /// The `W` bytes at `AT`.
    #[inline(always)]
    pub fn array<const AT: usize, const W: usize>(self) -> [u8; W] {
        const { assert!(AT + W <= N, "field outside the header") };
        let mut out = [0; W];
        out.copy_from_slice(&self.0[AT..AT + W]);
        out
    }

    /// The byte at `AT`.
    #[inline(always)]
    pub fn u8<const AT: usize>(self) -> u8 {
        let [b] = self.array::<AT, 1>();
        b
    }

    /// The big-endian `u16` at `AT`.
    #[inline(always)]
    pub fn u16_be<const AT: usize>(self) -> u16 {
        u16::from_be_bytes(self.array::<AT, 2>())
    }

    /// The big-endian `u32` at `AT`.
    #[inline(always)]
    pub fn u32_be<const AT: usize>(self) -> u32 {
        u32::from_be_bytes(self.array::<AT, 4>())
    }

    /// The big-endian `u64` at `AT`.
    #[inline(always)]
    pub fn u64_be<const AT: usize>(self) -> u64 {
        u64::from_be_bytes(self.array::<AT, 8>())
    }

    /// The little-endian `u16` at `AT`.
    #[inline(always)]
    pub fn u16_le<const AT: usize>(self) -> u16 {
        u16::from_le_bytes(self.array::<AT, 2>())
    }

    /// The little-endian `u32` at `AT`.
    #[inline(always)]
    pub fn u32_le<const AT: usize>(self) -> u32 {
        u32::from_le_bytes(self.array::<AT, 4>())
    }

    /// The little-endian `u64` at `AT`.
    #[inline(always)]
    pub fn u64_le<const AT: usize>(self) -> u64 {
        u64::from_le_bytes(self.array::<AT, 8>())
    }

    /// The `u16` at `AT` in byte order `order`.
    #[inline(always)]
    pub fn u16_in<const AT: usize>(self, order: Endian) -> u16 {
        match order {
            Endian::Little => self.u16_le::<AT>(),
            Endian::Big => self.u16_be::<AT>(),
        }
    }

    /// The `u32` at `AT` in byte order `order`.
    #[inline(always)]
    pub fn u32_in<const AT: usize>(self, order: Endian) -> u32 {
        match order {
            Endian::Little => self.u32_le::<AT>(),
            Endian::Big => self.u32_be::<AT>(),
        }
    }

    /// The `u64` at `AT` in byte order `order`.
    #[inline(always)]
    pub fn u64_in<const AT: usize>(self, order: Endian) -> u64 {
        match order {
            Endian::Little => self.u64_le::<AT>(),
            Endian::Big => self.u64_be::<AT>(),
        }
    }
}

/// A checked cursor over variable-length data. Each read takes bytes from the current
/// position on and moves past them; a read that needs more bytes than are left returns
/// [`Short`] and does not move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    /// Offset of the next read in `bytes`; past the end only after [`Reader::at`].
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    #[inline(always)]
    pub const fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Offset of the next read, from the start of the bytes.
    #[inline(always)]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// How many bytes are left from the position on.
    #[inline(always)]
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// Whether no byte is left.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The bytes left from the position on (none past the end).
    #[inline(always)]
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    /// A reader over the same bytes at absolute `offset`, for a read that does not move this
    /// one. An offset past the end is allowed: every read from it is then [`Short`].
    #[inline(always)]
    pub fn at(&self, offset: usize) -> Reader<'a> {
        Reader {
            bytes: self.bytes,
            pos: offset,
        }
    }

    /// The error of a read of `n` bytes here.
    #[cold]
    fn short(&self, n: usize) -> Short {
        Short::of(self.pos, n, self.bytes.len())
    }

    /// The next `n` bytes.
    #[inline(always)]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        let taken = self
            .pos
            .checked_add(n)
            .and_then(|end| self.bytes.get(self.pos..end));
        match taken {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(self.short(n)),
        }
    }

    /// Moves past the next `n` bytes.
    #[inline(always)]
    pub fn skip(&mut self, n: usize) -> Result<(), Short> {
        self.take(n).map(|_| ())
    }

    /// The next `N` bytes as a [`View`], without moving.
    #[inline(always)]
    pub fn peek<const N: usize>(&self) -> Result<View<'a, N>, Short> {
        View::at(self.bytes, self.pos)
    }

    /// The next `N` bytes as a [`View`].
    #[inline(always)]
    pub fn view<const N: usize>(&mut self) -> Result<View<'a, N>, Short> {
        let v = self.peek::<N>()?;
        self.pos += N;
        Ok(v)
    }

    /// The next `N` bytes.
    #[inline(always)]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        self.view::<N>().map(|v| *v.bytes())
    }

    /// The next byte.
    #[inline(always)]
    pub fn u8(&mut self) -> Result<u8, Short> {
        self.view::<1>().map(View::u8::<0>)
    }

    /// The next two bytes as a little-endian `u16`.
    #[inline(always)]
    pub fn u16_le(&mut self) -> Result<u16, Short> {
        self.view::<2>().map(View::u16_le::<0>)
    }

    /// The next four bytes as a little-endian `u32`.
    #[inline(always)]
    pub fn u32_le(&mut self) -> Result<u32, Short> {
        self.view::<4>().map(View::u32_le::<0>)
    }

    /// The next eight bytes as a little-endian `u64`.
    #[inline(always)]
    pub fn u64_le(&mut self) -> Result<u64, Short> {
        self.view::<8>().map(View::u64_le::<0>)
    }

    /// The next two bytes as a big-endian `u16`.
    #[inline(always)]
    pub fn u16_be(&mut self) -> Result<u16, Short> {
        self.view::<2>().map(View::u16_be::<0>)
    }

    /// The next four bytes as a big-endian `u32`.
    #[inline(always)]
    pub fn u32_be(&mut self) -> Result<u32, Short> {
        self.view::<4>().map(View::u32_be::<0>)
    }

    /// The next eight bytes as a big-endian `u64`.
    #[inline(always)]
    pub fn u64_be(&mut self) -> Result<u64, Short> {
        self.view::<8>().map(View::u64_be::<0>)
    }

    /// The next two bytes as a `u16` in byte order `order`.
    #[inline(always)]
    pub fn u16_in(&mut self, order: Endian) -> Result<u16, Short> {
        self.view::<2>().map(|v| v.u16_in::<0>(order))
    }

    /// The next four bytes as a `u32` in byte order `order`.
    #[inline(always)]
    pub fn u32_in(&mut self, order: Endian) -> Result<u32, Short> {
        self.view::<4>().map(|v| v.u32_in::<0>(order))
    }

    /// The next eight bytes as a `u64` in byte order `order`.
    #[inline(always)]
    pub fn u64_in(&mut self, order: Endian) -> Result<u64, Short> {
        self.view::<8>().map(|v| v.u64_in::<0>(order))
    }

    /// The next unsigned LEB128 varint (7 bits a byte, least significant first, the high bit
    /// set on every byte but the last), as the side index writes them. It takes at most 10
    /// bytes; of the 10th only the lowest bit fits in a `u64`, the others are dropped. On
    /// error the reader does not move.
    #[inline]
    pub fn varint(&mut self) -> Result<u64, VarintError> {
        let mut r = *self;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = r.u8().map_err(|e| Short {
                // The varint, not its last byte, is what is cut.
                offset: self.pos,
                needed: e.end() - self.pos,
                found: e.found + (e.offset - self.pos),
            })?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                *self = r;
                return Ok(v);
            }
        }
        Err(VarintError::TooLong { offset: self.pos })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A 20-byte header with known values at each width and byte order.
    static BYTES: [u8; 20] = [
        0x01, // u8 at 0
        0x02, 0x03, // u16 at 1
        0x04, 0x05, 0x06, 0x07, // u32 at 3
        0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, // u64 at 7
        0x10, 0x11, 0x12, 0x13, 0x14, // 5 more
    ];

    #[test]
    fn view_reads_every_width_in_every_order() {
        let v = View::new(&BYTES);
        assert_eq!(View::<20>::LEN, 20);
        assert_eq!(v.bytes(), &BYTES);
        assert_eq!(v.u8::<0>(), 0x01);
        assert_eq!(v.u8::<19>(), 0x14);
        assert_eq!(v.array::<1, 2>(), [0x02, 0x03]);
        assert_eq!(v.u16_be::<1>(), 0x0203);
        assert_eq!(v.u16_le::<1>(), 0x0302);
        assert_eq!(v.u32_be::<3>(), 0x0405_0607);
        assert_eq!(v.u32_le::<3>(), 0x0706_0504);
        assert_eq!(v.u64_be::<7>(), 0x0809_0a0b_0c0d_0e0f);
        assert_eq!(v.u64_le::<7>(), 0x0f0e_0d0c_0b0a_0908);
        assert_eq!(v.u16_in::<1>(Endian::Big), v.u16_be::<1>());
        assert_eq!(v.u16_in::<1>(Endian::Little), v.u16_le::<1>());
        assert_eq!(v.u32_in::<3>(Endian::Big), v.u32_be::<3>());
        assert_eq!(v.u32_in::<3>(Endian::Little), v.u32_le::<3>());
        assert_eq!(v.u64_in::<7>(Endian::Big), v.u64_be::<7>());
        assert_eq!(v.u64_in::<7>(Endian::Little), v.u64_le::<7>());
        // The last field that fits.
        assert_eq!(v.u32_be::<16>(), 0x1112_1314);
    }

    #[test]
    fn view_split_and_at_check_the_length_once() {
        let (v, rest) = View::<4>::split(&BYTES).unwrap();
        assert_eq!(v.u32_be::<0>(), 0x0102_0304);
        assert_eq!(rest, &BYTES[4..]);
        let (v, rest) = View::<20>::split(&BYTES).unwrap();
        assert_eq!((v.bytes(), rest), (&BYTES, &[][..]));
        assert_eq!(
            View::<21>::split(&BYTES),
            Err(Short {
                offset: 0,
                needed: 21,
                found: 20
            })
        );
        assert_eq!(View::<0>::split(&[]).map(|(_, r)| r), Ok(&[][..]));

        assert_eq!(View::<2>::at(&BYTES, 1).unwrap().u16_be::<0>(), 0x0203);
        assert_eq!(
            View::<4>::at(&BYTES, 16).unwrap().u32_le::<0>(),
            0x1413_1211
        );
        let short = View::<4>::at(&BYTES, 17).unwrap_err();
        assert_eq!(
            short,
            Short {
                offset: 17,
                needed: 4,
                found: 3
            }
        );
        assert_eq!(short.end(), 21);
        assert_eq!(short.to_string(), "need 4 bytes at offset 17, found 3");
        // An offset past the end, even one that overflows with the length, is short, not a panic.
        assert_eq!(
            View::<4>::at(&BYTES, 30),
            Err(Short {
                offset: 30,
                needed: 4,
                found: 0
            })
        );
        assert_eq!(
            View::<4>::at(&BYTES, usize::MAX).unwrap_err().end(),
            usize::MAX
        );
    }

    #[test]
    fn reader_moves_past_what_it_reads() {
        let mut r = Reader::new(&BYTES);
        assert_eq!((r.position(), r.remaining(), r.is_empty()), (0, 20, false));
        assert_eq!(r.u8(), Ok(0x01));
        assert_eq!(r.u16_be(), Ok(0x0203));
        assert_eq!(r.u32_be(), Ok(0x0405_0607));
        assert_eq!(r.u64_be(), Ok(0x0809_0a0b_0c0d_0e0f));
        assert_eq!((r.position(), r.remaining()), (15, 5));
        assert_eq!(r.rest(), &BYTES[15..]);

        let mut r = Reader::new(&BYTES);
        r.skip(1).unwrap();
        assert_eq!(r.u16_le(), Ok(0x0302));
        assert_eq!(r.u32_le(), Ok(0x0706_0504));
        assert_eq!(r.u64_le(), Ok(0x0f0e_0d0c_0b0a_0908));

        for (order, [a, b, c]) in [
            (Endian::Big, [0x0203u64, 0x0405_0607, 0x0809_0a0b_0c0d_0e0f]),
            (Endian::Little, [0x0302, 0x0706_0504, 0x0f0e_0d0c_0b0a_0908]),
        ] {
            let mut r = Reader::new(&BYTES[1..]);
            assert_eq!(r.u16_in(order).map(u64::from), Ok(a));
            assert_eq!(r.u32_in(order).map(u64::from), Ok(b));
            assert_eq!(r.u64_in(order), Ok(c));
        }

        let mut r = Reader::new(&BYTES);
        assert_eq!(r.take(3), Ok(&BYTES[..3]));
        assert_eq!(r.array::<2>(), Ok([0x04, 0x05]));
        assert_eq!(r.peek::<2>().map(View::u16_be::<0>), Ok(0x0607));
        assert_eq!(r.position(), 5, "peek does not move");
        assert_eq!(r.view::<2>().map(View::u16_be::<0>), Ok(0x0607));
        assert_eq!(r.position(), 7);
        assert_eq!(r.take(0), Ok(&[][..]));
        assert_eq!(r.take(13), Ok(&BYTES[7..]));
        assert!(r.is_empty());
        assert_eq!(r.rest(), &[] as &[u8]);
    }

    #[test]
    fn reader_reads_at_an_offset_without_moving() {
        let mut r = Reader::new(&BYTES);
        r.skip(2).unwrap();
        assert_eq!(r.at(16).u32_be(), Ok(0x1112_1314));
        assert_eq!(r.position(), 2);
        let mut far = r.at(25);
        assert_eq!(
            (far.position(), far.remaining(), far.rest()),
            (25, 0, &[][..])
        );
        assert_eq!(
            far.u8(),
            Err(Short {
                offset: 25,
                needed: 1,
                found: 0
            })
        );
        assert_eq!(far.take(0).unwrap_err().offset, 25);
    }

    #[test]
    fn short_reads_name_the_offset_and_do_not_move() {
        let mut r = Reader::new(&BYTES);
        r.skip(17).unwrap();
        let short = |needed| Short {
            offset: 17,
            needed,
            found: 3,
        };
        assert_eq!(r.take(4), Err(short(4)));
        assert_eq!(r.skip(4), Err(short(4)));
        assert_eq!(r.array::<4>(), Err(short(4)));
        assert_eq!(r.peek::<4>(), Err(short(4)));
        assert_eq!(r.view::<4>(), Err(short(4)));
        assert_eq!(r.u32_le(), Err(short(4)));
        assert_eq!(r.u32_be(), Err(short(4)));
        assert_eq!(r.u32_in(Endian::Big), Err(short(4)));
        assert_eq!(r.u64_le(), Err(short(8)));
        assert_eq!(r.u64_be(), Err(short(8)));
        assert_eq!(r.u64_in(Endian::Little), Err(short(8)));
        assert_eq!(r.take(usize::MAX), Err(short(usize::MAX)));
        assert_eq!(r.position(), 17);
        r.skip(1).unwrap();
        assert_eq!(r.u16_le(), Ok(0x1413));
        let end = Short {
            offset: 20,
            needed: 2,
            found: 0,
        };
        assert_eq!(r.u16_be(), Err(end));
        assert_eq!(r.u16_in(Endian::Little), Err(end));
        assert_eq!(r.u8(), Err(Short { needed: 1, ..end }));
        assert_eq!(r.position(), 20);
    }

    #[test]
    fn varints() {
        for (bytes, value) in [
            (&[0x00][..], 0u64),
            (&[0x7f], 127),
            (&[0x80, 0x01], 128),
            (&[0xe5, 0x8e, 0x26], 624_485),
            (
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                u64::MAX,
            ),
            // Of the 10th byte only its lowest bit fits.
            (
                &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f],
                1 << 63,
            ),
        ] {
            let mut r = Reader::new(bytes);
            assert_eq!(r.varint(), Ok(value), "{bytes:02x?}");
            assert!(r.is_empty());
        }
        let mut r = Reader::new(&[0x05, 0xff, 0xff]);
        assert_eq!(r.varint(), Ok(5));
        // Cut after two bytes of a varint that starts at 1: it needed at least 3.
        assert_eq!(
            r.varint(),
            Err(VarintError::Short(Short {
                offset: 1,
                needed: 3,
                found: 2
            }))
        );
        assert_eq!(r.position(), 1, "a failed varint does not move");
        let mut r = Reader::new(&[0x80; 11]);
        assert_eq!(r.varint(), Err(VarintError::TooLong { offset: 0 }));
        assert_eq!(r.position(), 0);
        assert_eq!(
            VarintError::TooLong { offset: 3 }.to_string(),
            "varint at offset 3 is longer than 10 bytes"
        );
        assert_eq!(
            Reader::new(&[]).varint().unwrap_err().to_string(),
            "need 1 bytes at offset 0, found 0"
        );
    }

    /// One read of each kind, chosen by `op`.
    fn read_one(r: &mut Reader<'_>, op: u8, n: usize) -> Result<(), VarintError> {
        let order = if n.is_multiple_of(2) {
            Endian::Big
        } else {
            Endian::Little
        };
        match op % 18 {
            0 => r.take(n).map(|_| ())?,
            1 => r.skip(n)?,
            2 => r.u8().map(|_| ())?,
            3 => r.u16_le().map(|_| ())?,
            4 => r.u32_le().map(|_| ())?,
            5 => r.u64_le().map(|_| ())?,
            6 => r.u16_be().map(|_| ())?,
            7 => r.u32_be().map(|_| ())?,
            8 => r.u64_be().map(|_| ())?,
            9 => r.u16_in(order).map(|_| ())?,
            10 => r.u32_in(order).map(|_| ())?,
            11 => r.u64_in(order).map(|_| ())?,
            12 => r.array::<3>().map(|_| ())?,
            13 => r.view::<5>().map(|_| ())?,
            14 => r.peek::<6>().map(|_| ())?,
            15 => r.varint().map(|_| ())?,
            16 => *r = r.at(n),
            _ => {
                let rest = r.rest();
                assert_eq!(View::<4>::at(rest, n).is_ok(), n + 4 <= rest.len());
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn no_input_panics_and_short_reads_do_not_move(
            data in proptest::collection::vec(any::<u8>(), 0..64),
            ops in proptest::collection::vec((any::<u8>(), 0usize..80), 0..40),
        ) {
            let mut r = Reader::new(&data);
            for (op, n) in ops {
                let before = r;
                match read_one(&mut r, op, n) {
                    // Only `at` moves past the end; a read that succeeds ends inside the bytes.
                    Ok(()) => prop_assert!(
                        op % 18 == 16 || r == before || r.position() <= data.len()
                    ),
                    Err(VarintError::Short(s)) => {
                        prop_assert_eq!(r, before);
                        prop_assert_eq!(s.offset, r.position());
                        prop_assert!(s.found < s.needed || s.offset > data.len());
                        prop_assert_eq!(s.found, data.len().saturating_sub(s.offset));
                    }
                    Err(VarintError::TooLong { offset }) => {
                        prop_assert_eq!(r, before);
                        prop_assert_eq!(offset, r.position());
                    }
                }
                prop_assert_eq!(r.remaining(), data.len().saturating_sub(r.position()));
                prop_assert_eq!(r.rest().len(), r.remaining());
            }
        }

        #[test]
        fn reads_agree_with_the_std_conversions(
            data in proptest::collection::vec(any::<u8>(), 0..24),
            at in 0usize..24,
        ) {
            let r = Reader::new(&data);
            let got = data.get(at..).and_then(|b| b.first_chunk::<8>());
            prop_assert_eq!(r.at(at).u64_le().ok(), got.map(|b| u64::from_le_bytes(*b)));
            prop_assert_eq!(r.at(at).u64_be().ok(), got.map(|b| u64::from_be_bytes(*b)));
            prop_assert_eq!(
                View::<8>::at(&data, at).ok().map(|v| v.u64_in::<0>(Endian::Little)),
                got.map(|b| u64::from_le_bytes(*b))
            );
            let got = data.get(at..).and_then(|b| b.first_chunk::<4>());
            prop_assert_eq!(r.at(at).u32_le().ok(), got.map(|b| u32::from_le_bytes(*b)));
            prop_assert_eq!(r.at(at).u32_be().ok(), got.map(|b| u32::from_be_bytes(*b)));
            let got = data.get(at..).and_then(|b| b.first_chunk::<2>());
            prop_assert_eq!(r.at(at).u16_le().ok(), got.map(|b| u16::from_le_bytes(*b)));
            prop_assert_eq!(r.at(at).u16_be().ok(), got.map(|b| u16::from_be_bytes(*b)));
        }

        #[test]
        fn varints_round_trip(v in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            // The encoder of the side index.
            let mut bytes = Vec::new();
            let mut x = v;
            while x >= 0x80 {
                bytes.push((x as u8) | 0x80);
                x >>= 7;
            }
            bytes.push(x as u8);
            let len = bytes.len();
            bytes.extend_from_slice(&tail);
            let mut r = Reader::new(&bytes);
            prop_assert_eq!(r.varint(), Ok(v));
            prop_assert_eq!(r.position(), len);
            for cut in 0..len {
                let mut r = Reader::new(&bytes[..cut]);
                prop_assert_eq!(
                    r.varint(),
                    Err(VarintError::Short(Short { offset: 0, needed: cut + 1, found: cut }))
                );
            }
        }
    }
}
