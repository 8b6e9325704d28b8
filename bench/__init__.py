"""Benchmarks: `make bench` runs every bench_*.py here, records each result in bench/results/
and renders docs/benchmarks.md from them."""
