"""The check of a file's tensor entries: dtype, shape, device and one source each
(an inline ``value``, an ``init`` distribution, or a weight ``file`` whose header
is read, not its data). What a bad entry meets; the arrays themselves are made by
the build step (``leaves.py``)."""
from __future__ import annotations

import os
import zlib

import numpy as np

from .. import devices as D
from ..errors import first_line as _first_line
from ..graph import LeafSpec
from .checker import Checker, finite_float, is_int, is_number, kind_of, short

DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64,
          "int32": np.int32, "int64": np.int64, "bool": np.bool_}
TENSOR_KEYS = {"shape", "dtype", "device", "requires_grad", "value", "init", "file", "key"}
INIT_KEYS = {"dist", "mean", "std", "low", "high", "fill", "seed"}
INIT_DISTS = ("zeros", "ones", "normal", "uniform", "arange", "full")
WEIGHT_FILES = {".npy": "a .npy file", ".npz": "an .npz archive",
                ".safetensors": "a .safetensors file"}


class TensorChecks(Checker):
    """Tensor entries (``tensors``, and the gradients ``backward`` and ``expect`` give)."""

    def leaf(self, name, entry, path, *, for_grad_root=False) -> LeafSpec:
        where = f"tensors.{name}" if path[0] == "tensors" else ".".join(str(p) for p in path)
        if not isinstance(entry, dict):
            self.fail(f"a tensor entry must be a mapping, not {kind_of(entry)}", path, where)
        self.check_keys(entry, TENSOR_KEYS, path, where, "a tensor entry")
        dtype_name = entry.get("dtype", "float64")
        if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
            self.fail(f"unknown dtype {dtype_name!r} (expected one of {', '.join(DTYPES)})",
                      path + ("dtype",), where)
        dtype = np.dtype(DTYPES[dtype_name])
        requires_grad = entry.get("requires_grad", False)
        if not isinstance(requires_grad, bool):
            self.fail(f"requires_grad must be true or false, got {requires_grad!r}",
                      path + ("requires_grad",), where)
        if requires_grad and dtype.kind != "f":
            self.fail(f"only floating point tensors can require gradients (dtype is {dtype_name})",
                      path + ("requires_grad",), where)
        device = self.device(entry.get("device", "cpu"), path + ("device",), where)

        sources = [k for k in ("value", "init", "file") if k in entry]
        if len(sources) > 1:
            self.fail(f"give exactly one of value, init, file (got {', '.join(sources)})", path, where)
        shape = entry.get("shape")
        if shape is not None:
            if not isinstance(shape, list) or not all(is_int(s) and s >= 0 for s in shape):
                self.fail(f"shape must be a list of non-negative ints, got {shape!r}",
                          path + ("shape",), where)
            shape = tuple(shape)
        if "key" in entry and "file" not in entry:
            self.fail("key is only valid with file", path + ("key",), where)

        given = sources[0] if sources else "init"
        if given == "value":
            array = self.value(entry["value"], dtype, path + ("value",), where)
            if shape is not None and array.shape != shape:
                self.fail(f"shape {list(shape)} does not match value of shape {list(array.shape)}",
                          path, where)
            self.check_size(array.shape, dtype, path, where)
            source = ("value", array)
            shape = array.shape
        elif given == "file":
            # without a dtype a file's array keeps its own; with one, they must agree
            source, shape, dtype = self.file_source(entry, dtype if "dtype" in entry else None,
                                                    shape, path, where)
            if requires_grad and dtype.kind != "f":
                self.fail(f"only floating point tensors can require gradients ({entry['file']!r} "
                          f"holds {dtype})", path + ("requires_grad",), where)
        else:
            if shape is None:
                if for_grad_root:
                    shape = None
                else:
                    self.fail("shape is required with init (or give value or file)", path, where)
            init = entry.get("init", "zeros")
            source = self.init(name, init, dtype, path + ("init",), where)
        if shape is not None:
            self.check_size(shape, dtype, path, where)
        leaf = LeafSpec(name=name, shape=shape, dtype=dtype, device=device,
                        requires_grad=requires_grad, make=None, line=self.doc.line(*path))
        self.sources.append((leaf, source, where))     # its array: made by the build step
        return leaf

    # Note [Weight files checked once]: the leaves of an exported model name one weight
    # file (hundreds of entries, one file): its path is resolved, kept inside the
    # graph's folder and found a regular file once per load, not once per leaf
    # (two realpath walks each were a fifth of the load of an exported ViT).
    def weight_file(self, rel, path, where):
        """``(full path, extension)`` of the weight file ``rel`` an entry names, checked."""
        if not isinstance(rel, str) or not rel or "\x00" in rel:
            self.fail("file must be a path to a .npy, .npz or .safetensors file", path + ("file",),
                      where)
        full = os.path.normpath(os.path.join(self.base_dir, rel))
        if not self.options.allow_outside_paths:
            base = os.path.realpath(self.base_dir)
            real = os.path.realpath(full)
            if os.path.commonpath([base, real]) != base:
                self.fail(f"file {rel!r} is outside the graph's folder (refused; pass "
                          "--allow-outside-paths to allow it)", path + ("file",), where)
        ext = os.path.splitext(full)[1].lower()
        if ext not in WEIGHT_FILES:
            self.fail(f"file {rel!r} must be a .npy, .npz or .safetensors file", path + ("file",),
                      where)
        if not os.path.isfile(full):
            what = "is not a regular file" if os.path.exists(full) else "not found"
            self.fail(f"file {rel!r} {what}", path + ("file",), where)
        self._weight_files[rel] = full, ext
        return full, ext

    def device(self, spec, path, where):
        if not isinstance(spec, str):
            self.fail(f"device must be a string such as cpu, cuda:0 or sim:0, got {spec!r}",
                      path, where)
        if len(spec) > 16:          # no device string is this long (sim:N has at most 9 digits)
            self.fail(f"unknown device {short(spec)} of {len(spec)} characters (expected cpu, "
                      "cuda:N or sim:N)", path, where)
        try:
            dev = D.device(spec)
            mapped = self.options.device_map.get(dev.type)
            if mapped and mapped != dev.type:
                kind = D.DEVICE_TYPES[mapped]
                dev = D.device(f"{mapped}:{max(dev.index, 0)}" if kind.is_accelerator else mapped)
            D.check_available(dev)
        except D.DeviceError as exc:
            self.fail(str(exc), path, where)
        return dev

    def value(self, value, dtype, path, where):
        if isinstance(value, bool) or isinstance(value, (int, float)) or isinstance(value, list):
            _check_numeric(value, lambda msg: self.fail(msg, path, where))
            try:
                return np.array(value, dtype=dtype)
            except (ValueError, TypeError, OverflowError) as exc:
                if "inhomogeneous" in str(exc) or "sequence" in str(exc):
                    self.fail("bad value: a nested list whose rows differ in length (the value "
                              "must be rectangular)", path, where)
                if isinstance(exc, OverflowError) or "cannot convert float" in str(exc):
                    # NumPy: "Python int too large to convert to C long", "cannot convert
                    # float infinity to integer"; PyTorch's wording instead
                    self.fail(f"bad value: a number cannot be converted to type "
                              f"{np.dtype(dtype) if dtype is not None else 'int64'} without "
                              f"overflow (inf, nan or out of its range)", path, where)
                self.fail(f"bad value: {_first_line(exc)}", path, where)
        self.fail(f"value must be a number or a nested list of numbers, not {kind_of(value)}",
                  path, where)

    def init(self, name, init, dtype, path, where):
        if isinstance(init, str):
            spec = {"dist": init}
        elif isinstance(init, dict):
            self.check_keys(init, INIT_KEYS, path, where, "init")
            spec = dict(init)
        else:
            self.fail(f"init must be one of {', '.join(INIT_DISTS)} or a mapping, got {init!r}",
                      path, where)
        dist = spec.get("dist")
        if dist not in INIT_DISTS:
            self.fail(f"unknown init {dist!r} (expected one of {', '.join(INIT_DISTS)})", path, where)
        for key in ("mean", "std", "low", "high", "fill"):
            if key in spec and not is_number(spec[key]):
                self.fail(f"init {key} must be a number, got {short(spec[key])}", path + (key,),
                          where)
            if key in spec and not finite_float(spec[key]):
                self.fail(f"init {key} must be finite, got {short(spec[key])}",
                          path + (key,), where)
        if dist == "full" and "fill" in spec and not _fits(spec["fill"], dtype):
            # as torch.full: "value cannot be converted to type ... without overflow"
            self.fail(f"init fill {short(spec['fill'])} cannot be converted to {dtype} without "
                      "overflow", path + ("fill",), where)
        if spec.get("std", 0) < 0:
            self.fail(f"init std must be non-negative, got {spec['std']!r}", path + ("std",), where)
        if dist == "uniform" and spec.get("low", 0.0) > spec.get("high", 1.0):
            self.fail(f"init low ({spec.get('low', 0.0)!r}) is above high "
                      f"({spec.get('high', 1.0)!r})", path, where)
        if dist == "full" and "fill" not in spec:
            self.fail("init full needs fill", path, where)
        seed = spec.get("seed")
        if seed is not None and (not is_int(seed) or seed < 0):
            self.fail(f"init seed must be a non-negative int, got {seed!r}", path + ("seed",), where)
        # Seed per tensor: its own seed, else the file's seed combined with its name.
        seed_seq = [seed] if seed is not None else [self.seed, zlib.crc32(name.encode())]
        return ("init", dist, spec, dtype, seed_seq)

    def file_source(self, entry, dtype, shape, path, where):
        rel = entry["file"]
        known = self._weight_files.get(rel) if type(rel) is str else None
        full, ext = known or self.weight_file(rel, path, where)
        key = entry.get("key")
        if key is not None and (not isinstance(key, str) or not key):
            self.fail(f"key must be the name of an array in the file, got {key!r}",
                      path + ("key",), where)
        if ext != ".npy" and key is None:
            self.fail(f"file {rel!r} is {WEIGHT_FILES[ext]}: give key to pick an array", path,
                      where)
        if ext == ".npy" and key is not None:
            self.fail("key is only valid with an .npz or .safetensors file", path + ("key",), where)
        try:
            file_shape, file_dtype = self.weights.peek(full, key)
        except KeyError:
            self.fail(f"no array {key!r} in {rel!r}", path + ("key",), where)
        except (ValueError, OSError) as exc:
            self.fail(f"cannot read {rel!r}: {_first_line(exc)}", path + ("file",), where)
        except MemoryError:
            self.fail(f"cannot read {rel!r}: out of memory reading its header", path + ("file",), where)
        if file_dtype.hasobject:
            self.fail(f"{rel!r} holds pickled Python objects (refused: only plain numeric "
                      "arrays are loaded)", path + ("file",), where)
        if file_dtype.kind not in "biuf" or file_dtype.fields is not None:
            # complex would lose its imaginary part and datetimes become numbers, silently
            self.fail(f"{rel!r} holds an array of dtype {short(str(file_dtype))} (only bool, "
                      "int and float arrays are loaded)", path + ("file",), where)
        if not all(is_int(n) and n >= 0 for n in file_shape):
            self.fail(f"cannot read {rel!r}: its header gives the shape {short(file_shape)}",
                      path + ("file",), where)
        if shape is not None and tuple(shape) != file_shape:
            self.fail(f"shape {list(shape)} does not match {rel!r} of shape {list(file_shape)}",
                      path, where)
        if dtype is None:
            if file_dtype.name not in DTYPES:
                self.fail(f"{rel!r} holds {file_dtype} (expected one of {', '.join(DTYPES)})",
                          path + ("file",), where)
            dtype = file_dtype
        elif file_dtype != dtype:
            self.fail(f"dtype {dtype.name} does not match {rel!r} of dtype {file_dtype}",
                      path + ("dtype",), where)
        self.check_size(file_shape, file_dtype, path, where)

        def fail_at_file(message):     # the run's read of the data reports at the entry's file
            self.fail(message, path + ("file",), where)
        return ("file", full, key, rel, file_shape, file_dtype, fail_at_file), file_shape, dtype


def _fits(value, dtype):
    """``value`` converts to ``dtype`` without overflow (torch.full's rule)."""
    if dtype.kind == "f":
        return abs(float(value)) <= float(np.finfo(dtype).max)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min <= value <= info.max
    return True


def _check_numeric(value, fail):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif not isinstance(v, (int, float, bool)):
            fail(f"value must contain only numbers, found {v!r}")

