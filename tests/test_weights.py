"""Weights are read once per loaded graph, mapped where the format allows, and shared
read-only between runs (Note [Weights read once], Note [Leaves made once])."""
import json
import mmap
import zipfile

import numpy as np
import pytest

from gradcli.loader import weights as W
from gradcli.errors import GraphError
from gradcli.loader import loads


def _root(arr):
    while isinstance(getattr(arr, "base", None), np.ndarray):
        arr = arr.base
    base = arr.base
    return base.obj if isinstance(base, memoryview) else base


def _graph(tmp_path, arrays, compressed=False, extra_tensors=None, ops=None):
    save = np.savez_compressed if compressed else np.savez
    save(tmp_path / "w.npz", **arrays)
    tensors = {name: {"file": "w.npz", "key": name, "requires_grad": True} for name in arrays}
    tensors.update(extra_tensors or {})
    names = list(arrays)
    ops = ops or ([{"op": "mul", "inputs": [names[0], names[1]], "output": "p"}]
                  + [{"op": "sum", "inputs": ["p"], "output": "loss"}])
    doc = {"version": 1, "tensors": tensors, "ops": ops, "backward": {"roots": ["loss"]}}
    return loads(json.dumps(doc), format="json", base_dir=str(tmp_path))


def test_each_archive_is_opened_once_for_load_and_every_run(tmp_path, monkeypatch):
    opened = []
    real = W._open_npz
    monkeypatch.setattr(W, "_open_npz", lambda full: opened.append(full) or real(full))
    arrays = {f"w{i}": np.full(4, float(i + 1)) for i in range(6)}
    graph = _graph(tmp_path, arrays)
    for _ in range(3):
        result = graph.run()
    assert len(opened) == 1
    np.testing.assert_array_equal(result.grads["w0"], arrays["w1"])


@pytest.mark.parametrize("compressed", [False, True])
def test_runs_share_one_read_only_array_per_leaf(tmp_path, compressed):
    graph = _graph(tmp_path, {"a": np.arange(3.0), "b": np.ones(3)}, compressed=compressed)
    graph.run()
    first = graph.values["a"].data
    graph.run()
    assert graph.values["a"].data is first
    assert not first.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        first[0] = 5.0
    np.testing.assert_array_equal(graph.run().grads["b"], [0.0, 1.0, 2.0])


def test_a_stored_member_is_mapped_not_copied(tmp_path):
    graph = _graph(tmp_path, {"a": np.arange(3.0), "b": np.ones(3)})
    graph.run()
    assert isinstance(_root(graph.values["a"].data), mmap.mmap)
    with zipfile.ZipFile(tmp_path / "w.npz") as zf:      # np.savez stores: nothing inflated
        assert zf.getinfo("a.npy").compress_type == zipfile.ZIP_STORED


def test_a_npy_file_is_mapped_read_only(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(4.0).reshape(2, 2).T.copy(order="F"))
    doc = {"version": 1, "tensors": {"a": {"file": "a.npy", "requires_grad": True}},
           "ops": [{"op": "sum", "inputs": ["a"], "output": "loss"}], "backward": {"roots": ["loss"]}}
    graph = loads(json.dumps(doc), format="json", base_dir=str(tmp_path))
    graph.run()
    data = graph.values["a"].data
    assert type(data) is np.ndarray and not data.flags.writeable
    np.testing.assert_array_equal(data, np.arange(4.0).reshape(2, 2).T)


def test_a_patched_local_header_is_read_through_zipfile(tmp_path):
    """Note [Mapping a stored member]: the local header must agree with the central one;
    a member whose local name differs is not mapped (zipfile refuses it)."""
    np.savez(tmp_path / "w.npz", a=np.arange(3.0))
    raw = bytearray((tmp_path / "w.npz").read_bytes())
    at = raw.index(b"PK\x03\x04") + 30
    assert raw[at:at + 5] == b"a.npy"
    raw[at:at + 5] = b"b.npy"
    (tmp_path / "w.npz").write_bytes(bytes(raw))
    files = W.WeightFiles()
    with pytest.raises(ValueError, match="not a valid .npz archive"):
        files.array(str(tmp_path / "w.npz"), "a")


def test_an_op_writing_into_a_leaf_copies_it_first(tmp_path):
    """Note [Copy on write of leaves]: batch norm's training forward updates the running
    statistics of this run's tensor; the shared array, and so the next run, is unchanged."""
    np.savez(tmp_path / "w.npz", x=np.arange(12.0).reshape(4, 3), mean=np.zeros(3), var=np.ones(3))
    tensors = {"x": {"file": "w.npz", "key": "x", "requires_grad": True},
               "mean": {"file": "w.npz", "key": "mean"}, "var": {"file": "w.npz", "key": "var"}}
    ops = [{"op": "aten.native_batch_norm.default", "inputs": ["x", None, None, "mean", "var"],
            "args": {"training": True, "momentum": 0.5, "eps": 1e-5}, "outputs": ["y", "m", "r"]},
           {"op": "aten.sum.default", "inputs": ["y"], "output": "loss"}]
    doc = {"version": 1, "tensors": tensors, "ops": ops, "backward": {"roots": ["loss"]}}
    graph = loads(json.dumps(doc), format="json", base_dir=str(tmp_path))
    first = graph.run()
    np.testing.assert_allclose(graph.values["mean"].data, [2.25, 2.75, 3.25])
    assert graph.leaves["mean"].shared().tolist() == [0.0, 0.0, 0.0]
    second = graph.run()
    np.testing.assert_allclose(graph.values["mean"].data, [2.25, 2.75, 3.25])
    np.testing.assert_array_equal(first.grads["x"], second.grads["x"])


def test_a_replaced_make_is_made_again(tmp_path):
    graph = _graph(tmp_path, {"a": np.arange(3.0), "b": np.ones(3)})
    graph.run()
    graph.leaves["b"].make = lambda shape=None: np.full(3, 2.0)
    np.testing.assert_array_equal(graph.run().grads["a"], [2.0, 2.0, 2.0])


def test_a_leaf_is_worked_out_once_for_the_runs(tmp_path, monkeypatch):
    """Note [A leaf's run]: the runs after the first take the leaf's array, fit and
    accumulator metadata from its run tuple; assigning a field works them out again."""
    from gradcli.graph import LeafSpec

    graph = _graph(tmp_path, {"a": np.arange(3.0), "b": np.ones(3)})
    graph.run()
    made = []
    real = LeafSpec.shared
    monkeypatch.setattr(LeafSpec, "shared", lambda self, shape=None: made.append(self.name) or real(self, shape))
    graph.run()
    graph.run()
    assert made == []
    graph.leaves["b"].make = lambda shape=None: np.full(3, 2.0)
    np.testing.assert_array_equal(graph.run().grads["a"], [2.0, 2.0, 2.0])
    assert made == ["b"]


def test_a_weight_file_named_by_many_leaves_is_checked_once(tmp_path, monkeypatch):
    """Note [Weight files checked once]: the path of the file is resolved and checked
    once per load, not once per leaf; each leaf's key still is."""
    import os

    resolved = []
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, **kw: resolved.append(p) or real(p, **kw))
    arrays = {f"w{i}": np.full(4, float(i + 1)) for i in range(20)}
    graph = _graph(tmp_path, arrays)
    assert len(resolved) == 2                  # the graph's folder and the file, once
    assert len(graph.leaves) == 20
    with pytest.raises(GraphError, match=r"no array 'nope' in 'w.npz'"):
        _graph(tmp_path, arrays, extra_tensors={"v": {"file": "w.npz", "key": "nope"}})
    for bad in ({}, ["w.npz"], 3):          # not a name: refused, never looked up
        with pytest.raises(GraphError, match=r"tensors\.v: file must be a path to a \.npy, "
                                             r"\.npz or \.safetensors file$"):
            _graph(tmp_path, arrays, extra_tensors={"v": {"file": bad, "key": "w0"}})


@pytest.mark.parametrize("array", [
    np.arange(6.0).reshape(2, 3), np.zeros((), np.float32), np.ones(5, np.int32),
    np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)), np.array([True, False]),
    np.zeros((0, 7), np.float16), np.zeros((4, 1, 2), ">f8")])
def test_numpys_own_headers_are_read_without_its_parser(tmp_path, monkeypatch, array):
    """Note [Canonical npy headers]: what np.save writes is read by the pattern, to the
    same shape, order and dtype numpy's reader gives; the array maps to the same data."""
    import io

    np.save(tmp_path / "a.npy", array)
    data = (tmp_path / "a.npy").read_bytes()
    want = np.lib.format.read_array_header_1_0(io.BytesIO(data[8:]))
    monkeypatch.setattr(np.lib.format, "read_array_header_1_0", None)   # not called
    fh = io.BytesIO(data)
    assert W._header_fields(fh) == want
    np.testing.assert_array_equal(W._array_at(data, 0, len(data)), array)


def test_any_other_header_goes_to_numpys_reader(tmp_path):
    """A header numpy reads but does not write (other spacing, key order, a structured
    or a complex dtype, version 2.0) is read by numpy, as before."""
    import io

    def npy(header, version=b"\x01\x00", size=2):
        text = header.encode("latin1")
        return b"\x93NUMPY" + version + len(text).to_bytes(size, "little") + text

    for header, want in [
            ("{'shape': (2,), 'fortran_order': False, 'descr': '<f8'}\n", ((2,), False, "<f8")),
            ("{'descr': '<f8',  'fortran_order': False, 'shape': (2,), }\n",
             ((2,), False, "<f8")),
            ("{'descr': '<c16', 'fortran_order': False, 'shape': (2,), }\n",
             ((2,), False, "<c16"))]:
        shape, fortran, dtype = W._header_fields(io.BytesIO(npy(header)))
        assert (shape, fortran, dtype) == (want[0], want[1], np.dtype(want[2]))
    v2 = npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }\n", b"\x02\x00", 4)
    fh = io.BytesIO(v2 + b"\0" * 12)
    assert W._header_fields(fh) == ((3,), False, np.dtype("<i4"))
    assert fh.tell() == len(v2)                  # past the header: where the data starts
    with pytest.raises(ValueError, match=r"not a valid \.npy file"):
        W.read_npy_header(io.BytesIO(npy("{'descr': '<f8', 'shape': (2,)}\n")))
