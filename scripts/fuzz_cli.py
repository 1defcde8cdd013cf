"""Mutation fuzzer for the gradcli command line.

Takes seed graph files (graphs/*.yaml, graphs/*.json, the small models under
graphs/models/, tests/bad_inputs/*), mutates them at the text level (delete,
duplicate, swap lines; extreme numbers; huge or negative shapes; other
registered op names, ``aten.*`` included; other dtypes, devices, arg values,
inputs lists; truncation; YAML anchors, aliases and tags; JSON variants) and
at the structure level (parse, mutate the dict, dump as YAML or JSON), and
runs each mutant in process through the click CLI (``gradcli.cli.main``) with
``run``, ``validate`` (plain, ``--numeric``, ``--fast``) and ``order``.

The rule it checks: a bad input gives exactly one ``gradcli: error: FILE...``
line and exit 2, or exit 3 from a backward that legitimately raised (the
``fail`` op). Everything else is a *finding*:

- an exception that escapes the CLI's guard, or ``gradcli: internal error``;
- ``internal error in op`` (an op's kernel crashed: OpBugError);
- a traceback or more than one line on stderr, or an error line that does not
  name the file;
- an exit code outside 0-3;
- a hang (the per-case time limit, ``--timeout``, via SIGALRM; the parent also
  kills a worker that stops making progress);
- a memory blow-up: the worker runs under RLIMIT_AS (``--mem-gb``), so it
  shows as MemoryError;
- a silently wrong result, as far as a differential oracle can tell: the same
  mutant run with and without ``--no-multithreading`` must give the same
  gradients.

Findings are written to ``--out`` (default /tmp/fuzz-findings), one folder per
distinct finding (deduplicated by class + exception type + innermost gradcli
frame), each with the input file, the command and stderr (and the traceback
from a ``--debug`` re-run). ``summary.jsonl`` there lists them, ``stats.json``
counts cases.

Run it (niced: it is meant to run in the background for a long time):

    PYTHONPATH=$PWD nice -n 19 /work/venv/bin/python scripts/fuzz_cli.py \\
        --minutes 30 --out /tmp/fuzz-findings

Reproduce a finding: ``cat /tmp/fuzz-findings/<key>/command.txt``, run it from
that folder (the input file and the data files it needs are copied there).
``--replay DIR`` re-runs the case in DIR and prints the outcome.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

EXTREME_NUMBERS = ["0", "-1", "1", "2", "-2", "1e308", "-1e308", "1.0e+400", ".nan", "nan", ".inf",
                   "-.inf", "inf", str(2**63), str(2**64), str(-2**63), str(2**31), "1e-320",
                   "100000", "99999999999", "3.5", "-0.0", "0x10", "1_000", "true", "null",
                   "2147483648", "65536", "7", "'3'", "[]", "{}"]
HUGE_SHAPES = ["[0]", "[-1]", "[-1, 3]", "[0, 0]", "[]", "[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]",
               "[2147483648, 2147483648]", f"[{2**63}]", "[100000, 100000]", "[3.5, 2]",
               "[1000000000]", "[2, -3]", "[true]", "null", "5", "[[2]]", "['2']",
               "[" + ", ".join(["1"] * 70) + "]", "[65536, 65536, 65536]", "[4, 0, 3]"]
DTYPES = ["float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
          "uint8", "uint64", "bool", "complex64", "complex128", "str", "object", "null",
          "float", "long", "torch.float32", "f8"]
DEVICES = ["cpu", "sim:0", "sim:1", "sim:99", "sim:-1", "sim", "cuda:0", "cuda", "meta",
           "cpu:1", "mps", "sim:99999999999999999999", "null", "''", "cuda:1"]
TAGS = ["!!str", "!!int", "!!float", "!!bool", "!!null", "!!binary", "!!set", "!!omap",
        "!!seq", "!!map", "!!timestamp", "!!python/object:os.system", "!custom", "!!pairs"]
# Exit 3 messages of a backward that legitimately raised, as PyTorch's would: the
# `fail` op (also inside a `grad` op's backward), and a graph freed by a `grad` op without retain_graph then walked again.
LEGIT_BACKWARD_ERRORS = ("failed in FailBackward",
                         "Trying to backward through the graph a second time")
# Text of Python's or NumPy's own exceptions: in an error line it means a check is
# missing and the user gets an implementation detail instead of the problem.
# (NumPy's "cannot reshape array of size 12 into shape (3,0)", "too many indices
# for array", "index 5 is out of bounds for axis 0" and "maximum supported dimension"
# say the problem as PyTorch would: not flagged.)
LEAKY = re.compile(
    r"operands could not be broadcast"
    r"|object has no attribute|unsupported operand type|NoneType|list index out of range"
    r"|invalid literal for int|positional argument|unhashable type|not subscriptable"
    r"|object is not iterable|object cannot be interpreted"
    r"|array is not broadcastable|negative dimensions are not"
    r"|Maximum allowed size exceeded|array is too big|division by zero|math domain error"
    r"|cannot convert float|OverflowError|Python int too large|non-broadcastable"
    r"|setting an array element|got an unexpected keyword|missing \d+ required"
    r"|axes don't match array|repeated axis|diff requires|zero-size array"
    r"|KeyError|IndexError|TypeError|AttributeError|AssertionError|RecursionError")
# Ops that wait on purpose (a `delay` may sleep a minute per call): a time-out is
# what they are for, not a finding.
SLEEPY_OPS = {"delay"}


# -- the case generator -------------------------------------------------------------------------

def registered_ops():
    """The op names ``gradcli ops`` lists (whatever the registry's form)."""
    from click.testing import CliRunner

    from gradcli.cli import main

    out = CliRunner().invoke(main, ["ops"]).stdout
    names = []
    for line in out.splitlines()[1:]:
        tok = line.split(" ", 1)[0].strip()
        if tok and tok not in SLEEPY_OPS:
            names.append(tok)
    return names


def seed_files():
    seeds = []
    for pattern in ("graphs/*.yaml", "graphs/*.json", "graphs/*/graph.yaml",
                    "graphs/models/*/graph.yaml", "tests/bad_inputs/*.yaml",
                    "tests/bad_inputs/*.json", "tests/graphs/*.yaml"):
        for p in sorted(ROOT.glob(pattern)):
            if p.stat().st_size <= 64_000:
                seeds.append(p)
    return seeds


class Mutator:
    def __init__(self, rng, ops, seeds):
        self.rng = rng
        self.ops = ops
        self.seeds = seeds
        self.texts = {}

    def text(self, path):
        if path not in self.texts:
            try:
                self.texts[path] = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                self.texts[path] = path.read_bytes().decode("latin-1")
        return self.texts[path]

    # text level
    def m_delete_line(self, t):
        lines = t.splitlines(True)
        if lines:
            del lines[self.rng.randrange(len(lines))]
        return "".join(lines)

    def m_duplicate_line(self, t):
        lines = t.splitlines(True)
        if lines:
            i = self.rng.randrange(len(lines))
            lines.insert(self.rng.randrange(len(lines) + 1), lines[i])
        return "".join(lines)

    def m_swap_lines(self, t):
        lines = t.splitlines(True)
        if len(lines) > 1:
            i, j = self.rng.sample(range(len(lines)), 2)
            lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines)

    def m_truncate(self, t):
        return t[:self.rng.randrange(len(t) + 1)] if t else t

    def _replace_match(self, t, pattern, choices, group=0):
        ms = list(re.finditer(pattern, t))
        if not ms:
            return None
        m = self.rng.choice(ms)
        a, b = m.span(group)
        return t[:a] + self.rng.choice(choices) + t[b:]

    def m_number(self, t):
        return self._replace_match(t, r"(?<![\w.:'\"-])-?\d+(\.\d+)?([eE][-+]?\d+)?(?![\w.'\"])",
                                   EXTREME_NUMBERS)

    def m_shape(self, t):
        return self._replace_match(t, r"(?:shape|size|kernel_size|stride|padding|dim|output_size"
                                      r"|sizes|sections|indices)\s*[:=]\s*(\[[^\]\[]*\])",
                                   HUGE_SHAPES, 1)

    def m_op(self, t):
        return self._replace_match(t, r"\bop\"?\s*:\s*\"?([\w.]+)", self.ops, 1)

    def m_dtype(self, t):
        return self._replace_match(t, r"\bdtype\"?\s*:\s*\"?([\w.]+)", DTYPES, 1)

    def m_device(self, t):
        r = self._replace_match(t, r"\bdevice\"?\s*:\s*\"?([\w.:]+)", DEVICES, 1)
        if r is None:   # add a device to a tensor or op mapping
            r = self._replace_match(t, r"(\{)(?:shape|op|value|file)", ["{device: " +
                                    self.rng.choice(DEVICES) + ", "], 1)
        return r

    def m_arg_value(self, t):
        m = list(re.finditer(r"\bargs\"?\s*:\s*\{([^{}]*)\}", t))
        if not m:
            return None
        m = self.rng.choice(m)
        inner = m.group(1)
        vals = list(re.finditer(r":\s*([^,{}]+|\[[^\]]*\])", inner))
        if not vals:
            return None
        v = self.rng.choice(vals)
        new = self.rng.choice(EXTREME_NUMBERS + HUGE_SHAPES + ["true", "false", "'x'", "sum",
                                                               "-100", "[1, 1]", "[0, 0]"])
        a, b = m.start(1) + v.start(1), m.start(1) + v.end(1)
        return t[:a] + new + t[b:]

    def m_inputs(self, t):
        ms = list(re.finditer(r"\binputs\"?\s*:\s*\[([^\]]*)\]", t))
        if not ms:
            return None
        m = self.rng.choice(ms)
        names = [s.strip() for s in m.group(1).split(",") if s.strip()]
        allnames = re.findall(r"^\s+([\w.]+):\s*\{", t, re.M) + re.findall(r"outputs?:\s*\[?([\w.]+)", t)
        action = self.rng.choice(["drop", "dup", "shuffle", "other", "null", "empty", "self"])
        if action == "drop" and names:
            names.pop(self.rng.randrange(len(names)))
        elif action == "dup" and names:
            names.insert(self.rng.randrange(len(names) + 1), self.rng.choice(names))
        elif action == "shuffle":
            self.rng.shuffle(names)
        elif action == "other" and names and allnames:
            names[self.rng.randrange(len(names))] = self.rng.choice(allnames)
        elif action == "null" and names:
            names[self.rng.randrange(len(names))] = "null"
        elif action == "empty":
            names = []
        elif action == "self":
            out = re.search(r"outputs?\"?\s*:\s*\[?\"?([\w.]+)", t[m.end():])
            if out and names:
                names[0] = out.group(1)
        return t[:m.start(1)] + ", ".join(names) + t[m.end(1):]

    def m_yaml_alias(self, t):
        lines = t.splitlines(True)
        cands = [i for i, ln in enumerate(lines) if re.search(r":\s*[\[{\w]", ln)]
        if len(cands) < 2:
            return None
        i, j = sorted(self.rng.sample(cands, 2))
        li = lines[i]
        m = re.search(r":\s*(?=[\[{\w])", li)
        lines[i] = li[:m.end()] + "&A " + li[m.end():]
        lj = lines[j]
        m2 = re.search(r":\s*(?=[\[{\w])", lj)
        kind = self.rng.choice(["alias", "merge", "undefined"])
        if kind == "alias":
            end = "\n" if lj.endswith("\n") else ""
            lines[j] = lj[:m2.end()] + "*A" + end
        elif kind == "merge":
            lines[j] = lj[:m2.end()] + "{<<: *A}\n"
        else:
            lines[j] = lj[:m2.end()] + "*B\n"
        return "".join(lines)

    def m_yaml_tag(self, t):
        return self._replace_match(t, r"(?<=: )(?=[\w\[{.-])", [self.rng.choice(TAGS) + " "])

    def m_splice(self, t):
        other = self.text(self.rng.choice(self.seeds))
        ol = [ln for ln in other.splitlines(True) if "op:" in ln or "shape:" in ln]
        if not ol:
            return None
        lines = t.splitlines(True)
        ln = self.rng.choice(ol)
        lines.insert(self.rng.randrange(len(lines) + 1), ln)
        return "".join(lines)

    def m_bytes(self, t):
        choices = ["\ufeff", "\x00", "\t", "\r", "\u2028", "\x1b[2J", "é", "\udcff"[:0] + "\uffff",
                   ":", "- ", "{", "[", "#", "'", '"', "\\", "&", "*", "!", "%YAML 1.1\n---\n",
                   "---\n", "...\n"]
        if not t:
            return self.rng.choice(choices)
        i = self.rng.randrange(len(t) + 1)
        return t[:i] + self.rng.choice(choices) + t[i:]

    TEXT = ["m_delete_line", "m_duplicate_line", "m_swap_lines", "m_truncate", "m_number",
            "m_number", "m_shape", "m_shape", "m_op", "m_op", "m_op", "m_dtype", "m_device",
            "m_arg_value", "m_arg_value", "m_inputs", "m_inputs", "m_yaml_alias", "m_yaml_tag",
            "m_splice", "m_bytes"]

    # structure level
    def extreme_value(self):
        r = self.rng
        return r.choice([0, -1, 1, 2, 1e308, -1e308, float("nan"), float("inf"), -float("inf"),
                         2**63, 2**64, -2**63, 2**31, 1e-320, 3.5, None, True, False, "", "x",
                         [], {}, [0], [-1], [2**31, 2**31], [1.5], [[1, 2], [3]], {"a": 1},
                         r.choice(self.ops), r.choice(DTYPES), r.choice(DEVICES), "sim:1",
                         "1:3", "...", [1, 2, 3], list(range(40)), "a" * 300])

    def _paths(self, obj, path=()):
        if len(path) > 12:
            return
        yield path
        if isinstance(obj, dict):
            for k, v in list(obj.items()):
                yield from self._paths(v, path + (k,))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                yield from self._paths(v, path + (i,))

    def structural(self, doc):
        r = self.rng
        for _ in range(r.randint(1, 3)):
            paths = [p for p in self._paths(doc) if p]
            if not paths:
                return doc
            path = r.choice(paths)
            parent = doc
            for p in path[:-1]:
                parent = parent[p]
            key = path[-1]
            value = parent[key]
            action = r.choice(["drop", "replace", "replace", "dup", "shuffle", "insert",
                               "numeric", "listify", "swap_op"])
            if action == "drop":
                del parent[key]
            elif action == "replace":
                parent[key] = self.extreme_value()
            elif action == "dup" and isinstance(value, list) and value:
                value.insert(r.randrange(len(value) + 1), json.loads(json.dumps(r.choice(value))))
            elif action == "shuffle" and isinstance(value, list):
                r.shuffle(value)
            elif action == "insert" and isinstance(value, dict):
                value[r.choice(["shape", "dtype", "device", "args", "inputs", "value", "init",
                                "requires_grad", "retain_grad", "id", "x", "grad_roots",
                                "create_graph", "retain_graph", "inputs", "key", "file"])] = \
                    self.extreme_value()
            elif action == "numeric" and isinstance(value, (int, float)) and not isinstance(value, bool):
                parent[key] = r.choice([0, -1, value * -1, value * 2**31, 1e308, float("nan"),
                                        2**63, value + 1, value - 1])
            elif action == "listify":
                parent[key] = [value] if r.random() < 0.5 else {"a": value}
            elif action == "swap_op" and isinstance(value, dict) and "op" in value:
                value["op"] = r.choice(self.ops)
        return doc

    def mutate(self, seed):
        """(text, suffix, description) of one mutant of seed."""
        r = self.rng
        t = self.text(seed)
        suffix = seed.suffix if seed.suffix in (".yaml", ".json", ".yml") else ".yaml"
        desc = []
        if r.random() < 0.3 and "&" not in t and "deep" not in seed.name and len(t) < 30_000:
            import yaml
            try:
                doc = json.loads(t) if suffix == ".json" else yaml.safe_load(t)
            except Exception:  # noqa: BLE001 - a seed that does not parse: text only
                doc = None
            if isinstance(doc, (dict, list)):
                doc = self.structural(doc)
                desc.append("structural")
                try:
                    if r.random() < 0.5:
                        t, suffix = json.dumps(doc, allow_nan=True), ".json"
                        desc.append("as-json")
                    else:
                        t = yaml.safe_dump(doc, default_flow_style=r.random() < 0.5, sort_keys=False)
                except (TypeError, ValueError, yaml.YAMLError):
                    pass
        for _ in range(r.choice([1, 1, 1, 2, 2, 3, 5])):
            name = r.choice(self.TEXT)
            out = getattr(self, name)(t)
            if out is not None:
                t = out
                desc.append(name[2:])
        return t, suffix, " ".join(desc)


# -- synthetic op-contract cases: one registered op, plausible inputs, edge-case args ------------

def op_specs():
    """{name: (arity, {arg: default or REQUIRED})} of the public ops (read from the registry)."""
    from gradcli.ops import OPS

    specs = {}
    for name, op in OPS.items():
        if not op.public or name in SLEEPY_OPS or op.needs_code or op.has_body:
            continue
        params = getattr(op, "tensor_inputs", None)
        layout = [(p.optional, p.is_list) for p in params] if params is not None else None
        nout = None
        if op.multi_output:
            try:
                nout = op.num_outputs({}) if hasattr(op, "num_outputs") else None
            except Exception:  # noqa: BLE001 - depends on args: guess
                nout = None
            nout = nout if isinstance(nout, int) else 0
        specs[name] = (op.arity, {a: ("REQUIRED" if arg.required else arg.default)
                                  for a, arg in op.args.items()}, layout, nout)
    return specs


INT_EDGES = [-3, -2, -1, 0, 1, 2, 3, 4, 100, 2**31, 2**63, -2**63]
FLOAT_EDGES = [0.0, -1.0, 0.5, 1.0, 1e-5, 1e308, float("nan"), float("inf"), -0.0, 2.0, 1e-300]


class Synth:
    def __init__(self, rng, specs):
        self.rng = rng
        self.specs = specs

    def shape(self):
        r = self.rng
        rank = r.choice([0, 1, 1, 2, 2, 2, 3, 4, 4])
        return [r.choice([1, 2, 2, 3, 3, 4, 5, 0, 1, 2, 6, 8]) for _ in range(rank)]

    def arg_value(self, name, default):
        r = self.rng
        if default != "REQUIRED" and r.random() < 0.4:
            return default
        low = name.lower()
        if r.random() < 0.08:
            return r.choice([None, True, "x", [], {}, 1.5, [1.5], "sum", float("nan")])
        if any(k in low for k in ("size", "stride", "padding", "dilation", "kernel", "shape",
                                  "sizes", "split", "indices", "sections", "output_padding")):
            if r.random() < 0.2:
                return r.choice(INT_EDGES)
            n = r.choice([0, 1, 2, 2, 2, 3, 4])
            return [r.choice([-1, 0, 1, 1, 2, 2, 3, 4, 2**31]) for _ in range(n)]
        if low in ("dim", "axis", "dims", "axes", "start_dim", "end_dim", "dim0", "dim1"):
            if r.random() < 0.3:
                return [r.choice([-3, -2, -1, 0, 1, 2, 5]) for _ in range(r.choice([0, 1, 2]))]
            return r.choice([-5, -3, -2, -1, 0, 1, 2, 3, 7, None])
        if isinstance(default, bool):
            return r.choice([True, False, 0, 1, "true"])
        if isinstance(default, int):
            return r.choice(INT_EDGES)
        if isinstance(default, float):
            return r.choice(FLOAT_EDGES)
        if isinstance(default, (tuple, list)):
            return [r.choice(INT_EDGES[:8]) for _ in range(r.choice([0, 1, 2, 3]))]
        if low in ("dtype", "input_dtype"):
            return r.choice(DTYPES[:12] + [None, 6, 7])
        if low in ("device",):
            return r.choice(DEVICES)
        if low in ("index",):
            return r.choice(["0", "1:", "::-1", "..., 0", "None", "0, 0, 0, 0, 0", "-1", "5",
                             "1:0", "::0", ":, None", "[0]"])
        if low in ("reduction",):
            return r.choice([0, 1, 2, 3, -1, "mean"])
        return r.choice(INT_EDGES + FLOAT_EDGES + [None, True, [1, 2], [0]])

    def case(self):
        r = self.rng
        name = r.choice(sorted(self.specs))
        arity, args, layout, nout_spec = self.specs[name]
        if layout is not None:
            arity = sum(3 if is_list else 1 for _, is_list in layout)
        if isinstance(arity, tuple):
            lo, hi = arity
            n = r.randint(lo, (hi if hi is not None else lo + 3))
        else:
            n = arity
        if r.random() < 0.05:
            n += r.choice([-1, 1])
        base = self.shape()
        tensors, inputs = {}, []
        for i in range(max(0, n)):
            shp = list(base) if r.random() < 0.6 else self.shape()
            dtype = r.choice(["float64"] * 6 + ["float32", "int64", "bool", "float16", "int32"])
            t = {"shape": shp, "dtype": dtype}
            if dtype.startswith("int"):
                t["init"] = r.choice(["zeros", "ones", {"dist": "uniform", "low": -1, "high": 4}])
                t["init"] = "zeros" if isinstance(t["init"], dict) else t["init"]
            elif dtype == "bool":
                t["init"] = "ones"
            else:
                t["init"] = r.choice(["normal", "normal", "uniform", "zeros", "ones"])
                t["requires_grad"] = r.random() < 0.8
            if r.random() < 0.05:
                t["device"] = r.choice(["sim:0", "sim:1"])
            tensors[f"t{i}"] = t
            inputs.append(f"t{i}")
        if layout is not None and r.random() < 0.95:
            flat, inputs = list(inputs), []
            for optional, is_list in layout:
                if is_list:
                    inputs.append(flat[:r.randint(1, 3)])
                    flat = flat[len(inputs[-1]):]
                elif optional and r.random() < 0.3:
                    inputs.append(None)
                    flat = flat[1:]
                else:
                    inputs.append(flat.pop(0) if flat else "t0")
        if r.random() < 0.05 and inputs:
            inputs[r.randrange(len(inputs))] = None
        entry = {"op": name, "inputs": inputs, "id": "subject"}
        a = {k: self.arg_value(k, d) for k, d in args.items()
             if d == "REQUIRED" or r.random() < 0.7}
        if a:
            entry["args"] = a
        nout = r.choice([1, 1, 1, 2, 3]) if r.random() < 0.1 or nout_spec is None else \
            (nout_spec or r.choice([2, 2, 3]))
        outs = [f"o{j}" for j in range(nout)]
        if nout_spec is None and r.random() < 0.95:
            entry["output"] = "o0"
        else:
            entry["outputs"] = outs
        ops = [entry]
        root = "o0"
        if r.random() < 0.85:
            ops.append({"op": "sum", "inputs": ["o0"], "output": "loss"})
            if r.random() < 0.3:
                ops.insert(1, {"op": "cast", "inputs": ["o0"], "output": "o0f",
                               "args": {"dtype": "float64"}})
                ops[-1]["inputs"] = ["o0f"]
            root = "loss"
        doc = {"version": 1, "name": "synth-" + name, "seed": r.randrange(100),
               "tensors": tensors, "ops": ops, "backward": {"roots": [root]}}
        if r.random() < 0.2:
            doc["backward"]["create_graph"] = True
        return doc, name


COMMANDS = [
    (["run"], 6), (["run", "--no-multithreading"], 1), (["run", "--deterministic"], 1),
    (["run", "--detect-anomaly", "--check-inf"], 1), (["run", "--retain-graph", "--repeat", "2"], 1),
    (["run", "--format", "json"], 1),
    (["validate"], 3), (["validate", "--numeric"], 2), (["validate", "--fast"], 2),
    (["validate", "--check-order"], 1), (["validate", "--repeat", "2"], 1),
    (["order"], 2), (["order", "--predicted"], 1), (["order", "--format", "dot"], 1),
    (["order", "--no-multithreading", "--format", "json"], 1),
]
BUDGET = ["--max-graph-bytes", str(2**29), "--max-tensor-bytes", str(2**27)]


def pick_command(rng, size):
    cmds = [c for c, w in COMMANDS for _ in range(w)]
    cmd = list(rng.choice(cmds))
    if "--numeric" in cmd and size > 4000:
        cmd[cmd.index("--numeric")] = "--fast"
    if rng.random() < 0.9:
        cmd += BUDGET
    if rng.random() < 0.1:
        cmd += ["--device-map", "cuda=sim"]
    return cmd


# -- running one case ---------------------------------------------------------------------------

class CaseTimeout(BaseException):
    """Raised by SIGALRM: a BaseException, so that the CLI's guard does not catch it."""


def _alarm(signum, frame):
    raise CaseTimeout()


def invoke(args, timeout):
    """Run ``gradcli ARGS`` in process: (exit code, stdout, stderr, escaped exception, tb)."""
    from click.testing import CliRunner

    from gradcli.cli import main

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    exc, tb = None, ""
    try:
        res = CliRunner().invoke(main, args, catch_exceptions=False)
        code, out, err = res.exit_code, res.stdout, res.stderr
    except CaseTimeout as e:
        exc, tb = e, _all_stacks()
        code, out, err = None, "", ""
    except BaseException as e:  # noqa: BLE001 - an escaped exception is a finding
        exc, tb = e, traceback.format_exc()
        code, out, err = None, "", ""
    finally:
        signal.alarm(0)
    return code, out, err, exc, tb


def _all_stacks():
    parts = []
    for tid, frame in sys._current_frames().items():
        parts.append(f"--- thread {tid}\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def innermost_gradcli_frame(tb_text):
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb_text)
    keep = [f for f in frames if "/gradcli/" in f[0] and "/scripts/" not in f[0]
            and "/cli/__init__" not in f[0]]
    if not keep:
        return "?"
    f, line, fn = keep[-1]
    return f"{f.split('/gradcli/', 1)[1]}:{line}:{fn}"


def classify(args, path, code, out, err, exc, tb):
    """None when the outcome keeps the rule, else (class, detail for the key)."""
    if isinstance(exc, CaseTimeout):
        return "hang", innermost_gradcli_frame(tb)
    if exc is not None:
        return "escaped", f"{type(exc).__name__}@{innermost_gradcli_frame(tb)}"
    if "Traceback" in err or "Traceback" in out:
        return "traceback", ""
    if code not in (0, 1, 2, 3):
        return "exit-code", str(code)
    if "MemoryError" in err:
        return "memory", ""
    if "gradcli: internal error" in err:
        m = re.search(r"internal error: (\w+)", err)
        return "internal", m.group(1) if m else "?"
    if "internal error in op" in err:
        m = re.search(r"internal error in op '([^']+)'.*?: (\w+(?:Error|Exception|Warning)?):", err)
        return "opbug", f"{m.group(1)}:{m.group(2)}" if m else "?"
    lines = err.splitlines()
    if code in (2, 3):
        if len(lines) != 1:
            return "multiline", str(len(lines))
        if code == 2 and not lines[0].startswith(f"gradcli: error: {path}"):
            return "unnamed-file", re.sub(r"[\d'\"].*", "", lines[0][:60])
        leak = LEAKY.search(lines[0]) if code == 2 else None
        if leak:
            op = re.search(r"\(([\w.]+)\): ", lines[0])
            return "leaky-message", f"{op.group(1) if op else '?'}:{leak.group(0)}"
        if code == 3:
            if any(legit in err for legit in LEGIT_BACKWARD_ERRORS):
                return None
            if "--detect-anomaly" in args and re.search(r"returned (nan|inf) values", err):
                return None
            m = re.search(r"backward failed in (\w+): (.{0,40})", err)
            return "backward", (f"{m.group(1)}:{re.sub(r'[0-9].*', '', m.group(2))}"
                                if m else err[:50])
    return None


def differential(path, args, out, timeout):
    """run: the same gradients with and without threads (JSON compared)."""
    if args[0] != "run" or "--format" in args or "--repeat" in args:
        return None
    base = [a for a in args if a not in ("--no-multithreading", "--deterministic")]
    a = invoke(["run", "--format", "json", *base[1:]], timeout)
    b = invoke(["run", "--format", "json", "--no-multithreading", *base[1:]], timeout)
    if a[0] != 0 or b[0] != 0:
        if a[0] is not None and b[0] is not None and (a[0] == 0) != (b[0] == 0):
            return "differential", f"exit {a[0]} vs {b[0]}"
        return None
    try:
        ja, jb = json.loads(a[1]), json.loads(b[1])
    except ValueError:
        return "bad-json", ""
    ga, gb = _grads(ja), _grads(jb)
    if set(ga) != set(gb):
        return "differential", "different gradient names"
    for k in ga:
        if not _close(ga[k], gb[k]):
            return "differential", f"grad {k}"
    return None


def _grads(j):
    if isinstance(j, list):
        j = j[0] if j else {}
    g = j.get("grads", j) if isinstance(j, dict) else {}
    return {k: (v.get("data", v) if isinstance(v, dict) else v) for k, v in g.items()}


def _flat(v):
    if isinstance(v, list):
        for x in v:
            yield from _flat(x)
    else:
        yield v


def _close(a, b):
    fa, fb = list(_flat(a)), list(_flat(b))
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if isinstance(x, str) or isinstance(y, str) or x is None or y is None:
            if x != y:
                return False
            continue
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)) \
                or isinstance(x, bool) or isinstance(y, bool):
            if x != y:
                return False
            continue
        if math.isnan(x) and math.isnan(y):
            continue
        if not math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-8):
            return False
    return True


# -- the worker and the parent ------------------------------------------------------------------

def prepare_dir(workdir, seed):
    """A folder holding copies of the seed folder's data files; the mutant goes in it."""
    key = hashlib.sha1(str(seed.parent).encode()).hexdigest()[:8]
    d = workdir / key
    if not d.exists():
        d.mkdir(parents=True)
        if not seed.parent.is_dir():
            return d
        for f in seed.parent.iterdir():
            if f.is_file() and f.suffix in (".npy", ".npz", ".py", ".txt") and f.stat().st_size < 2**21:
                shutil.copy(f, d / f.name)
    return d


def record(outdir, cls, detail, path, args, err, tb, desc, seed, replay_tb=""):
    key = re.sub(r"[^\w.:@-]+", "_", f"{cls}-{detail}")[:120]
    kdir = outdir / key
    new = not kdir.exists()
    if new:
        kdir.mkdir(parents=True)
        shutil.copy(path, kdir / path.name)
        for f in path.parent.iterdir():
            if f.is_file() and f != path and f.suffix in (".npy", ".npz", ".py"):
                shutil.copy(f, kdir / f.name)
        (kdir / "command.txt").write_text(
            "PYTHONPATH=$REPO /work/venv/bin/python -m gradcli "
            + " ".join(args).replace(str(path), path.name) + "\n")
        (kdir / "stderr.txt").write_text(err)
        (kdir / "traceback.txt").write_text(tb + ("\n--- --debug re-run\n" + replay_tb if replay_tb else ""))
        (kdir / "info.json").write_text(json.dumps({"class": cls, "detail": detail, "seed": str(seed),
                                                    "mutations": desc, "args": args}, indent=1))
        with open(outdir / "summary.jsonl", "a") as f:
            f.write(json.dumps({"key": key, "class": cls, "detail": detail, "seed": str(seed),
                                "args": args, "stderr": err[:300], "time": time.time()}) + "\n")
    else:
        cnt = kdir / "count"
        n = int(cnt.read_text()) if cnt.exists() else 1
        cnt.write_text(str(n + 1))
        # keep the smallest reproducer
        olds = [f for f in kdir.iterdir() if f.suffix in (".yaml", ".json", ".yml") and f.name != "info.json"]
        if olds and path.stat().st_size < min(o.stat().st_size for o in olds):
            for o in olds:
                o.unlink()
            shutil.copy(path, kdir / path.name)
            (kdir / "command.txt").write_text(
                "PYTHONPATH=$REPO /work/venv/bin/python -m gradcli "
                + " ".join(args).replace(str(path), path.name) + "\n")
            (kdir / "stderr.txt").write_text(err)
    return new


def run_case(path, args, timeout, want_diff):
    code, out, err, exc, tb = invoke(args, timeout)
    found = classify(args, str(path), code, out, err, exc, tb)
    if found is None and code == 0 and want_diff:
        found = differential(path, args, out, timeout)
    return found, code, err, exc, tb


def worker(opts):
    os.nice(0)
    if opts.mem_gb:
        lim = int(opts.mem_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    sys.setrecursionlimit(10_000)
    import warnings
    warnings.simplefilter("ignore")
    rng = random.Random(opts.seed)
    seeds = seed_files()
    good = [s for s in seeds if "bad_inputs" not in str(s)]
    mut = Mutator(rng, registered_ops(), seeds)
    synth = Synth(rng, op_specs())
    outdir = Path(opts.out)
    outdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(opts.workdir) / f"w{opts.seed}"
    progress = outdir / f"progress-{opts.seed}"
    deadline = time.time() + opts.seconds
    n = 0
    while time.time() < deadline:
        if rng.random() < opts.synth:
            import yaml
            doc, opname = synth.case()
            seed, suffix, desc = ROOT / "synth" / "op.yaml", ".yaml", f"synth {opname}"
            text = yaml.safe_dump(doc, default_flow_style=None, sort_keys=False) \
                if rng.random() < 0.7 else json.dumps(doc)
            suffix = ".yaml" if text.startswith("version") else ".json"
            if rng.random() < 0.3:
                try:
                    text = mut.m_number(text) or text
                except (ValueError, IndexError):
                    pass
        else:
            seed = rng.choice(good if good and rng.random() < 0.7 else seeds)
            try:
                text, suffix, desc = mut.mutate(seed)
            except (RecursionError, MemoryError, ValueError, TypeError):
                continue
        d = prepare_dir(workdir, seed)
        path = d / f"case{suffix}"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        args = pick_command(rng, len(text)) + [str(path)]
        progress.write_text(json.dumps({"n": n, "args": args, "seed": str(seed), "desc": desc,
                                        "path": str(path), "t": time.time()}))
        t0 = time.time()
        try:
            found, code, err, exc, tb = run_case(path, args, opts.timeout, rng.random() < 0.15)
        except MemoryError:
            found, code, err, exc, tb = ("memory", "worker"), None, "", None, traceback.format_exc()
        n += 1
        if n % 200 == 0:        # counted as it goes: a killed worker's cases still count
            _bump_stats(outdir, 200)
        if opts.verbose:
            print(f"[{opts.seed}] {n} {time.time() - t0:.1f}s exit {code} {found} {args[:-1]} "
                  f"{seed.name}: {desc}", flush=True)
        if found:
            cls, detail = found
            replay_tb = ""
            if cls in ("internal", "memory") and not isinstance(exc, CaseTimeout):
                replay_tb = invoke(["--debug", *args], opts.timeout)[2]
                loc = innermost_gradcli_frame(replay_tb)
                detail = f"{detail}@{loc}"
            if cls == "hang" and any(f"op: {o}" in text or f'"op": "{o}"' in text for o in SLEEPY_OPS):
                cls = "hang-sleepy-op"
            if record(outdir, cls, detail, path, args, err, tb, desc, seed, replay_tb):
                print(f"[{opts.seed}] NEW {cls} {detail} ({seed.name}: {desc}) {err[:200]!r}",
                      flush=True)
            if cls in ("hang", "memory", "escaped", "hang-sleepy-op"):
                # engine threads may still be busy or the heap is in a bad state: start afresh
                _bump_stats(outdir, n % 200)
                os._exit(17)
    _bump_stats(outdir, n % 200)
    os._exit(0)


def _bump_stats(outdir, n):
    f = outdir / "stats.json"
    try:
        s = json.loads(f.read_text())
    except (OSError, ValueError):
        s = {"cases": 0}
    s["cases"] += n
    f.write_text(json.dumps(s))


def parent(opts):
    outdir = Path(opts.out)
    outdir.mkdir(parents=True, exist_ok=True)
    end = time.time() + opts.minutes * 60
    seed = opts.seed
    while time.time() < end:
        seed += 1
        left = max(10, int(end - time.time()))
        cmd = [sys.executable, __file__, "--worker", "--seed", str(seed), "--seconds", str(left),
               "--out", opts.out, "--workdir", opts.workdir, "--timeout", str(opts.timeout),
               "--mem-gb", str(opts.mem_gb), "--synth", str(opts.synth)] + (["--verbose"] if opts.verbose else [])
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        proc = subprocess.Popen(cmd, env=env)
        progress = outdir / f"progress-{seed}"
        while proc.poll() is None:
            time.sleep(2)
            try:
                p = json.loads(progress.read_text())
            except (OSError, ValueError):
                continue
            if time.time() - p["t"] > opts.timeout * 4 + 30:
                proc.kill()
                proc.wait()
                _record_dead(outdir, p, "hang-hard", "worker stopped making progress")
        if proc.returncode not in (0, 17, None, -9):
            try:
                p = json.loads(progress.read_text())
                _record_dead(outdir, p, "crash", f"worker exit {proc.returncode}")
            except (OSError, ValueError):
                pass
        try:
            progress.unlink()
        except OSError:
            pass
    s = outdir / "stats.json"
    print("done:", s.read_text() if s.exists() else "{}")


def _record_dead(outdir, p, cls, detail):
    path = Path(p["path"])
    record(outdir, cls, f"{detail}-{Path(p['seed']).name}", path, p["args"], "", "", p["desc"], p["seed"])
    print(f"NEW {cls} {detail} {p['args']}", flush=True)
    _bump_stats(outdir, (p["n"] + 1) % 200)


def replay(d, timeout):
    d = Path(d)
    info = json.loads((d / "info.json").read_text())
    args = list(info["args"])
    case = [f for f in d.iterdir() if f.suffix in (".yaml", ".json", ".yml") and f.name != "info.json"][0]
    args[-1] = str(case)
    code, out, err, exc, tb = invoke(args, timeout)
    print("exit", code, "exception", repr(exc))
    print(err or tb)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--out", default="/tmp/fuzz-findings")
    ap.add_argument("--workdir", default="/tmp/fuzz-work")
    ap.add_argument("--timeout", type=int, default=20, help="per-case time limit (s)")
    ap.add_argument("--mem-gb", type=float, default=4.0, help="RLIMIT_AS of the worker")
    ap.add_argument("--replay", metavar="DIR", help="re-run the finding in DIR")
    ap.add_argument("--verbose", action="store_true", help="print every case")
    ap.add_argument("--synth", type=float, default=0.4,
                    help="share of synthetic op-contract cases (one op, edge-case args)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=0, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.replay:
        sys.path.insert(0, str(ROOT))
        replay(opts.replay, opts.timeout)
    elif opts.worker:
        worker(opts)
    else:
        parent(opts)


if __name__ == "__main__":
    main()
