#!/usr/bin/python3
"""gen_pow10_g.py: prints the table of json/numbers.c's AVX-512 shortest-digit
loop (Schubfach for float32): for e = -31 .. 45, the 64-bit
g(e) = floor(10^e * 2^(63 - floor(log2 10^e))) + 1, in [2^63, 2^64).

    python3 tools/gen_pow10_g.py

Exact rational arithmetic (fractions), so no floating-point log is trusted.
The loop's results were compared with dragonbox's for every float32
(tests/exhaustive/shortest_all.c, run by make test)."""
from fractions import Fraction


def floor_log2(x):
    """floor(log2 x) for a positive Fraction x."""
    n = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** n > x:
        n -= 1
    while Fraction(2) ** (n + 1) <= x:
        n += 1
    return n


def main():
    rows = []
    for e in range(-31, 46):
        p = Fraction(10) ** e
        scaled = p * Fraction(2) ** (63 - floor_log2(p))
        g = scaled.numerator // scaled.denominator + 1
        assert 2 ** 63 <= g < 2 ** 64, e
        rows.append("UINT64_C(0x%016X)" % g)
    for i in range(0, len(rows), 2):
        print("    " + ", ".join(rows[i:i + 2]) + ",")


if __name__ == "__main__":
    main()
