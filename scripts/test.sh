#!/usr/bin/env bash
# Runs every Tributary test on a fresh machine: installs what the tests need when it is
# missing, then checks formatting and lints and runs the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*" >&2; }

# Toolchain components the checks use.
for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^${component}"; then
    step "installing rust component ${component}"
    rustup component add "${component}"
  fi
done

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo test"
cargo test --workspace --quiet
