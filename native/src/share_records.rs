//! Share-group records: a whole v2 batch straight to `ShareRecord` tuples (issue 28).
//!
//! Why: a share consumer's drain spent about a third of its client instructions a
//! record turning aiokafka's decoded records into `ShareRecord`s in Python - the
//! batch iterator's record object, five attribute reads, a tuple, then the tuple
//! copied into the `ShareRecord` subclass (callgrind, docs/benchmarks/share.md).  Here
//! the batch is parsed and checked whole (as `records.rs` does for the classic path),
//! then each record is one tuple-subclass allocation with its eleven items set in
//! place: topic, partition, offset, timestamp, timestamp type, key, value, headers,
//! delivery count, the acquired run it came from and its acquisition id.
//!
//! What to build is decided in Python (`aiogroup/_fetch/share_records.py`): only a
//! batch that lies wholly inside one acquired run with no offset missing comes here,
//! so every record gets the run's delivery count and `id_base + offset`.
//!
//! Malformed input never panics and builds no object: the whole batch is parsed
//! before the first record is made, and any problem is a `DecodeError` (the caller
//! then takes the pure-Python path, whose error the application sees as before).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyType};

use crate::records::{bytes_of, owned, with_parsed_batch, Header, Rec};

/// How many items a `ShareRecord` tuple holds (its nine public fields, the run, the id).
const ITEMS: usize = 11;

#[inline]
fn int_of(py: Python<'_>, v: i64) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: plain constructor call.
    owned(py, unsafe { ffi::PyLong_FromLongLong(v) })
}

/// The `ShareRecord`s of the v2 batch `data[start:end]`, in offset order.
///
/// `cls` must be a subclass of `tuple` (`ShareRecord`); each record is
/// `cls((topic, partition, offset, timestamp, timestamp_type, key, value, headers,
/// delivery_count, run, id_base + offset))` without the intermediate tuple.  Headers
/// are a tuple of `(str, bytes | None)` pairs (`()` when none).  The CRC is checked
/// only with `check_crc`.  A malformed batch raises `DecodeError` and builds nothing.
#[pyfunction]
#[pyo3(signature = (data, start, end, cls, topic, partition, delivery_count, run, id_base, check_crc=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn share_records<'py>(
    py: Python<'py>,
    data: &[u8],
    start: usize,
    end: usize,
    cls: &Bound<'py, PyType>,
    topic: &Bound<'py, PyAny>,
    partition: &Bound<'py, PyAny>,
    delivery_count: &Bound<'py, PyAny>,
    run: &Bound<'py, PyAny>,
    id_base: i64,
    check_crc: bool,
) -> PyResult<Bound<'py, PyList>> {
    // SAFETY: both are valid type objects.
    let is_tuple = unsafe {
        ffi::PyType_IsSubtype(cls.as_type_ptr(), std::ptr::addr_of_mut!(ffi::PyTuple_Type)) != 0
    };
    if !is_tuple {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "share_records: cls must be a subclass of tuple",
        ));
    }
    let where_ = format!("{topic}-{partition}");
    with_parsed_batch(data, start, end, check_crc, &where_, |head, recs, headers| {
        let fixed = Fixed {
            cls,
            topic,
            partition,
            delivery_count,
            run,
            id_base,
        };
        build(py, head, recs, headers, &fixed)
    })
}

/// What every record of the batch shares.
struct Fixed<'a, 'py> {
    cls: &'a Bound<'py, PyType>,
    topic: &'a Bound<'py, PyAny>,
    partition: &'a Bound<'py, PyAny>,
    delivery_count: &'a Bound<'py, PyAny>,
    run: &'a Bound<'py, PyAny>,
    id_base: i64,
}

fn build<'py>(
    py: Python<'py>,
    head: &crate::BatchHead,
    recs: &[Rec<'_>],
    headers: &[Header<'_>],
    fixed: &Fixed<'_, 'py>,
) -> PyResult<Bound<'py, PyList>> {
    let ts_type = int_of(py, i64::from(head.log_append))?;
    let none = py.None().into_bound(py);
    let empty = PyTuple::empty(py).into_any();
    let n = recs.len();
    // SAFETY: a new list of n empty slots, each filled below before it is returned.
    let list = owned(py, unsafe { ffi::PyList_New(n as ffi::Py_ssize_t) })?;
    let type_ptr = fixed.cls.as_type_ptr();
    let mut last_ts: Option<(i64, Bound<'py, PyAny>)> = None;
    let mut header_keys: Vec<(&[u8], Bound<'py, PyAny>)> = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let offset_value = head.base_offset.wrapping_add(i64::from(r.offset_delta));
        let offset = int_of(py, offset_value)?;
        let ts = if head.log_append {
            head.max_ts
        } else {
            head.first_ts.wrapping_add(r.ts_delta)
        };
        let timestamp = match &last_ts {
            Some((v, obj)) if *v == ts => obj.clone(),
            _ => {
                let obj = int_of(py, ts)?;
                last_ts = Some((ts, obj.clone()));
                obj
            }
        };
        let key = match r.key {
            None => none.clone(),
            Some(b) => bytes_of(py, b)?,
        };
        let value = match r.value {
            None => none.clone(),
            Some(b) => bytes_of(py, b)?,
        };
        let hdrs = if r.end_header > r.first_header {
            let mut items = Vec::with_capacity(r.end_header - r.first_header);
            for &Header { key: hk_raw, value: hv_raw } in &headers[r.first_header..r.end_header] {
                let hk = match header_keys.iter().find(|(k, _)| *k == hk_raw) {
                    Some((_, s)) => s.clone(),
                    None => {
                        // SAFETY: the parser checked the key is UTF-8; the call copies it.
                        let s = owned(py, unsafe {
                            ffi::PyUnicode_DecodeUTF8(
                                hk_raw.as_ptr().cast(),
                                hk_raw.len() as ffi::Py_ssize_t,
                                std::ptr::null(),
                            )
                        })?;
                        if header_keys.len() < 16 {
                            header_keys.push((hk_raw, s.clone()));
                        }
                        s
                    }
                };
                let hv = match hv_raw {
                    None => none.clone(),
                    Some(b) => bytes_of(py, b)?,
                };
                items.push(PyTuple::new(py, [hk, hv])?);
            }
            PyTuple::new(py, items)?.into_any()
        } else {
            empty.clone()
        };
        let id = int_of(py, fixed.id_base.wrapping_add(offset_value))?;
        let values: [Bound<'py, PyAny>; ITEMS] = [
            fixed.topic.clone(),
            fixed.partition.clone(),
            offset,
            timestamp,
            ts_type.clone(),
            key,
            value,
            hdrs,
            fixed.delivery_count.clone(),
            fixed.run.clone(),
            id,
        ];
        // SAFETY: `cls` is a tuple subclass (checked above): its tp_alloc-equivalent,
        // PyType_GenericAlloc, gives a tuple of ITEMS empty slots (as
        // `tuple.__new__(cls, ...)` does), each set once below with a new reference
        // (PyTuple_SetItem steals it); the list slot takes the record's reference.
        unsafe {
            let obj = owned(
                py,
                ffi::PyType_GenericAlloc(type_ptr, ITEMS as ffi::Py_ssize_t),
            )?;
            for (j, v) in values.into_iter().enumerate() {
                if ffi::PyTuple_SetItem(obj.as_ptr(), j as ffi::Py_ssize_t, v.into_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            ffi::PyList_SetItem(list.as_ptr(), i as ffi::Py_ssize_t, obj.into_ptr());
        }
    }
    list.cast_into::<PyList>().map_err(Into::into)
}
