# OpenGate. `make help` lists the targets; `make run` and `make test` are all a new user needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV      ?= .venv
PY        := $(VENV)/bin/python
P4_PREFIX ?= /opt/p4
export PATH := $(abspath $(VENV))/bin:$(P4_PREFIX)/bin:$(PATH)
# TARGET=soft|bmv2 selects the data plane (default: bmv2 if simple_switch_grpc is found, else soft).
export TARGET

P4C        ?= p4c-bm2-ss
P4_SOURCES := $(shell find p4src -name '*.p4' -not -path 'p4src/build/*')
P4_BUILD   := p4src/build
P4_FLAGS   := --std p4-16 -I p4src

.PHONY: help setup run test p4 constants ptf e2e bench lint clean check-p4c unit tofino docs fuzz

help: ## list the targets
	@echo "OpenGate make targets (TARGET=soft|bmv2 picks the data plane; default: bmv2 if installed):"
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z0-9-]+):.*## (.*)/  \1\t\2/' | expand -t 14

setup: ## install what is missing (Debian packages, the locked Python virtualenv); report p4c/BMv2
	@P4_PREFIX=$(P4_PREFIX) VENV=$(VENV) scripts/setup.sh

run: setup ## bring up the gateway topology in Mininet and open its CLI (TOPOLOGY=topo/FILE.yaml, BUILD=compact)
	$(PY) -m topo run $(if $(TOPOLOGY),--topology $(TOPOLOGY)) $(if $(BUILD),--build $(BUILD))

test: setup lint ## lint, type-check and run the whole suite (unit, PTF, end-to-end)
	$(PY) -m pytest tests

unit: setup ## the suite without the PTF and end-to-end parts
	$(PY) -m pytest tests -m "not e2e and not ptf"

lint: setup ## ruff (lint and format check) and mypy --strict
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

check-p4c:
	@command -v $(P4C) >/dev/null || { echo "make p4: $(P4C) (p4c's BMv2 backend) is not installed; install p4c (docs/howto/bmv2.md) or use the committed p4src/build/"; exit 1; }

p4: check-p4c ## compile p4src/ with p4c into p4src/build/ (BMv2 JSON + P4Info), every build
	@mkdir -p $(P4_BUILD)/naive_acl $(P4_BUILD)/compact
	$(P4C) $(P4_FLAGS) -o $(P4_BUILD)/opengate.json \
	    --p4runtime-files $(P4_BUILD)/opengate.p4info.txtpb p4src/opengate.p4
	$(P4C) $(P4_FLAGS) -DWITH_NAIVE_ACL -o $(P4_BUILD)/naive_acl/opengate.json \
	    --p4runtime-files $(P4_BUILD)/naive_acl/opengate.p4info.txtpb p4src/opengate.p4
	$(P4C) $(P4_FLAGS) -DWITH_COMPACT_TABLES -o $(P4_BUILD)/compact/opengate.json \
	    --p4runtime-files $(P4_BUILD)/compact/opengate.p4info.txtpb p4src/opengate.p4
	$(MAKE) constants

constants: setup ## generate opengate/p4constants.py from the committed P4Info
	$(PY) -m opengate.gen_constants $(P4_BUILD)/opengate.p4info.txtpb \
	    $(P4_BUILD)/naive_acl/opengate.p4info.txtpb p4src/include/defines.p4 \
	    -o opengate/p4constants.py

tofino: setup ## compile p4src/ for Tofino/Tofino 2 with bf-p4c; summaries into p4src/build/tofino/
	$(PY) -m opengate.tofino $(if $(ONLY),$(foreach b,$(ONLY),--only $(b)))

ptf: setup ## the PTF packet tests against TARGET (veths set up and torn down by the run)
	$(PY) ptf/run_ptf.py

e2e: setup ## the end-to-end tests across the Mininet topology
	$(PY) -m pytest tests -m e2e

fuzz: setup ## coverage-guided fuzzing, FUZZ_SECONDS (60) per target (FUZZ_TARGETS for some); findings in run/fuzz/findings/
	$(PY) -m fuzz --seconds $(or $(FUZZ_SECONDS),60) $(FUZZ_TARGETS)

bench: setup ## the benchmarks (BENCH="hsm softswitch" for some, ARGS for one); writes bench/results/ and docs/benchmarks.md
	$(PY) -m bench $(BENCH) $(if $(ARGS),-- $(ARGS))

docs: setup ## regenerate docs/reference/ and docs/benchmarks.md from the code, build the site in run/site
	$(PY) -m docgen
	$(PY) -m bench.render
	$(VENV)/bin/mkdocs build --strict --site-dir run/site

clean: ## remove caches and run-time files (not the virtualenv: `rm -rf .venv`)
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis run
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
