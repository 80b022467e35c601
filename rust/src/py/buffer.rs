//! A read-only Python buffer over published bytes of a mapped segment (zero copy). The
//! object owns an `Arc` of the map, so the bytes outlive a roll, close or deletion.

use std::ffi::c_int;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::log_read::BatchSlice;

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
