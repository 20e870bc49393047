#!/usr/bin/python3
"""Checks that a portable strata binary runs on every x86-64-v2 CPU.

Everything in a default build is compiled for x86-64-v2 except the code of the levels and
paths that are chosen at run time (docs/kernels.md, "Which CPU, which path"): the kernels'
copies in the isa_v3 / isa_v4 namespaces and the bf16 GEMM paths (detail::gemm_avx512bf16,
detail::gemm_amx and their internals in detail::bf16_isa). This script disassembles the
binaries it is given and fails, naming the functions, when any other function holds an
instruction beyond x86-64-v2: a VEX or EVEX instruction (AVX and above), a ymm, zmm, mask
or tile register, or one of BMI1/2, LZCNT and MOVBE. The usual way that happens is an inline
or template function of a header compiled inside a wider unit, whose copy the linker then
keeps for the whole program (kernels/isa_target.h).

  tools/isa/baseline_check.py BINARY...            exit 0, or 1 and the offending functions
  tools/isa/baseline_check.py --allow '' BINARY    nothing allowed: proves the scan finds them
"""
import argparse
import re
import subprocess
import sys

# Namespaces and functions compiled above the baseline on purpose.
DEFAULT_ALLOW = (r"::isa_v3::|::isa_v4::|kernels::detail::bf16_isa::"
                 r"|kernels::detail::gemm_avx512bf16\(|kernels::detail::gemm_amx\(")

# Instructions beyond x86-64-v2 that do not start with "v". tzcnt is left out: it is encoded
# as `rep bsf`, which GCC emits for the baseline on purpose (older CPUs run it as bsf).
SCALAR_BEYOND_V2 = {"andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "lzcnt", "movbe", "mulx",
                    "pdep", "pext", "rorx", "sarx", "shlx", "shrx"}
WIDE_REGISTER = re.compile(r"%(ymm|zmm|tmm)\d|%k[0-7]\b")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")


def offending(binary, allow):
    """{function: first offending instruction} for the functions outside `allow`."""
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", binary],
                          check=True, capture_output=True, text=True).stdout
    allowed = re.compile(allow) if allow else None
    found = {}
    function, skip = None, False
    for line in dump.splitlines():
        m = FUNCTION.match(line)
        if m:
            function = m.group(1)
            skip = bool(allowed and allowed.search(function))
            continue
        if skip or function is None or function in found:
            continue
        fields = line.split("\t")
        if len(fields) < 2 or not fields[1].strip():
            continue
        instruction = fields[1].strip()
        mnemonic = instruction.split()[0]
        if (mnemonic.startswith("v") or mnemonic in SCALAR_BEYOND_V2
                or WIDE_REGISTER.search(instruction)):
            found[function] = instruction
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow", default=DEFAULT_ALLOW,
                        help="regular expression of the functions compiled above the baseline "
                             "on purpose ('' allows none)")
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    status = 0
    for binary in args.binaries:
        found = offending(binary, args.allow)
        if found:
            status = 1
            print(f"{binary}: {len(found)} function(s) hold instructions beyond x86-64-v2:")
            for function, instruction in sorted(found.items())[:40]:
                print(f"  {function[:160]}: {instruction}")
        else:
            print(f"{binary}: no function outside the run-time-chosen levels and paths holds an "
                  "instruction beyond x86-64-v2")
    return status


if __name__ == "__main__":
    sys.exit(main())
