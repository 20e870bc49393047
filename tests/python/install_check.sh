#!/bin/sh
# Python.InstallIntoAPrefix: what `make install` does (`cmake --install BUILD --prefix P`), into
# a temporary prefix: P/bin/strata runs, every module of python/strata and _strata land in
# P/PYDIR/strata, and `import strata` works from there alone (PYTHONPATH exactly P/PYDIR, not
# the build tree, run from elsewhere), finding the installed strata on PATH. On Debian, PYDIR
# must be a directory python3 searches under /usr/local without PYTHONPATH.
#
#   install_check.sh BUILD_DIR PYDIR SOURCE_DIR
#
# The install names the component "Unspecified" (every install rule's) so that its manifest is
# BUILD/install_manifest_Unspecified.txt and `make install`'s install_manifest.txt, which
# `make uninstall` reads, stays as it was.
set -eu
build=$1 pydir=$2 src=$3
prefix=$(mktemp -d "${TMPDIR:-/tmp}/strata-install-XXXXXX")
trap 'rm -rf "$prefix"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" --component Unspecified >/dev/null

[ -x "$prefix/bin/strata" ] || fail "no executable $prefix/bin/strata"
help=$(cd "$prefix" && env -u PYTHONPATH PATH="$prefix/bin:/usr/bin:/bin" strata --help) ||
  fail "$prefix/bin/strata --help exited non-zero"
case $help in *"Usage: strata"*) ;; *) fail "strata --help printed no usage: $help" ;; esac
for f in "$src"/python/strata/*.py; do
  [ -f "$prefix/$pydir/strata/${f##*/}" ] || fail "${f##*/} not installed in $prefix/$pydir/strata"
done

cd "$prefix"
env -u PYTHONPATH PATH="$prefix/bin:/usr/bin:/bin" PYTHONPATH="$prefix/$pydir" /usr/bin/python3 -c '
import os, shutil, site, subprocess, sys, sysconfig
prefix, pydir = sys.argv[1], sys.argv[2]
import strata
from strata import _strata
here = os.path.join(prefix, pydir, "strata")
for m in (strata, _strata):
    assert os.path.dirname(os.path.abspath(m.__file__)) == here, f"{m.__name__} from {m.__file__}, not {here}"
if "deb_system" in sysconfig.get_scheme_names():  # Debian: /usr/local needs no PYTHONPATH
    default = os.path.join("/usr/local", pydir)
    assert default in site.getsitepackages(), f"{default} is not among {site.getsitepackages()}"
assert shutil.which("strata") == os.path.join(prefix, "bin", "strata"), shutil.which("strata")
version = subprocess.run(["strata", "--version"], check=True, capture_output=True, text=True).stdout
assert version.startswith("strata "), version
print("imported", strata.__file__, "and", _strata.__file__, "; ran", version.strip())
' "$prefix" "$pydir"
