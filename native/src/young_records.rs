//! Records kept out of the cyclic collector while aiogroup itself still holds them.
//!
//! Why: after each `getmany` the collector's first collection walked every record
//! just handed out (they are GC-tracked `ConsumerRecord` instances, one container
//! each): about 180 ns a 1 KiB record, 13.7 % of a Tansu 1 KiB drain's CPU (perf;
//! docs/benchmarks.md).  Untracking a record for good is not safe: a cycle the
//! application makes through it (`r.note = [r]`, or a deserialized dict that gets
//! the record put into it) would never be collected.  So the fetcher untracks
//! the records it builds only while it holds a reference of its own to each
//! (`aiogroup/_fetch/young_records.py`), and before it lets one go it tracks it again
//! if anything else still refers to it (`retrack_shared`): a record nobody else
//! holds is freed by its reference count, and cannot be part of a cycle; one that
//! is still referred to is tracked again, so from then on the collector sees it as
//! it sees any object.
//!
//! Both functions act only on instances of exactly `cls` (a GC type); anything
//! else in the list is left alone.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyType};

/// Whether `cls` is a class whose instances the collector tracks.
fn gc_class(cls: &Bound<'_, PyType>) -> bool {
    // SAFETY: a type object; PyType_GetFlags is in the limited API.
    let flags = unsafe { ffi::PyType_GetFlags(cls.as_type_ptr()) };
    flags & ffi::Py_TPFLAGS_HAVE_GC != 0
}

/// Untrack every instance of `cls` in `records` that the collector tracks; returns
/// how many.  The caller must hold a reference of its own to each (it keeps the
/// list) and call `retrack_shared` on it before letting them go.
#[pyfunction]
pub(crate) fn untrack(records: &Bound<'_, PyList>, cls: &Bound<'_, PyType>) -> usize {
    if !gc_class(cls) {
        return 0;
    }
    let want = cls.as_type_ptr();
    let list = records.as_ptr();
    let mut n = 0;
    // SAFETY: borrowed items of a list we hold, read with the GIL held (no call in
    // between can change the list); only instances of a GC type are passed to the
    // GC functions, and an untracked one is never untracked twice.
    unsafe {
        let len = ffi::PyList_Size(list);
        for i in 0..len {
            let item = ffi::PyList_GetItem(list, i);
            if item.is_null() {
                return n;
            }
            if ffi::Py_TYPE(item) == want && ffi::PyObject_GC_IsTracked(item) == 1 {
                ffi::PyObject_GC_UnTrack(item.cast());
                n += 1;
            }
        }
    }
    n
}

/// Track again every untracked instance of `cls` in `records` that something besides
/// this list refers to (a reference count above one); returns how many.
///
/// Called just before the list (the only reference aiogroup keeps) is dropped: a
/// record with a count of one is then freed at once; any other is tracked, so a
/// cycle through it is the collector's to find.  (Tracking is always safe: a record
/// that appears twice in the list is tracked too, which only costs a later walk.)
#[pyfunction]
pub(crate) fn retrack_shared(records: &Bound<'_, PyList>, cls: &Bound<'_, PyType>) -> usize {
    if !gc_class(cls) {
        return 0;
    }
    let want = cls.as_type_ptr();
    let list = records.as_ptr();
    let mut n = 0;
    // SAFETY: as in `untrack`; PyObject_GC_Track only on an untracked GC object.
    unsafe {
        let len = ffi::PyList_Size(list);
        for i in 0..len {
            let item = ffi::PyList_GetItem(list, i);
            if item.is_null() {
                return n;
            }
            if ffi::Py_TYPE(item) == want
                && ffi::Py_REFCNT(item) > 1
                && ffi::PyObject_GC_IsTracked(item) == 0
            {
                ffi::PyObject_GC_Track(item.cast());
                n += 1;
            }
        }
    }
    n
}

/// The items of `records` that something besides this list refers to (a reference
/// count above one), in order, as a new list; instances of other types than `cls`
/// are kept too.  The caller replaces its list with this one: the records only it
/// held are then freed at once, by their reference count, while their memory is
/// still warm (not a drain later), and the others stay held (still untracked).
#[pyfunction]
pub(crate) fn keep_shared<'py>(
    records: &Bound<'py, PyList>,
    cls: &Bound<'py, PyType>,
) -> PyResult<Bound<'py, PyList>> {
    let py = records.py();
    let want = cls.as_type_ptr();
    let list = records.as_ptr();
    // SAFETY: a new list; borrowed items of a list we hold, appended (with a new
    // reference) to it; the GIL is held and nothing runs between the reads.
    unsafe {
        let out = crate::records::owned(py, ffi::PyList_New(0))?;
        let len = ffi::PyList_Size(list);
        for i in 0..len {
            let item = ffi::PyList_GetItem(list, i);
            if item.is_null() {
                return Err(PyErr::fetch(py));
            }
            if (ffi::Py_TYPE(item) != want || ffi::Py_REFCNT(item) > 1)
                && ffi::PyList_Append(out.as_ptr(), item) != 0
            {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(out.cast_into::<PyList>()?)
    }
}
