"""PyTorch's ATen ops (``aten.NAME.OVERLOAD``), one table entry per overload.

``registry`` turns entries into ops registered in ``OPS``; the entries live in
``pointwise``, ``shape``, ``nn``, ``conv_pool`` and ``norm_attention``, whose shape rules
``meta`` holds (what the loader infers without computing); the core opset's families,
which carry their own: ``pointwise_core`` (elementwise math), ``logical`` (comparisons,
bitwise, logical), ``reduce_core`` (reductions, sort, topk), ``factory`` (factories and
tensor queries), ``sampling`` (random ops), ``group_norm``, ``index``, ``pad``,
``upsample``, ``layout``, ...; and ``inplace``. ``core_opset`` lists PyTorch's core opset
(``gradcli ops --missing``).
"""
from . import conv_pool, factory, logical, nn, norm_attention, pointwise, pointwise_core, reduce_core, sampling, shape  # noqa: F401 - registers the entries
from . import cdist, fold, group_norm, index, layout, pad, pool3d, upsample  # noqa: F401 - core ATen entries, each with its shape rule
from . import ctc, embedding_bag, fft, grid_sample, pdist  # noqa: F401 - core ATen entries, each with its shape rule
from . import reduce_more, reduce_select, trilinear  # noqa: F401 - non-core ops user modules record (nn.Bilinear, medians, scans, kthvalue, mode)
from . import special  # noqa: F401 - non-core special and pointwise functions (lgamma, digamma, Bessel, fmax, ...)
from . import vector_norm  # noqa: F401 - non-core, a kernel for PyTorch's formula at 0 (Note [A norm's gradient at zero])
from . import linalg  # noqa: F401 - non-core torch.linalg (det, slogdet, inv, solve, cholesky, qr, svd, eigh): no decomposition
from . import linalg_solvers  # noqa: F401 - solve_triangular, triangular_solve, cholesky_solve, cholesky_inverse
from . import linalg_lu  # noqa: F401 - linalg_lu_factor_ex, linalg_lu, lu_unpack, linalg_lu_solve
from . import linalg_functions  # noqa: F401 - linalg_pinv, linalg_matrix_exp
from . import meta  # noqa: F401 - their shape rules (after the entries)
from . import conv_backward, norm_legit  # noqa: F401 - core entries reusing the rules above
from . import inplace  # noqa: F401 - the in-place overloads (after the out-of-place ones)
from .registry import ATEN_OPS, AtenOp

__all__ = ["ATEN_OPS", "AtenOp"]
