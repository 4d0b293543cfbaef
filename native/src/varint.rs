//! Kafka's zigzag varints (`ByteUtils.readVarint` / `readVarlong`), and the bytes their writers take.

/// A field that cannot be read: what it was, for the error message.
#[derive(Debug)]
pub struct Malformed(pub String);

/// A cursor over the bytes of one record (`pos` .. `end` of `buf`).
pub struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
    pub end: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8], pos: usize, end: usize) -> Self {
        Cursor { buf, pos, end }
    }

    fn raw(&mut self, max_bytes: u32, what: &str) -> Result<u64, Malformed> {
        let mut value: u64 = 0;
        let mut shift = 0u32;
        for _ in 0..max_bytes {
            if self.pos >= self.end {
                return Err(Malformed(format!("{what} runs past the end of its record")));
            }
            let b = self.buf[self.pos];
            self.pos += 1;
            value |= u64::from(b & 0x7F) << shift;
            if b < 0x80 {
                return Ok(value);
            }
            shift += 7;
        }
        Err(Malformed(format!(
            "{what} is a varint longer than {max_bytes} bytes"
        )))
    }

    /// A zigzag varint of at most 5 bytes (Kafka's `readVarint`: lengths, counts, offset deltas).
    pub fn varint(&mut self, what: &str) -> Result<i32, Malformed> {
        let v = self.raw(5, what)? as u32;
        Ok(((v >> 1) as i32) ^ -((v & 1) as i32))
    }

    /// A zigzag varlong of at most 10 bytes (Kafka's `readVarlong`: timestamp deltas).
    pub fn varlong(&mut self, what: &str) -> Result<i64, Malformed> {
        let v = self.raw(10, what)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    pub fn byte(&mut self, what: &str) -> Result<u8, Malformed> {
        if self.pos >= self.end {
            return Err(Malformed(format!("{what} runs past the end of its record")));
        }
        self.pos += 1;
        Ok(self.buf[self.pos - 1])
    }

    /// `len` bytes (`len` ≥ 0, checked by the caller).
    pub fn bytes(&mut self, len: usize, what: &str) -> Result<&'a [u8], Malformed> {
        if len > self.end - self.pos {
            return Err(Malformed(format!(
                "{what} of {len} bytes runs past the end of its record"
            )));
        }
        self.pos += len;
        Ok(&self.buf[self.pos - len..self.pos])
    }
}

/// Bytes `v` takes as a zigzag varint.
#[inline]
pub fn varint_size(v: i32) -> usize {
    unsigned_size(u64::from(((v << 1) ^ (v >> 31)) as u32))
}

/// Bytes `v` takes as a zigzag varlong.
#[inline]
pub fn varlong_size(v: i64) -> usize {
    unsigned_size(((v << 1) ^ (v >> 63)) as u64)
}

#[inline]
fn unsigned_size(z: u64) -> usize {
    let bits = 64 - (z | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}
