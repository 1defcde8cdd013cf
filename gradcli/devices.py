"""Devices: ``cpu`` (NumPy), ``cuda:N`` (CuPy, imported lazily) and ``sim:N``.

A ``sim:N`` device is a simulated accelerator: its arrays are NumPy arrays of
the subclass :class:`SimArray`, tagged with their device. The engine treats
it exactly like a real accelerator (own worker thread and ready queue).

Devices are interned, so ``a is b`` compares them.
"""
from __future__ import annotations

import os
import re

import numpy as np

CPU_DEVICE = -1          # worker_device of a CPU thread (engine.cpp's CPU_DEVICE)
NO_DEVICE = -2           # worker_device of a thread that is not running the engine

_DEVICE_RE = re.compile(r"(cpu|cuda|sim)(?::([0-9]{1,9}))?")   # ASCII digits; fullmatch
_INTERNED: dict[str, "Device"] = {}


class DeviceError(ValueError):
    """A device string is malformed or names a device that is not there."""


class Device:
    __slots__ = ("type", "index", "_str")

    def __init__(self, type_: str, index: int):
        self.type = type_
        self.index = index
        self._str = "cpu" if type_ == "cpu" else f"{type_}:{index}"

    def __repr__(self):
        return f"device({self._str!r})"

    def __str__(self):
        return self._str

    @property
    def is_cpu(self) -> bool:
        return self.type == "cpu"


def device(spec: "str | Device") -> Device:
    """Parse and intern a device string (``cpu``, ``cuda:0``, ``sim:1``)."""
    if isinstance(spec, Device):
        return spec
    dev = _INTERNED.get(spec)
    if dev is not None:
        return dev
    m = _DEVICE_RE.fullmatch(str(spec))
    if not m:
        raise DeviceError(f"unknown device {spec!r} (expected cpu, cuda:N or sim:N)")
    type_, index = m.group(1), m.group(2)
    if type_ == "cpu":
        if index is not None:
            raise DeviceError(f"unknown device {spec!r} (cpu takes no index)")
        dev = _INTERNED.setdefault("cpu", Device("cpu", CPU_DEVICE))
    else:
        idx = 0 if index is None else int(index)
        key = f"{type_}:{idx}"
        dev = _INTERNED.setdefault(key, Device(type_, idx))
    _INTERNED[str(spec)] = dev
    return dev


CPU = device("cpu")


def sim_device_count() -> int:
    """How many simulated devices exist (``GRADCLI_SIM_DEVICES``, default 4)."""
    try:
        return max(0, int(os.environ.get("GRADCLI_SIM_DEVICES", "4")))
    except ValueError:
        return 4


_cupy = None


def cupy_module():
    """Import CuPy on first use; None if it is missing or sees no GPU."""
    global _cupy
    if _cupy is None:
        try:
            import cupy  # noqa: PLC0415 - optional and heavy, imported lazily

            cupy.cuda.runtime.getDeviceCount()
            _cupy = cupy
        except Exception:  # ImportError, CUDARuntimeError, ...
            _cupy = False
    return _cupy or None


def cuda_device_count() -> int:
    cp = cupy_module()
    return cp.cuda.runtime.getDeviceCount() if cp is not None else 0


def device_count(type_: str) -> int:
    if type_ == "sim":
        return sim_device_count()
    if type_ == "cuda":
        return cuda_device_count()
    return 1


def check_available(dev: Device) -> None:
    """Raise DeviceError if ``dev`` does not exist on this machine."""
    if dev.is_cpu:
        return
    if dev.type == "cuda" and cupy_module() is None:
        raise DeviceError(f"device {dev} needs CuPy and a CUDA GPU, and none was found "
                          "(run with --device-map cuda=sim to simulate it)")
    n = device_count(dev.type)
    if dev.index >= n:
        raise DeviceError(f"device {dev} is not available ({n} {dev.type} device(s) here)")


class SimArray(np.ndarray):
    """A NumPy array that lives on a simulated accelerator ``sim:N``."""

    gradcli_device = None

    def __array_finalize__(self, obj):
        self.gradcli_device = getattr(obj, "gradcli_device", None)


def device_of(array) -> Device:
    """The device an array lives on."""
    if type(array) is np.ndarray:
        return CPU
    dev = getattr(array, "gradcli_device", None)
    if dev is not None:
        return dev
    if isinstance(array, (np.ndarray, np.generic)):
        return CPU
    cuda_dev = getattr(array, "device", None)
    if cuda_dev is not None and hasattr(cuda_dev, "id"):
        return device(f"cuda:{cuda_dev.id}")
    return CPU


def xp_of(dev: Device):
    """The array module that computes on ``dev``: NumPy, or CuPy for CUDA."""
    if dev.type == "cuda":
        return cupy_module()
    return np


def to_device(array, dev: Device):
    """Copy ``array`` onto ``dev`` (a no-op view when it is already there)."""
    src = device_of(array)
    if src is dev:
        return array
    if src.type == "cuda":
        array = array.get()
    if dev.is_cpu:
        return np.array(array)
    if dev.type == "sim":
        out = np.array(array).view(SimArray)
        out.gradcli_device = dev
        return out
    cp = cupy_module()
    with cp.cuda.Device(dev.index):
        return cp.asarray(array)


def to_host(array):
    """The array as NumPy on the host: no copy for NumPy and sim arrays, a
    transfer for CuPy ones; None stays None."""
    if array is None:
        return None
    if hasattr(array, "get") and not isinstance(array, np.ndarray):
        return array.get()
    return np.asarray(array)


def on_device(array, dev: Device):
    """Tag a freshly computed array with ``dev`` without copying (sim only)."""
    if dev.type != "sim":
        return array
    if type(array) is not SimArray:
        array = np.asarray(array).view(SimArray)
    array.gradcli_device = dev
    return array
