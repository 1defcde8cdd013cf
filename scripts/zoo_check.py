"""Export + validate every model of two zoos: the measure of "any model".

The zoos:

- torchvision: every classification model of
  ``torchvision.models.list_models(module=torchvision.models)``, built with
  ``weights=None`` and 10 classes, on a small random input (2 images of 32x32
  unless a model needs more: see SIZES);
- transformers: the architectures in ``TRANSFORMERS``, each built from a small
  config with random weights (2 layers, hidden size 32), on token ids with an
  attention mask (or pixel values / mel features), passed by keyword.

Each run (model, train or eval, float64 or float32) goes the user's way:
``gradcli.bridges.torch.from_module`` (what ``gradcli export`` calls) writes
the graph, then ``gradcli validate`` checks it against PyTorch's gradients and
node order. Each run is a child process with its own time limit.

Nothing is downloaded and nothing is installed: torchvision and transformers
are not gradcli dependencies. Install them yourself into the environment that
runs this script, e.g. ``pip install torchvision transformers`` (the versions
used are written into the table).

Examples::

    python scripts/zoo_check.py --zoo torchvision --modes eval --dtypes float64 \\
        --timeout 300 --results docs/zoo-results-torchvision.json
    python scripts/zoo_check.py --zoo transformers --models 'llama|bert' \\
        --results docs/zoo-results-transformers.json
    python scripts/zoo_check.py --report-only --write-docs docs/models.md \\
        --results docs/zoo-results-torchvision.json --results docs/zoo-results-transformers.json

``--results`` accumulates: runs made in several parts (a machine with few
cores) merge into one file, and ``--write-docs`` writes the table of all of
them, with each part's command. A run writes one results file; with
``--report-only`` the option repeats, and the table is made of all the files
(each zoo can be run apart, into a file of its own).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL = ("this needs torch, torchvision and transformers, which gradcli does not depend "
           "on: pip install torchvision transformers (never installed by this script)")

# Input sizes that differ from 32x32 (the model needs a larger image), and the
# constructor arguments that keep a model small or make it accept the input.
SIZES = {"alexnet": 64, "inception_v3": 75, "maxvit_t": 224}
# Note [Train-mode input size]: in train mode batch norm normalizes each channel over
# the batch and the feature map. Most torchvision models reduce 32x32 to a 1x1 map
# (stride 32), so 2 images give 2 values per channel: the normalized output is +-1
# whatever the input, the gradient through it is huge (1e5 and more) and float64 rounding,
# amplified by it, decides the verdict, not the formulas. At 64x64 the last map is 2x2
# (8 values per channel) and the check means something again (measured: efficientnet_b0
# and resnet18 train fail by float64 rounding at 32x32 and pass at 64x64).
# inception_v3 shrinks with valid convolutions: 75x75 ends at 1x1 (its float64 train run
# failed by 5e-7 there) and 107x107 is its first size with a 2x2 map.
TRAIN_SIZE = 64
TRAIN_SIZES = {"inception_v3": 107}
# Note [Smaller configurations]: a float64 export holds the model's parameters several
# times over (the module, its copy for the real backward, the gradients, the written
# arrays, gradcli's replay and validate's run): measured peak memory of a run, about
# 0.7 GB for torch itself plus 65 bytes per parameter (convnext_tiny, 28M parameters:
# 2.6 GB; mnasnet1_3, 5M: 1.1 GB). The largest models (600M parameters: 40 GB) do not fit
# the machine's 23 GB, shared with other jobs, at full depth: they run with the blocks kept
# here (every kind of block, full width), and the table says so. Everything else runs as
# torchvision builds it; --max-params (250M: about 17 GB) guards the rest.
DEPTH = {"regnet_y_128gf": 2, "vit_h_14": 2, "vit_l_16": 4, "vit_l_32": 4}
# The ViTs take one image size, the one they are built for (a multiple of the patch):
# their input is that size in both modes (no batch norm: Note [Train-mode input size]
# does not apply), and --size does not change it.
FIXED = {"vit_b_16": 32, "vit_b_32": 32, "vit_l_16": 32, "vit_l_32": 32, "vit_h_14": 28}
BUILD_ARGS = {"googlenet": {"aux_logits": False, "init_weights": False},
              "inception_v3": {"aux_logits": False, "init_weights": False},
              **{name: {"image_size": side} for name, side in FIXED.items()}}

SMALL = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, max_position_embeddings=64)
# name -> (config class, model class, config kwargs, inputs kind)
TRANSFORMERS = {
    "llama": ("LlamaConfig", "LlamaModel", dict(SMALL, num_key_value_heads=2,
                                                 attn_implementation="eager"), "text"),
    "qwen2": ("Qwen2Config", "Qwen2Model", dict(SMALL, num_key_value_heads=2,
                                                 attn_implementation="eager"), "text"),
    "mistral-eager": ("MistralConfig", "MistralModel",
                      dict(SMALL, num_key_value_heads=2, attn_implementation="eager"), "text"),
    "mistral-sdpa": ("MistralConfig", "MistralModel",
                     dict(SMALL, num_key_value_heads=2, attn_implementation="sdpa"), "text"),
    "mixtral-moe": ("MixtralConfig", "MixtralModel",
                    dict(SMALL, num_key_value_heads=2, num_local_experts=4,
                         num_experts_per_tok=2, attn_implementation="eager",
                         experts_implementation="eager"), "text"),
    "gemma": ("GemmaConfig", "GemmaModel", dict(SMALL, num_key_value_heads=2, head_dim=8,
                                                 attn_implementation="eager"), "text"),
    "phi3": ("Phi3Config", "Phi3Model", dict(SMALL, num_key_value_heads=2, pad_token_id=0,
                                              attn_implementation="eager"), "text"),
    "gpt2": ("GPT2Config", "GPT2Model", dict(vocab_size=100, n_embd=32, n_layer=2, n_head=4,
                                              n_positions=64, attn_implementation="eager"), "text"),
    "gpt-neox": ("GPTNeoXConfig", "GPTNeoXModel", dict(SMALL, attn_implementation="eager"),
                 "text"),
    "opt": ("OPTConfig", "OPTModel", dict(vocab_size=100, hidden_size=32, ffn_dim=64,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          word_embed_proj_dim=32, max_position_embeddings=64,
                                          attn_implementation="eager"), "text"),
    "falcon": ("FalconConfig", "FalconModel", dict(vocab_size=100, hidden_size=32,
                                                   num_hidden_layers=2, num_attention_heads=4,
                                                   attn_implementation="eager"), "text"),
    "bloom": ("BloomConfig", "BloomModel", dict(vocab_size=100, hidden_size=32, n_layer=2,
                                                n_head=4), "text"),
    "bert": ("BertConfig", "BertModel", dict(SMALL, attn_implementation="eager"), "text"),
    "roberta": ("RobertaConfig", "RobertaModel", dict(SMALL, attn_implementation="eager"),
                "text"),
    "deberta-v2": ("DebertaV2Config", "DebertaV2Model", dict(SMALL), "text"),
    "electra": ("ElectraConfig", "ElectraModel", dict(SMALL, embedding_size=16,
                                                      attn_implementation="eager"), "text"),
    "albert": ("AlbertConfig", "AlbertModel", dict(SMALL, embedding_size=16,
                                                   attn_implementation="eager"), "text"),
    "distilbert": ("DistilBertConfig", "DistilBertModel",
                   dict(vocab_size=100, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
                        max_position_embeddings=64, attn_implementation="eager"), "text"),
    "t5-encoder": ("T5Config", "T5EncoderModel", dict(vocab_size=100, d_model=32, d_kv=8,
                                                      d_ff=64, num_layers=2, num_heads=4),
                   "text"),
    "bart": ("BartConfig", "BartModel", dict(vocab_size=100, d_model=32, encoder_layers=2,
                                             decoder_layers=2, encoder_attention_heads=4,
                                             decoder_attention_heads=4, encoder_ffn_dim=64,
                                             decoder_ffn_dim=64, max_position_embeddings=64,
                                             attn_implementation="eager"), "text"),
    "vit": ("ViTConfig", "ViTModel", dict(hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=64,
                                          image_size=32, patch_size=8,
                                          attn_implementation="eager"), "image"),
    "clip-text": ("CLIPTextConfig", "CLIPTextModel", dict(SMALL, attn_implementation="eager"),
                  "text"),
    "whisper-encoder": ("WhisperConfig", "WhisperModel", dict(
        vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=16,
        max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1, attn_implementation="eager"), "audio"),
}


# -- one run, in a child process ---------------------------------------------------------------
def input_side(name, size=None, train=False):
    """The side of a torchvision model's square input: 32, or more where the model needs it
    (SIZES), where train mode needs it (Note [Train-mode input size]) or ``--size`` asks.

    Example: ``input_side("resnet18", train=True)`` is 64.
    """
    if name in FIXED:
        return FIXED[name]
    train_side = TRAIN_SIZES.get(name, TRAIN_SIZE) if train else 0
    return max(SIZES.get(name, 32), train_side, size or 0)


def _torchvision_model(name, size=None, train=False):
    import torchvision

    kwargs = dict(weights=None, num_classes=10, **BUILD_ARGS.get(name, {}))
    size = input_side(name, size, train)
    import torch

    torch.manual_seed(0)            # the same random weights on every run: results repeat
    return torchvision.models.get_model(name, **kwargs), {"x": (2, 3, size, size)}


def _transformers_model(name):
    import torch
    import transformers

    config_cls, model_cls, kwargs, kind = TRANSFORMERS[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**kwargs)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    model = getattr(transformers, model_cls)(config)
    if name == "whisper-encoder":
        model = model.get_encoder()
    gen = torch.Generator().manual_seed(0)
    if kind == "image":
        return model, {}, {"pixel_values": torch.randn(2, 3, 32, 32, generator=gen)}
    if kind == "audio":
        return model, {}, {"input_features": torch.randn(2, 16, 32, generator=gen)}
    ids = torch.randint(1, 100, (2, 8), generator=gen)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 6:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if name == "bart":
        inputs["decoder_input_ids"] = torch.randint(1, 100, (2, 5), generator=gen)
    return model, {}, inputs


def _trim(name, model):
    """Note [Smaller configurations]: the models whose float64 export does not fit the
    memory of the machine the zoo runs on keep their width and every kind of block, with
    fewer blocks; returns what was changed, in words (None: the model as torchvision builds it).
    """
    if name in DEPTH:
        keep = DEPTH[name]
        if hasattr(model, "trunk_output"):                  # RegNet: stages of blocks
            for stage in model.trunk_output:
                for key in list(stage._modules)[keep:]:
                    del stage._modules[key]
            return f"the first {keep} blocks of each stage"
        layers = model.encoder.layers                       # ViT: encoder blocks
        model.encoder.layers = type(layers)(*list(layers)[:keep])
        return f"{keep} of its {len(layers)} encoder blocks"
    return None


def run_one(spec):
    """Export + validate one (zoo, model, mode, dtype); returns the result record."""
    import resource

    import torch

    sys.path.insert(0, ROOT)
    from gradcli.bridges.torch import ExportError, ExportMismatch, from_module
    from gradcli.validate import Options, validate_file

    zoo, name, mode, dtype = spec["zoo"], spec["model"], spec["mode"], spec["dtype"]
    t0 = time.time()
    if zoo == "torchvision":
        model, shapes = _torchvision_model(name, spec.get("size"), mode == "train")
        gen = torch.Generator().manual_seed(0)
        args, kwargs = (torch.randn(shapes["x"], generator=gen),), {}
        base = {"input": list(shapes["x"]), "config": _trim(name, model)}
    elif zoo == "beyond":
        model, args, kwargs = _beyond().build(name)
        base = {"input": None, "config": None}
    else:
        model, _, kwargs = _transformers_model(name)
        args = ()
        base = {"input": None, "config": None}
    params = sum(p.numel() for p in model.parameters())
    base["params"] = params

    def done(record):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KiB on Linux
        return dict(base, seconds=time.time() - t0, peak_mb=round(peak), **record)

    if params > spec["max_params"]:
        return dict(base, status="skipped", detail=f"{params / 1e6:.0f}M parameters, over "
                    f"--max-params {spec['max_params'] / 1e6:.0f}M")
    try:
        graph = from_module(model, args, keyword_inputs=kwargs, dtype=dtype,
                            train=(mode == "train"), name=name)
    except ExportMismatch as exc:
        return done({"status": "export-bug", "detail": str(exc)})
    except ExportError as exc:
        text = str(exc)
        core = re.findall(r"(aten\.[\w]+\.[\w]+) \(", text.split("core ATen op", 1)[1]
                          .split(" | ", 1)[0]) if "core ATen op" in text else []
        return done({"status": "missing-core-op" if core and "nor a PyTorch decomposition" not in
                     text else "export-error", "detail": text[:600], "ops": sorted(set(core))})
    with tempfile.TemporaryDirectory() as tmp:
        path = graph.write(tmp)
        report = validate_file(str(path), Options())
        failed = [f"{c.name}: {c.message}" for c in report.checks if c.status == "fail"]
        composites = sorted({op["op"] for op in graph.document["ops"] if "composite" in op})
        return done(dict({"status": report.status if report.invalid is None else "invalid",
                          "detail": (report.invalid or "; ".join(failed))[:600],
                          "nodes": len(graph.document["expect"]["order"]),
                          "composites": composites}, **verdict_summary(report.checks, dtype)))


def verdict_summary(checks, dtype):
    """What the verdict measured, for a run's record: the lowest floating precision on
    any gradient's path (``gradcli.precision``: measured, not the file's dtype) and, where
    the norm-wise policy judged (``gradcli.verdict``), how many gradients it judged and the
    largest ratio of gradcli's distance to the float64 gradients over PyTorch's (each
    distance taken as at least float32's epsilon), with the tensor it was found on.

    Example: a float64 LLaMA (float32 RMS norm and softmax) gives
    ``{"precision": "float32", "normwise": 20, "worst_ratio": 1.4, "worst_tensor": "..."}``.
    """
    ranks = {"float16": 0, "bfloat16": 0, "float32": 1, "float64": 2}
    measured = [c.precision for c in checks if c.precision]
    out = {"precision": min(measured, key=lambda d: ranks.get(d, 2), default=dtype)}
    kinks = [c.kinks for c in checks if getattr(c, "kinks", None)]
    if kinks:                    # Note [Kinks]: elements judged on float32's branches
        out["kinks"] = max(kinks)
    judged = [c for c in checks if c.distance is not None and c.torch_distance is not None]
    if judged:
        eps = 1.1920929e-07
        worst = max(judged, key=lambda c: c.distance / max(c.torch_distance, eps))
        out.update(normwise=len(judged),
                   worst_ratio=round(worst.distance / max(worst.torch_distance, eps), 3),
                   worst_tensor=worst.tensor)
    return out


# -- the parent: runs, results, table ----------------------------------------------------------
def _beyond():
    """scripts/zoo_beyond.py: the models beyond the two zoos (``--zoo beyond``)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import zoo_beyond

    return zoo_beyond


def _models(zoo, pattern):
    names = []
    if zoo in ("torchvision", "all"):
        import torchvision

        names += [("torchvision", m) for m in
                  torchvision.models.list_models(module=torchvision.models)]
    if zoo in ("transformers", "all"):
        names += [("transformers", m) for m in TRANSFORMERS]
    if zoo == "beyond":
        names += [("beyond", m) for m in _beyond().MODELS]
    if pattern:
        rx = re.compile(pattern)
        names = [(z, m) for z, m in names if rx.search(m)]
    return names


def _key(r):
    size = f":{r['size']}px" if r.get("size") else ""
    return f"{r['zoo']}:{r['model']}:{r['mode']}:{r['dtype']}{size}"


def _versions():
    out = {"python": platform.python_version()}
    for mod in ("torch", "torchvision", "transformers"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = "not installed"
    try:
        out["gradcli"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()
    except OSError:
        out["gradcli"] = "unknown"
    return out


def _run_child(spec, timeout, script=__file__, marker="ZOO-RESULT "):
    """Run one spec in a child process of ``script`` (``--child``), bounded by ``timeout``;
    its record is the last stdout line starting with ``marker`` (onnx_zoo.py runs its
    children through this too)."""
    cmd = [sys.executable, os.path.abspath(script), "--child", json.dumps(spec)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "detail": f"over {timeout} s (--timeout)",
                "seconds": timeout}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(marker)]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": "crash", "detail": f"exit {proc.returncode}: {tail[:400]}",
                "seconds": time.time() - t0}
    return json.loads(lines[-1][len(marker):])


def _load(path):
    if path and os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    return {"runs": {}, "parts": []}


def merge_results(paths):
    """The runs and parts of several results files as one (a run named in two files:
    the later file's record); a path that does not exist is an error, not an empty table.

    Example: ``merge_results(["docs/zoo-results-torchvision.json",
    "docs/zoo-results-transformers.json"])["runs"]``.
    """
    merged = {"runs": {}, "parts": []}
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"no results file {path}")
        one = _load(path)
        merged["runs"].update(one["runs"])
        merged["parts"] += one["parts"]
    return merged


def write_docs(results, path, zoo_models=None):
    """The generated table of ``results`` between the markers of ``path``;
    ``zoo_models``: ``[(zoo, model)]`` of the whole zoos, to list those not run."""
    runs = sorted(results["runs"].values(), key=lambda r: (r["zoo"], r["model"], r["mode"],
                                                            r["dtype"]))
    lines = ["<!-- zoo table: generated by scripts/zoo_check.py --write-docs; do not edit -->", ""]
    for part in results["parts"]:
        lines.append(f"- `{part['command']}` ({part['date']}; gradcli {part['versions']['gradcli']}, "
                     f"torch {part['versions']['torch']}, torchvision "
                     f"{part['versions']['torchvision']}, transformers "
                     f"{part['versions']['transformers']}, Python {part['versions']['python']})")
    lines.append("")
    for zoo in ("torchvision", "transformers", "beyond"):
        zr = [r for r in runs if r["zoo"] == zoo]
        if not zr:
            continue
        counts = {}
        for r in zr:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        lines += [f"**{zoo}**: {len(zr)} runs: {summary}.", "",
                  "| model | mode | dtype | result | nodes | detail |", "| --- | --- | --- | --- | --- | --- |"]
        for r in zr:
            detail = r.get("detail", "")
            if r["status"] == "missing-core-op":
                detail = "core ops without a kernel: " + ", ".join(f"`{o}`" for o in r["ops"])
            if r.get("normwise"):
                detail = (f"float32 verdict on {r['normwise']} gradients, worst distance to "
                          f"float64 {r['worst_ratio']:.2f} x torch's"
                          + (f" (`{r['worst_tensor']}`)" if r.get("worst_tensor") else "")
                          + (f"; {r['kinks']} element(s) judged on float32's branches"
                             if r.get("kinks") else "")
                          + ("; " + detail if detail else ""))
            if r.get("config"):
                detail = f"ran with {r['config']}" + ("; " + detail if detail else "")
            if r.get("composites"):
                detail = (detail + "; " if detail else "") + "composites: " + ", ".join(
                    f"`{o}`" for o in r["composites"])
            detail = re.sub(r"/\S*?/(site-packages|scripts)/", r"\1/", detail)  # no machine paths
            detail = detail.replace("|", "\\|").replace("\n", " ")
            side = (r.get("input") or [0, 0, 0, r.get("size") or 32])[-1]
            model = r["model"] + (f" ({side}x{side})" if side != 32 else "")
            lines.append(f"| {model} | {r['mode']} | {r['dtype']} | {r['status']} | "
                         f"{r.get('nodes', '')} | {detail} |")
        lines.append("")
        ran = {r["model"] for r in zr}
        rest = [m for z, m in (zoo_models or []) if z == zoo and m not in ran]
        if rest:
            lines += [f"Not run yet ({len(rest)}): " + ", ".join(rest) + ".", ""]
    lines.append("<!-- end of zoo table -->")
    replace_block(path, "<!-- zoo table:", "<!-- end of zoo table -->", "\n".join(lines))


def replace_block(path, start, end, table):
    """Write ``table`` (which begins with ``start`` and ends with ``end``) over the block
    between those markers in ``path``, or at its end where it has none."""
    text = open(path).read() if os.path.exists(path) else ""
    if start in text and end in text:
        text = text[:text.index(start)] + table + text[text.index(end) + len(end):]
    else:
        text = text + ("\n" if text else "") + table + "\n"
    with open(path, "w") as fh:
        fh.write(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=INSTALL)
    p.add_argument("--zoo", choices=["torchvision", "transformers", "all", "beyond"], default="all",
                   help="all: the two zoos; beyond: the models of scripts/zoo_beyond.py")
    p.add_argument("--models", default=None, help="a regular expression the model names match")
    p.add_argument("--modes", default="eval,train", help="eval, train or both (comma list)")
    p.add_argument("--dtypes", default="float64,float32", help="float64, float32 or both")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run (child process)")
    p.add_argument("--size", type=int, default=None,
                   help="torchvision input size (at least the model's own minimum)")
    p.add_argument("--max-params", type=float, default=250e6,
                   help="skip models with more parameters (memory of a float64 export: about "
                        "65 bytes per parameter; Note [Smaller configurations])")
    p.add_argument("--results", action="append", default=[],
                   help="a JSON file the results accumulate in; with --report-only it repeats, "
                        "and the table is made of all the files")
    p.add_argument("--write-docs", default=None, metavar="docs/models.md",
                   help="write the table of all results into this file")
    p.add_argument("--report-only", action="store_true", help="run nothing; with --write-docs")
    p.add_argument("--resume", action="store_true",
                   help="skip the runs the --results file already holds (a long matrix "
                        "stopped part way goes on where it stopped)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        record = run_one(json.loads(a.child))
        print("ZOO-RESULT " + json.dumps(record), flush=True)
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit(f"zoo_check: {INSTALL}")
    if a.report_only:
        try:
            results = merge_results(a.results)
        except FileNotFoundError as exc:
            sys.exit(f"zoo_check: {exc}")
    elif len(a.results) > 1:
        sys.exit("zoo_check: a run writes one --results file (several only with --report-only)")
    elif a.resume and not a.results:
        sys.exit("zoo_check: --resume needs the --results file to go on from")
    else:
        a.results = a.results[0] if a.results else None
        results = _load(a.results)
    if not a.report_only:
        try:
            models = _models(a.zoo, a.models)
        except ImportError as exc:
            sys.exit(f"zoo_check: {exc}: {INSTALL}")
        command = "python scripts/zoo_check.py " + " ".join(
            x if re.fullmatch(r"[\w./=,:-]+", x) else repr(x) for x in (argv or sys.argv[1:]))
        results["parts"].append({"command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                           time.gmtime()),
                                 "versions": _versions()})
        for zoo, model in models:
            for mode in a.modes.split(","):
                for dtype in a.dtypes.split(","):
                    spec = {"zoo": zoo, "model": model, "mode": mode, "dtype": dtype,
                            "max_params": a.max_params, "size": a.size}
                    if a.resume and _key(spec) in results["runs"]:
                        continue
                    record = dict(spec, **_run_child(spec, a.timeout))
                    record.pop("max_params")
                    if zoo != "torchvision" or not a.size:
                        record.pop("size")
                    results["runs"][_key(record)] = record
                    print(f"{_key(record)}: {record['status']} "
                          f"({record.get('seconds', 0):.0f} s) {record.get('detail', '')[:200]}",
                          flush=True)
                    if a.results:
                        with open(a.results, "w") as fh:
                            json.dump(results, fh, indent=1)
    if a.write_docs:
        try:
            everything = _models("all", None) + _models("beyond", None)
        except ImportError:
            everything = _models("transformers", None)
        write_docs(results, a.write_docs, everything)
    return 0


if __name__ == "__main__":
    sys.exit(main())
