//! The records of Kafka's record batch v2 to and from Arrow's buffers, on plain byte slices (no Python here).
//!
//! A record, as Kafka's `DefaultRecord` writes it:
//!
//! ```text
//! length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
//! keyLength varint (-1: null), key, valueLength varint (-1: null), value,
//! headerCount varint, then per header: keyLength varint, key (UTF-8), valueLength varint (-1: null), value
//! ```
//!
//! Decoding reads every field of every record in one pass, with each record's fields held to its declared
//! length as Kafka's `DefaultRecord.readFrom` does; encoding sizes each batch in a first pass and then writes it,
//! header and CRC-32C included, into bytes allocated once.

use crate::crc32c;
use crate::varint::{varint_size, varlong_size, Cursor, Malformed};

/// Bytes of a v2 batch before its records.
pub const BATCH_HEADER_SIZE: usize = 61;
/// The CRC covers the batch from its attributes (byte 21) to its end.
const CRC_FROM: usize = 21;

/// Why records could not be decoded.
pub enum DecodeError {
    /// Malformed bytes: Kafka's `CORRUPT_MESSAGE`.
    Corrupt(String),
    /// More than Arrow's 32-bit offsets can address (2 GiB of keys, values or headers in one batch).
    TooLarge(String),
}

impl From<Malformed> for DecodeError {
    fn from(m: Malformed) -> Self {
        DecodeError::Corrupt(m.0)
    }
}

/// An Arrow binary (or UTF-8) column being built: validity bitmap, 32-bit offsets, bytes.
pub struct Column {
    pub validity: Vec<u8>,
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    pub nulls: usize,
}

impl Column {
    fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Column {
            validity: Vec::with_capacity(rows.div_ceil(8)),
            offsets,
            data: Vec::with_capacity(bytes),
            nulls: 0,
        }
    }

    fn push(&mut self, value: Option<&[u8]>) -> Result<(), DecodeError> {
        let i = self.offsets.len() - 1;
        if i.is_multiple_of(8) {
            self.validity.push(0);
        }
        match value {
            Some(v) => {
                self.validity[i / 8] |= 1 << (i % 8);
                self.data.extend_from_slice(v);
            }
            None => self.nulls += 1,
        }
        let end = i32::try_from(self.data.len()).map_err(|_| {
            DecodeError::TooLarge("more than 2 GiB of keys, values or headers in one batch".into())
        })?;
        self.offsets.push(end);
        Ok(())
    }
}

/// The records of one batch as Arrow buffers.
pub struct Decoded {
    /// Bytes of each record as encoded (its length prefix excluded).
    pub sizes: Vec<i64>,
    /// Each record's timestamp in microseconds since the epoch: the batch's base timestamp plus its delta.
    pub timestamps_us: Vec<i64>,
    pub keys: Column,
    pub values: Column,
    /// None when no record has headers; else the list offsets (one per record, and the end), and the
    /// headers' keys (UTF-8, never null) and values.
    pub headers: Option<(Vec<i32>, Column, Column)>,
}

/// Decode `count` records filling `body` exactly (a batch's records, decompressed), whose base timestamp
/// is `base_timestamp_ms`.
pub fn decode(body: &[u8], count: usize, base_timestamp_ms: i64) -> Result<Decoded, DecodeError> {
    let rows = count.min(body.len());
    let mut out = Decoded {
        sizes: Vec::with_capacity(rows),
        timestamps_us: Vec::with_capacity(rows),
        keys: Column::with_capacity(rows, 0),
        values: Column::with_capacity(rows, body.len()),
        headers: None,
    };
    let mut header_offsets: Vec<i32> = Vec::new();
    let mut header_keys = Column::with_capacity(0, 0);
    let mut header_values = Column::with_capacity(0, 0);
    let mut headers_seen: usize = 0;
    let mut pos = 0usize;
    for i in 0..count {
        if pos >= body.len() {
            return Err(DecodeError::Corrupt(format!(
                "a record batch declares {count} records and holds {i}"
            )));
        }
        let mut head = Cursor::new(body, pos, body.len());
        let length = head.varint("a record's length")?;
        if length < 0 || length as usize > body.len() - head.pos {
            return Err(DecodeError::Corrupt(format!(
                "a record declares {length} bytes past the batch's end"
            )));
        }
        let end = head.pos + length as usize;
        let mut r = Cursor::new(body, head.pos, end);
        r.byte("a record's attributes")?;
        let ts_delta = r.varlong("a record's timestamp delta")?;
        r.varint("a record's offset delta")?; // records are kept in batch order
        let key_len = r.varint("a record's key length")?;
        let key = match key_len {
            -1 => None,
            n if n < -1 => {
                return Err(DecodeError::Corrupt(format!(
                    "a record's key length is {n}"
                )))
            }
            n => Some(r.bytes(n as usize, "a record's key")?),
        };
        let value_len = r.varint("a record's value length")?;
        let value = match value_len {
            -1 => None,
            n if n < -1 => {
                return Err(DecodeError::Corrupt(format!(
                    "a record's value length is {n}"
                )))
            }
            n => Some(r.bytes(n as usize, "a record's value")?),
        };
        let header_count = r.varint("a record's header count")?;
        if header_count < 0 {
            return Err(DecodeError::Corrupt(format!(
                "a record declares {header_count} headers"
            )));
        }
        if header_count > 0 && headers_seen == 0 {
            // The first record with headers: every record before it had none.
            header_offsets = vec![0; i + 1];
            header_keys = Column::with_capacity(header_count as usize, 0);
            header_values = Column::with_capacity(header_count as usize, 0);
        }
        for _ in 0..header_count {
            let klen = r.varint("a record header's key length")?;
            if klen < 0 {
                return Err(DecodeError::Corrupt(
                    "a record header has a null key".into(),
                ));
            }
            let k = r.bytes(klen as usize, "a record header's key")?;
            if std::str::from_utf8(k).is_err() {
                return Err(DecodeError::Corrupt(
                    "a record header's key is not UTF-8".into(),
                ));
            }
            let vlen = r.varint("a record header's value length")?;
            let v = match vlen {
                -1 => None,
                n if n < -1 => {
                    return Err(DecodeError::Corrupt(format!(
                        "a record header's value length is {n}"
                    )))
                }
                n => Some(r.bytes(n as usize, "a record header's value")?),
            };
            header_keys.push(Some(k))?;
            header_values.push(v)?;
        }
        headers_seen += header_count as usize;
        if headers_seen > 0 {
            let n = i32::try_from(headers_seen)
                .map_err(|_| DecodeError::TooLarge("more than 2^31 headers in one batch".into()))?;
            header_offsets.push(n);
        }
        if r.pos != end {
            return Err(DecodeError::Corrupt(format!(
                "a record's fields take {} of its declared {length} bytes",
                r.pos - head.pos
            )));
        }
        let ts_us = base_timestamp_ms
            .checked_add(ts_delta)
            .and_then(|ms| ms.checked_mul(1000))
            .ok_or_else(|| DecodeError::Corrupt("a record's timestamp is out of range".into()))?;
        out.sizes.push(i64::from(length));
        out.timestamps_us.push(ts_us);
        out.keys.push(key)?;
        out.values.push(value)?;
        pos = end;
    }
    if pos != body.len() {
        return Err(DecodeError::Corrupt(format!(
            "a record batch holds {} bytes after its {count} records",
            body.len() - pos
        )));
    }
    if headers_seen > 0 {
        out.headers = Some((header_offsets, header_keys, header_values));
    }
    Ok(out)
}

/// An Arrow binary or UTF-8 array's buffers, as Python hands them over: validity bitmap (None: no nulls),
/// 32-bit offsets, bytes, and the array's own offset into them (a slice).
pub struct BinaryIn<'a> {
    pub validity: Option<&'a [u8]>,
    pub offsets: &'a [u8],
    pub data: &'a [u8],
    pub offset: usize,
}

fn bit(bitmap: Option<&[u8]>, i: usize) -> Result<bool, Malformed> {
    match bitmap {
        None => Ok(true),
        Some(b) => b
            .get(i / 8)
            .map(|byte| byte & (1 << (i % 8)) != 0)
            .ok_or_else(|| Malformed("a validity bitmap is shorter than its array".into())),
    }
}

fn i32_at(buf: &[u8], i: usize) -> Result<i32, Malformed> {
    buf.get(4 * i..4 * i + 4)
        .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| Malformed("an offsets buffer is shorter than its array".into()))
}

fn i64_at(buf: &[u8], i: usize) -> Result<i64, Malformed> {
    buf.get(8 * i..8 * i + 8)
        .map(|b| i64::from_ne_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| Malformed("a 64-bit column is shorter than its row count".into()))
}

impl<'a> BinaryIn<'a> {
    /// Element `i` (null → None).
    fn get(&self, i: usize) -> Result<Option<&'a [u8]>, Malformed> {
        let j = self.offset + i;
        if !bit(self.validity, j)? {
            return Ok(None);
        }
        let (a, b) = (i32_at(self.offsets, j)?, i32_at(self.offsets, j + 1)?);
        if a < 0 || b < a {
            return Err(Malformed("offsets of a binary array go backwards".into()));
        }
        self.data
            .get(a as usize..b as usize)
            .map(Some)
            .ok_or_else(|| Malformed("a binary array's offsets run past its bytes".into()))
    }
}

/// The `headers` column (list of struct<key: string, value: binary>) as buffers: the list's validity and
/// offsets and its own offset, and the struct's two fields (already sliced to the struct's entries).
pub struct HeadersIn<'a> {
    pub validity: Option<&'a [u8]>,
    pub offsets: &'a [u8],
    pub offset: usize,
    pub keys: BinaryIn<'a>,
    pub values: BinaryIn<'a>,
}

impl<'a> HeadersIn<'a> {
    /// The range of entries of record `i` (a null list has none).
    fn range(&self, i: usize) -> Result<std::ops::Range<usize>, Malformed> {
        let j = self.offset + i;
        if !bit(self.validity, j)? {
            return Ok(0..0);
        }
        let (a, b) = (i32_at(self.offsets, j)?, i32_at(self.offsets, j + 1)?);
        if a < 0 || b < a {
            return Err(Malformed("offsets of the headers go backwards".into()));
        }
        Ok(a as usize..b as usize)
    }
}

/// The columns of the records of one batch to encode.
pub struct RecordsIn<'a> {
    pub rows: usize,
    /// int64 offsets, ascending (gaps allowed: a compacted slice).
    pub offsets: &'a [u8],
    /// int64 timestamps in microseconds (Kafka's milliseconds are these divided by 1000, toward zero).
    pub timestamps_us: &'a [u8],
    pub keys: BinaryIn<'a>,
    pub values: BinaryIn<'a>,
    pub headers: Option<HeadersIn<'a>>,
}

/// What :func:`write` needs of one batch, found by a first pass over its records: its bytes and each record's.
pub struct Plan {
    /// Bytes of each record after its length prefix.
    sizes: Vec<i32>,
    /// Bytes of the whole batch, header included.
    pub total: usize,
    base_offset: i64,
    last_delta: i32,
    base_ts: i64,
    max_ts: i64,
}

/// Plan one uncompressed v2 batch of `records` (at least one): check every record and size it.
pub fn plan(records: &RecordsIn) -> Result<Plan, Malformed> {
    let n = records.rows;
    if n == 0 {
        return Err(Malformed("a record batch of no records".into()));
    }
    i32::try_from(n).map_err(|_| Malformed("more than 2^31 records in a batch".into()))?;
    let base_offset = i64_at(records.offsets, 0)?;
    let last_offset = i64_at(records.offsets, n - 1)?;
    let mut base_ts = i64::MAX;
    let mut max_ts = i64::MIN;
    for i in 0..n {
        let t = i64_at(records.timestamps_us, i)? / 1000;
        base_ts = base_ts.min(t);
        max_ts = max_ts.max(t);
    }
    let last_delta = i32::try_from(last_offset - base_offset)
        .map_err(|_| Malformed("a batch's offsets span more than 2^31".into()))?;
    let mut sizes = Vec::with_capacity(n);
    let mut total = BATCH_HEADER_SIZE;
    for i in 0..n {
        let offset_delta = i32::try_from(i64_at(records.offsets, i)? - base_offset)
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| Malformed("offsets of a batch must ascend from its first".into()))?;
        let ts_delta = i64_at(records.timestamps_us, i)? / 1000 - base_ts;
        let mut size = 1 + varlong_size(ts_delta) + varint_size(offset_delta);
        size += field_size(records.keys.get(i)?)? + field_size(records.values.get(i)?)?;
        match &records.headers {
            None => size += varint_size(0),
            Some(h) => {
                let entries = h.range(i)?;
                size += varint_size(entries.len() as i32);
                for e in entries {
                    size += field_size(Some(h.keys.get(e)?.unwrap_or(b"")))?
                        + field_size(h.values.get(e)?)?;
                }
            }
        }
        let size =
            i32::try_from(size).map_err(|_| Malformed("a record of more than 2 GiB".into()))?;
        sizes.push(size);
        total += varint_size(size) + size as usize;
    }
    if total - 12 > i32::MAX as usize {
        return Err(Malformed("a record batch of more than 2 GiB".into()));
    }
    Ok(Plan {
        sizes,
        total,
        base_offset,
        last_delta,
        base_ts,
        max_ts,
    })
}

/// Write the batch `plan` sized into `out` (exactly `plan.total` bytes): records, then the header and its CRC.
/// `attributes` are the batch's (its timestamp type bit), `leader_epoch` its partition leader epoch; producer id,
/// epoch and base sequence are -1.
pub fn write(records: &RecordsIn, plan: &Plan, attributes: i16, leader_epoch: i32, out: &mut [u8]) {
    debug_assert_eq!(out.len(), plan.total);
    let mut w = Writer {
        buf: out,
        pos: BATCH_HEADER_SIZE,
    };
    for (i, &size) in plan.sizes.iter().enumerate() {
        // every field was read once by `plan`, which checked it: reading it again cannot fail
        let offset = i64_at(records.offsets, i).expect("planned");
        let ts = i64_at(records.timestamps_us, i).expect("planned") / 1000;
        w.varint(size);
        w.bytes(&[0]); // record attributes: none are defined
        w.varlong(ts - plan.base_ts);
        w.varint((offset - plan.base_offset) as i32);
        w.field(records.keys.get(i).expect("planned"));
        w.field(records.values.get(i).expect("planned"));
        match &records.headers {
            None => w.varint(0),
            Some(h) => {
                let entries = h.range(i).expect("planned");
                w.varint(entries.len() as i32);
                for e in entries {
                    w.field(Some(h.keys.get(e).expect("planned").unwrap_or(b"")));
                    w.field(h.values.get(e).expect("planned"));
                }
            }
        }
    }
    debug_assert_eq!(w.pos, plan.total);
    let mut h = Writer { buf: w.buf, pos: 0 };
    h.bytes(&plan.base_offset.to_be_bytes());
    h.bytes(&((plan.total - 12) as i32).to_be_bytes());
    h.bytes(&leader_epoch.to_be_bytes());
    h.bytes(&[2]); // magic
    h.bytes(&[0; 4]); // the CRC, below
    h.bytes(&attributes.to_be_bytes());
    h.bytes(&plan.last_delta.to_be_bytes());
    h.bytes(&plan.base_ts.to_be_bytes());
    h.bytes(&plan.max_ts.to_be_bytes());
    h.bytes(&(-1i64).to_be_bytes()); // producer id
    h.bytes(&(-1i16).to_be_bytes()); // producer epoch
    h.bytes(&(-1i32).to_be_bytes()); // base sequence
    h.bytes(&(plan.sizes.len() as i32).to_be_bytes());
    let crc = crc32c::append(0, &h.buf[CRC_FROM..]);
    h.buf[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Bytes written into a slice sized beforehand.
struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    #[inline]
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    #[inline]
    fn unsigned(&mut self, mut z: u64) {
        while z >= 0x80 {
            self.buf[self.pos] = (z as u8) | 0x80;
            self.pos += 1;
            z >>= 7;
        }
        self.buf[self.pos] = z as u8;
        self.pos += 1;
    }

    #[inline]
    fn varint(&mut self, v: i32) {
        self.unsigned(u64::from(((v << 1) ^ (v >> 31)) as u32));
    }

    #[inline]
    fn varlong(&mut self, v: i64) {
        self.unsigned(((v << 1) ^ (v >> 63)) as u64);
    }

    #[inline]
    fn field(&mut self, v: Option<&[u8]>) {
        match v {
            None => self.varint(-1),
            Some(b) => {
                self.varint(b.len() as i32);
                self.bytes(b);
            }
        }
    }
}

fn field_size(v: Option<&[u8]>) -> Result<usize, Malformed> {
    Ok(match v {
        None => varint_size(-1),
        Some(b) => {
            let n = i32::try_from(b.len())
                .map_err(|_| Malformed("a field of more than 2 GiB".into()))?;
            varint_size(n) + b.len()
        }
    })
}
