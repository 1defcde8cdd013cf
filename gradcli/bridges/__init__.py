"""Bridges between gradcli's graph files and other frameworks' formats, one package each.

- ``gradcli.bridges.torch``: PyTorch modules -> graph files (``gradcli export``), and
  graph files -> PyTorch (``validate --against torch``). Needs the ``torch`` extra.

Each bridge imports its framework on first use, so ``gradcli --help`` and
``gradcli run`` never load it.
"""
