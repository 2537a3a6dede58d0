//! ClickHouse's RowBinary format, the subset the fleet tables use: little-endian integers,
//! `FixedString(16)` (and `IPv6`, the same 16 bytes), `String` (LEB128 length, bytes),
//! `Nullable(T)` (a null byte, then T when 0) and `Array(T)` (LEB128 count, elements).
//! Both ways: nodes insert rows in it, fleet questions read rows back in it (no text
//! parsing, no float or escaping questions). It is in every ClickHouse release since 1.1.

use crate::FleetError;

/// Rows being encoded.
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.buf.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.buf.push(n as u8);
    }
    pub fn string(&mut self, s: &str) {
        self.len(s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }
    /// A String column holding bytes that need not be UTF-8.
    pub fn blob(&mut self, b: &[u8]) {
        self.len(b.len() as u64);
        self.buf.extend_from_slice(b);
    }
    pub fn fixed16(&mut self, b: &[u8; 16]) {
        self.buf.extend_from_slice(b);
    }
    pub fn nullable_u64(&mut self, v: Option<u64>) {
        match v {
            None => self.u8(1),
            Some(v) => {
                self.u8(0);
                self.u64(v);
            }
        }
    }
    /// An array of `items`, each written by `put`.
    pub fn array<T>(&mut self, items: &[T], mut put: impl FnMut(&mut Self, &T)) {
        self.len(items.len() as u64);
        for i in items {
            put(self, i);
        }
    }
}

/// Rows being decoded; every read names what it expected when the bytes end early.
#[derive(Debug)]
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    what: &'a str,
    /// A read failed because the bytes ended (not because they were wrong).
    short: bool,
}

impl<'a> Reader<'a> {
    /// `what` names the bytes in errors (`flows of ClickHouse`, an outbox file).
    pub fn new(b: &'a [u8], what: &'a str) -> Reader<'a> {
        Reader {
            b,
            at: 0,
            what,
            short: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.at >= self.b.len()
    }

    /// How many bytes were read.
    pub fn consumed(&self) -> usize {
        self.at
    }

    /// Whether a read failed because the bytes ended before what it expected (more bytes
    /// may complete it), rather than because they were wrong.
    pub fn short(&self) -> bool {
        self.short
    }

    /// What the bytes are named in errors (for a reader of a part of them).
    pub fn what(&self) -> &'a str {
        self.what
    }

    /// The element count before an array of a packed record (rows.rs, the packed flow
    /// table): a little-endian `UInt32`, its elements `width` bytes each; a count whose
    /// elements would run past the end fails here, not in an allocation.
    #[inline]
    pub fn count(&mut self, width: usize) -> Result<usize, FleetError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(width) > self.remaining() {
            return Err(self.overlong(n, width));
        }
        Ok(n)
    }

    /// The error of a count of `n` elements of `width` bytes, just read, past the end.
    #[cold]
    #[inline(never)]
    fn overlong(&self, n: usize, width: usize) -> FleetError {
        FleetError::Decode {
            what: self.what.to_string(),
            problem: format!(
                "at byte {}: a count of {n} element(s) of {width} byte(s), {} byte(s) left",
                self.at - 4,
                self.remaining()
            ),
        }
    }

    /// How many bytes are left to read.
    pub fn remaining(&self) -> usize {
        self.b.len().saturating_sub(self.at)
    }

    // The reads are inlined into the row decoders, their errors made out of line: a row of
    // the packed flow table is some forty reads, and as calls that each carried their
    // error's formatting they were a sixth of its decode (perf, fleet `top`).
    #[inline]
    fn take(&mut self, n: usize, of: &str) -> Result<&'a [u8], FleetError> {
        match self.b.get(self.at..self.at.saturating_add(n)) {
            Some(s) => {
                self.at += n;
                Ok(s)
            }
            None => Err(self.ended(n, of)),
        }
    }

    /// The error of a read of `n` bytes of `of` past the end.
    #[cold]
    #[inline(never)]
    fn ended(&mut self, n: usize, of: &str) -> FleetError {
        self.short = true;
        FleetError::Decode {
            what: self.what.to_string(),
            problem: format!(
                "at byte {}: expected {n} byte(s) of {of}, found {}",
                self.at,
                self.b.len().saturating_sub(self.at)
            ),
        }
    }

    /// The next `n` bytes as they are.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], FleetError> {
        self.take(n, "bytes")
    }
    #[inline]
    pub fn u8(&mut self) -> Result<u8, FleetError> {
        Ok(self.take(1, "UInt8")?[0])
    }
    #[inline]
    pub fn u16(&mut self) -> Result<u16, FleetError> {
        let s = self.take(2, "UInt16")?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    #[inline]
    pub fn u32(&mut self) -> Result<u32, FleetError> {
        let s = self.take(4, "UInt32")?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    #[inline]
    pub fn u64(&mut self) -> Result<u64, FleetError> {
        let s = self.take(8, "UInt64")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    #[inline]
    fn len(&mut self) -> Result<usize, FleetError> {
        // One byte: a length under 128 (most of them).
        if let Some(&b) = self.b.get(self.at) {
            if b & 0x80 == 0 && usize::from(b) < self.b.len() - self.at {
                self.at += 1;
                return Ok(usize::from(b));
            }
        }
        self.long_len()
    }

    /// [`Reader::len`] of a length of more than one byte, or one past the end.
    #[inline(never)]
    fn long_len(&mut self) -> Result<usize, FleetError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                // No count can exceed the bytes left: a damaged one fails here, not in an
                // allocation.
                let n = usize::try_from(v)
                    .ok()
                    .filter(|&n| n <= self.b.len() - self.at);
                self.short |= n.is_none();
                return n.ok_or_else(|| FleetError::Decode {
                    what: self.what.to_string(),
                    problem: format!("at byte {}: a length of {v} past the end", self.at),
                });
            }
        }
        Err(FleetError::Decode {
            what: self.what.to_string(),
            problem: format!("at byte {}: a length longer than 64 bits", self.at),
        })
    }
    pub fn string(&mut self) -> Result<String, FleetError> {
        let n = self.len()?;
        let s = self.take(n, "String")?;
        String::from_utf8(s.to_vec()).map_err(|_| FleetError::Decode {
            what: self.what.to_string(),
            problem: format!("at byte {}: a String that is not UTF-8", self.at - n),
        })
    }
    /// A String column's bytes, whatever they are.
    #[inline]
    pub fn blob(&mut self) -> Result<&'a [u8], FleetError> {
        let n = self.len()?;
        self.take(n, "String")
    }
    #[inline]
    pub fn fixed16(&mut self) -> Result<[u8; 16], FleetError> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16, "FixedString(16)")?);
        Ok(a)
    }
    pub fn nullable_u64(&mut self) -> Result<Option<u64>, FleetError> {
        Ok(match self.u8()? {
            0 => Some(self.u64()?),
            _ => None,
        })
    }
    pub fn array<T>(
        &mut self,
        mut get: impl FnMut(&mut Self) -> Result<T, FleetError>,
    ) -> Result<Vec<T>, FleetError> {
        let n = self.len()?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(get(self)?);
        }
        Ok(v)
    }
}

/// Decodes rows with `row` from `body` as its bytes arrive (rows of ClickHouse's answer
/// while it still sends them), each row once it is whole: a row cut by the end of what came
/// so far is decoded again when more came. `io` makes a read error of `body` an error;
/// `what` names the bytes in errors. Rows that end early at the end of `body` are an error.
pub fn rows_from<T>(
    body: &mut dyn std::io::Read,
    what: &str,
    mut row: impl FnMut(&mut Reader<'_>) -> Result<T, FleetError>,
    io: impl Fn(std::io::Error) -> FleetError,
) -> Result<Vec<T>, FleetError> {
    const CHUNK: usize = 1 << 16;
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(4 * CHUNK);
    let mut eof = false;
    loop {
        let mut pos = 0;
        while pos < buf.len() {
            let mut r = Reader::new(&buf[pos..], what);
            match row(&mut r) {
                Ok(v) => {
                    pos += r.consumed();
                    out.push(v);
                }
                Err(_) if r.short() && !eof => break,
                Err(e) => return Err(e),
            }
        }
        if eof {
            return Ok(out);
        }
        // Keep only the row not whole yet, then read on after it.
        buf.drain(..pos);
        let old = buf.len();
        buf.resize(old + CHUNK, 0);
        let n = loop {
            match body.read(&mut buf[old..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(e)),
            }
        };
        buf.truncate(old + n);
        eof = n == 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes in pieces of `n`, as a network gives them.
    struct Pieces<'a>(&'a [u8], usize);

    impl std::io::Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// Rows cut anywhere by the pieces they arrive in decode as from the whole; a body that
    /// ends inside a row, or with wrong bytes, is an error.
    #[test]
    fn rows_decode_as_they_arrive_in_any_pieces() {
        let mut w = Writer::default();
        for i in 0..500u64 {
            w.string(&"n".repeat(i as usize % 7));
            w.u64(i);
            w.array(&vec![i; i as usize % 300], |w, x| w.u64(*x));
        }
        let row = |r: &mut Reader<'_>| -> Result<(String, u64, usize), FleetError> {
            Ok((r.string()?, r.u64()?, r.array(|r| r.u64())?.len()))
        };
        let io = |e: std::io::Error| FleetError::Decode {
            what: "test".into(),
            problem: e.to_string(),
        };
        let mut whole = Reader::new(&w.buf, "test");
        let mut want = Vec::new();
        while !whole.is_empty() {
            want.push(row(&mut whole).unwrap());
        }
        for piece in [1, 3, 8, 100, 4096, 1 << 20] {
            let got = rows_from(&mut Pieces(&w.buf, piece), "test", row, io).unwrap();
            assert_eq!(got, want, "pieces of {piece}");
        }
        let cut = &w.buf[..w.buf.len() - 3];
        assert!(rows_from(&mut Pieces(cut, 100), "test", row, io).is_err());
        let mut bad = w.buf.clone();
        bad[0] = 0xff; // a length of more than the bytes: wrong, at the end too.
        bad.truncate(40);
        assert!(rows_from(&mut Pieces(&bad, 7), "test", row, io).is_err());
    }

    #[test]
    fn values_round_trip_and_a_short_input_names_what_it_expected() {
        let mut w = Writer::default();
        w.u8(7);
        w.u16(300);
        w.u32(70_000);
        w.u64(u64::MAX - 1);
        w.string(&"é".repeat(100));
        w.fixed16(&[9; 16]);
        w.nullable_u64(None);
        w.nullable_u64(Some(5));
        w.array(&[1u64, 2, 3], |w, v| w.u64(*v));
        let mut r = Reader::new(&w.buf, "test rows");
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u16().unwrap(), 300);
        assert_eq!(r.u32().unwrap(), 70_000);
        assert_eq!(r.u64().unwrap(), u64::MAX - 1);
        assert_eq!(r.string().unwrap(), "é".repeat(100));
        assert_eq!(r.fixed16().unwrap(), [9; 16]);
        assert_eq!(r.nullable_u64().unwrap(), None);
        assert_eq!(r.nullable_u64().unwrap(), Some(5));
        assert_eq!(r.array(|r| r.u64()).unwrap(), vec![1, 2, 3]);
        assert!(r.is_empty());
        let e = Reader::new(&w.buf[..3], "test rows").u32().unwrap_err();
        assert_eq!(
            e.to_string(),
            "test rows: at byte 0: expected 4 byte(s) of UInt32, found 3"
        );
        // A count past the end fails before allocating.
        let e = Reader::new(&[0xff, 0xff, 0xff, 0x7f], "x")
            .array(|r| r.u8())
            .unwrap_err();
        assert!(e.to_string().contains("past the end"), "{e}");
    }
}
