# fencelock — the two commands a user needs:
#   make test   installs what is missing (idempotent) and runs every test
#   make demo   builds the wasm core and serves the browser demo on 127.0.0.1
# Each layer's steps live in scripts/, so this file only says what runs in which order.

SHELL := /bin/bash
.DEFAULT_GOAL := help
PORT ?= 8080
# install-cli: where the `fencelock` CLI goes ($(DESTDIR)$(BINDIR)/fencelock); install: the C library
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin

.PHONY: help install wheel install-cli setup setup-demo test demo test-rust test-nostd test-ffi test-wasm test-packages test-demo test-verify test-docs fuzz mutants bench cluster bench-cluster lint test-partitions

help:
	@echo "make test   - install what is missing, then run every test"
	@echo "make demo   - build and serve the browser demo (PORT=$(PORT))"
	@echo "make bench  - run the benchmarks and regenerate BENCHMARKS.md"
	@echo "make fuzz   - fuzz each target for longer (FUZZ_SECONDS=300)"
	@echo "make mutants - mutation-test the core (hours; MUTANTS_FILES=core/src/gate.rs for one file)"
	@echo "make cluster       - run a local three-node replicated server and print how to use it"
	@echo "make bench-cluster - measure that cluster against a three-member etcd (BENCHMARKS.md)"
	@echo "make install-cli - build the fencelock CLI and install it as $(PREFIX)/bin/fencelock (PREFIX=..., DESTDIR=...)"
	@echo "make install PREFIX=/usr/local - install the C library, header and fencelock.pc (DESTDIR respected)"
	@echo "make wheel  - build the Python wheel (with the library inside) into target/wheels/"
	@echo "make test-docs - run every README example as written and check the quoted figures (part of make test)"
	@echo "make test-ffi / test-wasm / test-demo / test-verify - one layer's tests (part of make test; after make setup)"
	@echo "make test-partitions - the server's partition test, long form (PARTITION_SECONDS=480 of random faults)"

# Packages a user installs: the C library under PREFIX (DESTDIR for staging), the wheel.
install:
	@PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" scripts/install-c.sh

wheel:
	@scripts/build-wheel.sh

# Every README example run as a reader would, and the figures quoted in several places
# checked against their sources (also part of make test).
test-docs:
	@scripts/test-docs.sh

# The packages as a user installs them (also part of make test).
test-packages:
	@scripts/test-packages.sh

# One layer's tests each (all part of make test; each needs what `make setup` installs).
test-ffi:
	@scripts/test-ffi.sh

test-wasm:
	@scripts/test-wasm.sh

test-demo:
	@scripts/test-demo.sh

test-verify:
	@scripts/test-verify.sh

setup:
	@scripts/setup.sh

# The demo needs only the wasm build: no browser, valgrind, Miri or fuzzer.
setup-demo:
	@scripts/setup.sh demo

test: setup
	@scripts/test-all.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc -p fencelock --no-deps --all-features
	RUSTDOCFLAGS="-D warnings" cargo doc -p fencelock --no-deps

test-rust:
	cargo test --workspace --all-features
	@scripts/check-ignored.sh

test-nostd:
	cargo build -p fencelock --target thumbv7em-none-eabihf
	cargo build -p fencelock --target thumbv7em-none-eabihf --release
	@scripts/test-bare-metal.sh

demo: setup-demo
	@scripts/demo.sh $(PORT)

# Longer-running, optional targets; each script says what it needs.
fuzz: setup
	@scripts/fuzz.sh

# Mutation testing of the core: not part of make test (hours for the whole crate).
mutants:
	@scripts/mutants.sh

bench: setup
	@scripts/bench.sh

cluster:
	@scripts/cluster.sh

bench-cluster:
	@scripts/bench-cluster.sh

# The CLI, release build, installed as $(DESTDIR)$(BINDIR)/fencelock (PREFIX=$$HOME/.local
# for a user install; DESTDIR for packaging). The build honours CARGO_TARGET_DIR.
install-cli:
	cargo build --release --locked -p fencelock-server --bin fencelock
	install -d "$(DESTDIR)$(BINDIR)"
	install -m 0755 "$$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/fencelock" "$(DESTDIR)$(BINDIR)/fencelock"

# The short form runs in `make test`; this adds PARTITION_SECONDS of seeded random faults.
test-partitions:
	@PARTITION_SECONDS=$${PARTITION_SECONDS:-480} scripts/test-partitions.sh
