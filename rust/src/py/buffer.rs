//! A read-only Python buffer over published bytes of a mapped segment (zero copy). The
//! object owns an `Arc` of the map, so the bytes outlive a roll, close or deletion. And the
//! other direction: borrowing the bytes of many Python `bytes` objects without copying them.

use std::ffi::c_int;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::storage::log_read::BatchSlice;

#[pyclass(frozen, module = "kafkalite._native")]
pub struct BatchView {
    pub slice: BatchSlice,
}

#[pymethods]
impl BatchView {
    /// # Safety
    /// Called by CPython with a valid `view` pointer.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("kafkalite log views are read-only"));
        }
        let bytes = slf.get().slice.bytes();
        static EMPTY: [u8; 1] = [0];
        let ptr = if bytes.is_empty() { EMPTY.as_ptr() } else { bytes.as_ptr() };
        // SAFETY: `ptr` points at `bytes.len()` published, immutable bytes of a map owned by
        // `slf` (or at a static), and PyBuffer_FillInfo takes a reference to `slf`, which keeps
        // the map alive for as long as the buffer exists. readonly=1 forbids writes.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr as *mut _, bytes.len() as ffi::Py_ssize_t, 1, flags)
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.slice.len
    }
}

/// The bytes of every item of `items` (no copy), or the index of the first item that is not
/// `bytes`. One C call per item reads both pointer and length (`PyBytes_AsStringAndSize`) and
/// no reference counts change: the tuple already holds a reference to each item, and it is
/// immutable, so the slices stay valid for as long as it is borrowed, with the GIL released too.
/// (The append path hands a thousand values per call to the engine this way.)
pub(crate) fn bytes_items<'a>(items: &'a Bound<'_, PyTuple>) -> Result<Vec<&'a [u8]>, usize> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter_borrowed().enumerate() {
        let (mut ptr, mut len): (*mut std::ffi::c_char, ffi::Py_ssize_t) = (std::ptr::null_mut(), 0);
        // SAFETY: `item` is a live object (the tuple holds it, and we hold the GIL).
        // PyBytes_AsStringAndSize checks that it is a bytes object itself (a separate type
        // check cost a third C call per value) and fails, raising TypeError, for anything else.
        if unsafe { ffi::PyBytes_AsStringAndSize(item.as_ptr(), &mut ptr, &mut len) } != 0 {
            drop(PyErr::take(items.py())); // reported as the index, with the caller's message
            return Err(i);
        }
        // SAFETY: for a bytes object the call set `ptr` and `len` to the object's own buffer.
        // That buffer lives as long as the object, which the tuple keeps alive for 'a (the
        // tuple is borrowed for 'a and never changes), and a bytes object's contents are
        // immutable, so the slice is valid and unaliased by writes for 'a.
        let slice = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize) };
        out.push(slice);
    }
    Ok(out)
}
