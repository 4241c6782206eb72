"""How long a chain of operations a lowered program may hold, read off its text.

XLA:CPU's elemental fusion emitters (which :mod:`datarax.core.compiled_store` asks for)
recurse once per fused operation on a fixed-stack thread, so a long enough chain crashes
the process (docs/reliability.md, "Compiled steps on disk"). :func:`program_weight`
bounds the chain from above: the program's lines, each ``chlo`` operation as
:data:`CHLO_WEIGHT`, a function's lines again at every call. A program heavier than
:data:`ELEMENTAL_MAX_WEIGHT` is compiled with XLA's default emitters.

Example:
    >>> text = '''func.func public @main(%arg0: tensor<f32>) -> tensor<f32> {
    ...   %0 = call @f(%arg0) : (tensor<f32>) -> tensor<f32>
    ...   %1 = call @f(%0) : (tensor<f32>) -> tensor<f32>
    ...   return %1 : tensor<f32>
    ... }
    ... func.func private @f(%arg0: tensor<f32>) -> tensor<f32> {
    ...   %0 = chlo.erf_inv %arg0 : tensor<f32> -> tensor<f32>
    ...   return %0 : tensor<f32>
    ... }
    ... '''
    >>> program_weight(text)  # main's 5 lines, then f's 4 and its chlo op, twice
    93
"""

from __future__ import annotations

import re

__all__ = ["CHLO_WEIGHT", "ELEMENTAL_MAX_WEIGHT", "program_weight"]

#: the weight above which XLA's default emitters are used: a fifth of the lightest crash seen
ELEMENTAL_MAX_WEIGHT = 2000
#: lines one ``chlo`` operation counts for (XLA expands ``erf_inv`` into ~12 operations)
CHLO_WEIGHT = 40

_NAME = r'@("(?:[^"\\]|\\.)*"|[\w.$-]+)'
_FUNCTION = re.compile(r"^\s*func\.func (?:public |private )?" + _NAME, re.MULTILINE)
_CALL = re.compile(r"\bcall " + _NAME)


def program_weight(text: str) -> int:
    """An upper bound on the longest chain of operations in a lowered program's StableHLO
    ``text``, in lines (see the module)."""
    starts = [(match.start(), match.group(1)) for match in _FUNCTION.finditer(text)]
    if not starts:
        return text.count("\n") + CHLO_WEIGHT * text.count("chlo.")
    ends = [start for start, _ in starts[1:]] + [len(text)]
    bodies = {name: text[start:end] for (start, name), end in zip(starts, ends)}
    weights: dict[str, int] = {}

    def weight(name: str, calling: frozenset[str]) -> int:
        if name not in weights:
            body = bodies[name]
            total = body.count("\n") + CHLO_WEIGHT * body.count("chlo.")
            for callee in _CALL.findall(body):
                if callee in bodies and callee not in calling:
                    total += weight(callee, calling | {name})
            weights[name] = total
        return weights[name]

    main = next((name for _, name in starts if name.strip('"') == "main"), None)
    if main is None:  # no entry function: every line once
        return text.count("\n") + CHLO_WEIGHT * text.count("chlo.")
    return text[: starts[0][0]].count("\n") + weight(main, frozenset())
