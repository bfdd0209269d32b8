//! `HeldSteps`: the fast step of `async for` over held records, as an awaitable
//! that completes without raising.
//!
//! Why: once a refill holds a getmany's worth of records, each `async for` step only
//! compares a count, reads the membership gate, moves the position past the record
//! and hands it over (`aiogroup/_fetch/iteration.py`).  Written as an async generator
//! that step cost about 2,200 instructions a record over getmany's (callgrind,
//! `python -m benchmarks.record_path_cost`): the generator's protocol (an `asend`
//! object, the frame's resumption, the `StopIteration` carrying the value) and the
//! bytecode of the checks.  Here the object is its own async iterator and its own
//! awaitable: `__anext__` (the type's `am_anext` slot) returns the object itself
//! while a loaded run has records left; `await` reaches `am_send` (CPython >= 3.10
//! calls it directly, without `__next__`), which makes the checks in C and, when they
//! hold, moves the position and returns the record as the result - no
//! `StopIteration` object, no frame.  The step is made at the await, as the async
//! generator makes it: an `__anext__()` never awaited moves nothing, and a change
//! between `__anext__()` and its await (a rebalance in a task not yet run) is heeded.
//!
//! At a run's end or with nothing held, `__anext__` returns `slow(self)`: a coroutine
//! from Python that makes the full step (which may wait for data, honours stop() and
//! raises what the consumer raises) and calls `load` to tell this object the run it
//! may go on with.  When a check fails at the await, `am_send` delegates to `slow(self)`
//! the way `yield from` does (sends, `throw` and `close` forwarded).  Everything that
//! decides what may be handed out stays in Python; this type only repeats the
//! comparisons the Python fast branch makes.
//!
//! A step writes only the partition's `position` (the application may read it, or
//! commit, before the next step).  The run's `index` is written when `HeldRecords`
//! needs it (`sync`), and `changes.value` and `state.position` are read and written
//! in place once their place in the object is known (`Slot::probe`).
//!
//! Only CPython's limited API is used (`PyType_FromSpec` with the `Py_am_send` slot,
//! available since 3.10), so the abi3 wheel keeps working.

use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;

use pyo3::ffi;
use pyo3::ffi::{PyObject, PySendResult, Py_ssize_t};

type SendFunc =
    unsafe extern "C" fn(*mut PyObject, *mut PyObject, *mut *mut PyObject) -> PySendResult;

/// The object's layout: a plain PyObject header, then owned references (or NULL).
#[repr(C)]
struct HeldSteps {
    ob_base: PyObject,
    /// `DeliveryChanges`: its `value` is compared with `seen` at each step.
    changes: *mut PyObject,
    /// `SubscriptionState`: its `membership_valid_until` is the gate.
    sub: *mut PyObject,
    /// The loop's clock (the gate's deadline is in loop time).
    clock: *mut PyObject,
    /// `slow(self)` -> an awaitable for the full step.
    slow: *mut PyObject,
    /// The count when the full check was last made, or NULL: the next step is slow.
    seen: *mut PyObject,
    records: *mut PyObject,
    run: *mut PyObject,
    state: *mut PyObject,
    /// The record the pending `await` returns, or NULL (`hand_out`).
    ready: *mut PyObject,
    /// The full step's coroutine an `await` of this object delegates to (sends,
    /// `throw` and `close` forwarded, as `yield from` does), or NULL.
    inner: *mut PyObject,
    /// `__anext__()` found a run to step in; the step itself (the checks, the
    /// position) is made when the result is awaited, so that an `__anext__()` never
    /// awaited moves nothing and the checks are those of the moment of handing out.
    armed: bool,
    /// The gate's deadline when the run was loaded (a change of it bumps the count),
    /// or NULL: no deadline.
    until: *mut PyObject,
    /// The next record to hand out, and the index of the run's last one.
    i: Py_ssize_t,
    last: Py_ssize_t,
    /// The offset of `records[i]`, the next record to hand out.
    offset: i64,
    /// Whether the offsets of `records[i..=last]` are contiguous (checked at `load`:
    /// offsets rise strictly, so the span equals the count only then).  Then a
    /// step makes the position from `offset` and reads no attribute of a record.
    contiguous: bool,
    /// Where `changes.value` and `state.position` live in their objects
    /// (`Slot::probe`), so that a step reads and writes them without the generic
    /// attribute protocol.
    value_slot: Slot,
    position_slot: Slot,
}

/// A `__slots__` attribute's place in objects of one type, found by probing.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    tp: *mut ffi::PyTypeObject,
    /// Byte offset of the attribute's `PyObject *` in the object, or 0: unknown
    /// (the generic attribute protocol is used).
    offset: Py_ssize_t,
}

impl Slot {
    const UNKNOWN: Slot = Slot {
        tp: null_mut(),
        offset: 0,
    };

    /// Where `obj.name` is stored, for `obj`'s type.  Found without assuming a layout:
    /// a fresh sentinel is stored in the attribute and the object's own memory (its
    /// type's `__basicsize__`, past the object header) is searched for it; exactly
    /// one hit is the attribute's word.  Anything else (a property, a `__dict__`
    /// attribute, a custom `__setattr__`) leaves the offset unknown.  The old value
    /// is put back.  Errors are swallowed: unknown is always safe.
    unsafe fn probe(obj: *mut PyObject, name: *mut PyObject) -> Slot {
        let tp = ffi::Py_TYPE(obj);
        let mut slot = Slot { tp, offset: 0 };
        let size_obj = ffi::PyObject_GetAttrString(tp as *mut PyObject, c"__basicsize__".as_ptr());
        if size_obj.is_null() {
            ffi::PyErr_Clear();
            return slot;
        }
        let size = ffi::PyLong_AsSsize_t(size_obj);
        ffi::Py_DECREF(size_obj);
        if size <= 0 {
            ffi::PyErr_Clear();
            return slot;
        }
        let old = ffi::PyObject_GetAttr(obj, name);
        if old.is_null() {
            ffi::PyErr_Clear();
            return slot;
        }
        // A fresh float: a unique pointer whose allocation cannot start the cyclic
        // collector (which could run a finalizer while the attribute holds it).
        let sentinel = ffi::PyFloat_FromDouble(-0.5);
        if sentinel.is_null() || ffi::PyObject_SetAttr(obj, name, sentinel) != 0 {
            ffi::PyErr_Clear();
            if !sentinel.is_null() {
                ffi::Py_DECREF(sentinel);
            }
            ffi::Py_DECREF(old);
            return slot;
        }
        let word = std::mem::size_of::<*mut PyObject>() as Py_ssize_t;
        let mut found = 0;
        let mut at = std::mem::size_of::<PyObject>() as Py_ssize_t;
        while at + word <= size {
            if *((obj as *mut u8).offset(at) as *mut *mut PyObject) == sentinel {
                found += 1;
                slot.offset = at;
            }
            at += word;
        }
        if found != 1 {
            slot.offset = 0;
        }
        if ffi::PyObject_SetAttr(obj, name, old) != 0 {
            ffi::PyErr_Clear();
            slot.offset = 0;
        }
        ffi::Py_DECREF(old);
        ffi::Py_DECREF(sentinel);
        slot
    }

    /// Probe again only for an object of another type than the last one.
    unsafe fn refresh(&mut self, obj: *mut PyObject, name: *mut PyObject) {
        if ffi::Py_TYPE(obj) != self.tp {
            *self = Slot::probe(obj, name);
        }
    }

    /// A borrowed reference to `obj.name`, or NULL when the offset is unknown.
    #[inline]
    unsafe fn get(&self, obj: *mut PyObject) -> *mut PyObject {
        if self.offset == 0 || ffi::Py_TYPE(obj) != self.tp {
            return null_mut();
        }
        *((obj as *mut u8).offset(self.offset) as *mut *mut PyObject)
    }

    /// `obj.name = value` (a new reference, consumed); -1 with an error set.
    #[inline]
    unsafe fn set(&self, obj: *mut PyObject, name: *mut PyObject, value: *mut PyObject) -> c_int {
        if self.offset != 0 && ffi::Py_TYPE(obj) == self.tp {
            let place = (obj as *mut u8).offset(self.offset) as *mut *mut PyObject;
            let old = *place;
            *place = value;
            if !old.is_null() {
                ffi::Py_DECREF(old);
            }
            return 0;
        }
        let rc = ffi::PyObject_SetAttr(obj, name, value);
        ffi::Py_DECREF(value);
        rc
    }
}

struct Names {
    value: *mut PyObject,
    until: *mut PyObject,
    index: *mut PyObject,
    offset: *mut PyObject,
    position: *mut PyObject,
    one: *mut PyObject,
}

static mut NAMES: Names = Names {
    value: null_mut(),
    until: null_mut(),
    index: null_mut(),
    offset: null_mut(),
    position: null_mut(),
    one: null_mut(),
};

#[inline]
unsafe fn clear(slot: &mut *mut PyObject) {
    let p = *slot;
    if !p.is_null() {
        *slot = null_mut();
        ffi::Py_DECREF(p);
    }
}

#[inline]
unsafe fn set(slot: &mut *mut PyObject, value: *mut PyObject) {
    // `value` is a new reference (or NULL).
    let old = *slot;
    *slot = value;
    if !old.is_null() {
        ffi::Py_DECREF(old);
    }
}

unsafe fn none_to_null(obj: *mut PyObject) -> *mut PyObject {
    if obj == ffi::Py_None() {
        null_mut()
    } else {
        ffi::Py_INCREF(obj);
        obj
    }
}

/// 1: the fast step may hand out `records[i]`; 0: it may not; -1: an error is set.
#[inline]
unsafe fn fast_ok(s: &mut HeldSteps) -> c_int {
    if s.seen.is_null() || s.i >= s.last {
        return 0;
    }
    let names = &*std::ptr::addr_of!(NAMES);
    let value = s.value_slot.get(s.changes);
    if value != s.seen {
        let value = if value.is_null() {
            let v = ffi::PyObject_GetAttr(s.changes, names.value);
            if v.is_null() {
                return -1;
            }
            v
        } else {
            ffi::Py_INCREF(value);
            value
        };
        let same = ffi::PyObject_RichCompareBool(value, s.seen, ffi::Py_EQ);
        ffi::Py_DECREF(value);
        if same != 1 {
            return same;
        }
    }
    if s.until.is_null() {
        return 1;
    }
    // A deadline is set: read the clock at every step (a process frozen past the
    // deadline must hand out nothing when it wakes).
    let now = ffi::PyObject_CallNoArgs(s.clock);
    if now.is_null() {
        return -1;
    }
    let open = ffi::PyObject_RichCompareBool(now, s.until, ffi::Py_LT);
    ffi::Py_DECREF(now);
    open
}

/// The fast step: `records[i]` goes out, the position past it.  NULL with an error set.
#[inline]
unsafe fn step(s: &mut HeldSteps) -> *mut PyObject {
    let names = &*std::ptr::addr_of!(NAMES);
    let record = ffi::PyList_GetItem(s.records, s.i);
    if record.is_null() {
        return null_mut();
    }
    let after = s.offset.wrapping_add(1);
    let (position, n) = if s.contiguous {
        let p = ffi::PyLong_FromLongLong(after);
        if p.is_null() {
            return null_mut();
        }
        (p, after)
    } else {
        // With gaps, the position after `record` is its offset + 1 and the next
        // record's offset is read (when the two are equal, its int is stored as is).
        let next = ffi::PyList_GetItem(s.records, s.i + 1);
        if next.is_null() {
            return null_mut();
        }
        let next_offset = ffi::PyObject_GetAttr(next, names.offset);
        if next_offset.is_null() {
            return null_mut();
        }
        let n = ffi::PyLong_AsLongLong(next_offset);
        if n == -1 && !ffi::PyErr_Occurred().is_null() {
            ffi::Py_DECREF(next_offset);
            return null_mut();
        }
        if n == after {
            (next_offset, n)
        } else {
            ffi::Py_DECREF(next_offset);
            let p = ffi::PyLong_FromLongLong(after);
            if p.is_null() {
                return null_mut();
            }
            (p, n)
        }
    };
    if s.position_slot.set(s.state, names.position, position) != 0 {
        return null_mut();
    }
    s.i += 1;
    s.offset = n;
    ffi::Py_INCREF(record);
    record
}

unsafe extern "C" fn am_anext(obj: *mut PyObject) -> *mut PyObject {
    let s = &mut *(obj as *mut HeldSteps);
    if !s.ready.is_null() {
        ffi::Py_INCREF(obj);
        return obj;
    }
    // An earlier await abandoned mid-step (its task closed): let its coroutine go.
    if !s.inner.is_null() {
        close_inner(s);
    }
    if !s.seen.is_null() && s.i < s.last {
        // The checks and the step are made by the await (`am_send`).
        s.armed = true;
        ffi::Py_INCREF(obj);
        return obj;
    }
    // The full step, in Python: forget the run until it loads one again.
    s.armed = false;
    clear(&mut s.seen);
    call_slow(s, obj)
}

/// `slow(self)`: the full step's coroutine (a new reference), or NULL.
unsafe fn call_slow(s: &mut HeldSteps, obj: *mut PyObject) -> *mut PyObject {
    let args = ffi::PyTuple_New(1);
    if args.is_null() {
        return null_mut();
    }
    ffi::Py_INCREF(obj);
    ffi::PyTuple_SetItem(args, 0, obj);
    let awaitable = ffi::PyObject_Call(s.slow, args, null_mut());
    ffi::Py_DECREF(args);
    awaitable
}

/// Close the delegated coroutine (its `finally` blocks run) and forget it.
unsafe fn close_inner(s: &mut HeldSteps) {
    let inner = s.inner;
    s.inner = null_mut();
    let r = ffi::PyObject_CallMethod(inner, c"close".as_ptr(), null_mut());
    if r.is_null() {
        ffi::PyErr_WriteUnraisable(inner);
    } else {
        ffi::Py_DECREF(r);
    }
    ffi::Py_DECREF(inner);
}

/// Send `arg` into the delegated coroutine; forget it once it has finished.
unsafe fn send_inner(
    s: &mut HeldSteps,
    arg: *mut PyObject,
    result: *mut *mut PyObject,
) -> PySendResult {
    let inner = s.inner;
    let status = ffi::PyIter_Send(inner, arg, result);
    if !matches!(status, PySendResult::PYGEN_NEXT) {
        s.inner = null_mut();
        ffi::Py_DECREF(inner);
    }
    status
}

unsafe extern "C" fn self_iter(obj: *mut PyObject) -> *mut PyObject {
    ffi::Py_INCREF(obj);
    obj
}

unsafe extern "C" fn am_send(
    obj: *mut PyObject,
    arg: *mut PyObject,
    result: *mut *mut PyObject,
) -> PySendResult {
    let s = &mut *(obj as *mut HeldSteps);
    if !s.inner.is_null() {
        return send_inner(s, arg, result);
    }
    let record = s.ready;
    if !record.is_null() {
        s.ready = null_mut();
        *result = record;
        return PySendResult::PYGEN_RETURN;
    }
    if !s.armed {
        ffi::PyErr_SetString(
            ffi::PyExc_RuntimeError,
            c"HeldSteps awaited with no step at hand: await what __anext__() returned".as_ptr(),
        );
        *result = null_mut();
        return PySendResult::PYGEN_ERROR;
    }
    s.armed = false;
    match fast_ok(s) {
        1 => {
            let record = step(s);
            *result = record;
            if record.is_null() {
                PySendResult::PYGEN_ERROR
            } else {
                PySendResult::PYGEN_RETURN
            }
        }
        0 => {
            // Something changed between __anext__() and this await (a rebalance, a
            // pause, the gate): the full step decides, as if __anext__() had found it.
            clear(&mut s.seen);
            let coro = call_slow(s, obj);
            if coro.is_null() {
                *result = null_mut();
                return PySendResult::PYGEN_ERROR;
            }
            s.inner = coro;
            send_inner(s, ffi::Py_None(), result)
        }
        _ => {
            *result = null_mut();
            PySendResult::PYGEN_ERROR
        }
    }
}

/// `throw(...)`: into the delegated coroutine (a cancellation of the awaiting task
/// reaches the full step where it waits, as with `yield from`).
unsafe extern "C" fn throw(obj: *mut PyObject, args: *mut PyObject) -> *mut PyObject {
    let s = &mut *(obj as *mut HeldSteps);
    if s.inner.is_null() {
        // Nothing in flight: the exception is raised here, as given.
        let n = ffi::PyTuple_Size(args);
        let first = if n > 0 { ffi::PyTuple_GetItem(args, 0) } else { null_mut() };
        if first.is_null() {
            ffi::PyErr_SetString(ffi::PyExc_TypeError, c"throw() needs an exception".as_ptr());
        } else if ffi::PyExceptionInstance_Check(first) != 0 {
            ffi::PyErr_SetObject(ffi::Py_TYPE(first) as *mut PyObject, first);
        } else {
            let value = if n > 1 { ffi::PyTuple_GetItem(args, 1) } else { ffi::Py_None() };
            ffi::PyErr_SetObject(first, value);
        }
        return null_mut();
    }
    let inner = s.inner;
    ffi::Py_INCREF(inner);
    let meth = ffi::PyObject_GetAttrString(inner, c"throw".as_ptr());
    let r = if meth.is_null() {
        null_mut()
    } else {
        let r = ffi::PyObject_Call(meth, args, null_mut());
        ffi::Py_DECREF(meth);
        r
    };
    if r.is_null() && s.inner == inner {
        // Finished (StopIteration carries the result) or failed: forget it.
        s.inner = null_mut();
        ffi::Py_DECREF(inner);
    }
    ffi::Py_DECREF(inner);
    r
}

/// `close()`: close the delegated coroutine, if any.
unsafe extern "C" fn close(obj: *mut PyObject, _args: *mut PyObject) -> *mut PyObject {
    let s = &mut *(obj as *mut HeldSteps);
    s.armed = false;
    if !s.inner.is_null() {
        close_inner(s);
    }
    ffi::Py_NewRef(ffi::Py_None())
}

/// `__next__`, for callers that do not use `am_send` (a tracer's `SEND`): the same
/// result, carried by `StopIteration` as the iterator protocol wants it.
unsafe extern "C" fn tp_iternext(obj: *mut PyObject) -> *mut PyObject {
    let mut result: *mut PyObject = null_mut();
    match am_send(obj, ffi::Py_None(), &mut result) {
        PySendResult::PYGEN_RETURN => {
            let args = ffi::PyTuple_New(1);
            if args.is_null() {
                ffi::Py_DECREF(result);
                return null_mut();
            }
            ffi::PyTuple_SetItem(args, 0, result);
            let exc = ffi::PyObject_Call(ffi::PyExc_StopIteration, args, null_mut());
            ffi::Py_DECREF(args);
            if !exc.is_null() {
                ffi::PyErr_SetObject(ffi::PyExc_StopIteration, exc);
                ffi::Py_DECREF(exc);
            }
            null_mut()
        }
        PySendResult::PYGEN_NEXT => result,
        _ => null_mut(),
    }
}

unsafe extern "C" fn tp_traverse(
    obj: *mut PyObject,
    visit: ffi::visitproc,
    arg: *mut c_void,
) -> c_int {
    let s = &*(obj as *mut HeldSteps);
    for p in [
        s.changes, s.sub, s.clock, s.slow, s.seen, s.records, s.run, s.state, s.ready, s.until,
        s.inner,
    ] {
        if !p.is_null() {
            let rc = visit(p, arg);
            if rc != 0 {
                return rc;
            }
        }
    }
    visit(ffi::Py_TYPE(obj) as *mut PyObject, arg)
}

unsafe extern "C" fn tp_clear(obj: *mut PyObject) -> c_int {
    let s = &mut *(obj as *mut HeldSteps);
    clear(&mut s.changes);
    clear(&mut s.sub);
    clear(&mut s.clock);
    clear(&mut s.slow);
    clear(&mut s.seen);
    clear(&mut s.records);
    clear(&mut s.run);
    clear(&mut s.state);
    clear(&mut s.ready);
    clear(&mut s.until);
    clear(&mut s.inner);
    0
}

unsafe extern "C" fn tp_dealloc(obj: *mut PyObject) {
    let tp = ffi::Py_TYPE(obj);
    ffi::PyObject_GC_UnTrack(obj as *mut c_void);
    tp_clear(obj);
    let free = ffi::PyType_GetSlot(tp, ffi::Py_tp_free);
    let free: ffi::freefunc = std::mem::transmute::<*mut c_void, ffi::freefunc>(free);
    free(obj as *mut c_void);
    ffi::Py_DECREF(tp as *mut PyObject);
}

/// `HeldSteps(changes, sub, clock, slow)`.
unsafe extern "C" fn tp_new(
    tp: *mut ffi::PyTypeObject,
    args: *mut PyObject,
    kwargs: *mut PyObject,
) -> *mut PyObject {
    if !kwargs.is_null() && ffi::PyDict_Size(kwargs) != 0 {
        ffi::PyErr_SetString(
            ffi::PyExc_TypeError,
            c"HeldSteps(changes, sub, clock, slow) takes no keyword arguments".as_ptr(),
        );
        return null_mut();
    }
    if ffi::PyTuple_Size(args) != 4 {
        ffi::PyErr_SetString(
            ffi::PyExc_TypeError,
            c"HeldSteps(changes, sub, clock, slow) takes exactly 4 arguments".as_ptr(),
        );
        return null_mut();
    }
    let clock = ffi::PyTuple_GetItem(args, 2);
    let slow = ffi::PyTuple_GetItem(args, 3);
    if ffi::PyCallable_Check(clock) == 0 || ffi::PyCallable_Check(slow) == 0 {
        ffi::PyErr_SetString(
            ffi::PyExc_TypeError,
            c"HeldSteps: clock and slow must be callable".as_ptr(),
        );
        return null_mut();
    }
    let alloc = ffi::PyType_GetSlot(tp, ffi::Py_tp_alloc);
    let alloc: ffi::allocfunc = std::mem::transmute::<*mut c_void, ffi::allocfunc>(alloc);
    let obj = alloc(tp, 0);
    if obj.is_null() {
        return null_mut();
    }
    let s = &mut *(obj as *mut HeldSteps);
    for (slot, k) in [
        (&mut s.changes, 0),
        (&mut s.sub, 1),
        (&mut s.clock, 2),
        (&mut s.slow, 3),
    ] {
        let item = ffi::PyTuple_GetItem(args, k);
        ffi::Py_INCREF(item);
        *slot = item;
    }
    s.i = 0;
    s.last = 0;
    s.offset = 0;
    s.contiguous = false;
    s.armed = false;
    s.value_slot = Slot::probe(s.changes, (*std::ptr::addr_of!(NAMES)).value);
    s.position_slot = Slot::UNKNOWN;
    obj
}

/// `load(seen, records, i, last, run, state)`: the run the next steps may go on
/// with, checked in full when the count was `seen`; `seen=None` clears it.
unsafe extern "C" fn load(obj: *mut PyObject, args: *mut PyObject) -> *mut PyObject {
    let s = &mut *(obj as *mut HeldSteps);
    if ffi::PyTuple_Size(args) != 6 {
        ffi::PyErr_SetString(
            ffi::PyExc_TypeError,
            c"load(seen, records, i, last, run, state) takes exactly 6 arguments".as_ptr(),
        );
        return null_mut();
    }
    let seen = ffi::PyTuple_GetItem(args, 0);
    if seen == ffi::Py_None() {
        clear(&mut s.seen);
        clear(&mut s.records);
        clear(&mut s.run);
        clear(&mut s.state);
        clear(&mut s.until);
        s.i = 0;
        s.last = 0;
        return ffi::Py_NewRef(ffi::Py_None());
    }
    let records = ffi::PyTuple_GetItem(args, 1);
    if ffi::PyList_Check(records) == 0 {
        ffi::PyErr_SetString(
            ffi::PyExc_TypeError,
            c"load: records must be a list".as_ptr(),
        );
        return null_mut();
    }
    let i = ffi::PyLong_AsSsize_t(ffi::PyTuple_GetItem(args, 2));
    if i == -1 && !ffi::PyErr_Occurred().is_null() {
        return null_mut();
    }
    let last = ffi::PyLong_AsSsize_t(ffi::PyTuple_GetItem(args, 3));
    if last == -1 && !ffi::PyErr_Occurred().is_null() {
        return null_mut();
    }
    if i < 0 || i > last || last >= ffi::PyList_Size(records) {
        ffi::PyErr_SetString(
            ffi::PyExc_ValueError,
            c"load: need 0 <= i <= last < len(records)".as_ptr(),
        );
        return null_mut();
    }
    let run = ffi::PyTuple_GetItem(args, 4);
    let state = ffi::PyTuple_GetItem(args, 5);
    let names = &*std::ptr::addr_of!(NAMES);
    let offset = ffi::PyObject_GetAttr(ffi::PyList_GetItem(records, i), names.offset);
    if offset.is_null() {
        return null_mut();
    }
    let o = ffi::PyLong_AsLongLong(offset);
    ffi::Py_DECREF(offset);
    if o == -1 && !ffi::PyErr_Occurred().is_null() {
        return null_mut();
    }
    let last_offset = ffi::PyObject_GetAttr(ffi::PyList_GetItem(records, last), names.offset);
    if last_offset.is_null() {
        return null_mut();
    }
    let lo = ffi::PyLong_AsLongLong(last_offset);
    ffi::Py_DECREF(last_offset);
    if lo == -1 && !ffi::PyErr_Occurred().is_null() {
        return null_mut();
    }
    let until = ffi::PyObject_GetAttr(s.sub, names.until);
    if until.is_null() {
        return null_mut();
    }
    set(&mut s.until, none_to_null(until));
    ffi::Py_DECREF(until);
    s.position_slot.refresh(state, names.position);
    set(&mut s.seen, none_to_null(seen));
    ffi::Py_INCREF(records);
    set(&mut s.records, records);
    ffi::Py_INCREF(run);
    set(&mut s.run, run);
    ffi::Py_INCREF(state);
    set(&mut s.state, state);
    s.i = i;
    s.last = last;
    s.offset = o;
    s.contiguous = lo.wrapping_sub(o) == (last - i) as i64;
    ffi::Py_NewRef(ffi::Py_None())
}

/// `sync()`: write the progress to `run.index` and let go of the run.
///
/// The steps do not write `run.index` (an int object a step); `HeldRecords` calls
/// this before anything of it reads an index (`aiogroup._fetch.iteration`).  The
/// run is let go of so that a stale index is never written again; the next step is
/// a slow one, which loads a run again.
unsafe extern "C" fn sync(obj: *mut PyObject, _args: *mut PyObject) -> *mut PyObject {
    let s = &mut *(obj as *mut HeldSteps);
    if !s.run.is_null() {
        let names = &*std::ptr::addr_of!(NAMES);
        let index = ffi::PyLong_FromSsize_t(s.i);
        if index.is_null() {
            return null_mut();
        }
        let rc = ffi::PyObject_SetAttr(s.run, names.index, index);
        ffi::Py_DECREF(index);
        if rc != 0 {
            return null_mut();
        }
    }
    clear(&mut s.seen);
    clear(&mut s.records);
    clear(&mut s.run);
    clear(&mut s.state);
    clear(&mut s.until);
    ffi::Py_NewRef(ffi::Py_None())
}

/// `hand_out(record)`: the next await returns `record` (the slow step's own result,
/// when it has one at once); returns self, to be awaited.
unsafe extern "C" fn hand_out(obj: *mut PyObject, record: *mut PyObject) -> *mut PyObject {
    let s = &mut *(obj as *mut HeldSteps);
    ffi::Py_INCREF(record);
    set(&mut s.ready, record);
    ffi::Py_INCREF(obj);
    obj
}

static mut METHODS: [ffi::PyMethodDef; 6] = [
    ffi::PyMethodDef {
        ml_name: c"throw".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunction: throw },
        ml_flags: ffi::METH_VARARGS,
        ml_doc: c"throw(exc): into the full step this await delegates to".as_ptr(),
    },
    ffi::PyMethodDef {
        ml_name: c"close".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunction: close },
        ml_flags: ffi::METH_NOARGS,
        ml_doc: c"close(): close the full step this await delegates to, if any".as_ptr(),
    },
    ffi::PyMethodDef {
        ml_name: c"sync".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunction: sync },
        ml_flags: ffi::METH_NOARGS,
        ml_doc: c"sync(): write the progress to run.index and let go of the run".as_ptr(),
    },
    ffi::PyMethodDef {
        ml_name: c"load".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunction: load },
        ml_flags: ffi::METH_VARARGS,
        ml_doc: c"load(seen, records, i, last, run, state): the run the next steps go on with"
            .as_ptr(),
    },
    ffi::PyMethodDef {
        ml_name: c"hand_out".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunction: hand_out,
        },
        ml_flags: ffi::METH_O,
        ml_doc: c"hand_out(record): self, whose await returns record".as_ptr(),
    },
    ffi::PyMethodDef::zeroed(),
];

/// Make the type (once per module import): a new reference, or NULL with an error set.
pub fn make_type() -> *mut PyObject {
    unsafe {
        let names = &mut *std::ptr::addr_of_mut!(NAMES);
        for (slot, text) in [
            (&mut names.value, c"value"),
            (&mut names.until, c"membership_valid_until"),
            (&mut names.index, c"index"),
            (&mut names.offset, c"offset"),
            (&mut names.position, c"position"),
        ] {
            if slot.is_null() {
                *slot = ffi::PyUnicode_InternFromString(text.as_ptr());
                if slot.is_null() {
                    return null_mut();
                }
            }
        }
        if names.one.is_null() {
            names.one = ffi::PyLong_FromLong(1);
            if names.one.is_null() {
                return null_mut();
            }
        }
        let send: SendFunc = am_send;
        let mut slots = [
            ffi::PyType_Slot { slot: ffi::Py_tp_new, pfunc: tp_new as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_tp_dealloc, pfunc: tp_dealloc as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_tp_traverse, pfunc: tp_traverse as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_tp_clear, pfunc: tp_clear as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_tp_iter, pfunc: self_iter as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_tp_iternext, pfunc: tp_iternext as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_am_aiter, pfunc: self_iter as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_am_anext, pfunc: am_anext as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_am_await, pfunc: self_iter as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_am_send, pfunc: send as *mut c_void },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_methods,
                pfunc: std::ptr::addr_of_mut!(METHODS) as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_doc,
                pfunc: c"HeldSteps(changes, sub, clock, slow): async for's fast step over held records (aiogroup._fetch.iteration)".as_ptr() as *mut c_void,
            },
            ffi::PyType_Slot { slot: 0, pfunc: null_mut() },
        ];
        let mut spec = ffi::PyType_Spec {
            name: c"aiogroup_native.HeldSteps".as_ptr() as *const c_char,
            basicsize: std::mem::size_of::<HeldSteps>() as c_int,
            itemsize: 0,
            flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_HAVE_GC) as _,
            slots: slots.as_mut_ptr(),
        };
        ffi::PyType_FromSpec(&mut spec)
    }
}
