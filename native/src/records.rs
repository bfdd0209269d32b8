//! Kafka v2 record batches straight to `ConsumerRecord` objects: the record path.
//!
//! Why: decoding a batch through aiokafka's C records made one `DefaultRecord` per
//! record, and aiogroup then read five attributes of it and called the
//! `ConsumerRecord` dataclass's Python `__init__` (eleven arguments): about 3,600 of
//! getmany's ~8,100 instructions per record (callgrind, docs/benchmarks.md).  Here a
//! batch is parsed (and checked) whole, then each record is made the way `__init__`
//! would leave it without running it: the class's own `tp_new` (`object.__new__`,
//! which gives the instance its inline attribute values) and the eleven fields
//! stored in field order by `PyObject_GenericSetAttr` - no Python frame, no record
//! object in between.
//!
//! Measured alternatives (docs/benchmarks.md): calling the class (its `__init__`
//! runs) costs more (5,624 instructions a getmany record against 5,455, and more CPU
//! time); a copy of a prepared attribute dict per record, set as the instance's
//! `__dict__`, costs fewer instructions (4,045) but no less CPU time by the clock and
//! twice the memory (684 B a 100 B record against 338 B), and with a split dict
//! (the class's shared keys) CPython 3.11 does not specialise `record.value` in
//! Python code, which made every attribute read about three times slower.
//!
//! `cls` must be a plain class whose `__new__` is `object.__new__` and whose
//! attributes are set by the generic `__setattr__` (aiokafka's `ConsumerRecord`
//! dataclass; checked in `aiogroup/_fetch/native.py`).
//!
//! Malformed input never panics and builds no object: the whole batch is parsed
//! before the first object is made, and any problem is a `DecodeError` (the caller
//! then takes the Python path, whose error the application sees as before).

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};

use crate::{batch_error, batch_head, decompress, Cursor, Res, HEADER_LEN, SCRATCH};

/// One record's fields, pointing into the (decompressed) batch (also the share
/// path's, `share_records.rs`).
pub(crate) struct Rec<'a> {
    pub(crate) offset_delta: i32,
    pub(crate) ts_delta: i64,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
    /// This record's headers: `headers[first..end]`.
    pub(crate) first_header: usize,
    pub(crate) end_header: usize,
}

pub(crate) struct Header<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) value: Option<&'a [u8]>,
}

/// Every record of a batch's (decompressed) records section, checked whole.
pub(crate) fn parse<'a>(
    records: &'a [u8],
    count: usize,
    recs: &mut Vec<Rec<'a>>,
    headers: &mut Vec<Header<'a>>,
) -> Res<()> {
    let mut cur = Cursor::new(records);
    // A record takes at least 7 bytes: do not trust `count` to reserve memory.
    recs.reserve(count.min(records.len() / 7 + 1));
    for i in 0..count {
        let head = cur.record_head(i)?;
        let first_header = headers.len();
        for _ in 0..head.headers {
            let (key, value) = cur.header(i)?;
            headers.push(Header { key, value });
        }
        cur.record_end(&head, i)?;
        let (offset_delta, ts_delta, key, value) =
            (head.offset_delta, head.ts_delta, head.key, head.value);
        recs.push(Rec {
            offset_delta,
            ts_delta,
            key,
            value,
            first_header,
            end_header: headers.len(),
        });
    }
    if cur.remaining() != 0 {
        return Err(format!(
            "{} bytes left after the batch's {count} records",
            cur.remaining()
        ));
    }
    Ok(())
}

/// An owned reference from a C API call, or the Python error it set.
#[inline]
pub(crate) fn owned<'py>(py: Python<'py>, ptr: *mut ffi::PyObject) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: every caller passes a new reference (or NULL with an exception set).
    unsafe { Bound::from_owned_ptr_or_err(py, ptr) }
}

#[inline]
pub(crate) fn bytes_of<'py>(py: Python<'py>, b: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `b` is valid for `b.len()` bytes; the call copies them.
    owned(py, unsafe {
        ffi::PyBytes_FromStringAndSize(b.as_ptr().cast(), b.len() as ffi::Py_ssize_t)
    })
}

/// A Python int, the previous one again when the value repeats (timestamps and sizes
/// often do within a batch; small ints are shared by CPython anyway).
struct IntCache<'py> {
    last: Option<(i64, Bound<'py, PyAny>)>,
}

impl<'py> IntCache<'py> {
    #[inline]
    fn get(&mut self, py: Python<'py>, v: i64) -> PyResult<Bound<'py, PyAny>> {
        if let Some((last, obj)) = &self.last {
            if *last == v {
                return Ok(obj.clone());
            }
        }
        // SAFETY: plain constructor call.
        let obj = owned(py, unsafe { ffi::PyLong_FromLongLong(v) })?;
        self.last = Some((v, obj.clone()));
        Ok(obj)
    }
}

/// The `ConsumerRecord`s of the v2 batch `data[start:end]`, in offset order.
///
/// `template`: a dict with the partition's `topic` and `partition` (the objects every
/// record shares; `aiogroup._fetch.native.record_template`); `cls` the class.  Keys and values
/// go through `key_deserializer` / `value_deserializer` when given (not for a null
/// one).  Returns `(records, stopped)`: `stopped` is true when a deserializer raised,
/// and then `records` holds the records before the one it refused (its exception is
/// dropped: the caller reads that record again through its own path, which raises; a
/// `BaseException` that is not an `Exception` propagates instead).
/// A malformed batch raises `DecodeError` and builds nothing.  The CRC is checked
/// only with `check_crc` (the walker checked it already when asked to).
#[pyfunction]
#[pyo3(signature = (data, start, end, cls, template, key_deserializer=None, value_deserializer=None, check_crc=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn consumer_records<'py>(
    py: Python<'py>,
    data: &[u8],
    start: usize,
    end: usize,
    cls: &Bound<'py, PyType>,
    template: &Bound<'py, PyDict>,
    key_deserializer: Option<&Bound<'py, PyAny>>,
    value_deserializer: Option<&Bound<'py, PyAny>>,
    check_crc: bool,
) -> PyResult<(Bound<'py, PyList>, bool)> {
    let where_ = match (template.get_item("topic"), template.get_item("partition")) {
        (Ok(Some(t)), Ok(Some(p))) => format!("{t}-{p}"),
        _ => "?".to_string(),
    };
    with_parsed_batch(data, start, end, check_crc, &where_, |head, recs, headers| {
        build(
            py,
            head,
            recs,
            headers,
            cls,
            template,
            key_deserializer,
            value_deserializer,
        )
    })
}

/// `consumer_records` that also says what the records' key + value bytes are: the
/// consumer's delivered-bytes metric, counted from the sizes the parse found rather
/// than read back from each record's attributes (`key_value_bytes`: two generic
/// attribute reads per record, about 7 % of getmany's instructions).
///
/// Returns `(records, stopped, total, prefix)`: `total` the key + value bytes of the
/// records returned (a missing key or value counts 0); `prefix` None, or with
/// `prefix=True` the running sums as native-endian int64s in a `bytes` of
/// `len(records) + 1` entries (`prefix[i]` the bytes of the records before `i`), so
/// that a slice of the records is counted in O(1) (`memoryview(prefix).cast("q")`;
/// `aiogroup/_fetch/walker.py`, a batch read in part).
#[pyfunction]
#[pyo3(signature = (data, start, end, cls, template, key_deserializer=None, value_deserializer=None, check_crc=false, prefix=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn consumer_records_sized<'py>(
    py: Python<'py>,
    data: &[u8],
    start: usize,
    end: usize,
    cls: &Bound<'py, PyType>,
    template: &Bound<'py, PyDict>,
    key_deserializer: Option<&Bound<'py, PyAny>>,
    value_deserializer: Option<&Bound<'py, PyAny>>,
    check_crc: bool,
    prefix: bool,
) -> PyResult<(Bound<'py, PyList>, bool, i64, Option<Bound<'py, PyAny>>)> {
    let where_ = match (template.get_item("topic"), template.get_item("partition")) {
        (Ok(Some(t)), Ok(Some(p))) => format!("{t}-{p}"),
        _ => "?".to_string(),
    };
    with_parsed_batch(data, start, end, check_crc, &where_, |head, recs, headers| {
        let (list, stopped) = build(
            py,
            head,
            recs,
            headers,
            cls,
            template,
            key_deserializer,
            value_deserializer,
        )?;
        let built = &recs[..list.len().min(recs.len())];
        let sums = running_sizes(built);
        let total = *sums.last().unwrap_or(&0);
        let prefix = if prefix {
            let raw: Vec<u8> = sums.iter().flat_map(|v| v.to_ne_bytes()).collect();
            Some(bytes_of(py, &raw)?)
        } else {
            None
        };
        Ok((list, stopped, total, prefix))
    })
}

/// The running key + value bytes of `recs`: `len + 1` entries, the first 0, entry `i`
/// the bytes of the records before `i` (a missing key or value counts 0).
pub(crate) fn running_sizes(recs: &[Rec<'_>]) -> Vec<i64> {
    let mut sums = Vec::with_capacity(recs.len() + 1);
    let mut total: i64 = 0;
    sums.push(0);
    for r in recs {
        total += r.key.map_or(0, |b| b.len() as i64) + r.value.map_or(0, |b| b.len() as i64);
        sums.push(total);
    }
    sums
}

/// `f` over the v2 batch `data[start:end]` parsed whole: its head, its records and
/// their headers (decompressed into the thread's scratch buffer, checked before `f`
/// runs).  A malformed batch is a `DecodeError` naming `where_` and the batch's base
/// offset (`batch_error`), and `f` is not called.  The share path's too.
pub(crate) fn with_parsed_batch<R>(
    data: &[u8],
    start: usize,
    end: usize,
    check_crc: bool,
    where_: &dyn std::fmt::Display,
    f: impl FnOnce(&crate::BatchHead, &[Rec<'_>], &[Header<'_>]) -> PyResult<R>,
) -> PyResult<R> {
    let fail = |msg: String| batch_error(where_, data, start, msg);
    if start > end || end > data.len() {
        return Err(fail(format!(
            "batch range {start}..{end} is outside the {} bytes given",
            data.len()
        )));
    }
    let batch = &data[start..end];
    let head = batch_head(batch, check_crc).map_err(fail)?;
    let body = &batch[HEADER_LEN..];
    SCRATCH.with(|cell| {
        let mut scratch = cell.take();
        let result = (|| {
            let records: &[u8] = if head.codec == 0 {
                body
            } else {
                let n = decompress(head.codec, body, &mut scratch).map_err(fail)?;
                &scratch[..n]
            };
            let mut recs = Vec::new();
            let mut headers = Vec::new();
            parse(records, head.count, &mut recs, &mut headers).map_err(fail)?;
            f(&head, &recs, &headers)
        })();
        if scratch.capacity() <= 64 << 20 {
            cell.replace(scratch);
        }
        result
    })
}

/// The records built before a deserializer refused record `i`, and `stopped`.
///
/// Only an `Exception` is a refusal (the pure path catches those alone): a
/// `BaseException` (KeyboardInterrupt, SystemExit, a task's cancellation) goes on up.
fn stopped<'py>(
    py: Python<'py>,
    list: &Bound<'py, PyAny>,
    i: usize,
    err: PyErr,
) -> PyResult<(Bound<'py, PyList>, bool)> {
    if !err.is_instance_of::<pyo3::exceptions::PyException>(py) {
        return Err(err);
    }
    // SAFETY: slots 0..i are filled; the slice copies (and owns) only them.
    let prefix = owned(py, unsafe {
        ffi::PyList_GetSlice(list.as_ptr(), 0, i as ffi::Py_ssize_t)
    })?;
    Ok((prefix.cast_into::<PyList>()?, true))
}

/// The key + value bytes of the records in `records`: the sum of their
/// `serialized_key_size` and `serialized_value_size`, a missing one (-1) counting 0.
///
/// For the consumer's metrics (`aiogroup/_fetch/delivery.py`, `records_and_bytes`):
/// two attribute reads per record with no Python loop around them, about half of
/// what the same sum costs through `map(attrgetter)`, `sum` and `list.count`.
#[pyfunction]
pub(crate) fn key_value_bytes(records: &Bound<'_, PyList>) -> PyResult<i64> {
    let py = records.py();
    let key_size = intern!(py, "serialized_key_size");
    let value_size = intern!(py, "serialized_value_size");
    let mut total: i64 = 0;
    for r in records.iter() {
        let k = as_i64(&r.getattr(key_size)?)?;
        let v = as_i64(&r.getattr(value_size)?)?;
        total += k.max(0) + v.max(0);
    }
    Ok(total)
}

/// An int's value; cheaper than `extract` where -1 is common (a missing key's size):
/// the error indicator is looked at only when -1 comes back.
#[inline]
fn as_i64(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    // SAFETY: a borrowed object; PyLong_AsLongLong raises TypeError for a non-int.
    let v = unsafe { ffi::PyLong_AsLongLong(obj.as_ptr()) };
    if v == -1 && unsafe { !ffi::PyErr_Occurred().is_null() } {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok(v)
}

/// `t` untracked by the cyclic collector: a header pair (a `str` and a `bytes` or None)
/// or the tuple of such pairs, which can never be part of a cycle.  The collector
/// untracks such tuples itself, but only after walking them once, in the first
/// collection after the call, with the record that holds them.
#[inline]
fn untracked_tuple(t: Bound<'_, PyTuple>) -> Bound<'_, PyTuple> {
    // SAFETY: a tuple (a GC type) just made and tracked by PyTuple_New.
    unsafe { ffi::PyObject_GC_UnTrack(t.as_ptr().cast()) };
    t
}

#[allow(clippy::too_many_arguments)]
fn build<'py>(
    py: Python<'py>,
    head: &crate::BatchHead,
    recs: &[Rec<'_>],
    headers: &[Header<'_>],
    cls: &Bound<'py, PyType>,
    template: &Bound<'py, PyDict>,
    kd: Option<&Bound<'py, PyAny>>,
    vd: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyList>, bool)> {
    let names = [
        intern!(py, "topic").as_ptr(),
        intern!(py, "partition").as_ptr(),
        intern!(py, "offset").as_ptr(),
        intern!(py, "timestamp").as_ptr(),
        intern!(py, "timestamp_type").as_ptr(),
        intern!(py, "key").as_ptr(),
        intern!(py, "value").as_ptr(),
        intern!(py, "checksum").as_ptr(),
        intern!(py, "serialized_key_size").as_ptr(),
        intern!(py, "serialized_value_size").as_ptr(),
        intern!(py, "headers").as_ptr(),
    ];
    let topic = template
        .get_item("topic")?
        .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err("topic"))?;
    let partition = template
        .get_item("partition")?
        .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err("partition"))?;
    let ts_type = owned(py, unsafe {
        ffi::PyLong_FromLong(i64::from(head.log_append) as _)
    })?;
    let none = py.None().into_bound(py);
    let empty = PyTuple::empty(py).into_any();
    let n = recs.len();
    let list = owned(py, unsafe { ffi::PyList_New(n as ffi::Py_ssize_t) })?;
    let type_ptr = cls.as_type_ptr();
    // SAFETY: the class's tp_new (object.__new__ for the dataclass: checked by the caller).
    let new_fn: ffi::newfunc = unsafe {
        let slot = ffi::PyType_GetSlot(type_ptr, ffi::Py_tp_new);
        if slot.is_null() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "the record class has no tp_new",
            ));
        }
        std::mem::transmute::<*mut std::ffi::c_void, ffi::newfunc>(slot)
    };
    let mut timestamps = IntCache { last: None };
    let mut key_sizes = IntCache { last: None };
    let mut value_sizes = IntCache { last: None };
    let mut header_keys: Vec<(&[u8], Bound<'py, PyAny>)> = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let offset = owned(py, unsafe {
            ffi::PyLong_FromLongLong(head.base_offset.wrapping_add(i64::from(r.offset_delta)))
        })?;
        let ts = if head.log_append {
            head.max_ts
        } else {
            head.first_ts.wrapping_add(r.ts_delta)
        };
        let timestamp = timestamps.get(py, ts)?;
        let key = match r.key {
            None => none.clone(),
            Some(b) => {
                let raw = bytes_of(py, b)?;
                match kd {
                    None => raw,
                    Some(f) => match f.call1((raw,)) {
                        Ok(k) => k,
                        Err(e) => return stopped(py, &list, i, e),
                    },
                }
            }
        };
        let value = match r.value {
            None => none.clone(),
            Some(b) => {
                let raw = bytes_of(py, b)?;
                match vd {
                    None => raw,
                    Some(f) => match f.call1((raw,)) {
                        Ok(v) => v,
                        Err(e) => return stopped(py, &list, i, e),
                    },
                }
            }
        };
        let key_size = key_sizes.get(py, r.key.map_or(-1, |b| b.len() as i64))?;
        let value_size = value_sizes.get(py, r.value.map_or(-1, |b| b.len() as i64))?;
        let hdrs = if r.end_header > r.first_header {
            let hs = &headers[r.first_header..r.end_header];
            let mut items = Vec::with_capacity(hs.len());
            for h in hs {
                let hk = match header_keys.iter().find(|(k, _)| *k == h.key) {
                    Some((_, s)) => s.clone(),
                    None => {
                        let s = owned(py, unsafe {
                            ffi::PyUnicode_DecodeUTF8(
                                h.key.as_ptr().cast(),
                                h.key.len() as ffi::Py_ssize_t,
                                std::ptr::null(),
                            )
                        })?;
                        if header_keys.len() < 16 {
                            header_keys.push((h.key, s.clone()));
                        }
                        s
                    }
                };
                let hv = match h.value {
                    None => none.clone(),
                    Some(b) => bytes_of(py, b)?,
                };
                items.push(untracked_tuple(PyTuple::new(py, [hk, hv])?));
            }
            untracked_tuple(PyTuple::new(py, items)?).into_any()
        } else {
            empty.clone()
        };
        let values = [
            &topic,
            &partition,
            &offset,
            &timestamp,
            &ts_type,
            &key,
            &value,
            &none,
            &key_size,
            &value_size,
            &hdrs,
        ];
        unsafe {
            let obj = owned(py, new_fn(type_ptr, empty.as_ptr(), std::ptr::null_mut()))?;
            for (name, v) in names.iter().zip(values.iter()) {
                if ffi::PyObject_GenericSetAttr(obj.as_ptr(), *name, v.as_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            ffi::PyList_SetItem(list.as_ptr(), i as ffi::Py_ssize_t, obj.into_ptr());
        }
    }
    Ok((list.cast_into::<PyList>()?, false))
}

#[cfg(test)]
mod tests {
    use super::{running_sizes, Rec};

    fn rec<'a>(key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> Rec<'a> {
        Rec {
            offset_delta: 0,
            ts_delta: 0,
            key,
            value,
            first_header: 0,
            end_header: 0,
        }
    }

    #[test]
    fn running_sizes_count_key_and_value_bytes_a_missing_one_as_zero() {
        let recs = [
            rec(None, None),
            rec(Some(b"k"), None),
            rec(None, Some(b"vv")),
            rec(Some(b""), Some(b"")),
            rec(Some(b"abc"), Some(&[0u8; 100])),
        ];
        assert_eq!(running_sizes(&recs), vec![0, 0, 1, 3, 3, 106]);
    }

    #[test]
    fn running_sizes_of_nothing_is_one_zero() {
        assert_eq!(running_sizes(&[]), vec![0]);
    }
}
