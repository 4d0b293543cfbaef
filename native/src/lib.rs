//! `logstore_native`: the compiled kernels of logstore's Kafka protocol listener.
//!
//! Every function here takes and gives plain buffers (anything with Python's buffer protocol: `bytes`,
//! pyarrow buffers, numpy arrays) and does its work with the interpreter lock released, so a node's event
//! loop, committers and fetch threads run beside it. The Python side (`kafka_api/records.py`) turns the
//! buffers into Arrow arrays and back.

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::{create_exception, ffi};
use std::ffi::{c_int, c_void};

mod batch;
mod crc32c;
mod varint;

create_exception!(
    logstore_native,
    CorruptRecords,
    PyValueError,
    "Malformed record batch bytes."
);
create_exception!(
    logstore_native,
    RecordsTooLarge,
    PyValueError,
    "A batch holding more than Arrow's 32-bit offsets address."
);

/// Bytes owned by Rust, lent to Python read-only through the buffer protocol (no copy).
#[pyclass(frozen, module = "logstore_native")]
struct Buffer {
    data: Data,
}

enum Data {
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::U8(v) => v,
            // SAFETY: any initialised integer's bytes are valid u8s; the view lives as long as the Vec.
            Data::I32(v) => unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 4) },
            Data::I64(v) => unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 8) },
        }
    }
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.data.bytes().len()
    }

    /// # Safety
    /// `view` is a `Py_buffer` the interpreter hands in; the bytes it points at belong to this object,
    /// which the view keeps alive (`view.obj`), and never change (`frozen`).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("View is null"));
        }
        if (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err(
                "a logstore_native.Buffer is read-only",
            ));
        }
        let bytes = slf.get().data.bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        // SAFETY: `view` is non-null (checked); the interpreter owns it for the duration of the call.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr as *mut c_void;
            (*view).len = len as isize;
            (*view).readonly = 1;
            (*view).itemsize = 1;
            (*view).format = if (flags & ffi::PyBUF_FORMAT) == ffi::PyBUF_FORMAT {
                c"B".as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if (flags & ffi::PyBUF_ND) == ffi::PyBUF_ND {
                &mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if (flags & ffi::PyBUF_STRIDES) == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

fn buffer(py: Python<'_>, data: Data) -> PyResult<Py<Buffer>> {
    Py::new(py, Buffer { data })
}

/// A read-only view of the bytes of any object with the buffer protocol (`bytes`, a pyarrow buffer, a numpy
/// array of any dtype), held from `get` until dropped (with the interpreter lock held).
struct Bytes {
    view: Box<ffi::Py_buffer>,
}

impl Bytes {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        // SAFETY: a zeroed Py_buffer is what PyObject_GetBuffer fills; PyBUF_SIMPLE asks for contiguous bytes.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_SIMPLE) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Bytes { view })
    }

    fn slice(&self) -> &[u8] {
        if self.view.len == 0 {
            return &[];
        }
        // SAFETY: a PyBUF_SIMPLE view is `len` contiguous bytes, neither freed nor resized while it is held;
        // its exporters here are immutable (`bytes`, pyarrow buffers) or not written while a call reads them.
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.view.len as usize) }
    }
}

impl Drop for Bytes {
    fn drop(&mut self) {
        // SAFETY: the view was filled by PyObject_GetBuffer; every Bytes is dropped with the lock held.
        unsafe { ffi::PyBuffer_Release(&mut *self.view) }
    }
}

fn optional(obj: &Bound<'_, PyAny>) -> PyResult<Option<Bytes>> {
    if obj.is_none() {
        Ok(None)
    } else {
        Bytes::get(obj).map(Some)
    }
}

/// The CRC-32C of `data` continued from `crc` (the CRC of what came before it; 0 to start).
#[pyfunction(name = "crc32c")]
#[pyo3(signature = (data, crc = 0))]
fn crc32c_py(py: Python<'_>, data: &Bound<'_, PyAny>, crc: u32) -> PyResult<u32> {
    let data = Bytes::get(data)?;
    let s = data.slice();
    Ok(py.detach(|| crc32c::append(crc, s)))
}

/// The table-driven CRC-32C, which CPUs without SSE 4.2 use: the tests hold it to the instruction's.
#[pyfunction]
#[pyo3(signature = (data, crc = 0))]
fn crc32c_portable(data: &Bound<'_, PyAny>, crc: u32) -> PyResult<u32> {
    Ok(crc32c::append_portable(crc, Bytes::get(data)?.slice()))
}

fn column<'py>(py: Python<'py>, c: batch::Column) -> PyResult<Bound<'py, PyTuple>> {
    let validity = if c.nulls == 0 {
        py.None()
    } else {
        buffer(py, Data::U8(c.validity))?.into_any()
    };
    PyTuple::new(
        py,
        [
            validity,
            buffer(py, Data::I32(c.offsets))?.into_any(),
            buffer(py, Data::U8(c.data))?.into_any(),
            c.nulls.into_pyobject(py)?.into_any().unbind(),
        ],
    )
}

/// Decode the `count` records of a batch's (decompressed) records section `body`, base timestamp
/// `base_timestamp_ms`.
///
/// Returns `(sizes, timestamps_us, keys, values, headers)`: `sizes` and `timestamps_us` int64 buffers (each
/// record's encoded bytes, its timestamp in µs); `keys`, `values` each `(validity | None, offsets, data,
/// null_count)`, an Arrow binary array's buffers (int32 offsets); `headers` None when no record has any, else
/// `(list_offsets, keys, values)`: int32 offsets of each record's headers, then the headers' keys (UTF-8,
/// validated) and values in the same form.
///
/// Raises `CorruptRecords` for malformed bytes (a field past its record, a record past the batch, another
/// record count, bytes left over, a null or non-UTF-8 header key), `RecordsTooLarge` past 2 GiB.
#[pyfunction]
fn decode_records<'py>(
    py: Python<'py>,
    body: &Bound<'py, PyAny>,
    count: i64,
    base_timestamp_ms: i64,
) -> PyResult<Bound<'py, PyTuple>> {
    let count = usize::try_from(count)
        .map_err(|_| CorruptRecords::new_err(format!("a record batch declares {count} records")))?;
    let body = Bytes::get(body)?;
    let s = body.slice();
    let decoded = py
        .detach(|| batch::decode(s, count, base_timestamp_ms))
        .map_err(|e| match e {
            batch::DecodeError::Corrupt(m) => CorruptRecords::new_err(m),
            batch::DecodeError::TooLarge(m) => RecordsTooLarge::new_err(m),
        })?;
    let headers = match decoded.headers {
        None => py.None(),
        Some((offsets, keys, values)) => PyTuple::new(
            py,
            [
                buffer(py, Data::I32(offsets))?.into_any(),
                column(py, keys)?.into_any().unbind(),
                column(py, values)?.into_any().unbind(),
            ],
        )?
        .into_any()
        .unbind(),
    };
    PyTuple::new(
        py,
        [
            buffer(py, Data::I64(decoded.sizes))?.into_any(),
            buffer(py, Data::I64(decoded.timestamps_us))?.into_any(),
            column(py, decoded.keys)?.into_any().unbind(),
            column(py, decoded.values)?.into_any().unbind(),
            headers,
        ],
    )
}

/// `(validity | None, offsets, data, offset)` of an Arrow binary or UTF-8 array, as Python holds them.
struct BinaryArg {
    validity: Option<Bytes>,
    offsets: Bytes,
    data: Option<Bytes>,
    offset: usize,
}

impl BinaryArg {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (validity, offsets, data, offset): (
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            usize,
        ) = obj.extract()?;
        Ok(BinaryArg {
            validity: optional(&validity)?,
            offsets: Bytes::get(&offsets)?,
            data: optional(&data)?,
            offset,
        })
    }

    fn view(&self) -> batch::BinaryIn<'_> {
        batch::BinaryIn {
            validity: self.validity.as_ref().map(Bytes::slice),
            offsets: self.offsets.slice(),
            data: self.data.as_ref().map_or(&[], Bytes::slice),
            offset: self.offset,
        }
    }
}

/// The columns of one batch to encode, as Python hands them over (see `encode_batches`), held while they are read.
struct BatchArg {
    rows: usize,
    offsets: Bytes,
    timestamps: Bytes,
    keys: BinaryArg,
    values: BinaryArg,
    headers: Option<(Option<Bytes>, Bytes, usize, BinaryArg, BinaryArg)>,
    attributes: i16,
}

impl BatchArg {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        type Args<'py> = (
            usize,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
            i16,
        );
        let (rows, offsets, timestamps, keys, values, headers, attributes): Args<'_> =
            obj.extract()?;
        let headers = if headers.is_none() {
            None
        } else {
            type HeaderArgs<'py> = (
                Bound<'py, PyAny>,
                Bound<'py, PyAny>,
                usize,
                Bound<'py, PyAny>,
                Bound<'py, PyAny>,
            );
            let (validity, list_offsets, offset, hkeys, hvalues): HeaderArgs<'_> =
                headers.extract()?;
            Some((
                optional(&validity)?,
                Bytes::get(&list_offsets)?,
                offset,
                BinaryArg::get(&hkeys)?,
                BinaryArg::get(&hvalues)?,
            ))
        };
        Ok(BatchArg {
            rows,
            offsets: Bytes::get(&offsets)?,
            timestamps: Bytes::get(&timestamps)?,
            keys: BinaryArg::get(&keys)?,
            values: BinaryArg::get(&values)?,
            headers,
            attributes,
        })
    }

    fn view(&self) -> batch::RecordsIn<'_> {
        batch::RecordsIn {
            rows: self.rows,
            offsets: self.offsets.slice(),
            timestamps_us: self.timestamps.slice(),
            keys: self.keys.view(),
            values: self.values.view(),
            headers: self
                .headers
                .as_ref()
                .map(|(validity, list_offsets, offset, k, v)| batch::HeadersIn {
                    validity: validity.as_ref().map(Bytes::slice),
                    offsets: list_offsets.slice(),
                    offset: *offset,
                    keys: k.view(),
                    values: v.view(),
                }),
        }
    }
}

/// Uncompressed record batches v2, one after another in one `bytes`: one batch per element of `batches`, each
/// `(rows, offsets, timestamps_us, keys, values, headers, attributes)` — `rows` records (at least one), int64
/// `offsets` ascending and int64 `timestamps_us` (microseconds: Kafka's milliseconds are these / 1000); `keys` and `values` `(validity | None, offsets, data | None,
/// array_offset)` of Arrow binary arrays; `headers` None, or `(validity | None, list_offsets, array_offset, keys,
/// values)` of the list array and its struct's two fields (a null header key is written empty); `attributes` the
/// batch's (its timestamp type bit). Offset deltas come from the records' own offsets; producer id, epoch and
/// sequence are -1; `leader_epoch` is every batch's. The batches are sized first and written into the `bytes`
/// once, with the interpreter lock released. Raises `ValueError` for buffers that do not hold `rows` records, or
/// offsets that do not ascend.
#[pyfunction]
fn encode_batches<'py>(
    py: Python<'py>,
    batches: &Bound<'py, PyAny>,
    leader_epoch: i32,
) -> PyResult<Bound<'py, PyBytes>> {
    let args = batches
        .try_iter()?
        .map(|b| BatchArg::get(&b?))
        .collect::<PyResult<Vec<_>>>()?;
    let views: Vec<batch::RecordsIn<'_>> = args.iter().map(BatchArg::view).collect();
    let attributes: Vec<i16> = args.iter().map(|a| a.attributes).collect();
    let plans = py
        .detach(|| views.iter().map(batch::plan).collect::<Result<Vec<_>, _>>())
        .map_err(|e| PyValueError::new_err(e.0))?;
    let total = plans.iter().map(|p| p.total).sum();
    PyBytes::new_with(py, total, |out| {
        // The bytes object is this call's alone until it returns: filling it needs no lock.
        py.detach(|| {
            let mut rest = out;
            for ((records, plan), &attributes) in views.iter().zip(&plans).zip(&attributes) {
                let (this, after) = rest.split_at_mut(plan.total);
                batch::write(records, plan, attributes, leader_epoch, this);
                rest = after;
            }
        });
        Ok(())
    })
}

#[pymodule]
fn logstore_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Buffer>()?;
    m.add("CorruptRecords", m.py().get_type::<CorruptRecords>())?;
    m.add("RecordsTooLarge", m.py().get_type::<RecordsTooLarge>())?;
    m.add("BATCH_HEADER_SIZE", batch::BATCH_HEADER_SIZE)?;
    m.add_function(wrap_pyfunction!(crc32c_py, m)?)?;
    m.add_function(wrap_pyfunction!(crc32c_portable, m)?)?;
    m.add_function(wrap_pyfunction!(decode_records, m)?)?;
    m.add_function(wrap_pyfunction!(encode_batches, m)?)?;
    Ok(())
}
