"""Weights in .safetensors files: read as the safetensors library writes them, mapped
read-only and shared between runs, and every hostile file refused at load with one
line naming the graph file and the weight file (Note [Safetensors bounds])."""
from __future__ import annotations

import json
import mmap
import struct

import numpy as np
import pytest

from gradcli.errors import GraphError
from gradcli.loader import loads
from gradcli.loader import safetensors_file as S
from gradcli.loader import weights as W

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _doc(tensors, ops=None):
    names = list(tensors)
    ops = ops or [{"op": "mul", "inputs": [names[0], names[0]], "output": "p"},
                  {"op": "sum", "inputs": ["p"], "output": "loss"}]
    return json.dumps({"version": 1, "tensors": tensors, "ops": ops,
                       "backward": {"roots": ["loss"]}})


def _graph(tmp_path, key="w", **entry):
    return loads(_doc({"w": {"file": "w.safetensors", "key": key, "requires_grad": True,
                             **entry}}), format="json", name="g", base_dir=str(tmp_path))


def _raw(header, data=b"", size=None):
    """A .safetensors file's bytes: the size field (``size``, else the header's), the
    header (a dict as JSON, or bytes as they are) and the data."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if size is None else size) + text + data


def _root(arr):
    while isinstance(getattr(arr, "base", None), np.ndarray):
        arr = arr.base
    base = arr.base
    return base.obj if isinstance(base, memoryview) else base


def test_a_file_the_library_writes_is_read_mapped_and_shared(tmp_path, monkeypatch):
    w = np.arange(6.0).reshape(2, 3)
    safetensors_numpy.save_file({"w": w, "grad:w": 2 * w, "i": np.arange(4, dtype=np.int32)},
                                str(tmp_path / "w.safetensors"), metadata={"by": "test"})
    opened = []
    real = S.read_header
    monkeypatch.setattr(S, "read_header", lambda full: opened.append(full) or real(full))
    text = _doc({"w": {"file": "w.safetensors", "key": "w", "requires_grad": True},
                 "i": {"file": "w.safetensors", "key": "i"}})
    text = text.replace('"backward"', '"expect": {"grads": {"w": {"file": "w.safetensors", '
                                      '"key": "grad:w"}}}, "backward"')
    graph = loads(text, format="json", base_dir=str(tmp_path))
    first = graph.run()
    second = graph.run()
    for result in (first, second):
        np.testing.assert_array_equal(result.grads["w"], 2 * w)
    np.testing.assert_array_equal(graph.expect.grads["w"].shared(), 2 * w)
    arr = graph.leaves["w"].shared()
    assert arr is graph.leaves["w"].shared()                   # one array for every run
    assert not arr.flags.writeable
    assert isinstance(_root(arr), mmap.mmap)                   # mapped, not copied
    assert graph.leaves["i"].dtype == np.int32
    assert len(opened) == 1                                    # the header parsed once


def test_the_tensors_of_one_file_share_one_map(tmp_path):
    safetensors_numpy.save_file({"a": np.ones(3), "b": np.zeros(5)}, str(tmp_path / "w.safetensors"))
    files = W.WeightFiles()
    full = str(tmp_path / "w.safetensors")
    assert files.peek(full, "b") == ((5,), np.dtype("float64"))
    assert _root(files.array(full, "a")) is _root(files.array(full, "b"))


def test_a_file_replaced_after_load_is_refused_at_run(tmp_path):
    safetensors_numpy.save_file({"w": np.arange(3.0)}, str(tmp_path / "w.safetensors"))
    graph = _graph(tmp_path)
    safetensors_numpy.save_file({"w": np.ones((50, 50))}, str(tmp_path / "w.safetensors"))
    with pytest.raises(GraphError, match=r"'w.safetensors' changed since the graph was loaded"):
        graph.run()


def test_a_missing_key_and_a_dtype_mismatch_name_the_file(tmp_path):
    safetensors_numpy.save_file({"w": np.arange(3.0)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(GraphError, match=r"^<g>:\d+: tensors\.w: no array 'v' in 'w.safetensors'$"):
        _graph(tmp_path, key="v")
    with pytest.raises(GraphError, match=r"dtype float32 does not match 'w.safetensors' of "
                                         r"dtype float64"):
        _graph(tmp_path, dtype="float32")
    with pytest.raises(GraphError, match=r"'w.safetensors' is a .safetensors file: give key"):
        loads(_doc({"w": {"file": "w.safetensors"}}), format="json", name="g",
              base_dir=str(tmp_path))


def test_an_integer_dtype_the_graph_format_lacks_is_refused_as_in_npy(tmp_path):
    safetensors_numpy.save_file({"w": np.arange(3, dtype=np.uint8)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(GraphError, match=r"'w.safetensors' holds uint8 \(expected one of float16"):
        loads(_doc({"w": {"file": "w.safetensors", "key": "w"}}), format="json", name="g",
              base_dir=str(tmp_path))


F64 = {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}
DATA = np.arange(2.0).tobytes()

HOSTILE = {
    "shorter than the size field": (b"\x05\x00", "shorter than the 8-byte header size"),
    "header over the limit": (_raw({"w": F64}, DATA, size=S.MAX_HEADER_BYTES + 1),
                              f"over the limit of {S.MAX_HEADER_BYTES} bytes"),
    "header past the end": (_raw({"w": F64}, b"", size=10_000), "past the end of the file"),
    "not UTF-8": (_raw(b'{"w\xff": 1}'), "header is not UTF-8"),
    "not an object": (_raw(b"[1, 2]"), "header is not a JSON object"),
    "not JSON": (_raw(b'{"w": {'), "header is not valid JSON"),
    "a key twice": (_raw(b'{"w": {}, "w": {}}'), "header names 'w' twice"),
    "nested deep": (_raw(b'{"w": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
                    "header nests too deep"),
    "entry not an object": (_raw({"w": [1]}), "tensor 'w': its header entry is not a JSON object"),
    "bf16": (_raw({"w": {**F64, "dtype": "BF16", "data_offsets": [0, 4]}}, b"\0" * 4),
             "tensor 'w': dtype 'BF16' is not supported"),
    "unknown dtype": (_raw({"w": {**F64, "dtype": "C64"}}, DATA), "dtype 'C64' is not supported"),
    "negative dim": (_raw({"w": {**F64, "shape": [-2]}}, DATA),
                     "shape must be a list of non-negative ints, got [-2]"),
    "bool dim": (_raw({"w": {**F64, "shape": [True, 2]}}, DATA),
                 "shape must be a list of non-negative ints"),
    "offsets reversed": (_raw({"w": {**F64, "data_offsets": [16, 0]}}, DATA),
                         "data_offsets must be [begin, end] with 0 <= begin <= end"),
    "offsets not two": (_raw({"w": {**F64, "data_offsets": [0]}}, DATA),
                        "data_offsets must be [begin, end]"),
    "shape against offsets": (_raw({"w": {**F64, "shape": [1000, 1000]}}, DATA),
                              "shape [1000, 1000] of F64 takes 8000000 bytes, its data_offsets "
                              "[0, 16] hold 16"),
    "offsets past the data": (_raw({"w": {**F64, "shape": [4], "data_offsets": [0, 32]}}, DATA),
                              "data_offsets [0, 32] are past the end of the data (16 bytes)"),
    "a gap": (_raw({"w": {**F64, "shape": [1], "data_offsets": [8, 16]}}, DATA),
              "leave a gap at byte 0"),
    "an overlap": (_raw({"w": F64, "v": {**F64, "shape": [1], "data_offsets": [8, 16]}}, DATA),
                   "leave an overlap at byte 8"),
    "bytes after the tensors": (_raw({"w": F64}, DATA + b"\0" * 8),
                                "the tensors end at byte 16 of the data, which has 24"),
    "metadata not strings": (_raw({"__metadata__": {"a": 1}, "w": F64}, DATA),
                             "__metadata__ must map names to strings"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_file_is_refused_at_load_in_one_line(tmp_path, case):
    data, problem = HOSTILE[case]
    (tmp_path / "w.safetensors").write_bytes(data)
    with pytest.raises(GraphError) as info:
        _graph(tmp_path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("<g>:") and "tensors.w: cannot read 'w.safetensors': " in msg, msg
    assert problem in msg, msg


def test_the_well_formed_file_of_the_hostile_cases_loads(tmp_path):
    """The cases above differ from this file by their one fault."""
    (tmp_path / "w.safetensors").write_bytes(_raw({"w": F64}, DATA))
    assert _graph(tmp_path).run().grads["w"].tolist() == [0.0, 2.0]


def test_a_header_padded_with_spaces_and_an_odd_offset_are_read(tmp_path):
    # the library pads its header to 8 bytes; a writer that does not gives misaligned
    # float64s: read into one aligned copy, shared as a mapped array is
    (tmp_path / "w.safetensors").write_bytes(_raw(b'{"w": ' + json.dumps(F64).encode() + b"}   ",
                                                  DATA))
    graph = _graph(tmp_path)
    assert graph.run().grads["w"].tolist() == [0.0, 2.0]
    assert graph.leaves["w"].shared().flags.aligned


# -- what export writes ---------------------------------------------------------------------------
def _exported():
    from gradcli.bridges.graphfile import ExportedGraph

    w = np.arange(6.0).reshape(2, 3)
    return ExportedGraph.build(
        name="g", tensors={"w": {"requires_grad": True}, "m": {}},
        arrays={"w": w, "m": np.array([True, False, True])},
        ops=[{"op": "mul", "inputs": ["w", "w"], "output": "p"},
             {"op": "sum", "inputs": ["p"], "output": "s"}],
        root="s", grads={"w": 2 * w}, order=None, floating="float64", forward={"p": w * w})


def test_write_safetensors_names_the_file_everywhere_and_runs_as_npz_does(tmp_path):
    from gradcli.loader import load

    graph = _exported()
    st = graph.write(str(tmp_path / "st"), weights="safetensors")
    npz = graph.write(str(tmp_path / "npz"))
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == ["graph.yaml",
                                                                   "weights.safetensors"]
    text = (tmp_path / "st" / "graph.yaml").read_text()
    assert "weights.npz" not in text and text.count("file: weights.safetensors") == 4
    assert graph.document["tensors"]["w"]["file"] == "weights.npz"   # the graph's own: as it was
    written = safetensors_numpy.load_file(str(tmp_path / "st" / "weights.safetensors"))
    assert sorted(written) == sorted(graph.arrays)
    for key, value in graph.arrays.items():
        np.testing.assert_array_equal(written[key], value)
    a, b = load(st), load(npz)
    ra, rb = a.run(), b.run()
    np.testing.assert_array_equal(ra.grads["w"], rb.grads["w"])
    np.testing.assert_array_equal(a.expect.forward.values["p"].shared(),
                                  b.expect.forward.values["p"].shared())
    assert isinstance(_root(a.leaves["w"].shared()), mmap.mmap)


def test_write_without_the_safetensors_package_says_what_to_install(tmp_path, monkeypatch):
    import sys

    from gradcli.bridges.errors import BridgeError

    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)     # import fails
    with pytest.raises(BridgeError, match=r"needs the safetensors package: pip install "
                                          r"'gradcli\[torch\]' \(or write weights.npz: "
                                          r"--weights npz\)"):
        _exported().write(str(tmp_path), weights="safetensors")
    with pytest.raises(ValueError, match="weights must be one of npz, safetensors"):
        _exported().write(str(tmp_path), weights="pt")


def test_the_export_command_writes_safetensors_unless_told_npz(tmp_path):
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from gradcli.cli import main

    (tmp_path / "model.py").write_text("import torch\n\ndef build_model():\n"
                                       "    torch.manual_seed(0)\n"
                                       "    return torch.nn.Linear(3, 2)\n")
    outs = {}
    for weights in (None, "npz"):
        out = tmp_path / f"out_{weights}"
        args = ["export", f"{tmp_path / 'model.py'}:build_model", "--input-shape", "4,3",
                "--dtype", "float64", "-o", str(out)]
        res = CliRunner().invoke(main, args + (["--weights", weights] if weights else []))
        assert res.exit_code == 0, res.output
        outs[weights] = sorted(p.name for p in out.iterdir())
        assert f"its weights.{weights or 'safetensors'}" in res.output
        res = CliRunner().invoke(main, ["validate", str(out / "graph.yaml")])
        assert res.exit_code == 0, res.output
    assert outs == {None: ["graph.yaml", "weights.safetensors"], "npz": ["graph.yaml", "weights.npz"]}
