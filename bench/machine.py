"""The line every bench/ report starts with: the CPU, its AVX-512/BF16/AMX flags, the threads,
the load average and the date (figures are quoted with the machine that measured them)."""
import datetime
import os


def machine_line(threads):
    info = open("/proc/cpuinfo").read()
    cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    bf = [f for f in flags if f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")]
    return (f"machine: {cpu}, flags {' '.join(bf) or 'none of avx512f/avx512_bf16/amx'}; "
            f"{threads} thread(s); load average {os.getloadavg()[0]:.1f}; {datetime.date.today()}")
