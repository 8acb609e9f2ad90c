"""Benchmarks: this engine and its peers measured side by side (never part of the test suite).

Run everything with ``python -m benchmarks.run`` (writes ``docs/performance.md``); each module
also runs alone, e.g. ``python -m benchmarks.engine``. The peers come from
``benchmarks/requirements.txt``, not from the project's runtime dependencies.
"""
