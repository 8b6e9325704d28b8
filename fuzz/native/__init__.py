"""The native data plane's fuzzers: og_fuzz.c, its inputs (state.py) and its build (build.py)."""
