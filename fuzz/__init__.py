"""Coverage-guided fuzzing: libFuzzer harnesses of the native data plane (fuzz/native/), atheris
harnesses of the Python parsers (fuzz/py/), their seed corpora (fuzz/corpus/<target>/) and the
runner (`python -m fuzz`, `make fuzz`). docs/howto/tests.md says how to use them."""
