"""Export + validate one sample of every op in PyTorch's OpInfo database: coverage of
PyTorch's operator set measured by construction, not by the models gradcli was shown.

PyTorch's own tests describe each public operator by an ``OpInfo``
(``torch.testing._internal.common_methods_invocations.op_db``: about 700 of them,
``torch.add`` to ``torch.linalg.svd``, each with sample inputs). For each OpInfo that
supports autograd and float64, this script takes its first sample whose tensors are all
real, wraps the call in a ``torch.nn.Module`` whose floating tensors are parameters,
exports it the user's way (``gradcli.bridges.torch.from_module``, the projection loss
over the floating outputs), and validates the written graph (``gradcli validate``:
PyTorch's gradients and node order). One process, a time limit per op (SIGALRM).

Needs torch's testing helpers, which need ``expecttest`` (``pip install expecttest``);
neither is a gradcli dependency.

    python scripts/opinfo_check.py --dtype float64 --results docs/opinfo-results.json
    python scripts/opinfo_check.py --ops '^linalg' --dtype float32
    python scripts/opinfo_check.py --report-only --results docs/opinfo-results.json \\
        --write-docs docs/models.md

Results: ``pass``, ``fail`` (validate found a difference), ``missing-op`` (the export
names ops gradcli has no kernel for nor a decomposition into its ops; the detail lists
them), ``export-error`` (another refusal: its reason), ``torch-error`` (PyTorch itself
cannot run the sample's backward: not a gradcli matter), ``no-sample``, ``timeout``,
``crash``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Timeout()


def _sample(op, torch, dtype):
    """The first sample of ``op`` whose tensors are real and whose floating tensors are of
    ``dtype``, as (tensors, rebuild) where ``rebuild(tensors)`` gives (input, args, kwargs)."""
    from torch.utils import _pytree as pytree

    for s in op.sample_inputs("cpu", dtype, requires_grad=False):
        flat, spec = pytree.tree_flatten((s.input, s.args, s.kwargs))
        ts = [x for x in flat if isinstance(x, torch.Tensor)]
        if not ts or any(t.is_complex() or t.layout != torch.strided for t in ts):
            continue
        if not any(t.is_floating_point() for t in ts):
            continue
        return flat, spec, s.output_process_fn_grad
    return None


def _module(op, flat, spec, torch, process=None):
    """A Module running ``op`` on the sample: floating tensors are parameters. ``process``:
    the sample's ``output_process_fn_grad``, what PyTorch's own gradient tests apply to the
    result first (an SVD's vectors made sign-independent: a loss on their signs is no
    function of the input)."""
    from torch.utils import _pytree as pytree

    class OpModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.slots = []
            for i, x in enumerate(flat):
                if isinstance(x, torch.Tensor) and x.is_floating_point():
                    self.register_parameter(f"p{i}", torch.nn.Parameter(x.detach().clone()))
                    self.slots.append(("param", f"p{i}"))
                elif isinstance(x, torch.Tensor):
                    self.register_buffer(f"b{i}", x.detach().clone())
                    self.slots.append(("buffer", f"b{i}"))
                else:
                    self.slots.append(("value", x))

        def forward(self):
            values = [getattr(self, v) if kind != "value" else v for kind, v in self.slots]
            inp, args, kwargs = pytree.tree_unflatten(values, spec)
            out = op.op(inp, *args, **kwargs)
            return out if process is None else process(out)

    return OpModule()


def _torch_backward_works(module, torch):
    """Whether PyTorch itself runs the sample's backward (some samples are not
    differentiable at every output: the op's own restriction, not gradcli's)."""
    from torch.utils import _pytree as pytree

    try:
        out = module()
    except Exception as exc:  # noqa: BLE001 - PyTorch refuses the sample with grads on
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    leaves = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)
              and o.is_floating_point() and o.requires_grad]
    if not leaves:
        return "no floating output requires grad"
    try:
        sum(o.sum() for o in leaves).backward()
    except Exception as exc:  # noqa: BLE001 - PyTorch's own refusal, reported
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return None


def run_one(op, dtype, timeout):
    import torch

    from gradcli.bridges.torch import ExportError, ExportMismatch, from_module
    from gradcli.validate import Options, validate_file

    name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    t0 = time.time()
    record = {"op": name, "dtype": dtype}
    tdtype = getattr(torch, dtype)
    if not op.supports_autograd or tdtype not in op.supported_backward_dtypes("cpu"):
        return dict(record, status="skipped", detail="no autograd at this dtype in PyTorch")
    signal.alarm(int(timeout))
    try:
        torch.manual_seed(0)
        found = _sample(op, torch, tdtype)
        if found is None:
            return dict(record, status="no-sample", detail="no real floating sample")
        flat, spec, process = found
        module = _module(op, flat, spec, torch, process)
        why = _torch_backward_works(module, torch)
        if why is not None:
            return dict(record, status="torch-error", detail=why)
        try:
            graph = from_module(module, (), dtype=dtype, name=name)
        except ExportMismatch as exc:
            return dict(record, status="export-bug", detail=str(exc)[:600])
        except ExportError as exc:
            text = str(exc)
            ops = sorted(set(re.findall(r"((?:aten|prims)\.[\w]+\.[\w]+) \(", text)))
            status = "missing-op" if "cannot export: gradcli has no op" in text else "export-error"
            return dict(record, status=status, detail=text[:600], ops=ops)
        with tempfile.TemporaryDirectory() as tmp:
            path = graph.write(tmp)
            report = validate_file(str(path), Options())
        failed = [f"{c.name}: {c.message}" for c in report.checks if c.status == "fail"]
        return dict(record, status=report.status if report.invalid is None else "invalid",
                    detail=(report.invalid or "; ".join(failed))[:600],
                    nodes=len(graph.document["expect"]["order"]))
    except _Timeout:
        return dict(record, status="timeout", detail=f"over {timeout} s")
    except Exception as exc:  # noqa: BLE001 - one op's failure must not stop the sweep
        return dict(record, status="crash", detail=f"{type(exc).__name__}: {str(exc)[:400]}")
    finally:
        signal.alarm(0)
        record["seconds"] = round(time.time() - t0, 2)


def write_docs(results, path):
    """The summary and the table of non-passing ops between the markers of ``path``."""
    runs = sorted(results["runs"].values(), key=lambda r: (r["dtype"], r["op"]))
    counts = {}
    for r in runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    missing = {}
    for r in runs:
        for o in r.get("ops", []):
            missing.setdefault(o, []).append(r["op"])
    lines = ["<!-- opinfo table: generated by scripts/opinfo_check.py --write-docs; do not edit -->",
             ""]
    for part in results["parts"]:
        lines.append(f"- `{part['command']}` ({part['date']}; gradcli {part['gradcli']}, "
                     f"torch {part['torch']})")
    lines += ["", f"**{len(runs)} OpInfo samples**: " + ", ".join(
        f"{v} {k}" for k, v in sorted(counts.items())) + ".", ""]
    if missing:
        lines += ["Ops without a kernel nor a decomposition into gradcli's ops, with the "
                  "OpInfos that reach them:", ""]
        for o, users in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"- `{o}`: {', '.join(sorted(set(users)))}")
        lines.append("")
    rest = [r for r in runs if r["status"] not in ("pass", "missing-op", "skipped")]
    if rest:
        lines += ["| op | dtype | result | detail |", "| --- | --- | --- | --- |"]
        for r in rest:
            detail = (r.get("detail") or "").replace(ROOT + os.sep, "")      # the repo's paths
            detail = detail.replace("|", "\\|").replace("\n", " ")[:300]
            lines.append(f"| {r['op']} | {r['dtype']} | {r['status']} | {detail} |")
        lines.append("")
    lines.append("<!-- end of opinfo table -->")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from zoo_check import replace_block

    replace_block(path, "<!-- opinfo table:", "<!-- end of opinfo table -->", "\n".join(lines))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default=None, help="a regular expression the OpInfo names match")
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--timeout", type=float, default=60, help="seconds per op")
    p.add_argument("--results", default=None, help="a JSON file the runs accumulate in")
    p.add_argument("--write-docs", default=None, metavar="docs/models.md")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    results = {"runs": {}, "parts": []}
    if args.results and os.path.exists(args.results):
        with open(args.results) as fh:
            results = json.load(fh)
    if not args.report_only:
        import subprocess
        import warnings

        import torch
        try:
            from torch.testing._internal.common_methods_invocations import op_db
        except ImportError as exc:
            sys.exit(f"opinfo_check: torch's testing helpers did not import ({exc}); "
                     "pip install expecttest (not a gradcli dependency)")
        warnings.filterwarnings("ignore")
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        signal.signal(signal.SIGALRM, _alarm)
        rx = re.compile(args.ops) if args.ops else None
        for op in op_db:
            name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
            if rx and not rx.search(name):
                continue
            r = run_one(op, args.dtype, args.timeout)
            results["runs"][f"{name}:{args.dtype}"] = r
            print(f"{name} {args.dtype}: {r['status']} {(r.get('detail') or '')[:160]}",
                  flush=True)
        results["parts"].append({"command": "python scripts/opinfo_check.py " + " ".join(
            argv if argv is not None else sys.argv[1:]), "date": time.strftime(
            "%Y-%m-%d %H:%M UTC", time.gmtime()), "gradcli": commit, "torch": torch.__version__})
        if args.results:
            with open(args.results, "w") as fh:
                json.dump(results, fh, indent=1, sort_keys=True)
    if args.write_docs:
        write_docs(results, args.write_docs)
    counts = {}
    for r in results["runs"].values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(counts)


if __name__ == "__main__":
    main()
