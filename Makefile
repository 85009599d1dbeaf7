# Two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
UV := $(VENV)/bin/uv
# uv at UV_VERSION in $(VENV) (a new UV_VERSION installs it again)
UV_MARK = $(VENV)/.uv-$(UV_VERSION)
# The CPU build of PyTorch on this machine's disk; an unpinned torch pulls a multi-GB CUDA build.
TORCH_VERSION ?= 2.13.0
UV_VERSION ?= 0.13.9
CONSTRAINTS := constraints/constraints-3.11.txt
SPARK_CDS := $(VENV)/spark-cds.jsa
export DLTRAIN_HOME ?= $(CURDIR)/.dltrain
DEMO_START ?= 2026-11-24
DEMO_DAYS ?= 3
PYTEST_ARGS ?=
# make coverage: the same runs under coverage.py ([tool.coverage] in pyproject.toml: the package's lines
# and branches, subprocesses included: xdist workers, Airflow tasks, Spark's Python workers, fake-AWS jobs)
COVERAGE ?=
PYTEST = $(if $(COVERAGE),$(1) -m coverage run -m pytest,$(1) -m pytest)
# Every test but the Spark standalone cluster's runs on two pytest workers, whole files each (module
# fixtures are built once), in collection order: the slow files (whole DAG runs, services) first,
# the quick ones filling in behind them. Most tests wait on processes they start (JVMs, moto, jobs,
# Airflow), so two workers share 2 cores well. tests/cluster (a master and two one-core workers)
# then runs alone. TEST_WORKERS=0: everything in one process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
# pytest exits 5 when a selection holds no test (e.g. PYTEST_ARGS=tests/lake has no slow test)
NO_TESTS_OK = || [ $$? = 5 ]
# Horovod 0.28.1 built against the venv's torch (C++17 patch) with Gloo and MPI (Open MPI from
# Debian: the MPI launch of SageMaker jobs runs under a real mpirun), cached as a wheel outside the clone.
HOROVOD_VERSION ?= 0.28.1
HOROVOD_MARK := $(VENV)/.horovod-$(HOROVOD_VERSION)-mpi
# Spark 3.5 (AWS Glue 5, EMR 7) next to the main venv's Spark 4: an overlay venv holding only pyspark
# 3.5 and its py4j, which sees everything else (torch, deltalake, Airflow...) in $(VENV) through a
# .pth file. `make test SPARK35_TESTS=` skips the Spark 3.5 run.
SPARK35_VERSION ?= 3.5.6
SPARK35_PY4J ?= 0.10.9.7
SPARK35_VENV ?= .venv-spark35
SPARK35_PY := $(SPARK35_VENV)/bin/python
SPARK35_MARK := $(SPARK35_VENV)/.installed-$(SPARK35_VERSION)
# What touches Spark's Python API: the writer (DataFrame -> Arrow -> delta-rs), transforms and
# quarantine, Delta and raw S3 inputs read in workers, the scoring UDF (pandas and Arrow) and
# TorchDistributor. Tests of delta-rs alone, of checks made before Spark starts and of the operators
# (the same stage code) run on Spark 4 only.
SPARK35_TESTS ?= tests/etl/test_writer.py tests/etl/test_delta_inputs.py tests/etl/test_digits_bad_input.py \
	tests/etl/test_quarantine_pairing.py tests/inference/test_inference_scoring.py \
	tests/inference/test_inference_delta_semantics.py tests/inference/test_inference_s3_connections.py \
	tests/inference/test_non_finite_scores.py tests/inference/test_inference_worker.py \
	tests/training/test_training_ddp.py

.PHONY: uv install demo test coverage test-durations test-stack test-quick test-compat test-compat-smoke test-spark35 spark35 horovod mpi chromium docker dockerd images test-images bench lint clean constraints dist docs

install: $(VENV)/.installed $(SPARK_CDS)

# torch with pip first: pip takes the CPU build this machine keeps on disk (uv does not look there, and an
# unpinned torch is a multi-GB CUDA build). The rest with uv, pinned by the same constraints file: it
# downloads, unpacks and compiles the bytecode in parallel, about 2x faster than pip here. (Compiled up
# front as pip does: with PYTHONDONTWRITEBYTECODE set, every process would compile Airflow again.)
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) $(UV_MARK)
	$(PIP) install -q torch==$(TORCH_VERSION)
	$(UV) pip install -q --compile-bytecode --python $(PY) -c $(CONSTRAINTS) -e '.[all,dev]'
	touch $@

# The class-data-sharing archive of a small Spark session, per venv: the demo's and the tests' Spark
# JVMs map their classes from it (airflow_provider_dltrain/demo/spark_cds.py; about 40 s once).
$(SPARK_CDS): $(VENV)/.installed airflow_provider_dltrain/demo/spark_cds.py
	$(PY) -m airflow_provider_dltrain.demo.spark_cds $@

demo: install
	$(VENV)/bin/dltrain demo run --start $(DEMO_START) --days $(DEMO_DAYS)

SPARK35_LOG := $(DLTRAIN_HOME)/test-spark35.log

# The Spark 3.5 run (one pytest process, its output printed at the end) runs beside the 2-worker run at
# nice 10: the workers leave about a seventh of the 2 cores idle (service start-ups, the first and last
# minutes), which it takes. Its files' time is guarded in the 2-worker run (niced, they take longer:
# no slow-file limit here). The cluster tests (a master, two one-core workers, drivers) run after the
# 2-worker run, alone. Any of the three failing fails the target.
# Horovod (found as a cached wheel, else compiled: about 10 min cold) and then the container tier's images
# (found by content hash when unchanged, else built: about 4 min cold) are built in the background while
# the workers run the other tests; the tests that train through Horovod come after the rest and wait for
# it (tests/support/horovod.py), the container tests come last and wait for the images
# (docker/images.py holds a lock while it builds). A Docker daemon this target started
# is stopped at the end.
test: install $(SPARK_CDS) chromium dockerd $(if $(strip $(SPARK35_TESTS)),spark35)
	@mkdir -p $(DLTRAIN_HOME); rm -f $(HOROVOD_MARK).failed $(DLTRAIN_HOME)/test-durations.json; \
	( { $(MAKE) -s horovod && $(PYTHON) docker/images.py build $(TEST_IMAGES); } > $(IMAGES_LOG) 2>&1 || { \
		touch $(HOROVOD_MARK).failed; echo "the Horovod or image build failed: see $(IMAGES_LOG)" >&2; } ) & images=$$!; \
	$(if $(strip $(SPARK35_TESTS)),( DLTRAIN_HOME=$(DLTRAIN_HOME)/spark35-home DLTRAIN_SLOW_FILE_S=inf nice -n 10 $(call PYTEST,$(SPARK35_PY)) --basetemp=$(DLTRAIN_HOME)/pytest-spark35 $(SPARK35_TESTS) > $(SPARK35_LOG) 2>&1 ) & spark35=$$!;,spark35=;) \
	DLTRAIN_HOROVOD_MARK=$(CURDIR)/$(HOROVOD_MARK) DLTRAIN_HOROVOD_LOG=$(IMAGES_LOG) \
	$(call PYTEST,$(PY)) $(XDIST) -m "not cluster and not stack" $(PYTEST_ARGS) $(NO_TESTS_OK); main=$$?; \
	wait $$images; cluster=0; if [ $$main = 0 ]; then \
		echo "$(PY) -m pytest -p no:xdist -m cluster $(PYTEST_ARGS)"; \
		$(call PYTEST,$(PY)) -p no:xdist -m cluster $(PYTEST_ARGS); cluster=$$?; [ $$cluster = 5 ] && cluster=0; \
	fi; \
	s35=0; if [ -n "$$spark35" ]; then wait $$spark35; s35=$$?; \
		echo "--- $(SPARK35_PY) -m pytest $(SPARK35_TESTS) (beside the 2-worker run, at nice 10)"; cat $(SPARK35_LOG); fi; \
	$(STOP_DOCKERD); [ $$main = 0 ] || exit $$main; exit $$(( cluster || s35 ))

# The deployment: docker/stack/compose.yaml (+ compose.offline.yaml) on the Airflow and Postgres images, the
# nightly for 5 dates, then a backfill of them from the UI in Chromium, two runs at a time, then the
# backfills page's plan and verdicts after a restated date (about 40 min once the images exist; building
# the Airflow image takes about 7 more). Not part of `make test`.
test-stack: install chromium dockerd
	$(PYTHON) docker/images.py build airflow postgres >/dev/null
	$(PY) -m pytest -p no:xdist -m stack tests/stack $(PYTEST_ARGS); rc=$$?; $(STOP_DOCKERD); exit $$rc

# The inner loop: every test not marked slow or cluster (units, delta-rs, MLflow, moto, single Spark
# stages), on the same two workers; no Horovod build, no Chromium, no Spark 3.5.
test-quick: install $(SPARK_CDS)
	$(PY) -m pytest $(XDIST) -m "not slow and not cluster" $(PYTEST_ARGS) $(NO_TESTS_OK)

# The support matrix (compat/matrix.py, docs/install.md): each cell (the floor: Airflow 3.1.8, Python 3.10,
# the lowest declared dependencies; Airflow 3.2 on Python 3.12; 3.3 on 3.13; main) in its own venv under
# .venv-compat/, one at a time: its tests, the DAG integrity tests, the demo's first date, the wheel install
# test. COMPAT_CELLS=floor runs some. Not part of `make test`.
COMPAT_CELLS ?=
test-compat: install
	$(PY) compat/matrix.py test $(COMPAT_CELLS)

# The floor cell only: its venv, the import and DAG-parse tests, the demo's first date. It needs uv, not the
# main venv's packages: .ci/run starts it beside `make test`, whose install leaves a core idle.
test-compat-smoke: uv
	$(PYTHON) compat/matrix.py smoke

# uv in $(VENV), before the rest of the install: what the support matrix builds its venvs with.
uv: $(UV_MARK)

$(UV_MARK):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel uv==$(UV_VERSION)
	touch $@

test-spark35: spark35
	$(SPARK35_PY) -m pytest $(SPARK35_TESTS)

spark35: $(SPARK35_MARK)

# pyspark is installed before the .pth exists, so pip never sees (or touches) the main venv's Spark 4.
$(SPARK35_MARK): $(VENV)/.installed
	rm -rf $(SPARK35_VENV)
	$(PY) -m venv $(SPARK35_VENV)
	$(SPARK35_PY) -m pip install -q --no-deps pyspark==$(SPARK35_VERSION) py4j==$(SPARK35_PY4J)
	printf '%s\n' '$(CURDIR)' "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
		> "$$($(SPARK35_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/dltrain-main-venv.pth"
	$(SPARK35_PY) -c 'import pyspark, py4j, importlib.metadata as m, airflow_provider_dltrain as p; \
		assert pyspark.__version__ == "$(SPARK35_VERSION)" and m.version("py4j") == "$(SPARK35_PY4J)", pyspark.__version__; \
		assert p.__file__.startswith("$(CURDIR)/"), p.__file__'
	touch $@

horovod: $(HOROVOD_MARK)

$(HOROVOD_MARK): $(VENV)/.installed docker/jobs/build_horovod.sh | mpi
	HOROVOD_VERSION=$(HOROVOD_VERSION) HOROVOD_WITH_MPI=1 docker/jobs/build_horovod.sh $(PY)
	touch $@

# Open MPI (mpirun, and mpicxx for Horovod's MPI controller): Debian's packages.
mpi:
	@command -v mpicxx >/dev/null && command -v mpirun >/dev/null || [ "$$(id -u)" != 0 ] || { \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openmpi-bin libopenmpi-dev; }
	@command -v mpicxx >/dev/null && command -v mpirun >/dev/null || { echo "Horovod's MPI build and the" \
		"SageMaker MPI test need Open MPI: run 'sudo apt-get install -y openmpi-bin libopenmpi-dev'" >&2; exit 1; }

# tests/e2e/test_ui_browser.py drives Debian's Chromium (Playwright cannot download a browser here).
CHROMIUM := /usr/lib/chromium/chromium
chromium:
	@test -x $(CHROMIUM) || [ "$$(id -u)" != 0 ] || { apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
	@test -x $(CHROMIUM) || { echo "the UI test needs Chromium at $(CHROMIUM):" \
		"run 'sudo apt-get install -y chromium' (Debian/Ubuntu package chromium)" >&2; exit 1; }

# Docker (Debian's docker.io, debootstrap for the local base image, docker-compose v1) and a running
# daemon: started here when none answers, its log in $(DLTRAIN_HOME)/dockerd.log.
docker:
	@command -v docker >/dev/null && command -v debootstrap >/dev/null || [ "$$(id -u)" != 0 ] || { \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap docker-compose; }
	@command -v docker >/dev/null && command -v debootstrap >/dev/null || { echo "the container tier needs" \
		"Docker and debootstrap: run 'sudo apt-get install -y docker.io debootstrap docker-compose'" >&2; exit 1; }

DOCKERD_PID := $(DLTRAIN_HOME)/dockerd.pid
STOP_DOCKERD = if [ -f $(DOCKERD_PID) ]; then kill $$(cat $(DOCKERD_PID)) 2>/dev/null; rm -f $(DOCKERD_PID); fi
IMAGES_LOG := $(DLTRAIN_HOME)/images.log
dockerd: docker
	@docker info >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] || { echo "start the Docker daemon" \
		"(sudo systemctl start docker)" >&2; exit 1; }; mkdir -p $(DLTRAIN_HOME); \
		nohup /usr/sbin/dockerd > $(DLTRAIN_HOME)/dockerd.log 2>&1 & echo $$! > $(DOCKERD_PID); \
		for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done; docker info >/dev/null; }

# Every image (docker/images.py): built from a local Debian base, tagged by the hash of its inputs, so
# an unchanged image is found, not rebuilt. IMAGES=train glue emr builds some. Stale tags are pruned.
# The training image installs the Horovod wheel `make horovod` caches instead of compiling it again.
IMAGES ?=
images: dockerd horovod
	$(PYTHON) docker/images.py build $(IMAGES) >/dev/null
	@$(PYTHON) docker/images.py prune >/dev/null

# What the container tier (tests/containers) runs its jobs in.
TEST_IMAGES ?= train glue emr
test-images: dockerd horovod
	$(PYTHON) docker/images.py build $(TEST_IMAGES) >/dev/null

bench: install horovod
	$(PY) -m benchmarks

# The generated contract histories (tests/contract) for MINUTES, from seed SEED on, every pin read after
# every step (make test runs 200 histories of seed 46). A failure prints its seed and the shrunk history.
# LANDING_MINUTES more go to generated landing folders through Spark (tests/contract/test_landing_contract.py).
MINUTES ?= 30
SEED ?= 1
LANDING_MINUTES ?= 5
.PHONY: soak
soak: install
	DLTRAIN_CONTRACT_MINUTES=$(MINUTES) DLTRAIN_CONTRACT_SEED=$(SEED) \
		DLTRAIN_CONTRACT_LANDING_MINUTES=$(LANDING_MINUTES) $(PY) -m pytest -p no:xdist -q -s \
		-p no:cacheprovider --timeout=0 tests/contract

# lint-imports: the layer contracts of pyproject.toml ([tool.importlinter]): imports point down only.
lint: install
	$(VENV)/bin/ruff check airflow_provider_dltrain dags tests benchmarks
	$(VENV)/bin/ruff format --check airflow_provider_dltrain dags tests benchmarks
	$(VENV)/bin/mypy airflow_provider_dltrain
	$(VENV)/bin/lint-imports --no-cache

# The wheel and the sdist of the provider, in dist/: what a user installs into an environment of their
# own (see docs/install.md). uv (the dev extra's pin, installed alone into build/dist-uv) builds them in
# an isolated environment with setuptools and wheel pinned: nothing of the development environment
# (torch, Spark, Airflow) is installed for it; seconds on a fresh clone.
SETUPTOOLS_VERSION ?= 84.2.1
WHEEL_VERSION ?= 0.48.0
DIST_UV := build/dist-uv
dist:
	rm -rf dist
	test -x $(DIST_UV)/bin/uv || $(PYTHON) -m pip install -q --target $(DIST_UV) uv==$(UV_VERSION)
	printf 'setuptools==%s\nwheel==%s\n' $(SETUPTOOLS_VERSION) $(WHEEL_VERSION) > $(DIST_UV)/build-constraints.txt
	$(DIST_UV)/bin/uv build -q --python $(PYTHON) --build-constraints $(DIST_UV)/build-constraints.txt --out-dir dist

# The documentation site (mkdocs.yml, docs/) in site/; --strict: a broken link or reference fails.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Regenerate the exact versions every install uses (run after changing dependencies).
constraints: install
	$(PIP) freeze --exclude-editable | grep -v -E '^(torch==|airflow-provider-dltrain)' > $(CONSTRAINTS)

# The seconds each test file took in the last make test: the next run starts the longest files first
test-durations:
	cp $(DLTRAIN_HOME)/test-durations.json tests/durations.json

# The suite under coverage.py, then one report of the package's line and branch coverage
# (.dltrain/coverage/): slower than make test; the figure goes in benchmarks/RESULTS.md.
coverage:
	rm -rf $(DLTRAIN_HOME)/coverage; mkdir -p $(DLTRAIN_HOME)/coverage
	-COVERAGE_DIR=$(DLTRAIN_HOME)/coverage $(MAKE) test COVERAGE=1
	COVERAGE_DIR=$(DLTRAIN_HOME)/coverage $(PY) -m coverage combine -q
	COVERAGE_DIR=$(DLTRAIN_HOME)/coverage $(PY) -m coverage report --precision=1 | grep -E "^(Name|TOTAL)"

clean:
	rm -rf $(DLTRAIN_HOME) .pytest_cache .mypy_cache .ruff_cache build *.egg-info spark-warehouse metastore_db derby.log
