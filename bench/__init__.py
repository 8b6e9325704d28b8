"""Benchmarks: `make bench` runs every bench_*.py here and prints their Markdown tables."""
