"""A ``.safetensors`` weight file, read without the safetensors package: its header
checked against the file once, its tensors mapped read-only without a copy.

The format (https://huggingface.co/docs/safetensors): 8 bytes, a little-endian
unsigned header size N; N bytes of UTF-8 JSON, ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}`` (padded with spaces);
then the data, each tensor little-endian and C-contiguous at ``8 + N + begin``.

Note [Safetensors bounds]: a hostile file is refused at load with one line before
anything is mapped: a file shorter than its size field; a header over
``MAX_HEADER_BYTES`` (the safetensors library's own limit) or past the end of the
file; a header that is not a JSON object of entries (bad UTF-8 or JSON, a key given
twice, nesting too deep for the JSON parser); an entry whose shape is not a list
of non-negative ints, whose ``data_offsets`` are not two ints with begin <= end, or
whose size (shape times item size) differs from its offsets; offsets that do not
tile the data exactly (a gap, an overlap, or past its end: the library writes them
back to back and refuses anything else); a dtype NumPy does not hold as it is
(BF16, the F8 kinds: refused, never converted). The reader is gradcli's own because
the package's numpy reader copies every tensor: mapping is what lets every run share
one read-only array (Note [Weights read once] in weights.py).
"""
from __future__ import annotations

import json
import mmap
import os
import struct

import numpy as np

MAX_HEADER_BYTES = 100_000_000     # as the safetensors library: larger headers are refused
DTYPES = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "I16": "<i2", "U16": "<u2", "F16": "<f2",
          "I32": "<i4", "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8"}
_SIZE = struct.Struct("<Q")


class Safetensors:
    """One open .safetensors file: its header checked once (``header(name)``), its
    tensors mapped on first read (``read(name)``).

    >>> import numpy as np, tempfile, os, safetensors.numpy
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> safetensors.numpy.save_file({"fc.weight": np.ones((2, 3), np.float32)}, path)
    >>> f = Safetensors(path)
    >>> f.header("fc.weight")
    ((2, 3), dtype('float32'))
    >>> float(f.read("fc.weight").sum())
    6.0
    """

    def __init__(self, full):
        self.full = full
        self.entries, self.data_start = read_header(full)
        self.map = None

    def header(self, name):
        """``(shape, dtype)`` of tensor ``name`` (KeyError if the file has none)."""
        shape, dtype, _ = self.entries[name]
        return shape, dtype

    def read(self, name):
        """Tensor ``name`` as an array over the file's map (read-only)."""
        shape, dtype, begin = self.entries[name]
        if self.map is None:
            with open(self.full, "rb") as fh:
                self.map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        offset = self.data_start + begin
        count = 1
        for n in shape:
            count *= n
        if offset + count * dtype.itemsize > len(self.map):
            raise ValueError("the file is shorter than its header says (changed since it was "
                             "checked?)")
        arr = np.frombuffer(self.map, dtype=dtype, count=count, offset=offset).reshape(shape)
        if not arr.flags.aligned:       # an odd offset: one aligned copy, shared as the map is
            arr = arr.copy()
        return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))

    def close(self):
        self.map = None


def read_header(full):
    """``({name: (shape, dtype, begin)}, data start)`` of a .safetensors file, checked
    against the file's size (Note [Safetensors bounds]); ValueError if it is not one.

    >>> read_header(os.devnull)
    Traceback (most recent call last):
    ...
    ValueError: not a valid .safetensors file (0 bytes: shorter than the 8-byte header size)
    """
    with open(full, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(_SIZE.size)
        if len(head) < _SIZE.size:
            raise ValueError(f"not a valid .safetensors file ({size} bytes: shorter than the "
                             "8-byte header size)")
        (n,) = _SIZE.unpack(head)
        if n > MAX_HEADER_BYTES:
            raise ValueError(f"header of {n} bytes, over the limit of {MAX_HEADER_BYTES} bytes")
        if _SIZE.size + n > size:
            raise ValueError(f"header of {n} bytes, past the end of the file ({size} bytes)")
        text = fh.read(n)
    entries = _entries(_parse(text))
    data_start = _SIZE.size + n
    _check_tiling(entries, size - data_start)
    return {name: (shape, dtype, begin) for name, (shape, dtype, begin, _) in entries.items()}, \
        data_start


def _parse(raw):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"header is not UTF-8 (byte {exc.start})") from None
    if not text.lstrip().startswith("{"):
        raise ValueError("header is not a JSON object")
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except _Duplicate as exc:
        raise ValueError(f"header names {str(exc)!r} twice") from None
    except RecursionError:     # the C parser counts its depth: a deep header, refused
        raise ValueError("header nests too deep") from None
    except ValueError as exc:     # JSONDecodeError: its first line, with the position
        raise ValueError(f"header is not valid JSON ({str(exc).splitlines()[0]})") from None


class _Duplicate(Exception):
    pass


def _unique(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _entries(header):
    """{name: (shape, dtype, begin, end)} of the header's tensor entries."""
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("header's __metadata__ must map names to strings")
    entries = {}
    for name, entry in header.items():
        what = f"tensor {_short(name)}"
        if not isinstance(entry, dict):
            raise ValueError(f"{what}: its header entry is not a JSON object")
        code = entry.get("dtype")
        if not isinstance(code, str) or code not in DTYPES:
            raise ValueError(f"{what}: dtype {_short(code)} is not supported (one of "
                             f"{', '.join(DTYPES)})")
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(
                type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"{what}: shape must be a list of non-negative ints, got "
                             f"{_short(shape)}")
        offsets = entry.get("data_offsets")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(type(n) is int and n >= 0 for n in offsets)
                or offsets[0] > offsets[1]):
            raise ValueError(f"{what}: data_offsets must be [begin, end] with 0 <= begin <= "
                             f"end, got {_short(offsets)}")
        dtype = np.dtype(DTYPES[code])
        count = 1
        for n in shape:
            count *= n
        begin, end = offsets
        if count * dtype.itemsize != end - begin:
            raise ValueError(f"{what}: shape {shape} of {code} takes {count * dtype.itemsize} "
                             f"bytes, its data_offsets [{begin}, {end}] hold {end - begin}")
        entries[name] = (tuple(shape), dtype, begin, end)
    return entries


def _check_tiling(entries, data_bytes):
    """The tensors' bytes tile the data exactly: back to back from 0 to its end."""
    at = 0
    for name, (_, _, begin, end) in sorted(entries.items(), key=lambda e: (e[1][2], e[1][3])):
        if end > data_bytes:
            raise ValueError(f"tensor {_short(name)}: data_offsets [{begin}, {end}] are past the "
                             f"end of the data ({data_bytes} bytes)")
        if begin != at:
            what = "an overlap" if begin < at else "a gap"
            raise ValueError(f"tensor {_short(name)}: data_offsets [{begin}, {end}] leave "
                             f"{what} at byte {min(begin, at)} (tensors must tile the data)")
        at = end
    if at != data_bytes:
        raise ValueError(f"the tensors end at byte {at} of the data, which has {data_bytes} "
                         "(tensors must tile the data)")


def _short(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
