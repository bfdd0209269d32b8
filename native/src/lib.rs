//! Kafka v2 record batches straight into Arrow column buffers.
//!
//! aiogroup's pure-Python Arrow path asks aiokafka to decode every record into a
//! Python object, then copies keys and values into lists and the lists into Arrow.
//! Here a whole batch (its raw bytes, as fetched) is parsed once: the header, the
//! CRC-32C, the codec, then each record's varints, appending straight into the
//! buffers of the final Arrow columns.  Python wraps the buffers with
//! `pyarrow.foreign_buffer` (no copy) in `aiogroup/_native.py`.
//!
//! What to deliver (control batches, aborted transactions, partial batches) is
//! decided in Python before a batch gets here; this module only decodes.
//!
//! Malformed input never panics and never reads out of bounds: every read goes
//! through `Cursor`, which checks the remaining length, and every problem becomes a
//! `DecodeError` naming the topic-partition, the batch's base offset and the problem.

use std::io::Read;

mod held_steps;
mod lz4_frame;
mod pool;
mod records;
mod share_records;
mod young_records;
mod zstd_frame;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

create_exception!(
    aiogroup_native,
    DecodeError,
    PyValueError,
    "A record batch could not be decoded (bad CRC, truncated, bad varint, bad codec payload)."
);

const HEADER_LEN: usize = 61;
const CRC_START: usize = 21;
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

/// A problem found while decoding; the caller adds where (topic-partition, offset).
type Res<T> = Result<T, String>;

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// A v2 record's fields before its headers (``Cursor::record_head``).
struct RecordHead<'a> {
    start: usize,
    len: usize,
    ts_delta: i64,
    offset_delta: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: i32,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Res<&'a [u8]> {
        if n > self.remaining() {
            return Err(format!(
                "truncated: {what} needs {n} bytes, {} left",
                self.remaining()
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn byte(&mut self, what: &str) -> Res<u8> {
        Ok(self.take(1, what)?[0])
    }

    /// A zigzag varint of at most `max_bytes` bytes (5 for int32, 10 for int64).
    #[inline]
    fn varlong(&mut self, what: &str, max_bytes: usize) -> Res<i64> {
        // Most varints of a batch (lengths, deltas, header counts) take one or two
        // bytes (a 100 B record's length and value length take two).
        if let Some(&b0) = self.buf.get(self.pos) {
            if b0 & 0x80 == 0 {
                self.pos += 1;
                let raw = u64::from(b0);
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
            if let Some(&b1) = self.buf.get(self.pos + 1) {
                if b1 & 0x80 == 0 && max_bytes >= 2 {
                    self.pos += 2;
                    let raw = u64::from(b0 & 0x7f) | (u64::from(b1) << 7);
                    return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
                }
            }
        }
        self.varlong_slow(what, max_bytes)
    }

    #[inline(never)]
    fn varlong_slow(&mut self, what: &str, max_bytes: usize) -> Res<i64> {
        let mut raw: u64 = 0;
        let mut shift = 0u32;
        for i in 0..max_bytes {
            let b = match self.buf.get(self.pos) {
                Some(b) => *b,
                None => return Err(format!("truncated varint ({what})")),
            };
            self.pos += 1;
            raw |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
            shift += 7;
            if i + 1 == max_bytes {
                break;
            }
        }
        Err(format!("bad varint ({what}): longer than {max_bytes} bytes"))
    }

    #[inline]
    fn varint(&mut self, what: &str) -> Res<i32> {
        let v = self.varlong(what, 5)?;
        i32::try_from(v).map_err(|_| format!("bad varint ({what}): {v} is out of int32 range"))
    }

    /// A v2 record's fields up to its headers (record ``i`` of its batch, for errors);
    /// the headers follow (``header``), then ``record_end`` checks the declared length.
    #[inline]
    fn record_head(&mut self, i: usize) -> Res<RecordHead<'a>> {
        let len = self.varint("record length")?;
        if len < 0 {
            return Err(format!("invalid record length {len} (record {i})"));
        }
        let start = self.pos;
        if len as usize > self.remaining() {
            return Err(format!(
                "truncated: record {i} declares {len} bytes, {} left",
                self.remaining()
            ));
        }
        self.byte("record attributes")?;
        let ts_delta = self.varlong("timestamp delta", 10)?;
        let offset_delta = self.varint("offset delta")?;
        let key = self.bytes("key")?;
        let value = self.bytes("value")?;
        let headers = self.varint("header count")?;
        if headers < 0 {
            return Err(format!("invalid header count {headers} (record {i})"));
        }
        Ok(RecordHead { start, len: len as usize, ts_delta, offset_delta, key, value, headers })
    }

    /// One header of record ``i``: a UTF-8 key (never null) and a nullable value.
    #[inline]
    fn header(&mut self, i: usize) -> Res<(&'a [u8], Option<&'a [u8]>)> {
        let key = match self.bytes("header key")? {
            Some(k) => k,
            None => return Err(format!("null header key (record {i})")),
        };
        if std::str::from_utf8(key).is_err() {
            return Err(format!("header key is not UTF-8 (record {i})"));
        }
        Ok((key, self.bytes("header value")?))
    }

    /// Record ``i``'s fields took exactly the bytes its length declared.
    #[inline]
    fn record_end(&self, head: &RecordHead<'a>, i: usize) -> Res<()> {
        let took = self.pos - head.start;
        if took != head.len {
            return Err(format!("record {i} declares {} bytes but its fields take {took}", head.len));
        }
        Ok(())
    }

    /// Nullable bytes: a varint length (-1 = null) and that many bytes.
    #[inline]
    fn bytes(&mut self, what: &str) -> Res<Option<&'a [u8]>> {
        let n = self.varint(what)?;
        if n == -1 {
            return Ok(None);
        }
        if n < 0 {
            return Err(format!("invalid {what} length {n}"));
        }
        Ok(Some(self.take(n as usize, what)?))
    }
}

/// The `DecodeError` for the batch at `data[start..]` of `where_` (topic-partition):
/// its base offset when the bytes hold one, and `msg` ("CRC" for a failed CRC check).
pub(crate) fn batch_error(
    where_: &dyn std::fmt::Display,
    data: &[u8],
    start: usize,
    msg: String,
) -> PyErr {
    let base = if start <= data.len() && data.len() - start >= 8 {
        be_i64(data, start).to_string()
    } else {
        "?".to_string()
    };
    if msg == "CRC" {
        DecodeError::new_err(format!(
            "record batch of {where_} at offset {base} failed its CRC check"
        ))
    } else {
        DecodeError::new_err(format!("record batch of {where_} at offset {base}: {msg}"))
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// What decoding needs from a v2 batch header.
pub(crate) struct BatchHead {
    pub(crate) base_offset: i64,
    pub(crate) first_ts: i64,
    pub(crate) max_ts: i64,
    pub(crate) count: usize,
    pub(crate) codec: i16,
    /// Timestamp type 1 (log append time): every record takes the batch's max timestamp.
    pub(crate) log_append: bool,
}

/// The header of the v2 batch `batch` (exactly one batch), its length, magic and
/// (when `check_crc`) CRC-32C checked; the error "CRC" is a CRC mismatch.
pub(crate) fn batch_head(batch: &[u8], check_crc: bool) -> Res<BatchHead> {
    if batch.len() < HEADER_LEN {
        return Err(format!(
            "truncated: a v2 batch header is {HEADER_LEN} bytes, got {}",
            batch.len()
        ));
    }
    let batch_length = be_i32(batch, 8);
    if batch_length < 0 || batch_length as usize + 12 != batch.len() {
        return Err(format!(
            "batch length {batch_length} does not match the {} bytes given",
            batch.len().saturating_sub(12)
        ));
    }
    let magic = batch[16];
    if magic != 2 {
        return Err(format!("magic byte {magic}, only v2 batches are decoded natively"));
    }
    if check_crc {
        let want = be_u32(batch, 17);
        let got = ::crc32c::crc32c(&batch[CRC_START..]);
        if want != got {
            return Err("CRC".to_string());
        }
    }
    let attrs = be_i16(batch, 21);
    let count = be_i32(batch, 57);
    if count < 0 {
        return Err(format!("negative record count {count}"));
    }
    Ok(BatchHead {
        base_offset: be_i64(batch, 0),
        first_ts: be_i64(batch, 27),
        max_ts: be_i64(batch, 35),
        count: count as usize,
        codec: attrs & 0x07,
        log_append: attrs & 0x08 != 0,
    })
}

/// A growing Arrow binary/string column: int32 offsets, data, validity bitmap.
#[derive(Default)]
struct BinCol {
    offsets: Vec<i32>,
    data: Vec<u8>,
    validity: Vec<u8>,
    len: usize,
    nulls: usize,
}

impl BinCol {
    fn new() -> Self {
        let mut c = BinCol::default();
        c.offsets.push(0);
        c
    }

    fn push(&mut self, v: Option<&[u8]>) -> Res<()> {
        let bit = self.len;
        if bit.is_multiple_of(8) {
            self.validity.push(0);
        }
        match v {
            Some(b) => {
                self.data.extend_from_slice(b);
                self.validity[bit / 8] |= 1 << (bit % 8);
            }
            None => self.nulls += 1,
        }
        let end = i32::try_from(self.data.len())
            .map_err(|_| "column data over 2 GiB: read fewer records at a time".to_string())?;
        self.offsets.push(end);
        self.len += 1;
        Ok(())
    }
}

/// An owned buffer handed to Python; pyarrow wraps `address`/`size` without a copy
/// and keeps this object alive as the buffer's base.
#[pyclass(frozen, module = "aiogroup_native")]
struct Buffer {
    bytes: Vec<u8>,
    ints: Vec<i32>,
    longs: Vec<i64>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // pyarrow released the last Arrow buffer over this memory: recycle it.
        pool::give(std::mem::take(&mut self.bytes));
    }
}

impl Buffer {
    fn of_bytes(bytes: Vec<u8>) -> Self {
        Buffer { bytes, ints: Vec::new(), longs: Vec::new() }
    }
    fn of_ints(ints: Vec<i32>) -> Self {
        Buffer { bytes: Vec::new(), ints, longs: Vec::new() }
    }
    fn of_longs(longs: Vec<i64>) -> Self {
        Buffer { bytes: Vec::new(), ints: Vec::new(), longs }
    }
}

#[pymethods]
impl Buffer {
    #[getter]
    fn address(&self) -> usize {
        if !self.longs.is_empty() {
            self.longs.as_ptr() as usize
        } else if !self.ints.is_empty() {
            self.ints.as_ptr() as usize
        } else {
            self.bytes.as_ptr() as usize
        }
    }

    #[getter]
    fn size(&self) -> usize {
        self.bytes.len() + 4 * self.ints.len() + 8 * self.longs.len()
    }
}

/// Rows of Arrow columns filled from whole v2 record batches.
#[pyclass(module = "aiogroup_native")]
struct BatchDecoder {
    keys: BinCol,
    values: BinCol,
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    topic_idx: Vec<i32>,
    partitions: Vec<i32>,
    ts_types: Vec<i32>,
    header_offsets: Vec<i32>,
    header_keys: BinCol,
    header_values: BinCol,
    topics: Vec<String>,
}

thread_local! {
    /// Decompressed batch bytes, reused from batch to batch on this thread (decoding
    /// runs on the thread that called `add_batch`, with the GIL released).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl BatchDecoder {
    fn fresh() -> Self {
        BatchDecoder {
            keys: BinCol::new(),
            values: BinCol::new(),
            offsets: Vec::new(),
            timestamps: Vec::new(),
            topic_idx: Vec::new(),
            partitions: Vec::new(),
            ts_types: Vec::new(),
            header_offsets: vec![0],
            header_keys: BinCol::new(),
            header_values: BinCol::new(),
            topics: Vec::new(),
        }
    }

    fn topic_index(&mut self, topic: &str) -> i32 {
        if let Some(i) = self.topics.iter().rposition(|t| t == topic) {
            return i as i32;
        }
        self.topics.push(topic.to_string());
        (self.topics.len() - 1) as i32
    }

    fn rows(&self) -> usize {
        self.offsets.len()
    }

    /// Cut every column back to `rows` rows (a batch failed half way: nothing of it stays).
    fn truncate(&mut self, rows: usize, header_rows: usize) {
        fn cut(c: &mut BinCol, n: usize) {
            if c.len <= n {
                return;
            }
            let nulls_after = (n..c.len)
                .filter(|i| c.validity[i / 8] & (1 << (i % 8)) == 0)
                .count();
            c.nulls -= nulls_after;
            c.data.truncate(c.offsets[n] as usize);
            c.offsets.truncate(n + 1);
            c.validity.truncate(n.div_ceil(8));
            if !n.is_multiple_of(8) {
                let last = n / 8;
                c.validity[last] &= (1u8 << (n % 8)) - 1;
            }
            c.len = n;
        }
        cut(&mut self.keys, rows);
        cut(&mut self.values, rows);
        self.offsets.truncate(rows);
        self.timestamps.truncate(rows);
        self.topic_idx.truncate(rows);
        self.partitions.truncate(rows);
        self.ts_types.truncate(rows);
        self.header_offsets.truncate(rows + 1);
        cut(&mut self.header_keys, header_rows);
        cut(&mut self.header_values, header_rows);
    }

    fn decode(&mut self, batch: &[u8], topic_i: i32, partition: i32, check_crc: bool) -> Res<usize> {
        let head = batch_head(batch, check_crc)?;
        let (base_offset, first_ts, max_ts, count) =
            (head.base_offset, head.first_ts, head.max_ts, head.count);
        let log_append = head.log_append;
        let ts_type = i32::from(log_append);
        let codec = head.codec;
        let body = &batch[HEADER_LEN..];
        SCRATCH.with(|cell| {
            let mut scratch = cell.take();
            let result = (|| {
                let records: &[u8] = if codec == 0 {
                    body
                } else {
                    let n = decompress(codec, body, &mut scratch)?;
                    &scratch[..n]
                };
                self.records(
                    records, count, base_offset, first_ts, max_ts, log_append, ts_type,
                    topic_i, partition,
                )
            })();
            // Keep the buffer for the next batch, unless it grew huge.
            if scratch.capacity() <= 64 << 20 {
                cell.replace(scratch);
            }
            result
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn records(
        &mut self,
        records: &[u8],
        count: usize,
        base_offset: i64,
        first_ts: i64,
        max_ts: i64,
        log_append: bool,
        ts_type: i32,
        topic_i: i32,
        partition: i32,
    ) -> Res<usize> {
        if self.values.data.capacity() == 0 {
            // The values, the big column, go into a recycled buffer (`pool`); taken at the
            // first record, not with the decoder, so that a read that finds nothing does
            // not drain the pool (a buffer goes back only with a finished batch).
            self.values.data = pool::take();
        }
        let mut cur = Cursor::new(records);
        // A record takes at least 7 bytes: do not trust `count` to reserve memory.
        let reserve = count.min(records.len() / 7 + 1);
        self.offsets.reserve(reserve);
        self.timestamps.reserve(reserve);
        for i in 0..count {
            let head = cur.record_head(i)?;
            for _ in 0..head.headers {
                let (hk, hv) = cur.header(i)?;
                self.header_keys.push(Some(hk))?;
                self.header_values.push(hv)?;
            }
            cur.record_end(&head, i)?;
            let (key, value, ts_delta, off_delta) =
                (head.key, head.value, head.ts_delta, head.offset_delta);
            self.keys.push(key)?;
            self.values.push(value)?;
            self.offsets.push(base_offset.wrapping_add(i64::from(off_delta)));
            self.timestamps.push(if log_append { max_ts } else { first_ts.wrapping_add(ts_delta) });
            let h_end = i32::try_from(self.header_keys.len)
                .map_err(|_| "too many headers: read fewer records at a time".to_string())?;
            self.header_offsets.push(h_end);
        }
        if cur.remaining() != 0 {
            return Err(format!(
                "{} bytes left after the batch's {count} records",
                cur.remaining()
            ));
        }
        self.topic_idx.extend(std::iter::repeat_n(topic_i, count));
        self.partitions.extend(std::iter::repeat_n(partition, count));
        self.ts_types.extend(std::iter::repeat_n(ts_type, count));
        Ok(count)
    }
}

/// Decompress a batch's records into `out[..n]`; returns n (bytes of `out` past n are stale).
fn decompress(codec: i16, data: &[u8], out: &mut Vec<u8>) -> Res<usize> {
    let io = |name: &str, e: std::io::Error| format!("bad {name} payload: {e}");
    if codec == 3 {
        if let lz4_frame::Frame::Done(n) = lz4_frame::decompress(data, out)? {
            return Ok(n);
        }
    }
    if codec == 4 {
        if let zstd_frame::Frames::Done(n) = zstd_frame::decompress(data, out)? {
            return Ok(n);
        }
    }
    out.clear();
    match codec {
        1 => {
            flate2::read::MultiGzDecoder::new(data)
                .read_to_end(out)
                .map_err(|e| io("gzip", e))?;
        }
        2 => {
            let mut dec = snap::raw::Decoder::new();
            if data.len() > 16 && data[..8] == XERIAL_MAGIC {
                // xerial framing (Java's SnappyOutputStream): 16-byte header, then blocks
                // of [int32 length][raw snappy].
                let mut cur = Cursor::new(&data[16..]);
                while cur.remaining() > 0 {
                    let n = be_i32(cur.take(4, "snappy block length")?, 0);
                    if n < 0 {
                        return Err(format!("bad snappy payload: block length {n}"));
                    }
                    let block = cur.take(n as usize, "snappy block")?;
                    let v = dec
                        .decompress_vec(block)
                        .map_err(|e| format!("bad snappy payload: {e}"))?;
                    out.extend_from_slice(&v);
                }
            } else {
                let n = snap::raw::decompress_len(data)
                    .map_err(|e| format!("bad snappy payload: {e}"))?;
                out.resize(n, 0);
                dec.decompress(data, out)
                    .map_err(|e| format!("bad snappy payload: {e}"))?;
            }
        }
        3 => {
            // Frames the fast path leaves (linked blocks, a dictionary id, several frames
            // back to back): FrameDecoder reads one frame per call.
            let mut rest = data;
            while !rest.is_empty() {
                let before = rest.len();
                lz4_flex::frame::FrameDecoder::new(&mut rest)
                    .read_to_end(out)
                    .map_err(|e| io("lz4", e))?;
                if rest.len() == before {
                    return Err("bad lz4 payload: a frame of no bytes".to_string());
                }
            }
        }
        4 => {
            zstd::stream::read::Decoder::with_buffer(data)
                .map_err(|e| io("zstd", e))?
                .read_to_end(out)
                .map_err(|e| io("zstd", e))?;
        }
        c => return Err(format!("unknown compression codec {c}")),
    }
    Ok(out.len())
}

#[pymethods]
impl BatchDecoder {
    #[new]
    fn new() -> Self {
        BatchDecoder::fresh()
    }

    fn __len__(&self) -> usize {
        self.rows()
    }

    /// Append every record of the v2 batch `data[start:end]`; returns how many.
    ///
    /// On any problem nothing of the batch is kept and `DecodeError` is raised.
    /// The GIL is released while the batch is decoded (`data` is an immutable `bytes`),
    /// so another thread - the worker writing the previous Arrow batch to Spark, or
    /// `ingest()` handing one over - runs meanwhile.
    #[pyo3(signature = (data, start, end, topic, partition, check_crc=true))]
    #[allow(clippy::too_many_arguments)]
    fn add_batch(
        &mut self,
        py: Python<'_>,
        data: &[u8],
        start: usize,
        end: usize,
        topic: &str,
        partition: i32,
        check_crc: bool,
    ) -> PyResult<usize> {
        let where_ = format!("{topic}-{partition}");
        let fail = |msg: String| batch_error(&where_, data, start, msg);
        if start > end || end > data.len() {
            return Err(fail(format!(
                "batch range {start}..{end} is outside the {} bytes given",
                data.len()
            )));
        }
        let rows = self.rows();
        let header_rows = self.header_keys.len;
        let n_topics = self.topics.len();
        let ti = self.topic_index(topic);
        let batch = &data[start..end];
        let decoded = py.detach(|| self.decode(batch, ti, partition, check_crc));
        match decoded {
            Ok(n) => Ok(n),
            Err(msg) => {
                self.truncate(rows, header_rows);
                self.topics.truncate(n_topics);
                Err(fail(msg))
            }
        }
    }

    /// The columns so far as buffers (then empty again); see `aiogroup/_native.py`.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let old = std::mem::replace(self, BatchDecoder::fresh());
        let d = PyDict::new(py);
        d.set_item("rows", old.offsets.len())?;
        let bin = |c: BinCol| -> PyResult<Bound<'py, PyList>> {
            let validity = if c.nulls > 0 {
                Bound::new(py, Buffer::of_bytes(c.validity))?.into_any()
            } else {
                py.None().into_bound(py)
            };
            PyList::new(
                py,
                [
                    validity,
                    Bound::new(py, Buffer::of_ints(c.offsets))?.into_any(),
                    Bound::new(py, Buffer::of_bytes(c.data))?.into_any(),
                    c.len.into_pyobject(py)?.into_any(),
                    c.nulls.into_pyobject(py)?.into_any(),
                ],
            )
        };
        d.set_item("key", bin(old.keys)?)?;
        d.set_item("value", bin(old.values)?)?;
        d.set_item("header_key", bin(old.header_keys)?)?;
        d.set_item("header_value", bin(old.header_values)?)?;
        d.set_item("header_offsets", Bound::new(py, Buffer::of_ints(old.header_offsets))?)?;
        d.set_item("offset", Bound::new(py, Buffer::of_longs(old.offsets))?)?;
        d.set_item("timestamp", Bound::new(py, Buffer::of_longs(old.timestamps))?)?;
        d.set_item("topic_index", Bound::new(py, Buffer::of_ints(old.topic_idx))?)?;
        d.set_item("partition", Bound::new(py, Buffer::of_ints(old.partitions))?)?;
        d.set_item("timestamp_type", Bound::new(py, Buffer::of_ints(old.ts_types))?)?;
        d.set_item("topics", PyList::new(py, old.topics)?)?;
        Ok(d)
    }
}

/// CRC-32C of `data` (for tests that build corrupt batches).
#[pyfunction(name = "crc32c")]
fn crc32c_of(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

/// Whether the v2 batch `data[start:end]` holds its CRC-32C (false when too short).
#[pyfunction]
fn crc_ok(data: &[u8], start: usize, end: usize) -> bool {
    if start > end || end > data.len() || end - start < HEADER_LEN {
        return false;
    }
    let batch = &data[start..end];
    be_u32(batch, 17) == ::crc32c::crc32c(&batch[CRC_START..])
}

/// Capacity of released value buffers waiting for reuse (for tests; see `pool`).
#[pyfunction(name = "_pooled_bytes")]
fn pooled_bytes() -> usize {
    pool::pooled_bytes()
}

#[pymodule]
fn aiogroup_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BatchDecoder>()?;
    m.add_class::<Buffer>()?;
    m.add_function(wrap_pyfunction!(crc32c_of, m)?)?;
    m.add_function(wrap_pyfunction!(crc_ok, m)?)?;
    m.add_function(wrap_pyfunction!(pooled_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(records::consumer_records, m)?)?;
    m.add_function(wrap_pyfunction!(records::consumer_records_sized, m)?)?;
    m.add_function(wrap_pyfunction!(records::key_value_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(share_records::share_records, m)?)?;
    m.add_function(wrap_pyfunction!(young_records::untrack, m)?)?;
    m.add_function(wrap_pyfunction!(young_records::retrack_shared, m)?)?;
    m.add_function(wrap_pyfunction!(young_records::keep_shared, m)?)?;
    m.add("DecodeError", m.py().get_type::<DecodeError>())?;
    let held_steps = held_steps::make_type();
    if held_steps.is_null() {
        return Err(PyErr::fetch(m.py()));
    }
    m.add("HeldSteps", unsafe { Bound::from_owned_ptr(m.py(), held_steps) })?;
    Ok(())
}
