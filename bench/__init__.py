"""Benchmarks: each measures ours and its floor or peer in the same run and prints the ratio."""
