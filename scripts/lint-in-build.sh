#!/usr/bin/env bash
# CI lints while it builds: sourced by .ci/run, this makes clippy's driver the compiler of this
# workspace's own crates (RUSTC_WORKSPACE_WRAPPER; dependencies stay with rustc) with every warning
# denied (CLIPPY_ARGS, the way `cargo clippy -- -D warnings` passes them to the driver). The
# workspace is then compiled once, linted, instead of a second time in check mode for
# `cargo clippy` (docs/measurements.md: CI on a clean clone). Every cargo build of the workspace
# must see both variables: cargo's fingerprints include the wrapper, so one build without it would
# compile the workspace again. Before anything relies on it, a crate of one function with a
# warn-level clippy lint must fail to build this way, or CI stops here.
set -euo pipefail

driver=$(command -v clippy-driver || true)
if [ -z "$driver" ]; then
  echo "lint-in-build: clippy-driver not found (rustup component add clippy)" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

probe=$(mktemp -d)
mkdir -p "$probe/src"
printf '[package]\nname = "lint-probe"\nversion = "0.1.0"\nedition = "2021"\n[workspace]\n' >"$probe/Cargo.toml"
# clippy::len_zero is a warning, not an error, by default: only the denied warnings fail this.
printf 'fn main() {\n    let v: Vec<u8> = std::env::args().map(|a| a.len() as u8).collect();\n    if v.len() == 0 {\n        println!("none");\n    }\n}\n' >"$probe/src/main.rs"
if out=$(cd "$probe" && CARGO_TARGET_DIR="$probe/target" cargo build --quiet 2>&1); then
  rm -rf "$probe"
  echo "lint-in-build: a clippy warning did not fail the build (clippy-driver $driver ignored CLIPPY_ARGS?)" >&2
  exit 1
fi
rm -rf "$probe"
if ! grep -q "clippy::len_zero\|length comparison to zero" <<<"$out"; then
  echo "lint-in-build: the probe failed for another reason than its lint:" >&2
  echo "$out" >&2
  exit 1
fi
echo "lint-in-build: clippy lints this workspace's crates as they compile, warnings denied ($driver)"
