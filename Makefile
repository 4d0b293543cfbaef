# Two commands on a fresh machine: `make run` and `make test`.
# Everything they need (the venv, Delta's jars) is set up on first use and cached.

# The first of these that is a supported Python (3.11 or 3.12); `make PYTHON=...` picks another.
PYTHON ?= $(shell for p in python3.11 python3.12 python3; do $$p -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 12)' 2>/dev/null && echo $$p && break; done)
VENV   := .venv
BIN    := $(VENV)/bin
JARS   := .cache/jars
ZK     := .cache/zookeeper
KAFKA  := .cache/kafka
SPARK_KAFKA := .cache/spark-kafka
LOCALFS := .cache/localfs
ROOT   ?= ./data
CONSOLE_VENDOR := ingest_api/console/static/vendor
AZURITE := node_modules/.bin/azurite-blob

.PHONY: runtime setup run demo test lint typecheck docs unit bench jars zookeeper kafka console chromium clean compat native

# rustup keeps its toolchains beside its cargo (~/.cargo/bin/cargo, ~/.rustup): found there even when HOME
# points elsewhere (a CI run with an empty HOME).
CARGO_BIN := $(shell command -v cargo)
ifeq ($(origin RUSTUP_HOME),undefined)
  ifneq ($(wildcard $(dir $(CARGO_BIN))../../.rustup),)
    export RUSTUP_HOME := $(abspath $(dir $(CARGO_BIN))../../.rustup)
  endif
endif

# What `make run` needs (the package and its runtime dependencies, Delta's jars, the console's library), and
# what the tests add to it (the dev extras, ZooKeeper, Spark's Kafka connector: the test session's classpath holds it).
runtime: $(VENV)/.runtime $(JARS)/.done $(LOCALFS)/logstore-localfs.jar $(CONSOLE_VENDOR)/.done
setup: runtime $(VENV)/.installed $(ZK)/.done $(SPARK_KAFKA)/.done $(AZURITE)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# pyproject.toml states the versions logstore supports (Spark 4.0-4.2, Python 3.11-3.12); constraints.txt pins
# the set the tests run on, so every checkout installs the same one.
$(VENV)/.runtime: pyproject.toml constraints.txt $(VENV)/.native | $(BIN)/python
	$(BIN)/python -m pip install -q -c constraints.txt -e .
	touch $@

# native/: the compiled kernels of the Kafka listener (logstore_native: record batches ⇄ Arrow), Rust with PyO3,
# built by maturin (from PyPI) with the crates Cargo.lock pins (from crates.io), installed into the venv.
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock native/pyproject.toml native/logstore_native.pyi $(wildcard native/src/*.rs)
$(VENV)/.native: $(NATIVE_SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q ./native
	touch $@

native: $(VENV)/.native

$(VENV)/.installed: $(VENV)/.runtime
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

# Delta's Spark jars from Maven Central, into a project-local cache (no ~/.m2 needed).
$(JARS)/.done: jars/pom.xml
	mvn -q -B -Dmaven.repo.local=$(CURDIR)/.cache/m2 -f jars/pom.xml \
	    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(JARS)
	touch $@

jars: $(JARS)/.done

# Hadoop's local file system without a child process per file created or renamed (jars/localfs),
# compiled against this pyspark's own jars; logstore.spark.session() puts it on a local driver's classpath.
$(LOCALFS)/logstore-localfs.jar: $(wildcard jars/localfs/logstore/hadoop/*.java) $(VENV)/.runtime
	rm -rf $(LOCALFS)/classes && mkdir -p $(LOCALFS)/classes
	javac -Xlint:all,-path -Werror --release 17 -d $(LOCALFS)/classes \
	    -cp "$$($(BIN)/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/jars/*" \
	    $(filter %.java,$^)
	jar cf $@ -C $(LOCALFS)/classes .

# The web console's charting library (uPlot) from the npm registry, served by the node from
# $(CONSOLE_VENDOR) (build output, not committed): no CDN, the console works offline.
$(CONSOLE_VENDOR)/.done: package.json package-lock.json
	npm ci --omit=dev --no-audit --no-fund --silent
	mkdir -p $(CONSOLE_VENDOR)
	cp node_modules/uplot/dist/uPlot.esm.js node_modules/uplot/dist/uPlot.min.css node_modules/uplot/LICENSE $(CONSOLE_VENDOR)/
	touch $@

# Azurite, the Azure Blob server the object-storage tests start on 127.0.0.1 (package.json's devDependencies,
# pinned to 3.35: later releases need a newer Node than 20). After the console's step, which installs without it.
$(AZURITE): package.json package-lock.json | $(CONSOLE_VENDOR)/.done
	npm ci --no-audit --no-fund --silent
	touch $@

console: $(CONSOLE_VENDOR)/.done

# The console's browser tests drive Debian's Chromium (Playwright's own browser download is not used).
chromium:
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)

# Apache ZooKeeper (the cluster's coordinator) from Maven Central, into a cache of its own:
# every jar in $(JARS) goes on Spark's classpath, these must not.
$(ZK)/.done: jars/zookeeper/pom.xml
	mvn -q -B -Dmaven.repo.local=$(CURDIR)/.cache/m2 -f jars/zookeeper/pom.xml \
	    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(ZK)
	touch $@

zookeeper: $(ZK)/.done

# Apache Kafka (broker and tools) and Spark's Kafka connector, caches of their own. bench/vs_kafka.py uses both;
# the tests' one Spark session puts the connector on its classpath (`setup` fetches it), tests/system/kafka runs
# Kafka's tools where .cache/kafka is there. logstore.spark.session() leaves both off a session's classpath.
$(KAFKA)/.done: jars/kafka/pom.xml
	mvn -q -B -Dmaven.repo.local=$(CURDIR)/.cache/m2 -f jars/kafka/pom.xml \
	    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA)
	touch $@

$(SPARK_KAFKA)/.done: jars/spark-kafka/pom.xml jars/spark-kafka/settings.xml
	mvn -q -B -s jars/spark-kafka/settings.xml -Dmaven.repo.local=$(CURDIR)/.cache/m2 -f jars/spark-kafka/pom.xml \
	    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(SPARK_KAFKA)
	touch $@

kafka: $(KAFKA)/.done $(SPARK_KAFKA)/.done

# The HTTP API on the embedded default: ./data, 127.0.0.1:8080, no ZooKeeper.
run: runtime
	$(BIN)/logstore --root $(ROOT) serve

# lint-imports checks the layers of docs/layout.md (contracts in pyproject.toml, [tool.importlinter]).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	cd native && cargo fmt --check && cargo clippy --release --locked --quiet -- -D warnings

typecheck: setup
	$(BIN)/mypy

# The documentation site (mkdocs.yml): strict, so a broken link or any warning fails the build.
docs: setup
	$(BIN)/mkdocs build --strict --quiet --site-dir .cache/site

test: setup lint typecheck docs chromium
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=25 --junitxml=.artifacts/junit.xml

# The unit tier alone, the fast loop while editing: tests/unit runs in-process (no server, no JVM, no child
# process; tests/unit/conftest.py fails a test that starts one), in well under two minutes. `make test` runs
# every tier: tests/unit, tests/integration (a `logstore serve`, the SparkSession) and tests/system (kill -9,
# ZooKeeper, a Spark cluster, Chromium, notebooks), each of which holds tests, so pytest never exits 5.
.PHONY: test-unit
test-unit: setup
	$(BIN)/pytest -q tests/unit

bench: setup kafka
	$(BIN)/python bench/write_path.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/vs_kafka.py

clean:
	rm -rf $(VENV) .cache node_modules native/target $(CONSOLE_VENDOR) .pytest_cache .mypy_cache .ruff_cache .hypothesis .schemathesis .import_linter_cache .grimp_cache .artifacts

# The oldest supported pair (Python 3.12, pyspark 4.0, delta-spark 4.0) in a venv of its own, through the day-one
# Spark path (bench/compat.py: produce, stream with a group, batch read, sink, SQL, compaction). Downloads
# pyspark and Delta's jars (Ivy, into ~/.ivy2) on the first run.
COMPAT := .cache/compat
COMPAT_PYTHON ?= $(shell PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null | grep '^3\.12' | tail -1) python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null)
COMPAT_PINS := pyspark==4.0.1 delta-spark==4.0.0

$(COMPAT)/.done: pyproject.toml
	@test -n "$(COMPAT_PYTHON)" || (echo "make compat needs Python 3.12 (COMPAT_PYTHON=...)"; exit 1)
	rm -rf $(COMPAT) && $(COMPAT_PYTHON) -m venv $(COMPAT)
	$(COMPAT)/bin/python -m pip install -q --upgrade pip
	$(COMPAT)/bin/python -m pip install -q ./native
	$(COMPAT)/bin/python -m pip install -q $(COMPAT_PINS) -e .
	touch $@

compat: $(COMPAT)/.done
	PYTHONPATH=$(CURDIR) $(COMPAT)/bin/python bench/compat.py
