"""Benchmarks run by ``make bench``: each prints a ratio against a reference measured in the same run."""
