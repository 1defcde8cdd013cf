"""Devices: a registry of device types, ``cpu`` (NumPy), ``cuda:N`` (CuPy,
imported lazily) and ``sim:N``.

A :class:`DeviceType` says everything the engine, the loader and the op core
ask about a kind of device: its name, how many devices of it there are, the
array module that computes on it, whether it owns an array (a positive test:
nothing is taken for a device's array because it is not some other kind),
how to copy a host array onto one of its devices and back, how to make one of
its devices the calling thread's current device, and the current stream of a
device. Callers loop over :data:`DEVICE_TYPES` instead of naming types; a new
kind of device is one ``register_device_type`` call.

A ``sim:N`` device is a simulated accelerator: its arrays are NumPy arrays of
the subclass :class:`SimArray`, tagged with their device. The engine treats
it exactly like a real accelerator (own worker thread and ready queue).

Devices are interned, so ``a is b`` compares them.
"""
from __future__ import annotations

import os
import re
import threading
import weakref

import numpy as np

CPU_DEVICE = -1          # worker_device of a CPU thread (engine.cpp's CPU_DEVICE)
NO_DEVICE = -2           # worker_device of a thread that is not running the engine

# ASCII digits only, the whole string (no `$` matching before a trailing newline),
# and an index of at most 9 digits (no int-size limit to hit).
_DEVICE_RE = re.compile(r"([a-z]+)(?::([0-9]{1,9}))?", re.ASCII)
_INTERNED: dict[str, "Device"] = {}
_INTERN_LOCK = threading.Lock()


class DeviceError(ValueError):
    """A device string is malformed or names a device that is not there."""


class DeviceType:
    """A kind of device. Subclasses override what differs from the host."""

    name = "?"
    is_accelerator = True
    owned_by_type = False       # Note [Kinds by array type]

    def count(self) -> int:
        return 0

    def device_at(self, index: int) -> "Device":
        """The interned device ``index`` of this type (device_of's hot path: no string
        is made after the first time)."""
        try:
            return self._devices[index]
        except AttributeError:
            self._devices = {}
        except KeyError:
            pass
        dev = self._devices[index] = device(f"{self.name}:{index}")
        return dev

    def array_module(self):
        return np

    def owns(self, array) -> bool:
        """True when ``array`` lives on a device of this type (positive test)."""
        return False

    def index_of(self, array) -> int:
        return 0

    def copy_to(self, host_array, index: int):
        """A copy of the NumPy array ``host_array`` on device ``index``."""
        raise NotImplementedError

    def to_host(self, array):
        """``array`` as a NumPy array on the host."""
        return np.asarray(array)

    def tag(self, array, index: int):
        """Mark a freshly computed array as living on device ``index`` (no copy)."""
        return array

    def set_current(self, index: int) -> None:
        """Make device ``index`` the calling thread's current device."""

    def current_stream(self, index: int):
        """The calling thread's current stream on device ``index`` (None: no streams)."""
        return None

    def check_available(self, dev) -> None:
        n = self.count()
        if dev.index >= n:
            raise DeviceError(f"device {dev} is not available ({n} {self.name} device(s) here)")


class CpuType(DeviceType):
    name = "cpu"
    is_accelerator = False

    def count(self) -> int:
        return 1

    def owns(self, array) -> bool:
        return isinstance(array, (np.ndarray, np.generic)) and getattr(
            array, "gradcli_device", None) is None

    def copy_to(self, host_array, index):
        return np.array(host_array)

    def check_available(self, dev) -> None:
        return None


class SimArray(np.ndarray):
    """A NumPy array that lives on a simulated accelerator ``sim:N``."""

    gradcli_device = None

    def __array_finalize__(self, obj):
        self.gradcli_device = getattr(obj, "gradcli_device", None)


class _SimCurrent(threading.local):
    index = 0


class SimType(DeviceType):
    """Simulated accelerators: NumPy compute, SimArray storage, a per-thread
    current device (as ``cudaSetDevice``) so device placement can be tested
    without a GPU."""

    name = "sim"

    def __init__(self):
        self._current = _SimCurrent()

    def count(self) -> int:
        return sim_device_count()

    def owns(self, array) -> bool:
        dev = getattr(array, "gradcli_device", None)
        return dev is not None and dev.type == "sim"

    def index_of(self, array) -> int:
        return array.gradcli_device.index

    def copy_to(self, host_array, index):
        return self.tag(np.array(host_array), index)

    def to_host(self, array):
        return np.asarray(array).view(np.ndarray) if isinstance(array, np.ndarray) else array

    def tag(self, array, index):
        if type(array) is not SimArray:
            array = np.asarray(array).view(SimArray)
        array.gradcli_device = device(f"sim:{index}")
        return array

    def set_current(self, index):
        self._current.index = index

    def current_index(self) -> int:
        return self._current.index


class CudaType(DeviceType):
    """CUDA GPUs through CuPy (imported on first use)."""

    name = "cuda"

    def count(self) -> int:
        cp = cupy_module()
        return cp.cuda.runtime.getDeviceCount() if cp is not None else 0

    def array_module(self):
        return cupy_module()

    owned_by_type = True        # Note [Kinds by array type]

    def owns(self, array) -> bool:
        return type(array).__module__.split(".")[0] == "cupy" and hasattr(array, "device")

    def index_of(self, array) -> int:
        return array.device.id

    def copy_to(self, host_array, index):
        cp = cupy_module()
        with cp.cuda.Device(index):
            return cp.asarray(host_array)

    def to_host(self, array):
        return array.get()

    def set_current(self, index):
        cupy_module().cuda.Device(index).use()

    def current_stream(self, index):
        cp = cupy_module()
        with cp.cuda.Device(index):
            return cp.cuda.get_current_stream()

    def check_available(self, dev) -> None:
        if cupy_module() is None:
            raise DeviceError(f"device {dev} needs CuPy and a CUDA GPU, and none was found "
                              "(run with --device-map cuda=sim to simulate it)")
        super().check_available(dev)


DEVICE_TYPES: dict[str, DeviceType] = {}


def register_device_type(kind: DeviceType) -> DeviceType:
    DEVICE_TYPES[kind.name] = kind
    return kind


for _kind in (CpuType(), CudaType(), SimType()):
    register_device_type(_kind)


def accelerator_types() -> list[DeviceType]:
    return [k for k in DEVICE_TYPES.values() if k.is_accelerator]


class Device:
    __slots__ = ("type", "index", "kind", "_str")

    def __init__(self, kind: DeviceType, index: int):
        self.kind = kind
        self.type = kind.name
        self.index = index
        self._str = kind.name if not kind.is_accelerator else f"{kind.name}:{index}"

    def __repr__(self):
        return f"device({self._str!r})"

    def __str__(self):
        return self._str

    @property
    def is_cpu(self) -> bool:
        return not self.kind.is_accelerator


def _names():
    return ", ".join("cpu" if not k.is_accelerator else f"{k.name}:N" for k in DEVICE_TYPES.values())


def device(spec: "str | Device") -> Device:
    """Parse and intern a device string (``cpu``, ``cuda:0``, ``sim:1``)."""
    if isinstance(spec, Device):
        return spec
    dev = _INTERNED.get(spec)
    if dev is not None:
        return dev
    text = str(spec)
    m = _DEVICE_RE.fullmatch(text)
    kind = DEVICE_TYPES.get(m.group(1)) if m else None
    if kind is None:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise DeviceError(f"unknown device {shown!r} (expected {_names()})")
    index = m.group(2)
    if not kind.is_accelerator:
        if index is not None:
            raise DeviceError(f"unknown device {text!r} ({kind.name} takes no index)")
        idx = CPU_DEVICE
    else:
        idx = 0 if index is None else int(index)
    key = kind.name if not kind.is_accelerator else f"{kind.name}:{idx}"
    with _INTERN_LOCK:
        dev = _INTERNED.setdefault(key, Device(kind, idx))
        _INTERNED[text] = dev
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
    return DEVICE_TYPES["cuda"].count()


def device_count(type_: str) -> int:
    return DEVICE_TYPES[type_].count()


def check_available(dev: Device) -> None:
    """Raise DeviceError if ``dev`` does not exist on this machine."""
    dev.kind.check_available(dev)


# Note [Kinds by array type]: kind_of is asked for every array of every node (the
# engine's device checks, the streams, xp_of_array), hundreds of times a step. A device
# type whose arrays are told apart by their Python type alone (CuPy's ndarray) says so
# with ``owned_by_type``; the first array of such a type found owned records the type
# here, and later arrays of it skip the scan. NumPy arrays and their subclasses never
# enter: a SimArray's device is an attribute of the instance, not of its type.
_KIND_BY_TYPE: dict[type, DeviceType] = {}


def kind_of(array) -> DeviceType:
    """The device type that owns ``array``; the host for plain numbers."""
    tp = type(array)
    if tp is np.ndarray:
        return CPU.kind
    kind = _KIND_BY_TYPE.get(tp)
    if kind is not None:
        return kind
    for kind in DEVICE_TYPES.values():
        if kind.owns(array):
            if kind.owned_by_type:
                _KIND_BY_TYPE[tp] = kind
            return kind
    return CPU.kind      # Python scalars and other host values


def device_of(array) -> Device:
    """The device an array lives on."""
    if type(array) is np.ndarray:
        return CPU
    kind = kind_of(array)
    if not kind.is_accelerator:
        return CPU
    return kind.device_at(kind.index_of(array))


def xp_of(dev: Device):
    """The array module that computes on ``dev``: NumPy, or CuPy for CUDA."""
    return dev.kind.array_module()


def xp_of_array(array):
    """The array module that computes on ``array`` (a positive test of its type)."""
    return kind_of(array).array_module()


def to_device(array, dev: Device):
    """Copy ``array`` onto ``dev`` (a no-op view when it is already there)."""
    src = device_of(array)
    if src is dev:
        return array
    return dev.kind.copy_to(src.kind.to_host(array), dev.index)


# Note [Shared device arrays]: a loaded graph's leaves are copied to their device once
# and the copy is shared by every run (Note [Leaves made once] in graph.py), so a run
# must not write into it: the ops that write into an input ask ``writeable`` first and
# copy what is shared (Note [Copy on write of leaves]). A NumPy array (a SimArray too)
# says so with its flag. A CuPy array has no such flag: the shared ones are held here,
# by identity, weakly (the graph owns them), and a view of one is shared too (its
# ``base`` chain is walked). A device array that cannot be held weakly is not shared:
# each run then gets a fresh copy, as before.
_SHARED: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()


def share(array) -> bool:
    """Mark ``array`` (one the caller owns) as shared read-only; False where that cannot
    be recorded (the caller then must not share it).

    >>> a = np.zeros(2); share(a), writeable(a), writeable(a.copy())
    (True, False, True)
    """
    if isinstance(array, np.ndarray):
        array.flags.writeable = False
        return True
    try:
        _SHARED[id(array)] = array
    except TypeError:           # no weak references to this type
        return False
    return True


def writeable(array) -> bool:
    """False for a read-only array: a shared one (``share``) or a view of one."""
    flags = getattr(array, "flags", None)
    flag = getattr(flags, "writeable", None)
    if flag is not None:
        return bool(flag)
    while array is not None:
        if _SHARED.get(id(array)) is array:
            return False
        array = getattr(array, "base", None)
    return True


def scalar(value, dtype):
    """``value`` as a NumPy scalar of ``dtype``: the one kind of constant operand that
    NumPy and CuPy both take beside an array of their own (CuPy refuses a 0-d NumPy
    array, and a Python float would let NEP 50 pick the array's dtype where the
    formula wants ``dtype``).

    >>> scalar(1, np.float32) * np.ones(2, np.float32)
    array([1., 1.], dtype=float32)
    """
    return np.dtype(dtype).type(value)


# Note [Reductions without NumPy's wrappers]: ``np.sum``, ``np.mean`` and the ndarray's
# ``mean`` method reach their ufunc through NumPy's Python-level wrappers
# (``_wrapreduction`` and its dict comprehension, ``_methods._mean`` and its item count):
# about a hundred interpreter steps a call, a few percent of a small transformer's run.
# For a float32 or float64 host array these do what those wrappers end in, and nothing
# else: ``add.reduce`` with the same arguments, and for the mean a ``true_divide`` in
# place by the element count as an ``intp``, as ``_mean`` does. The values are the same
# bit for bit; any other array (a device's, float16, integers) takes NumPy's own path.
def reduce_sum(x, axis=None, keepdims=False):
    """``np.sum(x, axis=axis, keepdims=keepdims)`` (Note [Reductions without NumPy's wrappers]).

    >>> reduce_sum(np.ones((2, 3)), axis=1)
    array([3., 3.])
    """
    if type(x) is np.ndarray and x.dtype.char in "fd":
        return np.add.reduce(x, axis=axis, keepdims=keepdims)
    return np.sum(x, axis=axis, keepdims=keepdims)


def reduce_mean(x, axis=None, keepdims=False):
    """``np.mean(x, axis=axis, keepdims=keepdims)`` (Note [Reductions without NumPy's wrappers]).

    >>> reduce_mean(np.arange(6.0).reshape(2, 3), axis=(1,), keepdims=True)
    array([[1.],
           [4.]])
    """
    if type(x) is not np.ndarray or x.dtype.char not in "fd":
        return np.mean(x, axis=axis, keepdims=keepdims)
    if axis is None:
        n = x.size
    else:
        n = 1
        for a in (axis if type(axis) is tuple else (axis,)):
            n *= x.shape[a]
    total = np.add.reduce(x, axis=axis, keepdims=keepdims)
    if type(total) is np.ndarray:
        return np.true_divide(total, np.intp(n), out=total, casting="unsafe")
    return total.dtype.type(total / np.intp(n))


def to_host(array):
    """The array as NumPy on the host: no copy for NumPy and sim arrays, a
    transfer for CuPy ones; None stays None."""
    if array is None:
        return None
    if type(array) is np.ndarray:
        return array
    return np.asarray(kind_of(array).to_host(array))


def on_device(array, dev: Device):
    """Tag a freshly computed array with ``dev`` without copying (sim only)."""
    return dev.kind.tag(array, dev.index)


def set_current_device(worker_device: int) -> None:
    """Make device index ``worker_device`` current on this thread, for every
    accelerator type that has it (engine.cpp's ``set_device``)."""
    if worker_device < 0:
        return
    for kind in accelerator_types():
        if worker_device < kind.count():
            kind.set_current(worker_device)
