"""How long a chain of operations a lowered program may hold, read off its text.

XLA:CPU's elemental fusion emitters (``xla_cpu_use_fusion_emitters`` off, which
:mod:`datarax.core.compiled_store` asks for: a data step compiles in a third to a half
of the time) build a fused chain of elementwise operations by recursing once per
operation, on a compiler thread whose stack is fixed: a chain of about 6,000 operations
(2,000 steps of ``jnp.sin(x * 1.0001 + i)``; 1,000 of ``lax.erf_inv(jnp.tanh(x))``, each
expanded by XLA into a dozen operations) ended the process with a segmentation fault,
where XLA's default emitters compile it. :func:`program_weight` bounds that chain from
above, cheaply: the program's lines, each ``chlo`` operation (erf, erf_inv, lgamma ...,
which XLA expands) as :data:`CHLO_WEIGHT` lines, and a function's lines again at every
call of it. A program heavier than :data:`ELEMENTAL_MAX_WEIGHT` (an augmentation step of a
random resized crop, flip, brightness and contrast weighs about 1,100) is compiled with
XLA's default emitters.

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

#: the weight above which a program is compiled with XLA's default fusion emitters: a
#: fifth of the lightest crash seen (a chain of ~6,000 ops, ~10,000 lines of ``gelu``)
ELEMENTAL_MAX_WEIGHT = 2000
#: lines one ``chlo`` operation counts for (XLA expands ``erf_inv`` into ~12 operations)
CHLO_WEIGHT = 40

_NAME = r'@("(?:[^"\\]|\\.)*"|[\w.$-]+)'
_FUNCTION = re.compile(r"^\s*func\.func (?:public |private )?" + _NAME, re.MULTILINE)
_CALL = re.compile(r"\bcall " + _NAME)


def program_weight(text: str) -> int:
    """An upper bound on the longest chain of operations in the StableHLO ``text`` of a
    lowered program (``jax.jit(f).lower(...).as_text()``), in lines (see the module)."""
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
