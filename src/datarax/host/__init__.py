"""Host-side pieces that import neither JAX nor Flax.

What a ``decode_processes`` worker loads, so that it never imports JAX and Flax
(``tests/sources/test_decode_imports.py`` checks). :mod:`datarax.core` names them too.
"""
