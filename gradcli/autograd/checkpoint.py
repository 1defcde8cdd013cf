"""``checkpoint(function, *args, use_reentrant=False)``: activation checkpointing built on
saved-tensor hooks, as PyTorch's non-reentrant ``torch.utils.checkpoint``.

Note [Non-reentrant checkpoint]: the forward runs ``function`` normally (its graph is
recorded as usual) under saved-tensor hooks whose pack hook keeps, for each tensor a
node saves, only its position in the order of saving (a handle). The first time the
backward unpacks one of them, ``function`` runs again on the checkpoint's inputs with
recording on, under hooks that collect what each op saves in the same order; the
recomputed value of each handle is what its node's backward then reads. Nothing runs
the engine again, so unlike the reentrant checkpoint it works under ``grad()``,
``backward(inputs=...)`` and ``create_graph``, and checkpoints nest: an inner one is a
region of the outer's function with hooks of its own (it keeps its inputs' values;
PyTorch has the outer checkpoint recompute them). With ``early_stop`` the recomputation
stops as soon as every saved tensor has been recomputed. One recomputation serves one
backward (its graph task): a retained graph's next backward recomputes again. The
inputs must keep their values: an input changed in place since the forward fails the
backward with the "modified by an inplace operation" error.
"""
from __future__ import annotations

import threading

from ..devices import device_of
from . import dispatch
from .graph import saved_tensors_hooks
from .saved import modified_message
from .state import ENGINE_TLS, enable_grad

ERR_MORE = ("torch.utils.checkpoint: trying to save more tensors during recomputation than "
            "during the original forward pass.")
ERR_TWICE = ("torch.utils.checkpoint: Unpack is being triggered for a tensor that was already "
             "unpacked once. If you are calling ctx.saved_tensors in backward, make sure to do "
             "so only once. Otherwise please open an issue with details on your use case.")


class _StopRecomputation(BaseException):
    """Raised by the recomputation's pack hook once every saved tensor is back (a
    BaseException, so that no handler for errors of the function catches it)."""


class _Handle:
    __slots__ = ("frame", "index")

    def __init__(self, frame, index):
        self.frame, self.index = frame, index


class CheckpointFrame:
    """One call of a non-reentrant checkpoint (Note [Non-reentrant checkpoint])."""

    def __init__(self, function, args, kwargs, early_stop):
        Tensor = dispatch.Tensor
        self.function, self.kwargs, self.early_stop = function, kwargs, early_stop
        # an input's values, whether it requires grad and its version counter (to check
        # it was not changed in place): never the Tensor, so never its graph
        self.args = [(a.data, a.requires_grad, a._version, _counter(a)) if type(a) is Tensor
                     else a for a in args]
        self.count = 0
        self.metadata = []               # (shape, dtype, device) of each saved tensor
        self.lock = threading.Lock()
        self.recomputed = {}             # graph task id -> {index: array}
        self.unpacked = {}               # graph task id -> set of indices given out

    def pack(self, tensor):
        index = self.count
        self.count += 1
        self.metadata.append(_metadata(tensor))
        return _Handle(self, index)

    @staticmethod
    def unpack(handle):
        return handle.frame._unpack(handle.index)

    def _unpack(self, index):
        task = ENGINE_TLS.current_graph_task
        gid = task.id if task is not None else None
        with self.lock:
            given = self.unpacked.setdefault(gid, set())
            if index in given:
                raise RuntimeError(ERR_TWICE)
            values = self.recomputed.get(gid)
            if values is None:
                values = self.recomputed[gid] = self._recompute()
            given.add(index)
            value = values.pop(index)
            if not values:
                self.recomputed[gid] = {}
        return value

    def _recompute(self):
        Tensor = dispatch.Tensor
        inputs = []
        for a in self.args:
            if type(a) is not tuple:
                inputs.append(a)
                continue
            data, requires_grad, version, vc = a
            if vc is not None and vc[0] != version:
                raise RuntimeError(modified_message(data, vc[0], version,
                                                    saved_by="a checkpoint"))
            inputs.append(Tensor(data, requires_grad=requires_grad))
        values = {}
        position = [0]
        total = self.count
        mismatches = []

        def pack(tensor):
            i = position[0]
            if i >= total:
                raise RuntimeError(ERR_MORE)
            position[0] = i + 1
            values[i] = Tensor(tensor.data)
            meta = _metadata(tensor)
            if meta != self.metadata[i]:         # Note [Recomputed metadata]
                mismatches.append((i, self.metadata[i], meta))
            if self.early_stop and i + 1 == total:
                raise _StopRecomputation
            return None

        try:
            with enable_grad(), saved_tensors_hooks(pack, lambda _: None):
                self.function(*inputs, **self.kwargs)
        except _StopRecomputation:
            pass
        if mismatches:
            raise RuntimeError(
                "torch.utils.checkpoint: Recomputed values for the following tensors have "
                "different metadata than during the forward pass.\n" + "".join(
                    f"tensor at position {i}:\nsaved metadata: {_described(a)}\n"
                    f"recomputed metadata: {_described(b)}\n" for i, a, b in mismatches))
        if position[0] != total:
            raise RuntimeError(
                "torch.utils.checkpoint: A different number of tensors was saved during the "
                "original forward and recomputation.\n"
                f"Number of tensors saved during forward: {total}\n"
                f"Number of tensors saved during recomputation: {position[0]}")
        return values


# Note [Recomputed metadata]: a function that computes something else when it runs again
# (a branch on a global, a random shape) would hand the backward values of other shapes,
# dtypes or devices than the ones its nodes saved; as PyTorch's, the recomputation
# compares each recomputed tensor's shape, dtype and device with the saved one's and
# fails with its words, naming each position, instead of a gradient of the wrong shape.
def _metadata(tensor):
    data = tensor.data
    return (tuple(data.shape), str(data.dtype), str(device_of(data)))


def _described(meta):
    shape, dtype, device = meta
    return f"{{'shape': {list(shape)}, 'dtype': {dtype}, 'device': {device}}}"


def _counter(t):
    from .tensor import version_counter  # noqa: PLC0415

    return version_counter(t)


def checkpoint(function, *args, use_reentrant=None, early_stop=True, **kwargs):
    """Run ``function(*args, **kwargs)`` keeping none of the tensors its backward needs;
    the backward recomputes them (``torch.utils.checkpoint.checkpoint``).

    ``use_reentrant=False`` (PyTorch's recommendation) is built on saved-tensor hooks
    (Note [Non-reentrant checkpoint]); ``use_reentrant=True`` re-runs ``function``
    inside its node's backward and backpropagates through it reentrantly (not under
    ``grad()`` or ``backward(inputs=...)``). As PyTorch 2.13, leaving it out warns and
    uses the reentrant one.

    Example::

        def block(x):
            return O.tanh(x @ w) @ w

        y = checkpoint(block, x, use_reentrant=False)
        (gx,) = grad(y.sum(), x)          # recomputes block's saved tensors
    """
    if use_reentrant is None:
        import warnings  # noqa: PLC0415

        warnings.warn("gradcli.autograd.checkpoint: the use_reentrant parameter should be "
                      "passed explicitly; use_reentrant=False is recommended. Leaving it out "
                      "uses the reentrant checkpoint, as PyTorch 2.13.", stacklevel=2)
        use_reentrant = True
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if not early_stop:
            raise ValueError("early_stop applies to use_reentrant=False only")
        dispatch.load_ops()
        return dispatch.ops.checkpoint(function, *args)
    frame = CheckpointFrame(function, args, kwargs, early_stop)
    with saved_tensors_hooks(frame.pack, CheckpointFrame.unpack):
        return function(*args, **kwargs)
