#!/usr/bin/env bash
# Federated round overhead and secure aggregation's cost (docs/federated.md).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
/usr/bin/python3 "$ROOT/bench/fed/overhead.py" --strata "$BUILD/strata" "$@"
