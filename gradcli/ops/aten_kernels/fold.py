"""``col2im`` (``nn.Fold``) as an array function: columns of sliding blocks added back
into an image, overlaps adding up (one ``bincount`` through ``accumulate_at``)."""
import numpy as np

from ._common import array_module, expand_param
from .index import accumulate_at


def col2im_geometry(shape, output_size, kernel_size, dilation, padding, stride):
    """Checked (channels, blocks (bh, bw), kernel, dilation, padding, stride, padded (Hp, Wp))."""
    out = expand_param(output_size, 2, "output_size")
    k = expand_param(kernel_size, 2, "kernel_size")
    d = expand_param(dilation, 2, "dilation")
    p = expand_param(padding, 2, "padding")
    s = expand_param(stride, 2, "stride")
    if min(k) <= 0 or min(d) <= 0 or min(s) <= 0 or min(p) < 0 or min(out) <= 0:
        raise ValueError(f"col2im: kernel_size {list(k)}, dilation {list(d)}, stride {list(s)} and output_size "
                         f"{list(out)} must be positive and padding {list(p)} non-negative")
    if len(shape) not in (2, 3) or 0 in shape[-2:]:
        raise ValueError(f"col2im: Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and "
                         f"non-zero dimensions for input, but got: {list(shape)}")
    kk = k[0] * k[1]
    if shape[-2] % kk:
        raise ValueError(f"col2im: Expected size of input's dimension 1 to be divisible by the product of "
                         f"kernel_size, but got input.size(1)={shape[-2]} and kernel_size={tuple(k)}.")
    blocks = tuple((out[a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1 for a in range(2))
    if min(blocks) <= 0 or blocks[0] * blocks[1] != shape[-1]:
        raise ValueError(f"col2im: Given output_size={tuple(out)}, kernel_size={tuple(k)}, dilation={tuple(d)}, "
                         f"padding={tuple(p)}, stride={tuple(s)}, expected size of input's dimension 2 to match "
                         f"the calculated number of sliding blocks {blocks[0]} * {blocks[1]} = "
                         f"{blocks[0] * blocks[1]}, but got input.size(2)={shape[-1]}.")
    return shape[-2] // kk, out, blocks, k, d, p, s, (out[0] + 2 * p[0], out[1] + 2 * p[1])


def block_positions(xp, blocks, k, d, s, padded):
    """``(k0*k1, bh*bw)``: the position in the padded ``(Hp, Wp)`` image of each column entry."""
    wp = padded[1]
    ki = (xp.arange(k[0], dtype=np.int64)[:, None] * d[0] * wp + xp.arange(k[1], dtype=np.int64)[None, :] * d[1])
    bi = (xp.arange(blocks[0], dtype=np.int64)[:, None] * s[0] * wp
          + xp.arange(blocks[1], dtype=np.int64)[None, :] * s[1])
    return ki.reshape(-1, 1) + bi.reshape(1, -1)


def col2im(self, output_size, kernel_size, dilation, padding, stride):
    """``aten.col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation,
    int[2] padding, int[2] stride) -> Tensor``: ``(N, C*k0*k1, L)`` columns to ``(N, C, H, W)``.

    >>> import numpy as np
    >>> col2im(np.ones((1, 4, 4)), [3, 3], [2, 2], [1, 1], [0, 0], [1, 1])[0, 0].tolist()
    [[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]
    """
    xp = array_module(self)
    c, out, blocks, k, d, p, s, padded = col2im_geometry(tuple(self.shape), output_size, kernel_size, dilation,
                                                        padding, stride)
    lead = tuple(self.shape[:-2])
    planes = int(np.prod(lead, dtype=np.int64)) * c
    pos = block_positions(xp, blocks, k, d, s, padded).reshape(1, -1)
    size = padded[0] * padded[1]
    img = xp.zeros((planes, size), dtype=self.dtype)
    if planes:
        accumulate_at(xp, img, pos + xp.arange(planes, dtype=np.int64)[:, None] * size, self.reshape(planes, -1))
    img = img.reshape((planes,) + padded)[:, p[0]:p[0] + out[0], p[1]:p[1] + out[1]]
    return xp.ascontiguousarray(img).reshape(lead + (c,) + out)
