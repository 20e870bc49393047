#!/usr/bin/env bash
# Federated round overhead and secure aggregation's cost (docs/federated.md).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
/usr/bin/python3 "$ROOT/bench/fed/overhead.py" --strata "$BUILD/strata" "$@"
