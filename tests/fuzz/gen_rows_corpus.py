#!/usr/bin/python3
"""gen_rows_corpus.py: writes fuzz_rows' seed corpus (tests/fuzz/fuzz_rows.c).

    /usr/bin/python3 tests/fuzz/gen_rows_corpus.py tests/fuzz/corpus/rows

Two kinds of seed, by the first byte (fuzz_rows.c's mode: byte % 4):
  raw_*: mode 0, '[' then a row as clients write it (Python's repr of
         float32 values, json.dumps' ", ", compact, indented), some with a
         fault at a 64-byte seam (from the row's start or from its second
         number) or past 1024 bytes;
  gen_*: modes 1-3, the 16 bytes fuzz_rows.c expands into a long row
         (layout, forms, negatives, exponents, length, seed), then 3 bytes
         a fault (position near a seam or anywhere, operation, byte).
Deterministic (seeded).
"""
import os
import random
import struct
import sys

RNG = random.Random(11)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def row(count, sep, neg=0.33, exp=0.0):
    nums = []
    for _ in range(count):
        v = f32(RNG.uniform(0.001, 2.0))
        if RNG.random() < neg:
            v = -v
        if RNG.random() < exp:
            v = f32(v * 1e-6)
        nums.append(repr(v))
    return sep.join(nums)


def raw(name, body):
    return (name, b"\x00" + body.encode()[1:] if body.startswith("[")
            else b"\x00" + body.encode())


def fault_at(text, at, s, over=False):
    return text[:at] + s + text[at + (len(s) if over else 0):]


def gen(mode, layout, forms, neg, exp, length, seed, faults=()):
    head = bytes([mode, layout, forms, neg, exp,
                  (length >> 8) & 0xFF, length & 0xFF]) + seed.to_bytes(8, "big")
    head += b"\x00"  # byte 15: unused
    for f in faults:
        head += bytes(f)
    return head


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = []
    body = "[" + row(120, ", ") + "]"
    seeds.append(raw("raw_spaced", body))
    seeds.append(raw("raw_compact", "[" + row(150, ",") + "]"))
    seeds.append(raw("raw_indent",
                     "[\n      " + row(80, ",\n      ") + "\n    ]"))
    seeds.append(raw("raw_exp", "[" + row(100, ", ", exp=0.2) + "]"))
    seeds.append(raw("raw_short", "[0.5,-1,2.25,1e-05,-0.0,3.4028235e+38]"))
    for at, s, over in ((65, "01", False), (129, "1.", True),
                        (1025, ".5", False), (1089, " ,", True),
                        (1023, "1e5", False), (2049, "-", True)):
        b = "[" + row(150, ", ") + "]"
        seeds.append(raw("raw_fault_%d" % at, fault_at(b, at, s, over)))
    # the same, relative to the second number, where codec_array_parse's
    # first row call starts (it reads the first number alone)
    for k, s, over in ((1, "01", False), (16, "1..2", True),
                       (2, "-", False)):
        b = "[" + row(150, ", ") + "]"
        second = b.index(", ") + 2
        at = second + 64 * k - (1 if k == 2 else 0)
        seeds.append(raw("raw_fault2_%d" % at, fault_at(b, at, s, over)))
    # modes 1-3: the second lowest bits also pick the share doublings,
    # the high nibble the small room
    seeds.append(("gen_spaced", gen(1, 1, 0x00, 33, 0, 3000, 1)))
    seeds.append(("gen_compact", gen(2, 0, 0x00, 33, 0, 4000, 2)))
    seeds.append(("gen_indent", gen(3, 2, 0x00, 50, 0, 2500, 3)))
    seeds.append(("gen_mixed_seps", gen(0x15, 4, 0x80, 40, 5, 5000, 4)))
    seeds.append(("gen_exp", gen(0x29, 1, 0x00, 33, 3, 3000, 5)))
    seeds.append(("gen_shortest", gen(0x31, 0, 0x45, 20, 0, 3000, 6)))
    seeds.append(("gen_fixed", gen(0x42, 1, 0x46, 50, 0, 2000, 7)))
    seeds.append(("gen_midpoint", gen(0x53, 0, 0x48, 50, 0, 2000, 8)))
    seeds.append(("gen_faults_seams",
                  gen(1, 1, 0x00, 33, 0, 6000, 9,
                      [(0x81, 0x83, 0), (0x90, 0x7B, 2), (0x91, 0x89, 0x8A),
                       (0xA0, 0x40, 0x85)])))
    seeds.append(("gen_faults_any",
                  gen(2, 0, 0x80, 33, 0, 4000, 10,
                      [(0x10, 0x03, 17), (0x22, 0x02, 1), (0x05, 0x01, 0x8C)])))
    seeds.append(("gen_tail", gen(0x81, 0x81, 0x00, 33, 0, 1500, 12)))
    for name, data in seeds:
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
