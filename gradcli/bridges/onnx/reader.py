"""Read an ONNX file as untrusted input: every size is checked before it is allocated.

Note [Hostile ONNX files]: an ONNX file declares sizes (tensor dims, external data
offsets and lengths) that nothing forces to be true. The reader:

- refuses a file larger than the graph budget before parsing it (protobuf holds the
  whole message in memory);
- reads a tensor only when its declared element count times its item size fits the
  tensor budget, and only when the bytes it has (``raw_data``, typed fields or the
  external file's range) are exactly that many;
- opens external data only as a relative path below the model's own folder (after
  resolving links): ``..``, absolute paths and links that leave the folder are refused,
  as are ranges past the end of the file;
- converts dtypes gradcli's graph files do not have (int8, uint8, ...) only for
  constants, and refuses complex, string and 8-bit float tensors.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import OnnxError

# ONNX TensorProto.DataType -> NumPy dtype (those gradcli reads).
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
          7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
          13: np.uint64}
DTYPE_NAMES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32",
               13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16"}


def dtype_of(elem_type, where):
    """The NumPy dtype of an ONNX element type, or a one-line OnnxError."""
    dt = DTYPES.get(int(elem_type))
    if dt is None:
        raise OnnxError(f"{where}: element type {DTYPE_NAMES.get(int(elem_type), elem_type)} "
                        "is not supported (gradcli reads float, double, float16, integer and "
                        "bool tensors)")
    return np.dtype(dt)


def nbytes(shape, dtype):
    """Bytes of an array of this shape and dtype (Python ints: no overflow)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n * np.dtype(dtype).itemsize


def read_model(path, max_file_bytes):
    """The ModelProto of ``path``, external data not loaded (``tensor_array`` reads it)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise OnnxError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if size > max_file_bytes:
        raise OnnxError(f"{path}: the file has {size} bytes, over the budget of "
                        f"{max_file_bytes} bytes")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise OnnxError(f"{path}: cannot read: {exc.strerror or exc}") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise OnnxError(f"{path}: not an ONNX model (protobuf: {text})") from None
    if not model.HasField("graph") or not model.graph.node:
        raise OnnxError(f"{path}: not an ONNX model (no graph, or a graph without nodes)")
    return model


class TensorReader:
    """Arrays of TensorProtos (initializers, ``Constant`` values) under a byte budget."""

    def __init__(self, path, max_tensor_bytes, max_total_bytes):
        self.path = path
        self.base = os.path.dirname(os.path.abspath(path))
        self.max_tensor_bytes = max_tensor_bytes
        self.max_total_bytes = max_total_bytes
        self.total = 0

    def fail(self, where, message):
        raise OnnxError(f"{self.path}: {where}: {message}")

    def array(self, tensor, where):
        """The tensor's values as a NumPy array (a copy the file no longer owns)."""
        from onnx import numpy_helper

        if tensor.segment.begin or tensor.segment.end:
            self.fail(where, "segmented tensors are not supported")
        dtype = dtype_of(tensor.data_type, where)
        dims = list(tensor.dims)
        if any(d < 0 for d in dims):
            self.fail(where, f"negative dimension in its shape {dims}")
        size = nbytes(dims, dtype)
        if size > self.max_tensor_bytes:
            self.fail(where, f"its shape {dims} needs {size} bytes, over the tensor budget of "
                             f"{self.max_tensor_bytes} bytes")
        self.total += size
        if self.total > self.max_total_bytes:
            self.fail(where, f"the model's tensors need more than the budget of "
                             f"{self.max_total_bytes} bytes")
        if tensor.data_location == 1:                       # TensorProto.EXTERNAL
            raw = self._external(tensor, size, where)
        elif tensor.HasField("raw_data"):
            raw = tensor.raw_data
            if len(raw) != size:
                self.fail(where, f"raw_data holds {len(raw)} bytes, its shape {dims} needs {size}")
        else:
            count = size // dtype.itemsize
            have = _typed_count(tensor, dtype)
            if have != count:
                self.fail(where, f"holds {have} values, its shape {dims} needs {count}")
            try:
                return np.array(numpy_helper.to_array(tensor), dtype=dtype).reshape(dims)
            except (ValueError, TypeError) as exc:
                self.fail(where, f"cannot read its values: {exc}")
        return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(dims)

    def _external(self, tensor, size, where):
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        try:
            offset = int(info.get("offset", "0") or 0)
            length = int(info["length"]) if info.get("length") else size
        except ValueError:
            self.fail(where, "external data offset and length must be integers")
        if offset < 0 or length < 0:
            self.fail(where, "external data offset and length must not be negative")
        if length != size:
            self.fail(where, f"external data length {length} differs from the {size} bytes "
                             "its shape needs")
        if not location or os.path.isabs(location) or "\\" in location or \
                ".." in location.split("/") or "\0" in location:
            self.fail(where, f"external data location {location!r} must be a relative path "
                             "below the model's folder")
        full = os.path.realpath(os.path.join(self.base, location))
        base = os.path.realpath(self.base)
        if os.path.commonpath([full, base]) != base:
            self.fail(where, f"external data location {location!r} leaves the model's folder")
        try:
            with open(full, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                end = fh.tell()
                if offset + length > end:
                    self.fail(where, f"external data {location!r} has {end} bytes, the tensor "
                                     f"reads bytes {offset} to {offset + length}")
                fh.seek(offset)
                return fh.read(length)
        except OSError as exc:
            self.fail(where, f"cannot read external data {location!r}: {exc.strerror or exc}")


def _typed_count(tensor, dtype):
    if dtype == np.float32:
        return len(tensor.float_data)
    if dtype == np.float64:
        return len(tensor.double_data)
    if dtype == np.int64:
        return len(tensor.int64_data)
    if dtype in (np.uint64, np.uint32):
        return len(tensor.uint64_data)
    return len(tensor.int32_data)           # int32, int16, int8, uint8, uint16, bool, float16
