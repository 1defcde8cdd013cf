"""What the export test of each family of ATen ops checks of a module exported end to end
(``tests/test_export_more_ops*.py``, ``test_export_special.py``, ``test_export_linalg.py``)."""
from __future__ import annotations

from click.testing import CliRunner

from gradcli.cli import main as gradcli_main


def exports_and_validates(graph, tmp_path, ops=(), nodes=(), grads=(), own_kernels=True):
    """``graph`` (``from_module``'s) records each of ``ops``, as a kernel of gradcli's (not a
    composite) with ``own_kernels``; PyTorch's node order has each of ``nodes``; the expected
    gradients name each of ``grads``; and ``gradcli validate`` passes the written graph.
    Returns the graph's document."""
    entries = graph.document["ops"]
    names = [op["op"] for op in entries]
    for name in ops:
        assert name in names
    if own_kernels:
        assert not any("composite" in op for op in entries if op["op"] in ops)
    order = graph.document["expect"]["order"]
    for node in nodes:
        assert node in order
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    assert set(graph.document["expect"]["grads"]) >= set(grads)
    return graph.document
