# slurm-synergy: the user's entry points. Every target sets itself up first, so
# `make demo` and `make test` work on a fresh Debian machine.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
SYNERGY := $(VENV)/bin/synergy
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# The local cluster: Slurm's daemons and client, MariaDB for accounting, munge for auth;
# lua5.1 runs the job_submit shim's unit tests outside slurmctld; chromium renders the
# report page in its test; libslurm-dev and gcc build the small libslurm client that
# submits what sbatch would not (tests/clients/); debootstrap builds the root of another
# Debian release whose Slurm the local cluster can run (SLURM_VERSION=24.11, 26.05).
APT_PACKAGES := munge slurmctld slurmd slurmdbd slurm-client mariadb-server debootstrap \
                slurm-wlm-mysql-plugin procps util-linux lua5.1 lua-posix chromium \
                libslurm-dev gcc libc6-dev \
                python3-venv
# The venv is made from Debian's interpreter, which every user can run: the local
# cluster's ordinary users run `.venv/bin/synergy` and their jobs `.venv/bin/python`
# (a python3 under root's home, as pyenv's, is root's alone).
BASE_PYTHON := /usr/bin/python3
CSV ?= jobs_csv/example.csv
# The Slurm release the local cluster runs: unset, the host's (22.05); 24.11 or 26.05 run
# that Debian release's daemons from a root built once (docs/install.md).
export SLURM_VERSION
ARGS ?=

.PHONY: setup apt-packages venv-base cluster cluster-stop cluster-status demo submit report test lint bench

setup: apt-packages venv-base $(VENV)/.installed

# A venv made from another interpreter is made again.
venv-base:
	@if [ -e $(PY) ] && [ "$$(readlink -f $(PY))" != "$$(readlink -f $(BASE_PYTHON))" ]; then \
	  echo "$(VENV) runs $$(readlink -f $(PY)), not $(BASE_PYTHON): making it again"; \
	  rm -f $(VENV)/.installed; fi

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
	$(BASE_PYTHON) -m venv --clear $(VENV)
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

# The checkout's own targets use the local cluster where SLURM_CONF names no other; the
# product's commands alone never fall back to it (a site's cron must not reach the demo's).
LOCAL_CONF = $(shell $(PY) -c 'from slurm_synergy.paths import local_slurm_conf; print(local_slurm_conf())')
submit report: export SLURM_CONF ?= $(LOCAL_CONF)

submit: setup
	$(SYNERGY) submit $(CSV) $(ARGS)

report: setup
	$(SYNERGY) report --out runs/report $(ARGS)

# The integration tests share one cluster, one test at a time, and leave about one of
# the machine's cores idle (they wait on Slurm and on their jobs): the lint and then the
# unit tests run beside them at the lowest CPU priority, the tests spread over worker
# processes (none needs the cluster), so they take only the idle core. Their output
# follows the integration tests', with the slowest integration tests' times; any part
# failing fails the target.
UNIT_WORKERS ?= 3
# Then the release lanes: the flows whose Slurm side differs between releases (the shim's
# fields, in-place updates, the node hooks, QOS limits, the cluster itself) again on each
# later release's own daemons, one cluster after the other (docs/install.md); and the
# time limits, whose backfill differs from 23.11 (time_min_as_soft_limit).
RELEASE_LANES ?= 24.11 26.05
LANE_TESTS := $(addprefix tests/integration/,test_plugin.py test_node_hooks.py \
              test_limits.py test_cluster.py test_tune.py test_slurm_output.py \
              test_time_limits.py)
test: setup
	@beside_log=$$(mktemp); \
	( nice -n 19 $(MAKE) --no-print-directory lint; lint=$$?; \
	  nice -n 19 $(PY) -m pytest -q -n $(UNIT_WORKERS) tests/unit; \
	  exit $$(( lint != 0 || $$? != 0 )) ) > $$beside_log 2>&1 & \
	beside=$$!; \
	$(PY) -m pytest -q --durations=25 tests/integration; integration=$$?; \
	wait $$beside; beside_rc=$$?; \
	echo "== lint and tests/unit (beside the integration tests): exit $$beside_rc"; \
	cat $$beside_log; rm -f $$beside_log; \
	lanes=0; for v in $(RELEASE_LANES); do \
	  echo "== Slurm $$v lane: $(LANE_TESTS)"; \
	  SLURM_VERSION=$$v $(PY) -m pytest -q $(LANE_TESTS) || lanes=1; \
	done; \
	exit $$(( integration != 0 || beside_rc != 0 || lanes != 0 ))

lint: setup
	$(PY) -m ruff check slurm_synergy profiler tests bench
	$(PY) -m mypy

bench: setup
	@# Run from a clone of its own (docs/benchmarks.md): the local cluster goes down at the
	@# end, failed or not, so deleting the clone leaves no daemon of it running.
	@trap '$(SYNERGY) cluster down' EXIT; set -ex; \
	$(PY) bench/bench_submit.py; \
	$(PY) bench/bench_shim.py; \
	$(PY) bench/bench_store.py; \
	$(PY) bench/bench_loaders.py; \
	$(PY) bench/bench_profiles.py; \
	$(PY) bench/bench_inrun.py; \
	$(PY) bench/bench_peaks.py; \
	$(PY) bench/bench_styles.py; \
	$(PY) bench/bench_task.py; \
	$(PY) bench/bench_frameworks.py; \
	$(PY) bench/bench_memory.py; \
	$(PY) bench/bench_gpumem.py; \
	$(PY) bench/bench_sampler.py; \
	$(PY) bench/bench_probe.py; \
	$(PY) bench/bench_report.py; \
	$(PY) bench/bench_report_shapes.py; \
	$(PY) bench/bench_simulate.py; \
	$(PY) bench/bench_hetero.py; \
	$(PY) bench/bench_cluster.py --rounds 3; \
	$(PY) bench/bench_backfill.py --rounds 3; \
	$(PY) bench/bench_prediction.py; \
	$(PY) bench/bench_timelimits.py; \
	$(PY) bench/bench_site.py --quick; \
	$(PY) bench/bench_attack.py; \
	$(PY) bench/bench_timer_calls.py; \
	$(PY) bench/bench_timer_stopped.py; \
	$(PY) bench/bench_rescue.py; \
	$(PY) bench/bench_pace.py
