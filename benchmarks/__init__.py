"""Side-by-side throughput of datarax against its peers and a plain-numpy floor.

Run ``python -m benchmarks.run`` (or ``make bench``); see ``docs/benchmarks.md``.
"""
