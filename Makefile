# Quickstart: `make demo` and `make test`. Both create .venv and install what they need on first use
# (pinned by constraints.txt); nothing is needed beforehand but Python 3.11+, pip and make.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# pytest-xdist workers of `make test` (make test TEST_WORKERS=2 on a busy machine). A fresh-clone run used 34 CPU-minutes
# in 22 minutes on two cores (1.5 cores busy on average): three workers fill some of the waits.
TEST_WORKERS ?= 3
# Where `make test` keeps each test's CPU time (tests/support/cpu_report.py).
CPU_REPORT := .test-cpu/report
# The model server's environment (kserve SDK + torch), separate because kserve's pins conflict with Airflow's.
SERVING_VENV  := .venv-serving
SERVING_STAMP := $(SERVING_VENV)/.installed-stamp
# The PyTorch CPU build (~190 MB) instead of PyPI's default CUDA build (several GB on Linux), e.g.
# `make test TORCH_INDEX=https://download.pytorch.org/whl/cpu`; empty: torch comes from the default index.
TORCH_INDEX ?=
# Ray's environment (ray[default,tune] + scikit-learn) for the local cluster's rayproject/ray pods, separate because
# ray pins its own grpcio/protobuf/pydantic and a Ray node runs under the image's Python on a real cluster.
RAY_VENV  := .venv-ray
RAY_STAMP := $(RAY_VENV)/.installed-stamp
RAY_VERSION := 2.60.0

.PHONY: demo test lint docs venv serving-venv ray-venv lock lock-serving lock-ray schemas clean

venv: $(STAMP)

serving-venv: $(SERVING_STAMP)

$(SERVING_STAMP): constraints-serving.txt
	test -x $(SERVING_VENV)/bin/python || $(PYTHON) -m venv $(SERVING_VENV)
	$(SERVING_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SERVING_VENV)/bin/python -m pip install --quiet -c constraints-serving.txt \
		$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) kserve torch
	touch $(SERVING_STAMP)

ray-venv: $(RAY_STAMP)

$(RAY_STAMP): constraints-ray.txt
	test -x $(RAY_VENV)/bin/python || $(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RAY_VENV)/bin/python -m pip install --quiet -c constraints-ray.txt 'ray[default,tune]' scikit-learn
	touch $(RAY_STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "airflow-elastic needs Python 3.11+; set PYTHON=python3.11 (or newer)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install --quiet -c constraints.txt --index-url $(TORCH_INDEX) torch)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP) $(SERVING_STAMP)
	$(BIN)/python tools/demo.py

lint: $(STAMP)
	$(BIN)/ruff check airflow_elastic tests tools dags bench docs/conf.py docs/_ext
	$(BIN)/ruff format --check airflow_elastic tests tools dags bench docs/conf.py docs/_ext
	$(BIN)/mypy  # the package, as [tool.mypy] in pyproject.toml says (strict for the pure packages)
	$(BIN)/lint-imports --no-cache  # the layer contract: [tool.importlinter] in pyproject.toml

# The docs site (docs/, Sphinx + MyST) with warnings as errors: a broken include, reference or docstring fails.
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The two virtualenvs install side by side, then lint and the docs build run side by side (each mostly one core),
# then three pytest-xdist workers on the two cores (many tests wait on pods, polls and Airflow's loops), a test file
# per worker at a time (a file's module-scoped cluster stays on one
# worker), in collection order with the longest files first (tests/conftest.py FIRST), then the tests that need the
# machine to themselves (tests/conftest.py SERIAL), alone.
# Both runs add each test's CPU time to $(CPU_REPORT).*.jsonl; the second prints where the suite's CPU time went.
test:
	$(MAKE) -j2 venv serving-venv ray-venv
	$(MAKE) -j2 lint docs
	rm -f $(CPU_REPORT).*.jsonl
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" --cpu-report $(CPU_REPORT)
	$(BIN)/python -m pytest -m serial --cpu-report $(CPU_REPORT)

# Re-pin every dependency after changing pyproject.toml (commit the result).
# `--all` keeps setuptools (torch needs it); torch's pin drops the build's local label (+cpu), so both the CPU
# and the CUDA build satisfy it.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),.lock-venv/bin/python -m pip install --quiet --index-url $(TORCH_INDEX) torch==2.13.0)
	.lock-venv/bin/python -m pip install --quiet -e '.[dev]'
	.lock-venv/bin/python -m pip freeze --exclude-editable --all | grep -v '^pip==' \
		| sed -E 's/^(torch==[^+]+)\+.*$$/\1/' > constraints.txt
	rm -rf .lock-venv

lock-serving:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) kserve==0.21.0 torch==2.13.0
	(sed -n '1,3p' constraints-serving.txt; .lock-venv/bin/python -m pip freeze --all | grep -v '^pip==' \
		| sed -E 's/^(torch==[^+]+)\+.*$$/\1/') > constraints-serving.new && mv constraints-serving.new constraints-serving.txt
	rm -rf .lock-venv

# Re-pin Ray's environment (commit the result); ray's version is the rayproject/ray image tag the local cluster runs.
lock-ray:
	rm -rf .lock-venv-ray && $(PYTHON) -m venv .lock-venv-ray
	.lock-venv-ray/bin/python -m pip install --quiet --upgrade pip
	.lock-venv-ray/bin/python -m pip install --quiet 'ray[default,tune]==$(RAY_VERSION)' scikit-learn
	(sed -n '1,3p' constraints-ray.txt; .lock-venv-ray/bin/python -m pip freeze --all | grep -v '^pip==') \
		> constraints-ray.new && mv constraints-ray.new constraints-ray.txt
	rm -rf .lock-venv-ray

# Regenerate airflow_elastic/kube/schemas from upstream CRD/OpenAPI files: make schemas CRDS=<folder> (see tools/gen_schemas.py).
schemas: $(STAMP)
	$(BIN)/python tools/gen_schemas.py --crds "$(CRDS)"

clean:
	rm -rf $(VENV) $(SERVING_VENV) $(RAY_VENV) .test-cpu dist build docs/_build .pytest_cache .ruff_cache .mypy_cache
