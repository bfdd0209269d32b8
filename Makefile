# Every target installs what it uses: a fresh clone needs only Python >= 3.10.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_FLAGS ?=
# Apache Kafka, the reference broker: jars fetched by maven/pom.xml into .kafka/ (make install).
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' maven/pom.xml)
KAFKA_JAR := .kafka/$(KAFKA_VERSION)/libs/kafka_2.13-$(KAFKA_VERSION).jar
# Both tiers print one of these lines; .ci/run requires the first.
KAFKA_RAN := == Apache Kafka tier: integration tests on Apache Kafka $(KAFKA_VERSION)
KAFKA_SKIPPED := == Apache Kafka tier SKIPPED

.PHONY: install native native-test kafka-jars test test-unit test-integration test-kafka chaos lint demo bench docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,spark,bench,dev]'
	touch $(STAMP)

install: $(STAMP) native kafka-jars

# The native decoder (native/, Rust via maturin, release build): Kafka batches straight to
# Arrow columns on the getmany_arrow / Spark paths.  Optional: without cargo the pure-Python
# path is used (same results, slower); AIOGROUP_NATIVE=0 forces that path at run time.
NATIVE_STAMP := $(VENV)/.native
NATIVE_SRC := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
native: $(NATIVE_STAMP)
$(NATIVE_STAMP): $(STAMP) $(NATIVE_SRC)
	@if command -v cargo >/dev/null 2>&1; then \
	  $(BIN)/python -m pip install --quiet ./native && touch $@; \
	else \
	  echo "== native decoder SKIPPED: no cargo on PATH (https://rustup.rs); the pure-Python path is used =="; \
	fi

# The crate's own tests (the LZ4 frame fast path against lz4_flex's FrameDecoder, damaged
# frames, the buffer pool's bound); the Python tests check the module end to end.
native-test:
	@if command -v cargo >/dev/null 2>&1; then \
	  cargo test --quiet --release --manifest-path native/Cargo.toml; \
	else \
	  echo "== native crate tests SKIPPED: no cargo on PATH (the module is not built either) =="; \
	fi

# Maven fetches Kafka's broker jars and spark-sql-kafka (skipped, with a message, without java/mvn).
# A stamp per pom: a second `make test` does not ask Maven again; no stamp without the jars,
# so installing Java later and rerunning fetches them.
KAFKA_STAMP := .kafka/.fetched
kafka-jars: $(KAFKA_STAMP)
$(KAFKA_STAMP): $(STAMP) maven/pom.xml maven/fetch.sh
	maven/fetch.sh $(BIN)/python
	@if [ -f $(KAFKA_JAR) ]; then touch $@; fi

# CI runs this: unit + integration on the embedded Tansu broker (property tests at the
# thorough Hypothesis profile, tests/conftest.py), then the integration tier again on
# Apache Kafka (single node, the 3-node failover and rack tests, and the bounded chaos subset)
# when Java and the jars are here.
#
# Each tier is spread over TEST_WORKERS pytest-xdist processes (TEST_WORKERS=0: one
# process, as before).  Each worker starts its own broker (the session fixture) and every
# test names its own topics and groups, so tests do not see each other; the ones that
# must not share the machine (chaos, Spark, the 3-node cluster) keep to one worker per
# group (--dist loadgroup, the groups in tests/conftest.py); the 3-node cluster tests
# (failover, racks: three JVMs, sessions judged through broker restarts) run after the
# workers, alone.  The workers mostly wait on brokers, so there are more of them than cores.
TEST_WORKERS ?= 4
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)
test: install native-test
	HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest tests -p no:cacheprovider -q -m "not kafka_cluster" $(XDIST) $(PYTEST_FLAGS)
	@$(MAKE) --no-print-directory test-kafka

test-kafka: install
	@if command -v java >/dev/null 2>&1 && [ -f $(KAFKA_JAR) ]; then \
	  echo "$(KAFKA_RAN) =="; \
	  rc=0; \
	  AIOGROUP_BROKER=kafka $(BIN)/python -m pytest tests/integration tests/chaos -p no:cacheprovider -q -m "not kafka_cluster" $(XDIST) $(PYTEST_FLAGS) || rc=$$?; \
	  echo "== Apache Kafka tier, 3-node cluster tests (alone on the machine) =="; \
	  AIOGROUP_BROKER=kafka $(BIN)/python -m pytest tests/integration -p no:cacheprovider -q -m kafka_cluster $(PYTEST_FLAGS) || rc=$$?; \
	  exit $$rc; \
	else \
	  echo "$(KAFKA_SKIPPED): $$(command -v java >/dev/null 2>&1 || echo 'no java on PATH; ')$$([ -f $(KAFKA_JAR) ] || echo 'no jars in .kafka/$(KAFKA_VERSION)/libs (make install needs java and mvn)') =="; \
	fi

test-unit: $(STAMP) native native-test
	$(BIN)/python -m pytest tests/unit -q -m 'not scale' $(PYTEST_FLAGS)

# AIOGROUP_BROKER=kafka make test-integration runs the tier on Apache Kafka.
test-integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration -q $(XDIST) $(PYTEST_FLAGS)

# Every chaos scenario over several seeds, each judged by the ownership-history checker;
# the figures go to CHAOS_RESULTS (JSON lines) for docs/reliability.md.  `make test` runs a
# bounded subset (one seed, the scenarios not marked chaos_long).
CHAOS_SEEDS ?= 1,2,3
CHAOS_RESULTS ?= chaos-results.jsonl
chaos: $(STAMP)
	AIOGROUP_CHAOS=full AIOGROUP_CHAOS_SEEDS=$(CHAOS_SEEDS) AIOGROUP_CHAOS_RESULTS=$(CHAOS_RESULTS) \
		$(BIN)/python -m pytest tests/chaos -p no:cacheprovider -q $(PYTEST_FLAGS)

lint: $(STAMP)
	$(BIN)/ruff check aiogroup tests benchmarks
	$(BIN)/ruff format --check aiogroup tests benchmarks
	$(BIN)/mypy --strict aiogroup

# The demo needs aiogroup, aiokafka and the embedded broker only: its own small venv
# (about 80 MB, seconds to install), not the full one with pyspark and the benchmarks.
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed
$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet -e '.[broker]'
	touch $@

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/python -m aiogroup.testing.demo

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# The API reference: Sphinx autodoc over the docstrings, warnings as errors (-W), into
# build/api/index.html.  Sphinx comes from the docs extra, installed on first use.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

docs: $(STAMP) $(DOCS_STAMP)
	$(BIN)/python docs/generate.py
	$(BIN)/python -m benchmarks --report-only
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs/api build/api

clean:
	rm -rf $(VENV) $(DEMO_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .kafka native/target
