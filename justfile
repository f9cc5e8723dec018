# Developer shortcuts. Optional: CI runs `.ci/run` and never needs `just`.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List the recipes.
default:
    @just --list

# Build every crate.
build:
    cargo build --workspace --locked

# Run the test suite (the same command as CI and the README).
test:
    cargo test --workspace --locked

# Check formatting and run clippy with warnings as errors (CI runs the same
# lints inside its test build: .ci/run, step `build`).
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --locked -- -D warnings

# Format the code.
fmt:
    cargo fmt --all

# cargo-deny: licenses, bans, sources by default; `just deny advisories` needs network.
deny *checks="licenses bans sources":
    cargo deny check {{checks}}

# Build the API docs, warnings as errors.
doc:
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

# Whole-process cost of a step against thread length and active threads,
# and of a step inside `thread run` against thread length, each with the
# peak RSS of uwf (docs/performance.md); UWF_BENCH_SAMPLES=N for more
# samples, UWF_BENCH_GROUPS=length,active,run to pick groups.
bench-step:
    cargo build --release --locked -p uwf-cli -p uwf-mock
    cargo bench --locked -p uwf-engine --bench step

# Throughput of `uwf worker` (docs/performance.md "Workers"); sizes and the
# store from UWF_BENCH_THREADS, UWF_BENCH_WORKERS, UWF_BENCH_STORE (fs, pg or a URL).
bench-workers:
    cargo build --release --locked -p uwf-cli -p uwf-mock
    cargo bench --locked -p uwf-cli --bench workers

# `uwf cas verify` and `uwf cas gc` on a large filesystem store
# (docs/performance.md "Store at scale"); UWF_BENCH_NODES=1000000 for a
# million nodes, UWF_BENCH_DIR to keep the store between runs.
bench-store:
    cargo build --release --locked -p uwf-cli
    cargo bench --locked -p uwf-engine --bench store

# uwf side by side with LangGraph and DBOS Transact, the same workloads in
# the same run (docs/performance.md "Side by side with LangGraph and DBOS"):
# a Python venv in target/peers-venv from benches/peers/requirements.txt
# (made again when that file changes) and a throw-away PostgreSQL (fsync on).
# Sizes from UWF_PEERS_* (benches/peers/bench.py); not part of `cargo test`.
bench-peers:
    cargo build --release --locked -p uwf-cli -p uwf-mock
    if ! cmp -s benches/peers/requirements.txt target/peers-venv/requirements.txt; then \
        rm -rf target/peers-venv && python3 -m venv target/peers-venv && \
        target/peers-venv/bin/pip install --quiet --disable-pip-version-check -r benches/peers/requirements.txt && \
        cp benches/peers/requirements.txt target/peers-venv/requirements.txt; \
    fi
    target/peers-venv/bin/python benches/peers/bench.py

# Run the full CI gate locally.
ci:
    bash .ci/run

# The README's main job: a tour of the store on a throw-away root.
demo:
    bash examples/cas-tour.sh

# Benchmarks of the store (hash, put, get, refs) and of the moderator (a
# decision over a 1,000-step thread); results are machine-dependent.
bench:
    cargo bench -p uwf-cas --bench cas
    cargo bench -p uwf-moderator --bench moderator
