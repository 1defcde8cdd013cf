"""Pure array kernels for PyTorch's ATen ops (no autograd, no registration).

Each function takes and returns arrays of one NumPy-like module (NumPy, or
CuPy: the module is taken from the inputs), keeps float32 as float32, and
follows the ATen schema named in its docstring (same argument names and
order; ``bool[3] output_mask`` results are None where the mask is false).

Results carry no device tag: for gradcli's ``sim:N`` arrays (a NumPy
subclass) a result may come back as a plain ``ndarray``, so the caller tags
it (``gradcli.devices.on_device``). Errors are ``ValueError`` naming the op.
Only ``native_batch_norm`` (training) writes to an input: it updates
``running_mean``/``running_var`` in place, as PyTorch."""
from ._common import array_module
from .attention import (_scaled_dot_product_flash_attention_for_cpu,
                        _scaled_dot_product_flash_attention_for_cpu_backward)
from .conv import convolution, convolution_backward
from .embedding import embedding_dense_backward
from .gelu import gelu, gelu_backward
from .loss import nll_loss_backward, nll_loss_forward
from .norm import native_batch_norm, native_layer_norm
from .pool import (_adaptive_avg_pool2d, _adaptive_avg_pool2d_backward, adaptive_max_pool2d,
                   adaptive_max_pool2d_backward, avg_pool2d, fractional_max_pool2d,
                   fractional_max_pool2d_backward,
                   avg_pool2d_backward, max_pool2d_with_indices,
                   max_pool2d_with_indices_backward)
from .softmax import (_log_softmax, _log_softmax_backward_data, _safe_softmax, _softmax,
                      _softmax_backward_data)

__all__ = [
    "array_module",
    "convolution", "convolution_backward",
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
    "avg_pool2d", "avg_pool2d_backward",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
    "adaptive_max_pool2d", "adaptive_max_pool2d_backward", "fractional_max_pool2d",
    "fractional_max_pool2d_backward",
    "native_batch_norm", "native_layer_norm",
    "embedding_dense_backward",
    "_softmax", "_log_softmax", "_safe_softmax",
    "_softmax_backward_data", "_log_softmax_backward_data",
    "nll_loss_forward", "nll_loss_backward",
    "gelu", "gelu_backward",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
]
