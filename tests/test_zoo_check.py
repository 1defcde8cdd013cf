"""scripts/zoo_check.py: its model selection and the generated table of docs/models.md."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _zoo():
    spec = importlib.util.spec_from_file_location(
        "zoo_check", os.path.join(ROOT, "scripts", "zoo_check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_transformers_zoo_covers_the_architectures_asked_for():
    zoo = _zoo()
    names = [m for _, m in zoo._models("transformers", None)]
    assert len(names) >= 20
    for arch in ("llama", "qwen2", "mistral-eager", "mistral-sdpa", "gemma", "phi3", "gpt2",
                 "gpt-neox", "opt", "falcon", "bloom", "bert", "roberta", "deberta-v2",
                 "electra", "albert", "distilbert", "t5-encoder", "bart", "vit", "clip-text",
                 "whisper-encoder"):
        assert arch in names
    assert [m for _, m in zoo._models("transformers", "^(bert|gpt2)$")] == ["gpt2", "bert"]


def test_write_docs_replaces_only_the_generated_table(tmp_path):
    zoo = _zoo()
    doc = tmp_path / "models.md"
    doc.write_text("# Models\n\nintro\n")
    versions = {"gradcli": "abc1234", "torch": "2.x", "torchvision": "0.x", "transformers": "5.x",
                "python": "3.11"}
    results = {"parts": [{"command": "python scripts/zoo_check.py --zoo transformers",
                          "date": "2026-11-25 05:00 UTC", "versions": versions}],
               "runs": {"a": {"zoo": "transformers", "model": "bert", "mode": "eval",
                              "dtype": "float64", "status": "pass", "nodes": 50, "detail": ""},
                        "b": {"zoo": "transformers", "model": "roberta", "mode": "eval",
                              "dtype": "float64", "status": "missing-core-op",
                              "ops": ["aten.ne.Scalar"], "detail": "x"}}}
    zoo.write_docs(results, str(doc), [("transformers", "bert"), ("transformers", "gpt2")])
    first = doc.read_text()
    assert "Not run yet (1): gpt2." in first
    assert first.startswith("# Models\n\nintro\n")
    assert "**transformers**: 2 runs: 1 missing-core-op, 1 pass." in first
    assert "| roberta | eval | float64 | missing-core-op |  | core ops without a kernel: " \
           "`aten.ne.Scalar` |" in first
    assert "gradcli abc1234, torch 2.x" in first
    results["runs"]["a"]["status"] = "fail"
    zoo.write_docs(results, str(doc))
    second = doc.read_text()
    assert second.count("<!-- zoo table:") == 1 and "1 fail, 1 missing-core-op" in second


def test_verdict_summary_states_the_measured_precision_and_the_norm_wise_ratio():
    from gradcli.validate import Check

    zoo = _zoo()
    checks = [Check(name="backward", kind="backward", status="pass"),
              Check(name="grads[w]", kind="grad", status="pass", precision="float32",
                    tensor="w", distance=3e-6, torch_distance=2e-6),
              Check(name="grads[v]", kind="grad", status="pass", precision="float32",
                    tensor="v", distance=3e-8, torch_distance=0.0),
              Check(name="grads[b]", kind="grad", status="pass", precision="float64")]
    # a float64 file with a float32 island: judged at float32, two gradients norm-wise (a
    # PyTorch distance of 0 counts as float32's epsilon)
    assert zoo.verdict_summary(checks, "float64") == {"precision": "float32", "normwise": 2,
                                                      "worst_ratio": 1.5, "worst_tensor": "w"}
    exact = [Check(name="grads[b]", kind="grad", status="pass", precision="float64")]
    assert zoo.verdict_summary(exact, "float64") == {"precision": "float64"}   # element-wise


def _results(zoo, model, status, command):
    versions = {"gradcli": "abc1234", "torch": "2.x", "torchvision": "0.x",
                "transformers": "5.x", "python": "3.11"}
    return {"parts": [{"command": command, "date": "2026-11-25 06:00 UTC", "versions": versions}],
            "runs": {f"{zoo}:{model}:eval:float64": {
                "zoo": zoo, "model": model, "mode": "eval", "dtype": "float64",
                "status": status, "nodes": 10, "detail": ""}}}


def test_report_only_makes_one_table_of_several_results_files(tmp_path):
    zoo = _zoo()
    tv, hf = tmp_path / "tv.json", tmp_path / "hf.json"
    tv.write_text(json.dumps(_results("torchvision", "resnet18", "pass", "tv-command")))
    hf.write_text(json.dumps(_results("transformers", "bert", "fail", "hf-command")))
    doc = tmp_path / "models.md"
    doc.write_text("# Models\n")
    assert zoo.main(["--report-only", "--results", str(tv), "--results", str(hf),
                     "--write-docs", str(doc)]) == 0
    text = doc.read_text()
    assert "`tv-command`" in text and "`hf-command`" in text
    assert "**torchvision**: 1 runs: 1 pass." in text
    assert "**transformers**: 1 runs: 1 fail." in text


def test_report_only_refuses_a_results_file_that_is_not_there(tmp_path):
    zoo = _zoo()
    with pytest.raises(SystemExit) as exc:
        zoo.main(["--report-only", "--results", str(tmp_path / "nope.json"),
                  "--write-docs", str(tmp_path / "models.md")])
    assert "nope.json" in str(exc.value)
    assert not (tmp_path / "models.md").exists()


def test_a_run_writes_one_results_file(tmp_path):
    zoo = _zoo()
    with pytest.raises(SystemExit) as exc:
        zoo.main(["--results", str(tmp_path / "a.json"), "--results", str(tmp_path / "b.json")])
    assert "one --results" in str(exc.value)


def test_train_mode_runs_torchvision_at_64_and_the_table_says_so(tmp_path):
    zoo = _zoo()
    assert zoo.input_side("resnet18") == 32
    assert zoo.input_side("resnet18", train=True) == 64      # Note [Train-mode input size]
    assert zoo.input_side("maxvit_t", train=True) == 224
    assert zoo.input_side("inception_v3") == 75               # its own minimum
    assert zoo.input_side("inception_v3", train=True) == 107  # its first 2x2 last map
    assert zoo.input_side("resnet18", size=96) == 96
    # a ViT takes the one size it is built for, in both modes
    assert zoo.input_side("vit_h_14") == zoo.input_side("vit_h_14", train=True) == 28
    assert zoo.BUILD_ARGS["vit_h_14"] == {"image_size": 28}
    results = _results("torchvision", "resnet18", "pass", "tv-command")
    run = dict(next(iter(results["runs"].values())), mode="train", input=[2, 3, 64, 64])
    results["runs"]["torchvision:resnet18:train:float64"] = run
    doc = tmp_path / "models.md"
    zoo.write_docs(results, str(doc))
    text = doc.read_text()
    assert "| resnet18 (64x64) | train | float64 | pass |" in text
    assert "| resnet18 | eval | float64 | pass |" in text


def test_torchvision_models_get_the_same_random_weights_on_every_run(monkeypatch):
    import sys
    import types

    torch = pytest.importorskip("torch")
    zoo = _zoo()
    fake = types.SimpleNamespace(models=types.SimpleNamespace(
        get_model=lambda name, **kwargs: torch.nn.Linear(3, 2)))
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    (a, shapes), (b, _) = zoo._torchvision_model("resnet18"), zoo._torchvision_model("resnet18")
    assert torch.equal(a.weight, b.weight)
    assert shapes == {"x": (2, 3, 32, 32)}


def test_the_table_shows_the_float32_verdict_and_a_smaller_configuration(tmp_path):
    zoo = _zoo()
    results = _results("torchvision", "vit_h_14", "pass", "tv-command")
    run = next(iter(results["runs"].values()))
    run.update(dtype="float32", config="2 of its 32 encoder blocks", normwise=12,
               worst_ratio=1.234, worst_tensor="heads.head.weight")
    doc = tmp_path / "models.md"
    zoo.write_docs(results, str(doc))
    assert ("| vit_h_14 | eval | float32 | pass | 10 | ran with 2 of its 32 encoder blocks; "
            "float32 verdict on 12 gradients, worst distance to float64 1.23 x torch's "
            "(`heads.head.weight`) |") in doc.read_text()


def test_smaller_configurations_keep_width_and_block_kinds_with_fewer_blocks():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    zoo = _zoo()
    vit = nn.Module()
    vit.encoder = nn.Module()
    vit.encoder.layers = nn.Sequential(*[nn.Linear(4, 4) for _ in range(32)])
    assert zoo._trim("vit_h_14", vit) == "2 of its 32 encoder blocks"
    assert len(vit.encoder.layers) == 2
    regnet = nn.Module()
    regnet.trunk_output = nn.Sequential(nn.Sequential(*[nn.Linear(4, 4) for _ in range(5)]),
                                        nn.Sequential(nn.Linear(4, 4)))
    assert zoo._trim("regnet_y_128gf", regnet) == "the first 2 blocks of each stage"
    assert [len(s) for s in regnet.trunk_output] == [2, 1]
    assert zoo._trim("resnet18", nn.Linear(2, 2)) is None


@pytest.mark.timeout(600)
def test_a_float32_run_is_judged_by_the_norm_wise_verdict(monkeypatch):
    import sys
    import types

    torch = pytest.importorskip("torch")
    nn = torch.nn
    zoo = _zoo()

    def tiny(name, **kwargs):
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(4, kwargs["num_classes"]))

    fake = types.SimpleNamespace(models=types.SimpleNamespace(get_model=tiny))
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    spec = {"zoo": "torchvision", "model": "tiny", "mode": "eval", "max_params": 1e9,
            "size": None}
    record = zoo.run_one(dict(spec, dtype="float32"))
    assert record["status"] == "pass", record["detail"]
    assert record["normwise"] == 4                  # every parameter, against float64
    assert 0 < record["worst_ratio"] <= 4
    assert record["input"] == [2, 3, 32, 32] and record["params"] == 4 * 27 + 4 + 4 * 10 + 10
    record = zoo.run_one(dict(spec, dtype="float64"))
    assert record["status"] == "pass" and "normwise" not in record   # element-wise


def test_resume_runs_only_what_the_results_file_lacks(tmp_path, monkeypatch):
    zoo = _zoo()
    path = tmp_path / "r.json"
    results = _results("torchvision", "resnet18", "pass", "earlier")
    path.write_text(json.dumps(results))
    ran = []
    monkeypatch.setattr(zoo, "_models", lambda z, m: [("torchvision", "resnet18")])
    monkeypatch.setattr(zoo, "_versions", lambda: {})
    monkeypatch.setattr(zoo, "_run_child", lambda spec, timeout: ran.append(
        (spec["mode"], spec["dtype"])) or {"status": "pass", "detail": "", "seconds": 1})
    zoo.main(["--zoo", "torchvision", "--modes", "eval,train", "--dtypes", "float64",
              "--results", str(path), "--resume"])
    assert ran == [("train", "float64")]          # eval/float64 was already there
    assert set(json.loads(path.read_text())["runs"]) == {
        "torchvision:resnet18:eval:float64", "torchvision:resnet18:train:float64"}
    with pytest.raises(SystemExit) as exc:
        zoo.main(["--resume"])
    assert "--results" in str(exc.value)


def test_the_models_beyond_the_zoos_are_a_zoo_of_their_own(tmp_path, monkeypatch):
    """``--zoo beyond`` runs scripts/zoo_beyond.py's models; ``all`` stays the two zoos."""
    zoo = _zoo()
    beyond = zoo._models("beyond", None)
    assert len(beyond) >= 40 and all(z == "beyond" for z, _ in beyond)
    assert ("beyond", "hf-wav2vec2") in beyond and ("beyond", "nn-unet") in beyond
    assert zoo._models("beyond", "^tv-video") == [("beyond", m) for m in
                                                  ("tv-video-r3d_18", "tv-video-mc3_18",
                                                   "tv-video-r2plus1d_18")]
    results = _results("beyond", "nn-unet", "pass", "beyond-command")
    doc = tmp_path / "models.md"
    zoo.write_docs(results, str(doc), beyond)
    text = doc.read_text()
    assert "**beyond**: 1 runs: 1 pass." in text and "| nn-unet | eval | float64 | pass |" in text
    assert "Not run yet (" in text and "hf-wav2vec2" in text


def test_a_run_judged_on_float32s_branches_says_how_many_elements(tmp_path):
    zoo = _zoo()
    from gradcli.validate import Check

    checks = [Check("grads[w]", "grads", "pass", tensor="w", distance=1e-6, torch_distance=1e-6,
                    precision="float32", kinks=2),
              Check("grads[v]", "grads", "pass", tensor="v", distance=1e-6, torch_distance=1e-6,
                    precision="float32")]
    summary = zoo.verdict_summary(checks, "float32")
    assert summary["kinks"] == 2
    results = _results("torchvision", "vgg13", "pass", "cmd")
    run = next(iter(results["runs"].values()))
    run.update(dtype="float32", normwise=2, worst_ratio=1.0, worst_tensor="w", kinks=2)
    doc = tmp_path / "models.md"
    zoo.write_docs(results, str(doc))
    assert "2 element(s) judged on float32's branches" in doc.read_text()
