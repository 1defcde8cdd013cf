"""Which saved values an op's backward reads: what PyTorch's node would have saved.

Note [What a node saved]: a gradcli node keeps all of its op's inputs and its output
(Note [Saved layout]); PyTorch's node saves only what its formula reads, for the
inputs that need a gradient: ``MulBackward0`` saves ``other`` for ``self``'s gradient
and ``self`` for ``other``'s, never its result; ``ExpBackward0`` saves only its result.
Whether an in-place op later invalidates the node (Note [Version counters]) depends on
exactly that set, so it is read off the VJPs themselves: the names each VJP of a valid
edge loads, where a name used only for ``.shape``, ``.dtype``, ``.ndim`` or ``.size``
is metadata (PyTorch keeps sizes, not tensors, for those). A VJP whose code cannot be
read (a builtin, ``*args``) reads everything. The answer is cached per op and per set of
valid edges. An op with several outputs may name the ones its node saves
(``saved_outputs``: the batch and layer norms save their mean and inverse std, never
their normalized output, which ``relu_`` may then change in place, as in PyTorch). A VJP
that reads its outputs only as ``ans[i]`` with a constant ``i`` reads those outputs alone:
topk's reads its indices, so Mixtral's router may divide topk's values in place
(``routing_weights /= routing_weights.sum(...)``), as in PyTorch, whose TopkBackward0
saves ``indices``.
"""
from __future__ import annotations

import dis

_METADATA = frozenset({"shape", "dtype", "ndim", "size"})
_CACHE: dict = {}


def _is_metadata(instr):
    return instr is not None and instr.opname in ("LOAD_ATTR", "LOAD_METHOD") \
        and instr.argval in _METADATA


def _constant_subscript(instrs, k):
    """The int ``i`` where ``instrs[k]`` loads a name that ``instrs[k+1:k+3]`` index as
    ``name[i]``, with the instruction after them; (None, None) otherwise."""
    if k + 2 >= len(instrs):
        return None, None
    const, sub = instrs[k + 1], instrs[k + 2]
    if const.opname not in ("LOAD_CONST", "LOAD_SMALL_INT") or type(const.argval) is not int:
        return None, None
    if sub.opname == "BINARY_SUBSCR" or (sub.opname == "BINARY_OP" and "[" in sub.argrepr):
        return const.argval, instrs[k + 3] if k + 3 < len(instrs) else None
    return None, None


def _value_names(fn):
    """``(names, params, indexed)``: the argument names ``fn`` reads as values, its
    parameters, and ``{name: {i, ...}}`` for a name it reads only as ``name[i]`` with
    constant ``i`` (an op's outputs: Note [What a node saved]); None when it cannot tell."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_flags & 0x04:       # no code, or *args
        return None
    names, indexed = set(), {}
    instrs = list(dis.get_instructions(code))
    for k, ins in enumerate(instrs):
        if ins.opname in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLOSURE"):
            nxt = instrs[k + 1] if k + 1 < len(instrs) else None
            if _is_metadata(nxt):
                continue
            i, after = _constant_subscript(instrs, k)
            if i is not None:
                if not _is_metadata(after):     # ans[0].shape: sizes, not the tensor
                    indexed.setdefault(ins.argval, set()).add(i)
                continue
            names.add(ins.argval)
    # a nested function (a comprehension, a closure) reads its free variables
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names.update(const.co_freevars)
            names.update(const.co_varnames[:const.co_argcount])
    for name in names:                  # read whole somewhere: every part of it
        indexed.pop(name, None)
    return names | set(indexed), code.co_varnames[:code.co_argcount], indexed


def saved_uses(op, valid):
    """``(uses_output, input indices read)`` for ``op`` with valid edges ``valid``;
    ``uses_output`` is True (every output), False, or the frozenset of the outputs read
    (a VJP that reads ``ans[1]`` alone: topk's, sort's and max.dim's indices)."""
    key = (op, valid)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    n = len(valid)
    uses_out, used = False, set()
    joint = getattr(op, "joint_vjp", None)
    if joint is not None and len(getattr(op, "differentiable_inputs", ())) == n:
        # an ATen op with one formula for all its inputs (group norm): read the formula
        # itself, fn(g, ans, *inputs, ...), not the wrapper that hands it everything
        return _scan(op, [joint], n, key, uses_out, used, aten=True)
    schema_vjps = getattr(op, "schema_vjps", None)
    if (schema_vjps is not None and getattr(op, "joint_vjp", 1) is None
            and len(schema_vjps) == n and all(d for d in op.differentiable_inputs)):
        # an ATen op: its per-input formulas, one per edge (no Tensor[] input here)
        fns = [schema_vjps[i] for i in range(n) if valid[i] and schema_vjps[i] is not None]
        return _scan(op, fns, n, key, uses_out, used, aten=True)
    fns = ([op.vjp_all] if op.vjp_all is not None
           else [op.vjps[i] for i in range(n) if valid[i]] if op.vjps is not None else [])
    return _scan(op, fns, n, key, uses_out, used)


def saved_uses_by_schema(op, n):
    """``saved_uses`` for an ATen op whose node has fewer edges than saved inputs (its
    non-differentiable inputs, such as ``index``'s indices, have none): each schema
    formula's reads, mapped onto the ``n`` flattened inputs (a ``Tensor[]`` input
    spans several). Every formula counts, needed or not: a superset of PyTorch's saved
    set, never less. None when the op has no per-input formulas to read."""
    schema_vjps = getattr(op, "schema_vjps", None)
    if schema_vjps is None or getattr(op, "joint_vjp", 1) is not None:
        return None
    m = len(schema_vjps)
    pos = getattr(op, "_list_pos", None)
    width = 1 if pos is None else n - (m - 1)
    if width < 0 or (pos is None and m != n):
        return None
    uses_out, used = _scan(op, [f for f in schema_vjps if f is not None], m,
                           (op, "schema", m), False, set(), aten=True)
    flat = set()
    for j in used:
        start = j if pos is None or j <= pos else j + width - 1
        flat.update(range(start, start + (width if j == pos else 1)))
    return uses_out, frozenset(flat)


def _scan(op, fns, n, key, uses_out, used, aten=False):
    outs = set()                # the outputs read as ans[i] alone
    for fn in fns:
        found = _value_names(fn)
        if found is None:
            uses_out, used = True, set(range(n))
            break
        names, params, indexed = found
        if len(params) > 1 and params[1] in names:
            if params[1] in indexed:
                outs |= indexed[params[1]]
            else:
                uses_out = True
        if op.vjp_all is not None and not aten:   # fn(g, ans, inputs, needed, args)
            if len(params) > 2 and params[2] in names:
                used = set(range(n))
            continue
        for k, p in enumerate(params[2:2 + n]):
            if p in names:
                used.add(k)
        if len(params) < 2 + n:             # fewer named params than inputs: be safe
            used = set(range(n))
    if uses_out is not True and outs:
        uses_out = frozenset(outs)
    result = (uses_out, frozenset(used))
    if len(_CACHE) < 4096:
        _CACHE[key] = result
    return result
