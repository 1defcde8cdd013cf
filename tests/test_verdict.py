"""The verdict below float64: norm-wise against the model's float64 gradients, within
a factor of PyTorch's own distance (gradcli.verdict), on the tensors whose gradient
path computes below float64 (gradcli.precision); element-wise on request."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from gradcli.bridges.torch import from_module  # noqa: E402
from gradcli.cli import main as gradcli_main  # noqa: E402
from gradcli.document import read_document  # noqa: E402
from gradcli.bridges.torch.reference import widen  # noqa: E402
from gradcli.loader import load, loads  # noqa: E402
from gradcli.precision import lowest_precision  # noqa: E402
from gradcli.validate import Options, validate_file, validate_graph  # noqa: E402
from gradcli.verdict import FACTOR, judge  # noqa: E402


class SmallCNN(torch.nn.Module):
    """Convolutions, batch norm (train mode) and a linear head. conv1 keeps its bias
    although batch norm follows: that bias's exact gradient is zero (Note [The floor])."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean((2, 3)))


class Island(torch.nn.Module):
    """Two outputs: ``a``'s goes through a float32 variance (as T5's layer norm computes
    it inside a float64 model), ``b``'s is float64 throughout."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(6, 32)
        self.b = torch.nn.Linear(6, 5)

    def forward(self, x):
        h = self.a(x)
        var = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return h * torch.rsqrt(var + 1e-6), self.b(x)


def _export(module, shape, dtype, folder):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    return from_module(module, (x,), dtype=dtype).write(str(folder))


@pytest.fixture(scope="module")
def cnn32(tmp_path_factory):
    return _export(SmallCNN(), (8, 3, 16, 16), "float32", tmp_path_factory.mktemp("cnn32"))


@pytest.fixture(scope="module")
def island64(tmp_path_factory):
    return _export(Island(), (4, 6), "float64", tmp_path_factory.mktemp("island64"))


def _grad_checks(report):
    return {c.tensor: c for c in report.checks if c.kind == "grads"}


# -- export ------------------------------------------------------------------------------------
def test_float32_export_writes_the_float64_reference_and_torchs_distance(cnn32):
    doc = read_document(cnn32).data
    ref = doc["expect"]["reference"]
    assert set(ref["grads"]) == set(doc["expect"]["grads"])
    weights = np.load(str(cnn32).replace("graph.yaml", "weights.npz"))
    for name, entry in ref["grads"].items():
        assert entry == {"file": "weights.npz", "key": f"grad64:{name}"}
        r, g = weights[f"grad64:{name}"], weights[f"grad:{name}"]
        assert r.dtype == np.float64 and g.dtype == np.float32 and r.shape == g.shape
        d = np.linalg.norm(g - r) / np.linalg.norm(r)
        assert ref["distance"][name] == pytest.approx(d, rel=1e-2)
    # the reference is the float64 model's: PyTorch's float32 gradients are near, not equal
    assert 0 < np.median(list(ref["distance"].values())) < 1e-4


def test_float32_export_writes_torchs_runs_with_its_leaves_moved_by_one_ulp(cnn32):
    """Note [The float32 yardstick]: two more PyTorch runs of the written graph at float32,
    every floating leaf moved by one ulp; each is a float32 gradient near, not equal to, the
    exported one."""
    doc = read_document(cnn32).data
    moved = doc["expect"]["reference"]["perturbed"]
    assert set(moved) == set(doc["expect"]["reference"]["grads"])
    weights = np.load(str(cnn32).replace("graph.yaml", "weights.npz"))
    for name, entries in moved.items():
        assert entries == [{"file": "weights.npz", "key": f"gradulp{k}:{name}"} for k in (1, 2)]
        g, r = weights[f"grad:{name}"], weights[f"grad64:{name}"]
        for entry in entries:
            a = weights[entry["key"]]
            assert a.dtype == np.float32 and a.shape == g.shape
            # as far from float64 as PyTorch's rounding goes (conv1.bias's exact value is 0)
            assert np.linalg.norm(a - r) <= 10 * max(np.linalg.norm(g - r),
                                                     1e-4 * np.linalg.norm(r))
    first = weights["gradulp1:conv2.weight"]
    assert not np.array_equal(first, weights["grad:conv2.weight"])
    assert not np.array_equal(first, weights["gradulp2:conv2.weight"])


def test_float64_export_without_islands_has_no_reference(tmp_path):
    path = _export(SmallCNN(), (4, 3, 8, 8), "float64", tmp_path)
    expect = read_document(path).data["expect"]
    assert "reference" not in expect
    # Note [The float64 yardstick]: PyTorch's own spread under one-ulp moves of the leaves,
    # for every gradient; a well-conditioned weight's is a few eps
    spread = expect["rounding"]["distance"]
    assert set(spread) == set(expect["grads"])
    assert all(d >= 0 for d in spread.values())
    assert min(spread.values()) < 1e-13


def test_float32_export_has_no_float64_spread(cnn32):
    assert "rounding" not in read_document(cnn32).data["expect"]


# -- the verdict -------------------------------------------------------------------------------
def test_float32_cnn_passes_normwise_and_reports_both_distances(cnn32):
    report = validate_file(str(cnn32), Options())
    assert report.status == "pass", [c.message for c in report.checks if c.status == "fail"]
    checks = _grad_checks(report)
    for c in checks.values():
        assert c.precision == "float32"
        assert c.distance is not None and c.torch_distance is not None
        assert f"gradcli {c.distance:.3g}, torch {c.torch_distance:.3g}" in c.message
    # the exactly-zero bias gradient before batch norm passes through the floor, not the ratio
    assert "near zero" in checks["conv1.bias"].message or \
        checks["conv1.bias"].distance <= FACTOR * max(checks["conv1.bias"].torch_distance,
                                                     np.finfo(np.float32).eps)


def test_elementwise_on_request_keeps_todays_rtol_atol(cnn32):
    """--elementwise: PyTorch's float32 gradients, element by element, with the file's
    rtol/atol; a gradient moved within the norm-wise factor can then fail."""
    report = validate_file(str(cnn32), Options(elementwise=True))
    checks = _grad_checks(report)
    assert all(c.distance is None for c in checks.values())
    assert all(c.message.startswith("matches (rtol=0.0001, atol=1e-06); element-wise on request")
               for c in checks.values())
    graph = _perturbed(cnn32, "conv2.weight", 0.9, spread=1e-3)
    check = _grad_checks(validate_graph(graph, str(cnn32), Options(elementwise=True)))
    assert check["conv2.weight"].status == "fail"
    graph = _perturbed(cnn32, "conv2.weight", 0.9, spread=1e-3)
    assert _grad_checks(validate_graph(graph, str(cnn32), Options()))[
        "conv2.weight"].status == "pass"


def test_expect_elementwise_in_the_file(cnn32, tmp_path):
    text = cnn32.read_text() if hasattr(cnn32, "read_text") else open(cnn32).read()
    text = text.replace("expect:\n", "expect:\n  elementwise: true\n", 1)
    path = tmp_path / "graph.yaml"
    path.write_text(text)
    (tmp_path / "weights.npz").symlink_to(str(cnn32).replace("graph.yaml", "weights.npz"))
    checks = _grad_checks(validate_file(str(path), Options()))
    assert all(c.distance is None and "element-wise" in c.message for c in checks.values())


def _perturbed(path, name, size, spread=None):
    """The graph at ``path`` whose run gives ``name`` a gradient moved off the reference by
    ``size`` times the bound (FACTOR x PyTorch's distance), in a seeded random direction
    (with ``spread``: all of it on the element of the smallest reference magnitude)."""
    graph = load(str(path))
    weights = np.load(str(path).replace("graph.yaml", "weights.npz"))
    ref = weights[f"grad64:{name}"]
    # PyTorch's distance: the largest of its runs, the exported one and those with its leaves
    # moved by one ulp (Note [The float32 yardstick])
    runs = [weights[k] for k in weights.files if k == f"grad:{name}"
            or k.startswith("gradulp") and k.endswith(f":{name}")]
    assert len(runs) == 3
    d_pt = max(np.linalg.norm(theirs - ref) / np.linalg.norm(ref) for theirs in runs)
    direction = np.random.default_rng(0).standard_normal(ref.shape)
    if spread is not None:
        direction = np.zeros(ref.shape)
        direction[np.unravel_index(np.argmin(np.abs(ref)), ref.shape)] = 1.0
    delta = direction / np.linalg.norm(direction) * size * FACTOR * d_pt * np.linalg.norm(ref)
    run = graph.run

    def perturbed_run(**kwargs):
        result = run(**kwargs)
        result.grads[name] = (ref + delta).astype(np.float32)
        return result

    graph.run = perturbed_run
    return graph


def test_a_gradient_perturbed_beyond_the_factor_fails_naming_tensor_and_distances(cnn32):
    report = validate_graph(_perturbed(cnn32, "conv2.weight", 3.0), str(cnn32), Options())
    checks = _grad_checks(report)
    bad = checks["conv2.weight"]
    assert bad.status == "fail"
    assert "'conv2.weight'" in bad.message and "farther from the float64 reference" in bad.message
    assert f"gradcli {bad.distance:.3g}, torch {bad.torch_distance:.3g}" in bad.message
    assert bad.distance == pytest.approx(3.0 * FACTOR * bad.torch_distance, rel=0.05)
    assert [c.tensor for c in checks.values() if c.status == "fail"] == ["conv2.weight"]


def test_a_gradient_perturbed_within_the_factor_passes(cnn32):
    report = validate_graph(_perturbed(cnn32, "conv2.weight", 0.5), str(cnn32), Options())
    check = _grad_checks(report)["conv2.weight"]
    assert check.status == "pass" and check.distance > check.torch_distance


def test_judge_floor_for_a_near_zero_gradient():
    """A reference of zero: both are rounding noise; a ratio above the factor passes when
    gradcli's RMS error is within FACTOR x eps x the graph's largest RMS gradient."""
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(64) * 1e-12
    theirs = ref + rng.standard_normal(64) * 1e-9
    mine = rng.standard_normal(64) * 1e-8
    v = judge("b", mine, theirs, ref, np.float32, "why", scale=1.0)
    assert v.ok and "near zero" in v.message and v.distance > FACTOR * v.torch_distance
    v = judge("b", mine * 1e3, theirs, ref, np.float32, "why", scale=1.0)
    assert not v.ok
    v = judge("b", np.zeros(64), theirs, np.zeros(64), np.float32, "why", scale=0.0)
    assert v.ok and v.distance == 0.0       # a reference of zero: norms, not ratios
    v = judge("b", mine, theirs, np.zeros(64), np.float32, "why", scale=0.0)
    assert not v.ok and "gradcli inf" in v.message


# -- float32 islands in a float64 graph -------------------------------------------------------
def test_lowest_precision_is_measured_per_leaf(island64):
    graph = load(str(island64))
    graph.forward()
    found = lowest_precision(graph)
    assert {n: str(found[n].dtype) for n in ("a.weight", "a.bias", "b.weight", "b.bias")} == {
        "a.weight": "float32", "a.bias": "float32", "b.weight": "float64", "b.bias": "float64"}
    assert "_to_copy" in found["a.weight"].op and found["b.weight"].op is None


def test_float64_graph_with_a_float32_island_judges_only_the_islands_leaves_normwise(island64):
    doc = read_document(island64).data
    assert set(doc["expect"]["reference"]["grads"]) == {"a.weight", "a.bias", "b.weight",
                                                        "b.bias"}
    report = validate_file(str(island64), Options())
    assert report.status == "pass", [c.message for c in report.checks if c.status == "fail"]
    checks = _grad_checks(report)
    for name in ("a.weight", "a.bias"):
        c = checks[name]
        assert c.precision == "float32" and c.distance is not None
        assert "float32 on its gradient path" in c.message and "_to_copy" in c.message
    for name in ("b.weight", "b.bias"):
        c = checks[name]
        assert c.precision == "float64" and c.distance is None
        assert c.message.startswith("matches (rtol=1e-07")


def test_island_leaf_beyond_the_factor_fails(island64):
    report = validate_graph(_perturbed(island64, "a.weight", 3.0), str(island64), Options())
    assert [c.tensor for c in report.checks if c.status == "fail"] == ["a.weight"]


# -- output -----------------------------------------------------------------------------------
def test_json_table_and_junit_carry_both_distances(cnn32, tmp_path):
    runner = CliRunner()
    junit = tmp_path / "out.xml"
    res = runner.invoke(gradcli_main, ["validate", str(cnn32), "--format", "json",
                                       "--junit", str(junit)])
    assert res.exit_code == 0, res.output
    checks = {c["name"]: c for c in json.loads(res.stdout)["files"][0]["checks"]}
    c = checks["grads[fc.weight]"]
    assert c["precision"] == "float32"
    assert isinstance(c["distance"], float) and isinstance(c["torch_distance"], float)
    assert f"gradcli {c['distance']:.3g}, torch {c['torch_distance']:.3g}" in junit.read_text()
    res = runner.invoke(gradcli_main, ["validate", str(cnn32)], env={"COLUMNS": "240"})
    assert "dist. gradcli" in res.stdout and "dist. torch" in res.stdout


# -- T5: float32 islands inside a float64 model ----------------------------------------------
def test_t5_encoder_at_float64_is_judged_by_its_float32_variance(tmp_path):
    """T5's layer norm computes its variance in float32 inside a float64 model: every
    gradient depends on one, so each is judged norm-wise and passes; element-wise at
    float64's rtol 1e-7 it fails. Raised to float64, those casts leave gradcli equal to
    PyTorch's float64 replay, which is the reference."""
    transformers = pytest.importorskip("transformers")

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            cfg = transformers.T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32,
                                        num_layers=1, num_heads=4, dropout_rate=0.0)
            torch.manual_seed(0)
            self.m = transformers.T5EncoderModel(cfg)

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    ids = torch.as_tensor(np.random.default_rng(0).integers(0, 32, (2, 6)))
    path = from_module(Encoder(), (ids,), dtype="float64").write(str(tmp_path))
    text = open(path).read()
    assert "expect.reference: the float64 model's gradients" in text
    report = validate_file(path, Options())
    assert report.status == "pass", [c.message for c in report.checks if c.status == "fail"]
    checks = _grad_checks(report)
    assert checks and all(c.precision == "float32" and "_to_copy" in c.message
                          for c in checks.values())
    assert validate_file(path, Options(elementwise=True)).status == "fail"
    # the islands are the whole difference: widened, gradcli's float64 equals the reference
    folder = tmp_path / "widened"
    folder.mkdir()
    weights = dict(np.load(str(tmp_path / "weights.npz")))
    doc, arrays = widen(read_document(path).data, weights)
    np.savez(str(folder / "weights.npz"), **arrays)
    result = loads(json.dumps(doc), format="json", name="widened", base_dir=str(folder)).run()
    for name in checks:
        np.testing.assert_allclose(result.grads[name], weights[f"grad64:{name}"], rtol=1e-9,
                                   atol=1e-12)


# -- hand-written files ---------------------------------------------------------------------
ISLAND_YAML = """
version: 1
name: island
tensors:
  w: {value: [1.0, 2.0, 3.0], requires_grad: true}
  v: {value: [0.5, -1.0, 2.0], requires_grad: true}
ops:
  - {op: cast, inputs: [w], output: w32, args: {dtype: float32}}
  - {op: square, inputs: [w32], output: s32}
  - {op: cast, inputs: [s32], output: s, args: {dtype: float64}}
  - {op: sum, inputs: [s], output: a}
  - {op: square, inputs: [v], output: q}
  - {op: sum, inputs: [q], output: b}
  - {op: add, inputs: [a, b], output: loss}
backward: {roots: [loss]}
expect:
  grads: {w: {value: [2.0, 4.0, 6.0]}, v: {value: [1.0, -2.0, 4.0]}}
  REFERENCE
"""


def test_hand_written_island_is_measured_from_the_ops_dtypes():
    text = ISLAND_YAML.replace("REFERENCE", "reference: {grads: {w: {value: [2.0, 4.0, 6.0]}}}")
    graph = loads(text, name="island")
    checks = _grad_checks(validate_graph(graph, "island", Options()))
    assert checks["w"].precision == "float32" and checks["w"].distance == 0.0
    assert "float32 on its gradient path: ops[0] (cast) at line 8" in checks["w"].message
    assert checks["v"].precision == "float64" and checks["v"].distance is None


def test_without_a_reference_a_low_precision_gradient_stays_element_wise_and_says_so():
    graph = loads(ISLAND_YAML.replace("REFERENCE", ""), name="island")
    checks = _grad_checks(validate_graph(graph, "island", Options()))
    assert checks["w"].status == "pass" and checks["w"].distance is None
    assert "no float64 reference" in checks["w"].message and "float32" in checks["w"].message


# w's gradient is exactly [2, 4, 6] in gradcli; a reference 1e-4 off it and a PyTorch run on it
OFF = "grads: {w: {value: [2.0, 4.0, 6.0001]}}"


def test_torchs_runs_with_moved_leaves_widen_its_distance():
    """Note [The float32 yardstick]: PyTorch's exported run happens to equal the reference
    (distance 0: the bound is 4 x eps32), so gradcli's 1.3e-5 fails; one of PyTorch's runs
    with moved leaves is as far as gradcli, and the bound becomes 4 x that."""
    alone = ISLAND_YAML.replace("{w: {value: [2.0, 4.0, 6.0]}", "{w: {value: [2.0, 4.0, 6.0001]}")
    check = _grad_checks(validate_graph(loads(alone.replace("REFERENCE", f"reference: {{{OFF}}}"),
                                              name="island"), "island", Options()))["w"]
    assert check.status == "fail" and check.torch_distance == 0.0
    moved = ("reference: {" + OFF + ", perturbed: {w: [{value: [2.0, 4.0, 6.0001]}, "
             "{value: [2.0, 4.0, 6.0]}]}}")
    check = _grad_checks(validate_graph(loads(alone.replace("REFERENCE", moved), name="island"),
                                        "island", Options()))["w"]
    assert check.status == "pass", check.message
    assert check.torch_distance == pytest.approx(1e-4 / np.sqrt(56.0012), rel=1e-3)
    assert check.distance == pytest.approx(check.torch_distance, rel=1e-6)
    assert "its largest over runs with its leaves moved by one ulp; 0 as exported" in check.message


def test_a_closer_moved_run_does_not_narrow_torchs_distance():
    moved = ("reference: {" + OFF + ", perturbed: {w: [{value: [2.0, 4.0, 6.0001]}]}}")
    text = ISLAND_YAML.replace("REFERENCE", moved)
    check = _grad_checks(validate_graph(loads(text, name="island"), "island", Options()))["w"]
    assert check.status == "pass" and check.torch_distance == check.distance
    assert "moved by one ulp" not in check.message


@pytest.mark.parametrize("reference, words", [
    ("reference: [1, 2]", "reference must be a mapping"),
    ("reference: {grads: {w: {value: [2.0, 4.0, 6.0]}}, perturbed: [1]}",
     "perturbed must be a mapping from tensor name to a list of gradients"),
    ("reference: {grads: {w: {value: [2.0, 4.0, 6.0]}}, perturbed: {v: [{value: [1.0]}]}}",
     "perturbed gradients for 'v', which reference.grads does not name"),
    ("reference: {grads: {w: {value: [2.0, 4.0, 6.0]}}, perturbed: {w: {value: [1.0]}}}",
     "perturbed gradients of 'w' must be a list of 1 to 8 gradients"),
    ("reference: {grads: {w: {value: [2.0, 4.0, 6.0]}}, perturbed: {w: [{value: 'x'}]}}",
     "expect.reference.perturbed.w.0: value must be a number"),
    ("reference: {grads: {u: {value: [1.0]}}}", "'u', which expect.grads does not name"),
    ("reference: {distance: {w: -1}}", "distance of 'w' must be a non-negative number"),
    ("reference: {grad: {}}", "unknown key 'grad' in expect.reference"),
    ("elementwise: 3", "elementwise must be true or false"),
])
def test_bad_reference_sections_are_one_line_errors(reference, words):
    from gradcli.errors import GraphError

    with pytest.raises(GraphError) as info:
        loads(ISLAND_YAML.replace("REFERENCE", reference), name="island")
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_graph_whose_float64_replay_fails_is_written_without_a_reference(tmp_path,
                                                                            monkeypatch):
    from gradcli.bridges.torch import compare as compare_torch
    from gradcli.errors import GraphError

    replay = compare_torch.replay

    def failing_replay(source, **kwargs):
        if isinstance(source, dict) and "expect" not in source:      # the widened replay
            raise GraphError("ops[0]: no float64 kernel")
        return replay(source, **kwargs)

    monkeypatch.setattr(compare_torch, "replay", failing_replay)
    torch.manual_seed(0)
    path = _export(torch.nn.Linear(4, 3), (2, 4), "float32", tmp_path)
    text = open(path).read()
    assert "reference" not in read_document(path).data["expect"]
    assert "no expect.reference: the float64 replay of this graph failed (GraphError: " in text
    checks = _grad_checks(validate_file(path, Options()))
    assert all("no float64 reference" in c.message for c in checks.values())
