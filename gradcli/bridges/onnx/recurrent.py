"""ONNX's recurrent operators (``LSTM``, ``GRU``, ``RNN``) unrolled into gradcli ops.

Note [Recurrent operators unroll]: PyTorch's CPU ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``
have no fused autograd node: ``aten.lstm`` is a composite that projects the whole input
sequence once (``linear`` over ``S*B`` rows), then runs one cell per time step
(``mm`` with the recurrent weight, ``chunk``, ``sigmoid``/``tanh``, products) and
stacks the hidden states. The import writes the same computation with the ONNX node's
weights: one ``mm`` for the input projection of each direction, one cell per step and
direction, then ``stack``. The graph grows with the sequence length (the import runs
on real inputs, Note [Import runs the model], so the length is known); its gradients
are the module's (tests/test_onnx_recurrent.py compares them with ``torch.nn.LSTM`` and
``torch.nn.GRU`` exported by torch).

ONNX's gate orders are not PyTorch's: LSTM ``i o f c`` (PyTorch ``i f g o``), GRU
``z r h`` (PyTorch ``r z n``); the exporter permutes the weights, the import reads
ONNX's order. ``sequence_lens`` (constant: integers are constants of the replay) masks
each step: a batch entry past its length keeps its state and outputs zeros, which is
ONNX's definition for both directions (the reverse pass of an entry starts at its last
valid step).
"""
from __future__ import annotations

import numpy as np

from .registry import _ints, _reshape, onnx_op, unroll
from .values import Value

# ONNX's activation names (compared case-insensitively, as onnxruntime does)
_ACTIVATIONS = {name.lower(): op for name, op in {
    "Sigmoid": "aten.sigmoid.default", "Tanh": "aten.tanh.default",
    "Relu": "aten.relu.default"}.items()}
_RNN_ATTRS = {"activation_alpha": ("floats", None), "activation_beta": ("floats", None),
              "activations": ("strings", None), "clip": ("float", None),
              "direction": ("string", "forward"), "hidden_size": ("int", None),
              "layout": ("int", 0)}
# gates per cell, default activations per direction
_CELLS = {"LSTM": (4, ["Sigmoid", "Tanh", "Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
          "RNN": (1, ["Tanh"])}


class _Layer:
    """What one recurrent node's mapping needs: sizes, activations, masks, weights."""

    def __init__(self, ctx, ins, attrs):
        kind = ctx.node.op_type
        self.ctx, self.kind = ctx, kind
        gates, default_acts = _CELLS[kind]
        x, w, r = ins[0], ins[1], ins[2]
        get = (lambda i: ins[i] if len(ins) > i else None)
        self.bias, seq_lens, init_h = get(3), get(4), get(5)
        init_c, peep = (get(6), get(7)) if kind == "LSTM" else (None, None)
        direction = attrs["direction"]
        if direction not in ("forward", "reverse", "bidirectional"):
            ctx.fail(f"direction must be forward, reverse or bidirectional, not {direction!r}")
        dirs = 2 if direction == "bidirectional" else 1
        self.reverse = [False, True] if dirs == 2 else [direction == "reverse"]
        layout = attrs["layout"]
        if layout not in (0, 1):
            ctx.fail(f"layout must be 0 or 1, not {layout}")
        self.layout = layout
        if x.rank != 3:
            ctx.fail(f"X must be 3-d, not of shape {list(x.shape)}")
        if layout == 1:             # [batch, seq, input] -> [seq, batch, input]
            x = ctx.emit("aten.permute.default", [x], {"dims": [1, 0, 2]})
        seq, batch, size = x.shape
        if seq == 0:
            ctx.fail("X has an empty sequence")
        hidden = attrs["hidden_size"] or (r.shape[-1] if r.rank == 3 else 0)
        if hidden <= 0:
            ctx.fail("missing attribute 'hidden_size'")
        self.seq, self.batch, self.hidden, self.dirs, self.gates = seq, batch, hidden, dirs, gates
        unroll(ctx, seq * dirs, "the model's Loop and Scan bodies and recurrent layers")
        expect = {"W": (w, (dirs, gates * hidden, size)), "R": (r, (dirs, gates * hidden, hidden)),
                  "B": (self.bias, (dirs, 2 * gates * hidden)),
                  "initial_h": (init_h, (dirs, batch, hidden) if layout == 0 else
                                (batch, dirs, hidden)),
                  "initial_c": (init_c, (dirs, batch, hidden) if layout == 0 else
                                (batch, dirs, hidden)),
                  "P": (peep, (dirs, 3 * hidden))}
        for what, (value, shape) in expect.items():
            if value is not None and value.shape != shape:
                ctx.fail(f"{what} has shape {list(value.shape)}, expected {list(shape)} "
                         f"(hidden_size {hidden}, {dirs} direction(s), input {list(x.shape)})")
        acts = attrs["activations"] or default_acts * dirs
        if len(acts) != len(default_acts) * dirs:
            ctx.fail(f"activations needs {len(default_acts) * dirs} names, has {len(acts)}")
        for a in acts:
            if a.lower() not in _ACTIVATIONS:
                ctx.fail(f"activation {a!r} is not supported (Sigmoid, Tanh, Relu)")
        per = len(default_acts)
        self.acts = [[_ACTIVATIONS[a.lower()] for a in acts[d * per:(d + 1) * per]]
                     for d in range(dirs)]
        if attrs.get("input_forget"):
            ctx.fail("input_forget=1 (coupled input and forget gates) is not supported")
        self.clip = attrs["clip"]
        if self.clip is not None and not self.clip > 0:
            ctx.fail(f"clip must be positive, not {self.clip}")
        self.x, self.w, self.r, self.peep = x, w, r, peep
        self.masks = self._masks(seq_lens)
        self.init_h = self._state(init_h)
        self.init_c = self._state(init_c)

    def _masks(self, seq_lens):
        ctx = self.ctx
        if seq_lens is None:
            return None
        lens = _ints(ctx, seq_lens, "sequence_lens")
        if len(lens) != self.batch or any(not 0 <= n <= self.seq for n in lens):
            ctx.fail(f"sequence_lens {lens} must give one length in [0, {self.seq}] per batch "
                     f"entry ({self.batch})")
        if all(n == self.seq for n in lens):
            return None
        lens = np.asarray(lens).reshape(-1, 1)
        return [Value(np.asarray(t < lens)) for t in range(self.seq)]

    def _state(self, value):
        if value is None:
            return None
        if self.layout == 1:
            value = self.ctx.emit("aten.permute.default", [value], {"dims": [1, 0, 2]})
        return value

    def pick(self, value, d):
        """Direction ``d``'s slice of a per-direction tensor."""
        return self.ctx.emit("aten.select.int", [value], {"dim": 0, "index": d})

    def zeros(self):
        return Value(np.zeros((self.batch, self.hidden), dtype=self.x.dtype))

    def act(self, d, k, value):
        return self.ctx.emit(self.acts[d][k], [value])

    def clamp(self, value):
        if self.clip is None:
            return value
        return self.ctx.emit("aten.clamp.default", [value], dict(min=-self.clip, max=self.clip))

    def projection(self, d, bias_rows=None):
        """``X @ W[d].T (+ bias)`` for every step at once, as [seq, batch, gates*hidden]."""
        ctx = self.ctx
        flat = _reshape(ctx, self.x, [self.seq * self.batch, self.x.shape[2]])
        out = ctx.emit("aten.mm.default", [flat, ctx.emit("aten.t.default",
                                                          [self.pick(self.w, d)])])
        if bias_rows is not None:
            out = ctx.emit("aten.add.Tensor", [out, bias_rows])
        return _reshape(ctx, out, [self.seq, self.batch, self.gates * self.hidden])

    def biases(self, d):
        """(input bias, recurrent bias) of direction ``d``, or (None, None)."""
        if self.bias is None:
            return None, None
        b = self.pick(self.bias, d)
        n = self.gates * self.hidden
        wb, rb = self.ctx.emit("aten.split.Tensor", [b], {"split_size": n, "dim": 0})
        return wb, rb

    def keep(self, t, new, old):
        """Past an entry's length its state stays (sequence_lens)."""
        if self.masks is None:
            return new
        return self.ctx.emit("aten.where.self", [self.masks[t], new, old])

    def output(self, t, h):
        if self.masks is None:
            return h
        return self.ctx.emit("aten.where.self", [self.masks[t], h, self.zeros()])

    def finish(self, ys, finals, n_out):
        """The node's outputs: Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs,
        hidden]) and each final state [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]),
        only those the node names."""
        ctx = self.ctx
        wanted = list(ctx.node.output) + [""] * n_out
        outs = []
        if wanted[0]:
            per_dir = [ctx.emit("aten.stack.default", [y], {"dim": 0}) for y in ys]
            y = ctx.emit("aten.stack.default", [per_dir], {"dim": 1})
            if self.layout == 1:
                y = ctx.emit("aten.permute.default", [y], {"dims": [2, 0, 1, 3]})
            outs.append(y)
        else:
            outs.append(None)
        for k, states in enumerate(finals):
            if not wanted[k + 1]:
                outs.append(None)
                continue
            s = ctx.emit("aten.stack.default", [states], {"dim": 0})
            if self.layout == 1:
                s = ctx.emit("aten.permute.default", [s], {"dims": [1, 0, 2]})
            outs.append(s)
        return outs[:max(n_out, 1)]


def _steps(layer, d):
    return range(layer.seq - 1, -1, -1) if layer.reverse[d] else range(layer.seq)


@onnx_op("LSTM", attrs={**_RNN_ATTRS, "input_forget": ("int", 0)},
         aten="aten.mm.default aten.t.default aten.add.Tensor aten.split.Tensor "
         "aten.sigmoid.default aten.tanh.default aten.mul.Tensor aten.stack.default "
         "aten.select.int aten.where.self aten.clamp.default aten.permute.default",
         doc="unrolled (Note [Recurrent operators unroll]); directions, layouts, initial "
         "states, sequence_lens, peepholes, clip")
def _lstm(ctx, ins, attrs, n):
    layer = _Layer(ctx, ins, attrs)
    H = layer.hidden
    ys, hs, cs = [], [], []
    for d in range(layer.dirs):
        wb, rb = layer.biases(d)
        bias = ctx.emit("aten.add.Tensor", [wb, rb]) if wb is not None else None
        xw = layer.projection(d, bias)
        rt = ctx.emit("aten.t.default", [layer.pick(layer.r, d)])
        h = layer.pick(layer.init_h, d) if layer.init_h is not None else layer.zeros()
        c = layer.pick(layer.init_c, d) if layer.init_c is not None else layer.zeros()
        if layer.peep is not None:
            p_i, p_o, p_f = ctx.emit("aten.split.Tensor", [layer.pick(layer.peep, d)],
                                     {"split_size": H, "dim": 0})
        y = [None] * layer.seq
        for t in _steps(layer, d):
            g = ctx.emit("aten.add.Tensor", [ctx.emit("aten.select.int", [xw], {
                "dim": 0, "index": t}), ctx.emit("aten.mm.default", [h, rt])])
            i, o, f, cc = ctx.emit("aten.split.Tensor", [g], {"split_size": H, "dim": 1})
            if layer.peep is not None:
                i = ctx.emit("aten.add.Tensor", [i, ctx.emit("aten.mul.Tensor", [p_i, c])])
                f = ctx.emit("aten.add.Tensor", [f, ctx.emit("aten.mul.Tensor", [p_f, c])])
            i = layer.act(d, 0, layer.clamp(i))
            f = layer.act(d, 0, layer.clamp(f))
            cc = layer.act(d, 1, layer.clamp(cc))
            c_new = ctx.emit("aten.add.Tensor", [ctx.emit("aten.mul.Tensor", [f, c]),
                                                 ctx.emit("aten.mul.Tensor", [i, cc])])
            if layer.peep is not None:
                o = ctx.emit("aten.add.Tensor", [o, ctx.emit("aten.mul.Tensor", [p_o, c_new])])
            o = layer.act(d, 0, layer.clamp(o))
            h_new = ctx.emit("aten.mul.Tensor", [o, layer.act(d, 2, c_new)])
            h, c = layer.keep(t, h_new, h), layer.keep(t, c_new, c)
            y[t] = layer.output(t, h_new)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    return layer.finish(ys, [hs, cs], n)


@onnx_op("GRU", attrs={**_RNN_ATTRS, "linear_before_reset": ("int", 0)},
         aten="aten.mm.default aten.t.default aten.add.Tensor aten.split.Tensor "
         "aten.sigmoid.default aten.tanh.default aten.mul.Tensor aten.sub.Tensor "
         "aten.stack.default aten.select.int aten.where.self aten.clamp.default "
         "aten.permute.default",
         doc="unrolled (Note [Recurrent operators unroll]); linear_before_reset 0 and 1, "
         "directions, layouts, initial state, sequence_lens, clip")
def _gru(ctx, ins, attrs, n):
    layer = _Layer(ctx, ins, attrs)
    H = layer.hidden
    before = bool(attrs["linear_before_reset"])
    ys, hs = [], []
    for d in range(layer.dirs):
        wb, rb = layer.biases(d)
        xw = layer.projection(d, wb)
        r_d = layer.pick(layer.r, d)
        if before:
            rt = ctx.emit("aten.t.default", [r_d])
        else:   # the candidate's recurrent product reads r * h: keep its rows apart
            r_zr, r_h = ctx.emit("aten.split_with_sizes.default", [r_d],
                                 {"split_sizes": [2 * H, H], "dim": 0})
            rt = ctx.emit("aten.t.default", [r_zr])
            rt_h = ctx.emit("aten.t.default", [r_h])
            if rb is not None:
                rb, rb_h = ctx.emit("aten.split_with_sizes.default", [rb],
                                    {"split_sizes": [2 * H, H], "dim": 0})
        h = layer.pick(layer.init_h, d) if layer.init_h is not None else layer.zeros()
        y = [None] * layer.seq
        for t in _steps(layer, d):
            gx = ctx.emit("aten.select.int", [xw], {"dim": 0, "index": t})
            gh = ctx.emit("aten.mm.default", [h, rt])
            if rb is not None:
                gh = ctx.emit("aten.add.Tensor", [gh, rb])
            z_x, r_x, h_x = ctx.emit("aten.split.Tensor", [gx], {"split_size": H, "dim": 1})
            if before:
                z_h, r_h_, h_h = ctx.emit("aten.split.Tensor", [gh], {"split_size": H, "dim": 1})
            else:
                z_h, r_h_ = ctx.emit("aten.split.Tensor", [gh], {"split_size": H, "dim": 1})
            z = layer.act(d, 0, layer.clamp(ctx.emit("aten.add.Tensor", [z_x, z_h])))
            r = layer.act(d, 0, layer.clamp(ctx.emit("aten.add.Tensor", [r_x, r_h_])))
            if before:
                inner = ctx.emit("aten.mul.Tensor", [r, h_h])
            else:
                inner = ctx.emit("aten.mm.default", [ctx.emit("aten.mul.Tensor", [r, h]), rt_h])
                if rb is not None:
                    inner = ctx.emit("aten.add.Tensor", [inner, rb_h])
            cand = layer.act(d, 1, layer.clamp(ctx.emit("aten.add.Tensor", [h_x, inner])))
            # h' = (1 - z) * cand + z * h, written as PyTorch's cell does: cand + z * (h - cand)
            h_new = ctx.emit("aten.add.Tensor", [cand, ctx.emit("aten.mul.Tensor", [
                z, ctx.emit("aten.sub.Tensor", [h, cand])])])
            h = layer.keep(t, h_new, h)
            y[t] = layer.output(t, h_new)
        ys.append(y)
        hs.append(h)
    return layer.finish(ys, [hs], n)


@onnx_op("RNN", attrs=_RNN_ATTRS,
         aten="aten.mm.default aten.t.default aten.add.Tensor aten.tanh.default "
         "aten.relu.default aten.stack.default aten.select.int aten.where.self "
         "aten.clamp.default aten.permute.default",
         doc="unrolled (Note [Recurrent operators unroll]); Tanh, Relu, Sigmoid; directions, "
         "layouts, initial state, sequence_lens, clip")
def _rnn(ctx, ins, attrs, n):
    layer = _Layer(ctx, ins, attrs)
    ys, hs = [], []
    for d in range(layer.dirs):
        wb, rb = layer.biases(d)
        bias = ctx.emit("aten.add.Tensor", [wb, rb]) if wb is not None else None
        xw = layer.projection(d, bias)
        rt = ctx.emit("aten.t.default", [layer.pick(layer.r, d)])
        h = layer.pick(layer.init_h, d) if layer.init_h is not None else layer.zeros()
        y = [None] * layer.seq
        for t in _steps(layer, d):
            g = ctx.emit("aten.add.Tensor", [ctx.emit("aten.select.int", [xw], {
                "dim": 0, "index": t}), ctx.emit("aten.mm.default", [h, rt])])
            h_new = layer.act(d, 0, layer.clamp(g))
            h = layer.keep(t, h_new, h)
            y[t] = layer.output(t, h_new)
        ys.append(y)
        hs.append(h)
    return layer.finish(ys, [hs], n)
