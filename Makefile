# make serve: install everything and serve examples/models.  make test: install with test extras and run the suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
HOST ?= 127.0.0.1
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
SKLEARN_EXAMPLE := examples/models/iris_sklearn/model.joblib
LLM_EXAMPLE := examples/models/tiny_llama/model.safetensors
EMBED_EXAMPLE := examples/models/tiny_embedder/model.safetensors
TOOLS_EXAMPLE := build/tiny_llama_tools/model.safetensors

.PHONY: serve test lint format install install-test install-vllm install-tf install-torchserve install-triton perf-analyzer test-peers test-tritongrpc test-vllm test-tf test-torchserve test-triton native examples bytecode protos tfserving-protos clean fuzz

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[all]'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PIP) install --quiet -e '.[test,all]'
	# tests/browser drives Debian's headless Chromium
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)
	# tests/multihost makes network namespaces with iproute2's `ip`; tests/deploy renders the
	# Helm chart with helm, which only a PyPI package carries (deploy/tools/install_helm.py)
	command -v ip >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2)
	# tests/docs and the TLS tests run curl; the docs' TLS blocks make certificates with openssl
	command -v curl >/dev/null && command -v openssl >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl openssl)
	$(PY) deploy/tools/install_helm.py $(VENV)/bin/helm
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# runtime: vllm runs from a venv of its own: vLLM brings transformers 5, which the llm extra
# excludes (pyproject.toml). The torchvision, torchaudio and torchcodec it pulls are built for
# another torch and break its imports: they are removed. Its tests use the head-size-32 tiny
# Llama (vLLM's CPU attention needs 32), built from the example's seed with the main venv.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_MODEL := build/tiny_llama_h32/model.safetensors
VLLM_TOOLS_MODEL := build/tiny_llama_tools_h32/model.safetensors

$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet -e '.[vllm]' 'pytest>=8' 'pytest-timeout>=2.3'
	$(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

$(VLLM_MODEL): tests_vllm/build_model.py | $(VENV)/.installed
	$(PY) tests_vllm/build_model.py build/tiny_llama_h32

$(VLLM_TOOLS_MODEL): tests_vllm/build_model.py examples/build_llm.py | $(VENV)/.installed
	$(PY) tests_vllm/build_model.py --tools build/tiny_llama_tools_h32

install-vllm: $(VLLM_VENV)/.installed $(VLLM_MODEL) $(VLLM_TOOLS_MODEL)

# TF Serving's gRPC client (tensorflow-serving-api's stubs, tf.make_tensor_proto) runs from a
# venv of its own: TensorFlow is large and registers the tensorflow.* messages our server
# defines too. The CPU build; the serving API without its dependency on the full `tensorflow`
# (tensorflow-cpu installs the same module). The server under test is the main venv's.
TF_VENV ?= .venv-tf
TF_PY := $(TF_VENV)/bin/python

$(TF_VENV)/.installed:
	$(PYTHON) -m venv $(TF_VENV)
	$(TF_PY) -m pip install --quiet tensorflow-cpu==2.21.0 'pytest>=8' 'pytest-timeout>=2.3'
	$(TF_PY) -m pip install --quiet --no-deps tensorflow-serving-api==2.21.0
	touch $@

install-tf: $(TF_VENV)/.installed

# runtime: torchserve is tested against the real TorchServe (tests_torchserve/): its Python
# package and torch-model-archiver from PyPI in a venv of their own, its Java frontend on
# Debian's JRE. rosettaserve is installed there too, with the [torchserve] extra it serves with.
TS_VENV ?= .venv-torchserve
TS_PY := $(TS_VENV)/bin/python

$(TS_VENV)/.installed: pyproject.toml
	command -v java >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless)
	$(PYTHON) -m venv $(TS_VENV)
	$(TS_PY) -m pip install --quiet --upgrade pip
	$(TS_PY) -m pip install --quiet -e '.[torchserve]' 'torch-model-archiver==0.12.0' \
		'pytest>=8' 'pytest-timeout>=2.3' 'httpx>=0.27'
	touch $@

install-torchserve: $(TS_VENV)/.installed

# tests_triton/ runs every test against rosettaserve and the real Triton Inference Server 2.51:
# the tritonserver binary and its Python backend that nvidia-pytriton's wheel ships, with
# tritonclient (http and grpc; the CUDA extra is of no use on CPU), in a venv of their own
# (pytriton pins numpy 1); pins as bench/compare's pytriton peer. The server under test is the
# main venv's. What the binary or the backend stub links from the system and cannot find (ldd)
# is installed from Debian (tests_triton/servers.py says which packages).
TRITON_VENV ?= .venv-triton
TRITON_PY := $(TRITON_VENV)/bin/python
TRITON_PINS := bench/compare/peers/requirements/pytriton.txt

$(TRITON_VENV)/.installed: $(TRITON_PINS)
	$(PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_PY) -m pip install --quiet --upgrade pip
	$(TRITON_PY) -m pip install --quiet -c $(TRITON_PINS) 'nvidia-pytriton==0.7.0' \
		'tritonclient[http,grpc]==2.73.0' 'pytest>=8' 'pytest-timeout>=2.3'
	packages="$$($(TRITON_PY) -m tests_triton.servers)"; [ -z "$$packages" ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$packages)
	touch $@

install-triton: $(TRITON_VENV)/.installed

$(SKLEARN_EXAMPLE): examples/build_examples.py $(VENV)/.installed
	$(PY) examples/build_examples.py sklearn

# the tiny LLM is committed; this rebuilds it (from a fixed seed) only when it is missing
$(LLM_EXAMPLE): | $(VENV)/.installed
	$(PY) examples/build_llm.py

# the tiny embedder and reranker (runtime: embedding) are built, not committed: a few seconds
$(EMBED_EXAMPLE): examples/build_embedding.py | $(VENV)/.installed
	$(PY) examples/build_embedding.py

# the tiny LLM with hermes tool calls (tests/integration/test_chat_tools.py): built, not committed
$(TOOLS_EXAMPLE): examples/build_llm.py | $(VENV)/.installed
	$(PY) examples/build_llm.py --tools

examples: $(SKLEARN_EXAMPLE) $(LLM_EXAMPLE) $(TOOLS_EXAMPLE) $(EMBED_EXAMPLE)

# bytecode for the sources: an editable install has none, and where PYTHONDONTWRITEBYTECODE is
# set (container images often set it) every start would compile them again (~0.15 s)
bytecode: install
	$(PY) -m compileall -q src examples/models

# the request path compiled with mypyc, next to its sources (scripts/compile_native.py): done
# again only when one of them changed; `python scripts/compile_native.py --clean` undoes it
native: install
	$(PY) scripts/compile_native.py

serve: install native examples bytecode
	$(VENV)/bin/rosettaserve serve examples/models --host $(HOST) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT)

LINTED := src tests tests_tritongrpc tests_vllm tests_tfgrpc tests_torchserve tests_triton examples bench scripts deploy

lint: install-test
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy

format: install-test
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

# Fuzzing (tests/fuzz/): `make test` runs each target a few seconds; `make fuzz` runs each one
# FUZZ_SECONDS (a crash's input lands in build/fuzz/crashes/). The C JSON reader's target is
# built with clang's AddressSanitizer: Debian's clang.
FUZZ_SECONDS ?= 300
CLANG := /usr/bin/clang

$(CLANG):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang

fuzz: install-test $(CLANG)
	$(PY) -m tests.fuzz.run --all --seconds $(FUZZ_SECONDS)

# tritonclient.grpc and kserve cannot share a process (both register package `inference` in
# protobuf's default pool), so the tritonclient.grpc suite runs as its own pytest invocation.
test: install-test native examples lint $(CLANG) install-vllm install-tf install-torchserve install-triton
	$(PY) -m pytest -q tests
	$(MAKE) --no-print-directory -j2 --output-sync=target test-peers

# the suites that run from a venv of their own (or apart, above): independent of each other,
# so they run side by side once the main suite is done
test-peers: test-tritongrpc test-vllm test-tf test-torchserve test-triton

# Triton's perf_analyzer (tests_tritongrpc runs it through shared memory): PyPI's tritonclient
# 2.50 wheel and Debian's libb64, into bench/.tools/ (bench/README.md says why those)
PERF_ANALYZER := bench/.tools/perf_analyzer

$(PERF_ANALYZER): bench/setup_perf_analyzer.sh
	bash bench/setup_perf_analyzer.sh

perf-analyzer: $(PERF_ANALYZER)

test-tritongrpc: $(PERF_ANALYZER)
	$(PY) -m pytest -q tests_tritongrpc

test-vllm:
	$(VLLM_PY) -m pytest -q tests_vllm

test-tf:
	ROSETTASERVE=$(abspath $(VENV))/bin/rosettaserve $(TF_PY) -m pytest -q tests_tfgrpc

test-torchserve:
	$(TS_PY) -m pytest -q tests_torchserve

test-triton:
	ROSETTASERVE=$(abspath $(VENV))/bin/rosettaserve $(TRITON_PY) -m pytest -q tests_triton

protos: install-test
	$(PY) scripts/generate_protos.py

# TF Serving's messages: from the descriptors the pinned TF packages in .venv-tf ship
tfserving-protos: install-test install-tf
	$(PY) scripts/generate_tfserving_protos.py --site $$($(TF_PY) -c 'import site; print(site.getsitepackages()[0])')

clean:
	$(PYTHON) scripts/compile_native.py --clean
	rm -rf $(VENV) $(VLLM_VENV) $(TF_VENV) $(TS_VENV) $(TRITON_VENV) $(SKLEARN_EXAMPLE) build .pytest_cache .mypy_cache .ruff_cache
