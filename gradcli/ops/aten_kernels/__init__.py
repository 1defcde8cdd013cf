"""Pure array kernels for PyTorch's ATen ops (no autograd, no registration).

Each function takes and returns arrays of one NumPy-like module (NumPy, or
CuPy: the module is taken from the inputs), keeps float32 as float32, and
follows the ATen schema named in its docstring (argument names as there)."""
from ._common import array_module
from .conv import convolution, convolution_backward

__all__ = ["array_module", "convolution", "convolution_backward"]
