"""Host-side pieces that import neither JAX nor Flax.

What a ``decode_processes`` worker loads to read, decode and stack records
(:mod:`datarax.sources.decode_processes`): aligned batch arrays (:mod:`.arrays`), the
64-bit and text policy for values (:mod:`.dtypes`), per-record field specs
(:mod:`.specs`), read-ahead threads (:mod:`.threads`) and the check of counts given as
arguments (:mod:`.counts`, which the storage layer uses too), and where the user's caches
go (:mod:`.cache_home`). Their documented homes in
:mod:`datarax.core` name them too; a worker that imported those would load JAX and
Flax (about 1.7 s of CPU each) for nothing. ``tests/sources/test_decode_imports.py``
checks that it does not.
"""
