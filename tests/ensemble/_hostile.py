"""Hostile values for the laws of the decision modules: every operation on them raises.

A decision must never call ``==``, ``bool``, ``len`` or ``hash`` on a value it
was handed (a reason, a state, a numpy-like object): these values prove it.
"""

from __future__ import annotations


class Weird:
    """A value every operation on which raises, but identity (numpy-like)."""

    def __eq__(self, other):
        raise RuntimeError("== on Weird")

    def __ne__(self, other):
        raise RuntimeError("!= on Weird")

    def __lt__(self, other):
        raise RuntimeError("< on Weird")

    def __ge__(self, other):
        raise RuntimeError(">= on Weird")

    def __bool__(self):
        raise RuntimeError("bool on Weird")

    def __len__(self):
        raise RuntimeError("len on Weird")

    def __hash__(self):
        raise RuntimeError("hash on Weird")

    def __repr__(self):
        return "Weird()"


class WeirdStr(str):
    """A str subclass whose comparisons raise."""

    def __eq__(self, other):
        raise RuntimeError("== on WeirdStr")

    __hash__ = str.__hash__


class WeirdInt(int):
    """An int subclass whose comparisons raise."""

    def __ge__(self, other):
        raise RuntimeError(">= on WeirdInt")

    def __gt__(self, other):
        raise RuntimeError("> on WeirdInt")

    def __eq__(self, other):
        raise RuntimeError("== on WeirdInt")

    __hash__ = int.__hash__


class WeirdTuple(tuple):
    """A tuple subclass whose len and indexing raise."""

    def __len__(self):
        raise RuntimeError("len on WeirdTuple")

    def __getitem__(self, i):
        raise RuntimeError("[] on WeirdTuple")
