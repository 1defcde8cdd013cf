"""InputBuffer: where the gradients for one node's inputs accumulate."""
from __future__ import annotations


class InputBuffer(list):
    """One slot per input of a node; contributions to a slot are summed.

    Summation is out of place: a gradient array may be shared by several
    edges (``AddBackward0`` hands the same array to both operands). A slot
    holding such a sum holds an array the engine created and nobody else
    refers to: ``owns(pos)`` says so (Note [Stealing gradients]).
    """

    __slots__ = ("_owned",)

    def add(self, pos, grad, producer_nr=0, index=0, fresh=False):
        """Sum ``grad`` into slot ``pos`` (the producer is only used by the
        deterministic buffer); ``fresh``: the producer created ``grad`` and nothing
        else holds it (Note [Stealing gradients])."""
        if grad is None:
            return
        old = self[pos]
        if old is None:
            self[pos] = grad         # a slot is filled once from None: owned if fresh
            if fresh:
                self._owned = self._bits() | (1 << pos)
        else:
            self[pos] = old + grad
            self._owned = self._bits() | (1 << pos)

    def _bits(self):
        return getattr(self, "_owned", 0)

    def owns(self, pos) -> bool:
        """True when slot ``pos`` holds a sum this buffer created or a fresh gradient."""
        return bool(self._bits() >> pos & 1)

    def disown(self, pos) -> None:
        """Slot ``pos`` was replaced by an array from outside (a hook's result)."""
        bits = self._bits()
        if bits >> pos & 1:
            self._owned = bits & ~(1 << pos)


class FreshGrads(list):
    """A node's outputs, ``fresh`` a bit per output its node created for a leaf's
    accumulator and nothing else holds (Note [Stealing gradients] in ops/core.py)."""

    __slots__ = ("fresh",)


class DeterministicInputBuffer(list):
    """An InputBuffer that sums contributions in a fixed order.

    Contributions may arrive in any order when device threads or
    concurrent backwards race; floating-point addition is not associative,
    so the sum could differ in its last bits from run to run. This buffer
    keeps every contribution with a key (the producing node's sequence
    number and output index) and adds them in key order when the node runs.
    """

    __slots__ = ()

    def add(self, pos, grad, producer_nr=0, index=0, fresh=False):
        # (a single contribution is never owned here: variables() owns only its sums)
        if grad is None:
            return
        entry = ((producer_nr, index), grad)
        slot = self[pos]
        if slot is None:
            self[pos] = [entry]
        else:
            slot.append(entry)

    def variables(self):
        out = InputBuffer()
        for pos, slot in enumerate(self):
            if slot is None:
                out.append(None)
                continue
            slot.sort(key=lambda kv: kv[0])
            total = slot[0][1]
            for _, g in slot[1:]:
                total = total + g
            out.append(total)
            if len(slot) > 1:
                out._owned = out._bits() | (1 << pos)
        return out
