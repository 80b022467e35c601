//! Hands an Arrow `RecordBatch` to pyarrow through the Arrow PyCapsule interface
//! (`__arrow_c_array__`), with no copy.

use std::sync::Mutex;

use arrow_array::ffi::to_ffi;
use arrow_array::{Array, RecordBatch, StructArray};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

#[pyclass(frozen, module = "kafkalite._native")]
pub struct ArrowBatch {
    batch: Mutex<Option<RecordBatch>>,
    rows: usize,
}

impl ArrowBatch {
    pub fn new(batch: RecordBatch) -> Self {
        let rows = batch.num_rows();
        ArrowBatch { batch: Mutex::new(Some(batch)), rows }
    }
}

#[pymethods]
impl ArrowBatch {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _ = requested_schema;
        let batch = self
            .batch
            .lock()
            .unwrap()
            .take()
            .ok_or_else(|| PyValueError::new_err("this Arrow batch was already exported"))?;
        let data = StructArray::from(batch).into_data();
        let (array, schema) = to_ffi(&data).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let schema = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
        let array = PyCapsule::new_with_value(py, array, c"arrow_array")?;
        PyTuple::new(py, [schema.into_any(), array.into_any()])
    }

    fn __len__(&self) -> usize {
        self.rows
    }
}
