"""Hostile input: the memory of the whole graph, time bounds,
exact patterns, hostile .npz archives, and the load time of large files.

The bad-input corpus (tests/bad_inputs/) holds one file per case; these tests
check the mechanisms behind them, with hypothesis fuzzing where a class of
inputs is large.
"""
from __future__ import annotations

import gc
import io
import json
import re
import struct
import threading
import time
import tracemalloc
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import gradcli
from gradcli import devices as D
from gradcli import loader as L
from gradcli.loader.check_tensors import TensorChecks
from gradcli.errors import GraphError
from gradcli.loader import loads
from gradcli.ops import OPS
from gradcli.ops.args import parse_index


def _doc(tensors, ops, roots=("loss",)):
    return json.dumps({"version": 1, "tensors": tensors, "ops": ops,
                       "backward": {"roots": list(roots)}})


# -- 1. the memory budget of the whole graph ---------------------------------------------------
def _chain(n_exp, size, dtype="float64"):
    ops = [{"op": "expand", "inputs": ["x"], "output": "e0", "args": {"shape": [size]}}]
    for i in range(n_exp):
        ops.append({"op": "exp", "inputs": [f"e{i}"], "output": f"e{i + 1}"})
    ops.append({"op": "sum", "inputs": [f"e{n_exp}"], "output": "loss"})
    return _doc({"x": {"shape": [1], "dtype": dtype, "requires_grad": True}}, ops)


def test_graph_budget_adds_up_leaves_and_results_and_names_the_op():
    # x: 8 bytes; each exp: 8000 bytes; sum: 8 bytes. Views (expand) are free.
    text = _chain(3, 1000)
    graph = loads(text, max_graph_bytes=8 + 3 * 8000 + 8)          # exactly at the budget
    assert graph.run().grads["x"].shape == (1,)
    with pytest.raises(GraphError) as info:
        loads(text, max_graph_bytes=8 + 3 * 8000 + 7)
    assert "ops[4] (sum): the graph's tensors need 24016 bytes up to here (this one: 8 bytes)" \
        in str(info.value)
    with pytest.raises(GraphError, match=r"ops\[2\] \(exp\).*16008 bytes"):
        loads(text, max_graph_bytes=10_000)


def test_views_allocate_nothing_but_their_readers_do():
    # A 8 GB expanded view under a 10 MB graph budget is fine while nothing reads it in full
    # (a sum over it allocates a scalar); the per-tensor budget allows the view's shape.
    ops = [{"op": "expand", "inputs": ["x"], "output": "v", "args": {"shape": [10**9]}},
           {"op": "transpose", "inputs": ["v"], "output": "t"},
           {"op": "slice", "inputs": ["t"], "output": "s", "args": {"index": "::2"}},
           {"op": "sum", "inputs": ["s"], "output": "loss"}]
    text = _doc({"x": {"shape": [1], "requires_grad": True}}, ops)
    graph = loads(text, max_graph_bytes=10**7, max_tensor_bytes=10**10)
    assert graph is not None
    # Its reader (cast) allocates the view in full: refused at the cast.
    ops.insert(3, {"op": "cast", "inputs": ["s"], "output": "c", "args": {"dtype": "float32"}})
    with pytest.raises(GraphError, match=r"ops\[3\] \(cast\): the graph's tensors need "
                                         r"2000000008 bytes"):
        loads(_doc({"x": {"shape": [1], "requires_grad": True}}, ops),
              max_graph_bytes=10**7, max_tensor_bytes=10**10)


def test_aten_views_allocate_nothing_but_their_readers_do():
    # The same for ATen ops, whose schemas say which return views.
    ops = [{"op": "aten.expand.default", "inputs": ["x"], "output": "v",
            "args": {"size": [1000, 10**6]}},
           {"op": "aten.t.default", "inputs": ["v"], "output": "t"},
           {"op": "aten.sum.default", "inputs": ["t"], "output": "loss"}]
    x = {"x": {"shape": [1, 1], "requires_grad": True}}
    assert loads(_doc(x, ops), max_graph_bytes=10**7, max_tensor_bytes=10**10) is not None
    ops.insert(2, {"op": "aten.exp.default", "inputs": ["t"], "output": "e"})
    ops[-1]["inputs"] = ["e"]
    with pytest.raises(GraphError, match=r"ops\[2\] \(aten.exp.default\): the graph's tensors"):
        loads(_doc(x, ops), max_graph_bytes=10**7, max_tensor_bytes=10**10)


def test_view_ops_say_so_and_return_views():
    """``Op.view`` is a promise the budget relies on: such an op's outputs share
    its input's memory (or are its input)."""
    x = np.arange(24.0).reshape(2, 3, 4)
    samples = {"transpose": {}, "expand": {"shape": [5, 2, 3, 4]}, "squeeze": {},
               "unsqueeze": {"axis": 0}, "slice": {"index": parse_index("1:, ::2")},
               "split": {"sections": 2, "indices": None, "axis": 0}, "delay": {},
               "fail": {}, "nan": {}}
    # ATen ops say so by their schema's alias annotation (Note [Views from the schema]).
    samples.update({"aten.alias.default": {}, "aten.detach.default": {},
                    "aten.expand.default": {"size": [5, 2, 3, 4]},
                    "aten.permute.default": {"dims": [2, 0, 1]},
                    "aten.select.int": {"dim": 1, "index": 1},
                    "aten.slice.Tensor": {"dim": 2, "start": 1, "end": 3},
                    "aten.split.Tensor": {"split_size": 1, "dim": 0},
                    "aten.squeeze.dim": {"dim": 0}, "aten.squeeze.dims": {"dim": [0]},
                    "aten.t.default": {}, "aten.transpose.int": {"dim0": 0, "dim1": 2},
                    "aten.unbind.int": {"dim": 0}, "aten.unsqueeze.default": {"dim": 0},
                    "aten.view.default": {"size": [6, 4]},
                    "aten.diagonal.default": {"offset": 1, "dim1": 1, "dim2": 2},
                    "aten.as_strided.default": {"size": [3, 2], "stride": [4, 1], "storage_offset": 1},
                    "aten.split_with_sizes.default": {"split_sizes": [1, 1], "dim": 0},
                    "aten.view_as_real.default": {}, "aten.view_as_complex.default": {}})
    views = sorted(n for n, op in OPS.items() if op.public and op.view)
    assert set(views) <= set(samples), f"add a sample for the new view op(s) {views}"
    for name in views:
        if name == "aten.t.default":
            x = np.arange(6.0).reshape(2, 3)       # t takes at most 2 dimensions
        elif name in ("aten.view_as_real.default", "aten.view_as_complex.default"):
            x = np.arange(12.0).reshape(2, 3, 2)   # a complex tensor's real view: a last dim of 2
        else:
            x = np.arange(24.0).reshape(2, 3, 4)
        out = OPS[name].fn(x, **samples[name])
        for o in out if isinstance(out, list) else [out]:
            assert o is x or np.shares_memory(o, x), name
    assert not any(OPS[n].view for n in ("exp", "cast", "concat", "stack", "reshape", "clone",
                                         "aten._unsafe_view.default", "aten.clone.default",
                                         "aten.unsafe_split.Tensor", "aten.cat.default"))


def test_graph_budget_refuses_before_allocating():
    # 20 exps over an 80 MB view: 1.6 GB if run (1.75 GB peak RSS before the fix).
    tracemalloc.start()
    try:
        with pytest.raises(GraphError, match="for the whole graph"):
            loads(_chain(20, 10**7), max_graph_bytes=5 * 10**8)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


def test_graph_budget_defaults_to_twice_the_tensor_budget_and_is_kept_on_the_graph():
    assert L.LoadOptions().max_graph_bytes == 2 * L.default_max_tensor_bytes()
    graph = loads(_chain(1, 10), max_graph_bytes=12345)
    assert graph.max_graph_bytes == 12345


def test_checkpoint_bodies_count_against_the_graph_budget():
    body = [{"op": "exp", "inputs": ["x"], "output": "a"},
            {"op": "exp", "inputs": ["a"], "output": "b"}]
    ops = [{"op": "checkpoint", "inputs": ["x"], "outputs": ["b"], "body": body},
           {"op": "sum", "inputs": ["b"], "output": "loss"}]
    text = _doc({"x": {"shape": [1000], "requires_grad": True}}, ops)
    with pytest.raises(GraphError, match=r"ops\[0\]\.body\[1\] \(exp\).*24000 bytes"):
        loads(text, max_graph_bytes=20_000)


OPS_OVER_VIEWS = st.sampled_from([
    ("exp", {}), ("cast", {"dtype": "float32"}), ("cast", {"dtype": "float64"}),
    ("transpose", {}), ("slice", {"index": "::2"}), ("concat", {}), ("stack", {}),
    ("neg", {}), ("sum", {"axis": 0, "keepdims": True}), ("expand", None)])


@st.composite
def view_chains(draw):
    """A chain of ops over an expanded view, each reading the previous result."""
    n = draw(st.integers(1, 200_000))
    ops = [{"op": "expand", "inputs": ["x"], "output": "t0", "args": {"shape": [n]}}]
    for i, (name, args) in enumerate(draw(st.lists(OPS_OVER_VIEWS, min_size=1, max_size=8))):
        prev = f"t{i}"
        entry = {"op": name, "inputs": [prev], "output": f"t{i + 1}"}
        if name in ("concat", "stack"):
            entry["inputs"] = [prev] * draw(st.integers(1, 6))
        elif args is None:
            entry["args"] = {"shape": [draw(st.integers(1, 3)), -1]}
            entry["op"] = "expand"
        else:
            entry["args"] = args
        ops.append(entry)
    ops.append({"op": "sum", "inputs": [f"t{len(ops) - 1}"], "output": "loss"})
    return _doc({"x": {"shape": [1], "requires_grad": True}}, ops)


@pytest.mark.timeout(300)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view_chains(), st.integers(2**12, 2**24))
def test_forward_of_an_accepted_graph_stays_within_its_budget(text, budget):
    """Whatever chain of ops over views: refused at load, or its forward allocates
    no more than the graph budget (plus NumPy's small temporaries)."""
    try:
        graph = loads(text, max_graph_bytes=budget, max_tensor_bytes=budget)
    except GraphError as exc:              # over a budget, or shapes that do not fit
        assert "\n" not in str(exc)
        return
    tracemalloc.start()
    try:
        graph.forward()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= budget + 2**16, (peak, budget)


# -- validate --numeric: full Jacobians are bounded too ---------------------------------------
def test_full_jacobians_over_the_budget_switch_to_fast_mode():
    from gradcli.gradcheck import check_jacobians, full_jacobian_bytes
    from gradcli.validate import Options, validate_graph

    text = json.dumps({"version": 1, "tensors": {"x": {"shape": [300], "init": "normal",
                                                      "requires_grad": True}},
                       "ops": [{"op": "exp", "inputs": ["x"], "output": "y"}],
                       "backward": {"roots": ["y"], "grad_roots": {"y": {"shape": [300],
                                                                         "init": "ones"}}}})
    assert full_jacobian_bytes([300], [300]) == 32 * 300 * 300
    full = check_jacobians(loads(text))
    assert [m.fast for m in full] == [False] and full[0].note == ""
    graph = loads(text, max_graph_bytes=32 * 300 * 300 - 1)
    (m,) = check_jacobians(graph)
    assert m.fast and m.ok and "would need 2880000 bytes" in m.note and "fast mode" in m.note
    (check,) = [c for c in validate_graph(graph, "<graph>", Options(numeric=True)).checks
                if c.kind == "numeric"]
    assert check.status == "pass" and "fast mode" in check.message


@pytest.mark.timeout(120)
def test_full_check_that_would_take_too_long_switches_to_fast_mode():
    """Found by scripts/fuzz_cli.py: validate --numeric on a [100000, 2] input ran
    400,000 forward replays (over ten minutes, a hang); Note [gradcheck's time]."""
    from gradcli.gradcheck import MAX_FULL_CHECK_WORK, check_jacobians, full_check_work
    from gradcli.validate import Options, validate_graph

    def graph(n):
        return loads(json.dumps({
            "version": 1, "tensors": {"x": {"shape": [n, 2], "init": "normal", "requires_grad": True}},
            "ops": [{"op": "tanh", "inputs": ["x"], "output": "y"},
                    {"op": "sum", "inputs": ["y"], "output": "s"}],
            "backward": {"roots": ["s"]}}))

    # 2 replays per input element, each of 4n + 1 elements and 2 op calls
    assert full_check_work(200_000, 2, 400_001) == 2 * 200_000 * (400_001 + 20_000)
    (small,) = check_jacobians(graph(50))
    assert not small.fast and small.note == "" and small.ok
    big = graph(100_000)
    start = time.perf_counter()
    (m,) = check_jacobians(big)
    assert time.perf_counter() - start < 60       # fast mode: ~0.1 s; full: over ten minutes
    assert m.fast and m.ok and "replay the forward 400000 times" in m.note
    assert f"over {MAX_FULL_CHECK_WORK:.0e}" in m.note and "fast mode" in m.note
    (check,) = [c for c in validate_graph(big, "<graph>", Options(numeric=True)).checks
                if c.kind == "numeric"]
    assert check.status == "pass" and "fast mode" in check.message


def test_numeric_check_refuses_float64_copies_over_the_budget():
    """gradcheck promotes to float64 and holds three copies of the graph's values:
    a float16 graph within its budget can need 12 times as much there."""
    from gradcli.gradcheck import check_jacobians
    from gradcli.validate import Options, validate_file

    text = _chain(1, 1000, dtype="float16")          # x [1]; exp [1000]; sum []
    graph = loads(text, max_graph_bytes=20_000)
    assert (graph.forward_bytes, graph.float64_forward_bytes) == (2 + 2000 + 2, 8 + 8000 + 8)
    with pytest.raises(GraphError, match=r"<graph>:1: backward: the numeric check needs three "
                                         r"float64 copies of the graph's tensors \(24048 bytes\)"):
        check_jacobians(graph)
    assert check_jacobians(loads(text, max_graph_bytes=24_048))[0].ok
    report = validate_file("<graph>", Options(numeric=True),
                           load=lambda path: loads(text, max_graph_bytes=20_000))
    assert "24048 bytes" in report.invalid


# -- 2. time bounds ------------------------------------------------------------------------------
def _delays(*pairs):
    ops, prev = [], "x"
    for i, (ms, jitter) in enumerate(pairs):
        ops.append({"op": "delay", "inputs": [prev], "output": f"d{i}",
                    "args": {"ms": ms, "jitter_ms": jitter}})
        prev = f"d{i}"
    ops.append({"op": "sum", "inputs": [prev], "output": "loss"})
    return _doc({"x": {"shape": [2], "requires_grad": True}}, ops)


def test_delays_are_bounded_per_op_and_per_file():
    loads(_delays((30_000, 10_000), (10_000, 10_000)))              # 60 s in all: fine
    with pytest.raises(GraphError, match=r"ops\[1\] \(delay\): the ops' backward waits add up "
                                         r"to 60001 ms"):
        loads(_delays((30_000, 10_000), (10_000, 10_001)))
    with pytest.raises(GraphError, match="ms \\+ jitter_ms must be at most 60000"):
        loads(_delays((59_000, 1_001)))
    assert OPS["delay"].worst_backward_ms({"ms": 5, "jitter_ms": 7}) == 12
    assert OPS["exp"].worst_backward_ms({}) == 0


def test_delays_in_checkpoint_bodies_count():
    body = [{"op": "delay", "inputs": ["x"], "output": "a", "args": {"ms": 40_000}}]
    ops = [{"op": "checkpoint", "inputs": ["x"], "outputs": ["a"], "body": body},
           {"op": "delay", "inputs": ["a"], "output": "b", "args": {"ms": 30_000}},
           {"op": "sum", "inputs": ["b"], "output": "loss"}]
    with pytest.raises(GraphError, match=r"ops\[1\] \(delay\).*70000 ms"):
        loads(_doc({"x": {"shape": [2], "requires_grad": True}}, ops))


def test_loading_pauses_the_cyclic_collector_and_restores_it(monkeypatch):
    seen = []
    leaf = TensorChecks.leaf

    def spy(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return leaf(self, *args, **kwargs)

    monkeypatch.setattr(TensorChecks, "leaf", spy)
    assert gc.isenabled()
    loads(_chain(1, 10))
    assert seen == [False] and gc.isenabled()
    with pytest.raises(GraphError):
        loads(_chain(1, 10), max_graph_bytes=1)
    assert gc.isenabled()
    gc.disable()
    try:
        loads(_chain(1, 10))
        assert not gc.isenabled()                     # left as the caller had it
    finally:
        gc.enable()


@pytest.mark.timeout(60)
def test_concurrent_loads_leave_the_collector_enabled():
    errors = []

    def work():
        try:
            for _ in range(20):
                loads(_chain(2, 10)).run()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from gradcli import collector

    assert not errors and gc.isenabled() and collector._depth == 0


# -- 4. exact patterns ---------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["sim:0\n", "cpu\n", "sim:\u0661", "cuda:\u0660", "sim:\uff11",
                                  "sim:" + "9" * 5000, "sim:1_0", " sim:0", "sim: 1"])
def test_device_strings_match_whole_and_in_ascii(spec):
    with pytest.raises(D.DeviceError):
        D.device(spec)


def test_device_strings_that_parse():
    assert str(D.device("sim:01")) == "sim:1" and str(D.device("cuda")) == "cuda:0"
    assert D.device("cpu") is D.CPU


DIGITS = st.text(alphabet=st.sampled_from("0123456789\u0661\u0663\uff11\u0e51_"), max_size=11)
ODD = st.sampled_from(["", "", "", "\n", "\r", " ", "\t", "\x00", "\u2028", ":"])
DEVICE_STRINGS = st.builds(lambda pre, typ, colon, digits, post: pre + typ + colon + digits + post,
                           ODD, st.sampled_from(["cpu", "cuda", "sim", "Sim", "simx", ""]),
                           st.sampled_from([":", ":", ""]), DIGITS, ODD)


@example("sim:0\n")
@example("sim:\u0661")
@given(DEVICE_STRINGS | st.text(max_size=8))
def test_device_parser_accepts_exactly_the_spec_pattern(spec):
    ok = re.fullmatch(r"cpu|(cuda|sim)(:[0-9]{1,9})?", spec, re.ASCII) is not None
    try:
        D.device(spec)
        assert ok, spec
    except D.DeviceError:
        assert not ok, spec


NAMES = st.builds(lambda pre, body, post: pre + body + post, ODD,
                  st.from_regex(r"[A-Za-z_][A-Za-z0-9_./-]{0,5}", fullmatch=True)
                  | st.text(alphabet=st.sampled_from("ab_Z09./-\u0661é"), min_size=1, max_size=6),
                  ODD)


@example("x\n")
@example("loss")
@given(NAMES | st.text(max_size=6))
def test_tensor_names_match_the_spec_pattern_whole(name):
    ok = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]*", name, re.ASCII) is not None
    out = "loss" if name != "loss" else "loss2"     # (a leaf named loss: not a clash)
    text = _doc({name: {"shape": [2], "requires_grad": True}},
                [{"op": "sum", "inputs": [name], "output": out}], roots=(out,))
    try:
        loads(text, format="json")
        assert ok, name
    except GraphError as exc:
        assert not ok, (name, str(exc))
        assert "invalid tensor name" in str(exc)


@pytest.mark.parametrize("index", ["\u0661:\u0663", "\u0661", "1_0", "::\u0662", "\uff11",
                                   "1" * 30])
def test_slice_indexes_are_ascii_ints(index):
    with pytest.raises(ValueError):
        parse_index(index)


def test_slice_indexes_that_parse():
    assert parse_index(" -1 : +3 , ::2, ..., None") == (slice(-1, 3), slice(None, None, 2),
                                                       Ellipsis, None)


# -- 3. .npz archives -----------------------------------------------------------------------------
def _npy(array):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array))
    return buf.getvalue()


def _npz_graph(tmp_path, data, key="a"):
    (tmp_path / "d.npz").write_bytes(data)
    text = _doc({"x": {"file": "d.npz", "key": key, "requires_grad": True}},
                [{"op": "sum", "inputs": ["x"], "output": "loss"}])
    return loads(text, format="json", base_dir=str(tmp_path))


def _zip(members, compression=zipfile.ZIP_STORED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return buf.getvalue()


def test_npz_key_naming_two_members_is_refused(tmp_path):
    data = _zip([("a.npy", _npy(np.ones(3))), ("a", _npy(np.ones((2000, 2000))))])
    with pytest.raises(GraphError, match="ambiguous key 'a'"):
        _npz_graph(tmp_path, data)
    with pytest.warns(UserWarning):                  # a name twice in the zip directory
        data = _zip([("a.npy", _npy(np.ones(3))), ("a.npy", _npy(np.ones(4)))])
    with pytest.raises(GraphError, match="holds 'a.npy' 2 times"):
        _npz_graph(tmp_path, data)


def test_npz_member_checked_is_the_member_loaded(tmp_path):
    # Only 'a' (no .npy suffix) holds the key: np.load would read it; so do we.
    graph = _npz_graph(tmp_path, _zip([("a.npy", _npy(np.arange(3.0))),
                                       ("b", _npy(np.ones(2)))]))
    assert graph.run().grads["x"].tolist() == [1.0, 1.0, 1.0]
    graph = _npz_graph(tmp_path, _zip([("a.npy", _npy(np.arange(3.0)))]), key="a.npy")
    assert graph.run().grads["x"].shape == (3,)


def test_npz_replaced_after_load_is_refused_at_run(tmp_path):
    graph = _npz_graph(tmp_path, _zip([("a.npy", _npy(np.arange(3.0)))]))
    (tmp_path / "d.npz").write_bytes(_zip([("a.npy", _npy(np.ones((5000, 5000))))]))
    with pytest.raises(GraphError, match=r"'d.npz' changed since the graph was loaded"):
        graph.run()


LOCAL, CENTRAL = b"PK\x03\x04", b"PK\x01\x02"
# (offset in the local header, offset in the central header, format) of each field
FIELDS = {"version": (4, 6, "<H"), "flags": (6, 8, "<H"), "method": (8, 10, "<H"),
          "crc": (14, 16, "<I"), "csize": (18, 20, "<I"), "usize": (22, 24, "<I"),
          "name_len": (26, 28, "<H")}


@pytest.mark.timeout(300)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(sorted(FIELDS)), st.sampled_from(["local", "central",
                                                                              "both"]),
                          st.integers(0, 2**16 - 1)), min_size=1, max_size=3),
       st.booleans())
def test_patched_zip_headers_give_a_graph_error_or_the_right_values(tmp_path, patches, deflate):
    """A .npz whose zip headers are patched (compression method, encryption and
    patched-data flags, zip version, CRC, sizes) loads the right array or fails with
    a one-line GraphError: never another exception."""
    value = np.arange(6.0).reshape(2, 3)
    data = bytearray(_zip([("a.npy", _npy(value))],
                          zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED))
    lo, ce = data.index(LOCAL), data.index(CENTRAL)
    for field, where, v in patches:
        off_l, off_c, fmt = FIELDS[field]
        v = v if fmt == "<H" else v * 65537
        if where in ("local", "both"):
            struct.pack_into(fmt, data, lo + off_l, v)
        if where in ("central", "both"):
            struct.pack_into(fmt, data, ce + off_c, v)
    try:
        graph = _npz_graph(tmp_path, bytes(data))
        result = graph.run()
    except GraphError as exc:
        assert "\n" not in str(exc)
        return
    assert result.grads["x"].shape == value.shape
    assert graph.forward()["x"].data.tolist() == value.tolist()


# -- the load time of large files ---------------------------------------------------------------
def test_loading_many_tensors_runs_few_collections(monkeypatch):
    """Note [No cyclic GC while loading]: a load of 20,000 tensors runs at most the
    one full collection at its end (it ran hundreds, 60% of its time)."""
    text = _doc({f"t{i}": {"shape": [2], "requires_grad": True} for i in range(20_000)},
                [{"op": "sum", "inputs": ["t0"], "output": "loss"}])
    counts = []

    def callback(phase, info):
        if phase == "start":
            counts.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        loads(text, format="json")
    finally:
        gc.callbacks.remove(callback)
    assert len(counts) <= 1, counts


# -- fuzzing: mutated hostile documents fail only with a GraphError ----------------------------
HOSTILE_BASE = {
    "version": 1,
    "tensors": {
        "x": {"shape": [3], "requires_grad": True},
        "z": {"file": "data_ok.npz", "key": "a"},
        "d": {"shape": [2], "device": "sim:1", "requires_grad": True},
    },
    "ops": [
        {"op": "expand", "inputs": ["x"], "output": "v", "args": {"shape": [1000, 3]}},
        {"op": "exp", "inputs": ["v"], "output": "e"},
        {"op": "cast", "inputs": ["e"], "output": "c", "args": {"dtype": "float32"}},
        {"op": "concat", "inputs": ["v", "v"], "output": "k"},
        {"op": "delay", "inputs": ["k"], "output": "w", "args": {"ms": 1, "jitter_ms": 1}},
        {"op": "slice", "inputs": ["w"], "output": "s", "args": {"index": "1:3, ::2"}},
        {"op": "sum", "inputs": ["s"], "output": "t"},
        {"op": "sum", "inputs": ["c"], "output": "u"},
        {"op": "add", "inputs": ["t", "u"], "output": "loss"},
    ],
    "backward": {"roots": ["loss"]},
}
HOSTILE_VOCAB = ["x", "v", "e", "k", "w", "x\n", "loss\n", "sim:0\n", "sim:\u0661", "cuda:\u0660",
                 "sim:" + "9" * 400, "\u0661:\u0663", "1_0", "::\u0662", "data_npz_ambiguous.npz",
                 "data_zip_method.npz", "data_zip_encrypted.npz", "data_zip_version.npz",
                 "data_zip_patched.npz", "a", "a.npy", "ms", "jitter_ms", "shape", "dtype",
                 "float64", "float16", "index", "device", "file", "key", 60000, 59999, 10**6,
                 [10**5, 10**5], [0, 10**9], [10**4, 3], 10**400]
# (copied: a drawn list must not be the vocabulary's own, which later mutations would change)
HOSTILE_VALUES = (st.sampled_from(HOSTILE_VOCAB).map(lambda v: json.loads(json.dumps(v)))
                  | st.integers(-2, 10**7) | st.none())


def _all_paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _all_paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _all_paths(v, path + (i,))


@st.composite
def hostile_documents(draw):
    doc = json.loads(json.dumps(HOSTILE_BASE))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from([p for p in _all_paths(doc) if p]))
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        if isinstance(parent, dict) and draw(st.booleans()):
            parent[draw(st.sampled_from([k for k in HOSTILE_VOCAB if isinstance(k, str)]))] = \
                draw(HOSTILE_VALUES)
        else:
            parent[path[-1]] = draw(HOSTILE_VALUES)
    return doc


def test_hostile_base_document_runs():
    from pathlib import Path

    graph = loads(json.dumps(HOSTILE_BASE), format="json",
                  base_dir=str(Path(__file__).parent / "bad_inputs"), max_tensor_bytes=2**22,
                  max_graph_bytes=2**23)
    assert graph.run().grads["x"].shape == (3,)


@pytest.mark.timeout(300)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_documents())
def test_mutated_hostile_documents_fail_only_with_graph_error(doc):
    from pathlib import Path

    from gradcli.errors import BackwardError

    corpus = Path(__file__).parent / "bad_inputs"
    text = json.dumps(doc)
    try:
        graph = loads(text, format="json", base_dir=str(corpus), max_tensor_bytes=2**22,
                      max_graph_bytes=2**23)
        graph.run()
    except GraphError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<graph>")
    except BackwardError as exc:
        raise AssertionError(f"backward failed: {exc}") from exc
