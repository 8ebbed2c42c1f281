#!/usr/bin/python3
"""check_hardening.py: the binary carries the hardening its build flags ask
for.

    check_hardening.py build/attnd

Read from the ELF file with readelf (binutils):
  PIE          ELF type DYN with an interpreter (-fPIE -pie)
  full RELRO   a GNU_RELRO segment and BIND_NOW in the dynamic section
               (-Wl,-z,relro,-z,now)
  stack guard  __stack_chk_fail imported (-fstack-protector-strong)
  FORTIFY      at least one __*_chk function imported (-D_FORTIFY_SOURCE=2)
  NX stack     GNU_STACK without the execute flag
Exits 1 naming each missing property.
"""
import re
import subprocess
import sys


def readelf(flag, path):
    return subprocess.run(["readelf", "-W", flag, path], check=True,
                          capture_output=True, text=True).stdout


def main():
    path = sys.argv[1]
    header = readelf("-h", path)
    segments = readelf("-l", path)
    dynamic = readelf("-d", path)
    symbols = readelf("--dyn-syms", path)
    checks = {
        "PIE": re.search(r"Type:\s+DYN", header) is not None and
        "INTERP" in segments,
        "full RELRO": "GNU_RELRO" in segments and
        ("BIND_NOW" in dynamic or re.search(r"FLAGS_1.*\bNOW\b", dynamic)
         is not None),
        "stack protector": "__stack_chk_fail" in symbols,
        "FORTIFY_SOURCE": re.search(r"\b__\w+_chk\b",
                                    symbols.replace("__stack_chk_fail", ""))
        is not None,
        "NX stack": re.search(r"GNU_STACK\s+(\S+\s+){5}RW\s", segments)
        is not None,
    }
    missing = [k for k, ok in checks.items() if not ok]
    print("hardening of %s: %s" % (path, ", ".join(
        "%s %s" % (k, "yes" if ok else "MISSING")
        for k, ok in checks.items())))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
