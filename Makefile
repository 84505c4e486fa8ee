# slurm-synergy: the user's entry points. Every target sets itself up first, so
# `make demo` and `make test` work on a fresh Debian machine.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
SYNERGY := $(VENV)/bin/synergy
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# The local cluster: Slurm's daemons and client, MariaDB for accounting, munge for auth;
# lua5.1 runs the job_submit shim's unit tests outside slurmctld; chromium renders the
# report page in its test.
APT_PACKAGES := munge slurmctld slurmd slurmdbd slurm-client mariadb-server \
                slurm-wlm-mysql-plugin procps util-linux lua5.1 lua-posix chromium
CSV ?= jobs_csv/example.csv
ARGS ?=

.PHONY: setup apt-packages cluster cluster-stop cluster-status demo submit report test lint bench

setup: apt-packages $(VENV)/.installed

# Idempotent and quick: installs only what dpkg says is missing.
apt-packages:
	@missing=$$(for p in $(APT_PACKAGES); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi

$(VENV)/.installed: pyproject.toml setup.py
	@python3 -m venv --help >/dev/null 2>&1 || { \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q python3-venv; }
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev,train]'
	touch $@

cluster: setup
	$(SYNERGY) cluster up

cluster-stop: setup
	$(SYNERGY) cluster down

cluster-status: setup
	$(SYNERGY) cluster status

demo: setup
	$(SYNERGY) demo

submit: setup
	$(SYNERGY) submit $(CSV) $(ARGS)

report: setup
	$(SYNERGY) report --out runs/report $(ARGS)

test: setup lint
	$(PY) -m pytest -q tests

lint: setup
	$(PY) -m ruff check slurm_synergy profiler tests bench
	$(PY) -m mypy

bench: setup
	$(PY) bench/bench_submit.py
	$(PY) bench/bench_shim.py
	$(PY) bench/bench_store.py
	$(PY) bench/bench_loaders.py
	$(PY) bench/bench_profiles.py
	$(PY) bench/bench_inrun.py
	$(PY) bench/bench_styles.py
	$(PY) bench/bench_memory.py
	$(PY) bench/bench_gpumem.py
	$(PY) bench/bench_sampler.py
	$(PY) bench/bench_probe.py
	$(PY) bench/bench_report.py
	$(PY) bench/bench_simulate.py
	$(PY) bench/bench_hetero.py
