# Shared by the bench/ scripts, sourced right after `set -euo pipefail`: the paths every
# side-by-side run takes from the environment, and its scratch directory.
#   ROOT    the repository
#   BUILD   the build directory (build)
#   STRATA  the binary ($BUILD/strata)
#   PYTHON  the interpreter of the PyTorch peers (/usr/bin/python3: Debian's, with torch)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
STRATA="${STRATA:-$BUILD/strata}"
PYTHON="${PYTHON:-/usr/bin/python3}"

# bench_need_strata NAME: one line naming the bench and the missing binary, exit 1.
bench_need_strata() {
  [[ -x "$STRATA" ]] || { echo "bench/$1: $STRATA not built (make build)" >&2; exit 1; }
}

# bench_scratch: OUT, a temporary directory removed when the script exits.
bench_scratch() {
  OUT="$(mktemp -d)"
  trap 'rm -rf "$OUT"' EXIT
}
