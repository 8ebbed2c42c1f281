/* json/numbers.c: the text layout of a float32 from its shortest decimal digits
 * (dragonbox, via json/numbers_cc.cc): plain notation for moderate exponents,
 * scientific otherwise, as printf's %g would lay them out. Plain notation
 * takes one SSSE3 byte shuffle a number where the CPU has it; the portable
 * layout writes every notation, and the tests hold the two to the same
 * text (every float32 was compared once, 2^32 values, when the SSSE3 one
 * was written). With AVX-512, runs of values (codec_num_text_n) take the
 * shortest digits and the texts eight at a time: the same digits as
 * dragonbox and the same texts as the layouts above, which make test
 * checks on every float32 (tests/exhaustive/shortest_all.c). */
#include "json/numbers.h"

#include <math.h>
#include <string.h>

static const char codec__pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233"
    "34353637383940414243444546474849505152535455565758596061626364656667"
    "6869707172737475767778798081828384858687888990919293949596979899";

/* The layout from the digits one at a time: every notation. Used for zero,
 * non-finite values and the scientific notation, and for all values on a
 * machine without SSSE3. */
static size_t codec__format_slow(float v, uint32_t sig, int e, char *buf)
{
    char digits[10];
    int k, point, i;
    size_t len = 0;

    if (!isfinite(v)) {
        memcpy(buf, "null", 4);
        return 4;
    }
    if (signbit(v))
        buf[len++] = '-';
    if (v == 0.0f) {
        /* dragonbox needs a nonzero input; "-0" reads back as -0.0f */
        buf[len++] = '0';
        return len;
    }
    /* at most 9 significant digits for a float32, written right to left two
     * at a time (half the divisions of one at a time) */
    k = sig < 10 ? 1 : sig < 100 ? 2 : sig < 1000 ? 3 : sig < 10000 ? 4
        : sig < 100000 ? 5 : sig < 1000000 ? 6 : sig < 10000000 ? 7
        : sig < 100000000 ? 8 : 9;
    {
        char *d = digits + k;
        while (sig >= 100) {
            uint32_t q = sig / 100;
            d -= 2;
            memcpy(d, codec__pairs + 2 * (sig - q * 100), 2);
            sig = q;
        }
        if (sig >= 10)
            memcpy(d - 2, codec__pairs + 2 * sig, 2);
        else
            d[-1] = (char)('0' + sig);
    }
    /* |v| = 0.d1d2..dk * 10^point */
    point = k + e;
    if (point > 9 || point < -3) {
        /* scientific: d1.d2..dk e(point-1) */
        int x = point - 1;
        buf[len++] = digits[0];
        if (k > 1) {
            buf[len++] = '.';
            memcpy(buf + len, digits + 1, (size_t)(k - 1));
            len += (size_t)(k - 1);
        }
        buf[len++] = 'e';
        if (x < 0) {
            buf[len++] = '-';
            x = -x;
        }
        if (x >= 10)
            buf[len++] = (char)('0' + x / 10);
        buf[len++] = (char)('0' + x % 10);
    } else if (point <= 0) {
        /* 0.000ddd */
        buf[len++] = '0';
        buf[len++] = '.';
        for (i = 0; i < -point; i++)
            buf[len++] = '0';
        memcpy(buf + len, digits, (size_t)k);
        len += (size_t)k;
    } else if (point >= k) {
        /* integer: digits then zeros */
        memcpy(buf + len, digits, (size_t)k);
        len += (size_t)k;
        for (i = k; i < point; i++)
            buf[len++] = '0';
    } else {
        memcpy(buf + len, digits, (size_t)point);
        len += (size_t)point;
        buf[len++] = '.';
        memcpy(buf + len, digits + point, (size_t)(k - point));
        len += (size_t)(k - point);
    }
    return len;
}

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

/* Digit count (1 to 9) of sig > 0: digits_min[b] is that of 2^b,
 * the least value with b + 1 bits, and a range [2^b, 2^(b+1)) holds at most
 * one power of ten. */
static int codec__digit_count(uint32_t sig)
{
    static const unsigned char digits_min[32] = {
        1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5,
        5, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 9, 9, 9, 10, 10};
    static const uint32_t pow10[11] = {1,         10,        100,
                                       1000,      10000,     100000,
                                       1000000,   10000000,  100000000,
                                       1000000000, 0xFFFFFFFFu};
    int t = digits_min[31 - __builtin_clz(sig)];

    return t + (sig >= pow10[t]);
}

/* Eight decimal digits of x (< 10^8) as ASCII, the most significant in the
 * lowest byte (first in memory): x split into 4 + 4, 2 + 2, 1 + 1 digits in
 * the lanes of one 64-bit word, divisions by 100 and 10 done as
 * multiply-shifts that are exact in these ranges (checked for every x). */
static inline __attribute__((always_inline)) uint64_t codec__ascii8(uint32_t x)
{
    uint64_t hi = x / 10000, lo = x % 10000;
    uint64_t merged = hi | (lo << 32);
    uint64_t top = ((merged * 10486) >> 20) & ((UINT64_C(0x7F) << 32) | 0x7F);
    uint64_t bot = merged - 100 * top;
    uint64_t hundreds = (bot << 16) + top;
    uint64_t tens = (hundreds * 103) >> 10;

    tens &= (UINT64_C(0xF) << 48) | (UINT64_C(0xF) << 32) |
            (UINT64_C(0xF) << 16) | UINT64_C(0xF);
    tens += (hundreds - 10 * tens) << 8;
    return tens | UINT64_C(0x3030303030303030);
}

/* Every plain layout of k digits (1 to 9) with the point at `point` (-3 to
 * 9, |v| = 0.d1..dk * 10^point) is one byte shuffle of the vector
 * [the 9 digits of sig, leading zeros included] '.' '0':
 * codec__place[k - 1][point + 3], and the text's length beside it. Lanes
 * past the text get 0x80 (zero bytes, scratch the caller writes over). */
static __m128i codec__place[9][13];
static unsigned char codec__place_len[9][13];
/* The same shuffles for the AVX-512 texts, sign first: [neg][place] with
 * place (k - 1) * 13 + point + 3 for the plain layouts and CODEC__ZERO for
 * a zero, whose text is the '0' of the nine digits of sig 0. The source
 * vector has a '-' in lane 11. */
#define CODEC__ZERO (9 * 13)
static __m128i codec__text_ctl[2][CODEC__ZERO + 1];
static int codec__ssse3, codec__avx512;

__attribute__((constructor)) static void codec__place_init(void)
{
    int k, point, i;

    for (k = 1; k <= 9; k++)
        for (point = -3; point <= 9; point++) {
            unsigned char b[16];
            int n = 0, first = 9 - k; /* lane of the first digit */
            memset(b, 0x80, sizeof b);
            if (point <= 0) { /* 0.000ddd */
                b[n++] = 10;
                b[n++] = 9;
                for (i = 0; i < -point; i++)
                    b[n++] = 10;
                for (i = 0; i < k; i++)
                    b[n++] = (unsigned char)(first + i);
            } else if (point >= k) { /* ddd000 */
                for (i = 0; i < k; i++)
                    b[n++] = (unsigned char)(first + i);
                for (i = k; i < point; i++)
                    b[n++] = 10;
            } else { /* dd.ddd */
                for (i = 0; i < k; i++) {
                    if (i == point)
                        b[n++] = 9;
                    b[n++] = (unsigned char)(first + i);
                }
            }
            memcpy(&codec__place[k - 1][point + 3], b, sizeof b);
            codec__place_len[k - 1][point + 3] = (unsigned char)n;
        }
    for (i = 0; i <= CODEC__ZERO; i++) {
        unsigned char b[17];

        memset(b, 0x80, sizeof b);
        if (i < CODEC__ZERO)
            memcpy(b + 1, &codec__place[i / 13][i % 13], 16);
        else
            b[1] = 0;
        memcpy(&codec__text_ctl[0][i], b + 1, 16);
        b[0] = 11; /* '-' */
        memcpy(&codec__text_ctl[1][i], b, 16);
    }
    __builtin_cpu_init(); /* a constructor may run before libgcc's */
    codec__ssse3 = __builtin_cpu_supports("ssse3");
    codec__avx512 = __builtin_cpu_supports("avx512f") &&
                    __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512dq") &&
                    __builtin_cpu_supports("avx512cd");
}

/* The plain layout without a branch on the value: the nine digits of sig
 * (right-aligned, so independent of its digit count), then one shuffle
 * and one 16-byte store. */
__attribute__((target("ssse3"))) static size_t
codec__layout_ssse3(uint32_t neg, uint32_t sig, int k, int point, char *buf)
{
    uint64_t a8 = codec__ascii8(sig % 100000000);
    uint64_t head = ('0' + sig / 100000000) | (a8 << 8);
    uint64_t tail = (a8 >> 56) | ((uint64_t)'.' << 8) | ((uint64_t)'0' << 16);
    __m128i d = _mm_set_epi64x((long long)tail, (long long)head);

    d = _mm_shuffle_epi8(
        d, _mm_load_si128(&codec__place[k - 1][point + 3]));
    buf[0] = '-';
    _mm_storeu_si128((__m128i *)(void *)(buf + neg), d);
    return neg + codec__place_len[k - 1][point + 3];
}

/* The shortest digits of eight floats at once, in the eight 64-bit lanes of
 * an AVX-512 register: Giulietti's Schubfach ("The Schubfach way to render
 * doubles", 2020) for float32, every branch a mask. The same digits as
 * dragonbox (ties to even, trailing zeros removed): tests/exhaustive/
 * shortest_all.c compares the two on every float32 in make test. With v =
 * c * 2^q, k = floor(log10 2^q) (of 3/4 2^q where the float below is
 * closer) and h in [1, 4], the three scaled bounds c * 10^-k * 2^h for
 * c - 1/2, c and c + 1/2 are each rounded to odd from one 32 x 64-bit
 * product, with g = codec__pow10_g[-k + 31] (tools/gen_pow10_g.py). Of the
 * integers the interval holds, the one with a digit fewer wins when there is
 * one, else the one nearer to v. */
static const uint64_t codec__pow10_g[77] = {
    UINT64_C(0x81CEB32C4B43FCF5), UINT64_C(0xA2425FF75E14FC32),
    UINT64_C(0xCAD2F7F5359A3B3F), UINT64_C(0xFD87B5F28300CA0E),
    UINT64_C(0x9E74D1B791E07E49), UINT64_C(0xC612062576589DDB),
    UINT64_C(0xF79687AED3EEC552), UINT64_C(0x9ABE14CD44753B53),
    UINT64_C(0xC16D9A0095928A28), UINT64_C(0xF1C90080BAF72CB2),
    UINT64_C(0x971DA05074DA7BEF), UINT64_C(0xBCE5086492111AEB),
    UINT64_C(0xEC1E4A7DB69561A6), UINT64_C(0x9392EE8E921D5D08),
    UINT64_C(0xB877AA3236A4B44A), UINT64_C(0xE69594BEC44DE15C),
    UINT64_C(0x901D7CF73AB0ACDA), UINT64_C(0xB424DC35095CD810),
    UINT64_C(0xE12E13424BB40E14), UINT64_C(0x8CBCCC096F5088CC),
    UINT64_C(0xAFEBFF0BCB24AAFF), UINT64_C(0xDBE6FECEBDEDD5BF),
    UINT64_C(0x89705F4136B4A598), UINT64_C(0xABCC77118461CEFD),
    UINT64_C(0xD6BF94D5E57A42BD), UINT64_C(0x8637BD05AF6C69B6),
    UINT64_C(0xA7C5AC471B478424), UINT64_C(0xD1B71758E219652C),
    UINT64_C(0x83126E978D4FDF3C), UINT64_C(0xA3D70A3D70A3D70B),
    UINT64_C(0xCCCCCCCCCCCCCCCD), UINT64_C(0x8000000000000001),
    UINT64_C(0xA000000000000001), UINT64_C(0xC800000000000001),
    UINT64_C(0xFA00000000000001), UINT64_C(0x9C40000000000001),
    UINT64_C(0xC350000000000001), UINT64_C(0xF424000000000001),
    UINT64_C(0x9896800000000001), UINT64_C(0xBEBC200000000001),
    UINT64_C(0xEE6B280000000001), UINT64_C(0x9502F90000000001),
    UINT64_C(0xBA43B74000000001), UINT64_C(0xE8D4A51000000001),
    UINT64_C(0x9184E72A00000001), UINT64_C(0xB5E620F480000001),
    UINT64_C(0xE35FA931A0000001), UINT64_C(0x8E1BC9BF04000001),
    UINT64_C(0xB1A2BC2EC5000001), UINT64_C(0xDE0B6B3A76400001),
    UINT64_C(0x8AC7230489E80001), UINT64_C(0xAD78EBC5AC620001),
    UINT64_C(0xD8D726B7177A8001), UINT64_C(0x878678326EAC9001),
    UINT64_C(0xA968163F0A57B401), UINT64_C(0xD3C21BCECCEDA101),
    UINT64_C(0x84595161401484A1), UINT64_C(0xA56FA5B99019A5C9),
    UINT64_C(0xCECB8F27F4200F3B), UINT64_C(0x813F3978F8940985),
    UINT64_C(0xA18F07D736B90BE6), UINT64_C(0xC9F2C9CD04674EDF),
    UINT64_C(0xFC6F7C4045812297), UINT64_C(0x9DC5ADA82B70B59E),
    UINT64_C(0xC5371912364CE306), UINT64_C(0xF684DF56C3E01BC7),
    UINT64_C(0x9A130B963A6C115D), UINT64_C(0xC097CE7BC90715B4),
    UINT64_C(0xF0BDC21ABB48DB21), UINT64_C(0x96769950B50D88F5),
    UINT64_C(0xBC143FA4E250EB32), UINT64_C(0xEB194F8E1AE525FE),
    UINT64_C(0x92EFD1B8D0CF37BF), UINT64_C(0xB7ABC627050305AE),
    UINT64_C(0xE596B7B0C643C71A), UINT64_C(0x8F7E32CE7BEA5C70),
    UINT64_C(0xB35DBF821AE4F38C),
};

#define CODEC__AVX512 \
    __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512cd")))

/* floor(g * cp / 2^64), its lowest bit set when the rest is not zero (round
 * to odd); g in [2^63, 2^64), cp < 2^32. ghi is g >> 32. */
CODEC__AVX512 static inline __m512i codec__round_odd(__m512i g, __m512i ghi,
                                                     __m512i cp)
{
    const __m512i one = _mm512_set1_epi64(1);
    __m512i lo = _mm512_mul_epu32(g, cp), hi = _mm512_mul_epu32(ghi, cp);
    __m512i top, low;

    hi = _mm512_add_epi64(hi, _mm512_srli_epi64(lo, 32));
    top = _mm512_srli_epi64(hi, 32);
    low = _mm512_and_si512(hi, _mm512_set1_epi64(0xFFFFFFFF));
    /* Schubfach's sticky bit: the 32 bits below, all but the lowest */
    return _mm512_mask_or_epi64(top, _mm512_cmpgt_epu64_mask(low, one), top,
                                one);
}

/* x / 10 for x < 2^32, as a multiply-shift exact in that range */
CODEC__AVX512 static inline __m512i codec__div10(__m512i x)
{
    return _mm512_srli_epi64(
        _mm512_mul_epu32(x, _mm512_set1_epi64(0xCCCCCCCD)), 35);
}

/* r / 10^j where 10^j divides r, else r: r * 5^-j (mod 2^64) rotated right
 * by j is r / 10^j exactly when 10^j divides r, and above (2^64 - 1) / 10^j
 * otherwise, so one product tests and divides (no branch on the value) */
CODEC__AVX512 static inline __m512i codec__strip(__m512i r, __m512i *e,
                                                 uint64_t inv, int j,
                                                 uint64_t max)
{
    __m512i t = _mm512_rorv_epi64(
        _mm512_mullo_epi64(r, _mm512_set1_epi64((long long)inv)),
        _mm512_set1_epi64(j));
    __mmask8 z = _mm512_cmple_epu64_mask(t, _mm512_set1_epi64((long long)max));

    *e = _mm512_mask_add_epi64(*e, z, *e, _mm512_set1_epi64(j));
    return _mm512_mask_mov_epi64(r, z, t);
}

/* The shortest digits of the eight floats whose bits are in the 64-bit
 * lanes of `bits` (the `live` ones): sig in *sig, exponent in *exp, both 0
 * for zeros and non-finite values. Returns the mask of the finite nonzero
 * lanes. */
CODEC__AVX512 static inline __attribute__((always_inline)) __mmask8
codec__digits8(__m512i bits, __mmask8 live, __m512i *sig, __m512i *exp)
{
    const __m512i one = _mm512_set1_epi64(1), two = _mm512_set1_epi64(2);
    __m512i f = _mm512_and_si512(bits, _mm512_set1_epi64(0x7FFFFF));
    __m512i be = _mm512_and_si512(_mm512_srli_epi64(bits, 23),
                                  _mm512_set1_epi64(0xFF));
    __mmask8 normal = _mm512_test_epi64_mask(be, be);
    /* finite and not zero; the rest get sig 0 and exponent 0 */
    __mmask8 valid =
        live & _mm512_cmpneq_epi64_mask(be, _mm512_set1_epi64(0xFF)) &
        _mm512_test_epi64_mask(bits, _mm512_set1_epi64(0x7FFFFFFF));
    /* a power of two above the least normal: the float below is nearer */
    __mmask8 closer =
        _mm512_testn_epi64_mask(f, f) & _mm512_cmpgt_epu64_mask(be, one);
    __m512i c = _mm512_mask_or_epi64(f, normal, f, _mm512_set1_epi64(0x800000));
    __m512i q = _mm512_mask_sub_epi64(_mm512_set1_epi64(-149), normal, be,
                                      _mm512_set1_epi64(150));
    /* an odd c excludes the interval's ends (ties to even) */
    __mmask8 odd = _mm512_test_epi64_mask(c, one);
    __m512i cb = _mm512_slli_epi64(c, 2);
    __m512i cbl = _mm512_mask_add_epi64(_mm512_sub_epi64(cb, two), closer,
                                        _mm512_sub_epi64(cb, two), one);
    __m512i cbr = _mm512_add_epi64(cb, two);
    /* k = floor(log10 2^q), or of 3/4 2^q; h = q + floor(log2 10^-k) + 1 */
    __m512i kq = _mm512_mul_epi32(q, _mm512_set1_epi64(1262611));
    __m512i k = _mm512_srai_epi64(
        _mm512_mask_sub_epi64(kq, closer, kq, _mm512_set1_epi64(524031)), 22);
    __m512i negk = _mm512_sub_epi64(_mm512_setzero_si512(), k);
    __m512i h = _mm512_add_epi64(
        _mm512_add_epi64(q, one),
        _mm512_srai_epi64(_mm512_mul_epi32(negk, _mm512_set1_epi64(1741647)),
                          19));
    /* g from four registers of the table for -k + 31 in [24, 56) (|v|
     * from about 1e-23 to 1e10: probabilities and activations alike); the
     * gather, slow next to a permute, only for lanes outside */
    __m512i gi = _mm512_add_epi64(negk, _mm512_set1_epi64(31 - 24));
    __m512i g = _mm512_mask_mov_epi64(
        _mm512_permutex2var_epi64(_mm512_loadu_si512(codec__pow10_g + 24), gi,
                                  _mm512_loadu_si512(codec__pow10_g + 32)),
        _mm512_test_epi64_mask(gi, _mm512_set1_epi64(16)),
        _mm512_permutex2var_epi64(_mm512_loadu_si512(codec__pow10_g + 40), gi,
                                  _mm512_loadu_si512(codec__pow10_g + 48)));
    __mmask8 far =
        valid & _mm512_cmpgt_epu64_mask(gi, _mm512_set1_epi64(31));
    if (far)
        g = _mm512_mask_i64gather_epi64(
            g, far, _mm512_add_epi64(negk, _mm512_set1_epi64(31)),
            (const void *)codec__pow10_g, 8);
    __m512i ghi = _mm512_srli_epi64(g, 32);
    __m512i vbl = codec__round_odd(g, ghi, _mm512_sllv_epi64(cbl, h));
    __m512i vb = codec__round_odd(g, ghi, _mm512_sllv_epi64(cb, h));
    __m512i vbr = codec__round_odd(g, ghi, _mm512_sllv_epi64(cbr, h));
    __m512i lower = _mm512_mask_add_epi64(vbl, odd, vbl, one);
    __m512i upper = _mm512_mask_sub_epi64(vbr, odd, vbr, one);
    /* s: the integer part of v's scaled value; sp its tenth */
    __m512i s = _mm512_srli_epi64(vb, 2), s4 = _mm512_slli_epi64(s, 2);
    __m512i sp = codec__div10(s);
    __m512i sp40 = _mm512_add_epi64(_mm512_slli_epi64(sp, 5),
                                    _mm512_slli_epi64(sp, 3));
    __mmask8 u1 = _mm512_cmple_epu64_mask(lower, sp40);
    __mmask8 w1 = _mm512_cmple_epu64_mask(
        _mm512_add_epi64(sp40, _mm512_set1_epi64(40)), upper);
    /* exactly one of 10 sp and 10 (sp + 1) inside: a digit fewer */
    __mmask8 fewer =
        _mm512_cmpge_epu64_mask(s, _mm512_set1_epi64(10)) & (u1 ^ w1);
    __mmask8 u0 = _mm512_cmple_epu64_mask(lower, s4);
    __mmask8 w0 = _mm512_cmple_epu64_mask(
        _mm512_add_epi64(s4, _mm512_set1_epi64(4)), upper);
    __m512i mid = _mm512_add_epi64(s4, two);
    __mmask8 nearer_up =
        _mm512_cmpgt_epu64_mask(vb, mid) |
        (_mm512_cmpeq_epi64_mask(vb, mid) & _mm512_test_epi64_mask(s, one));
    /* exactly one of s and s + 1 inside: that one; else the nearer */
    __mmask8 up = ((u0 ^ w0) & w0) | (~(u0 ^ w0) & nearer_up);
    __m512i r = _mm512_mask_add_epi64(s, up, s, one);
    __m512i e = _mm512_mask_add_epi64(k, fewer, k, one);

    r = _mm512_mask_add_epi64(r, fewer, sp, _mm512_maskz_mov_epi64(w1, one));
    r = _mm512_maskz_mov_epi64(valid, r);
    /* trailing zeros off: r has at most 9 digits and at most 7 of them
     * trailing zeros (every float32 checked), so four, two and one zero
     * cover all without a branch (a loop a zero at a time mispredicted
     * on one pass in seven) */
    r = codec__strip(r, &e, UINT64_C(0xD288CE703AFB7E91), 4,
                     UINT64_C(0x68DB8BAC710CB));
    r = codec__strip(r, &e, UINT64_C(0x8F5C28F5C28F5C29), 2,
                     UINT64_C(0x28F5C28F5C28F5C));
    r = codec__strip(r, &e, UINT64_C(0xCCCCCCCCCCCCCCCD), 1,
                     UINT64_C(0x1999999999999999));
    *sig = r;
    *exp = _mm512_maskz_mov_epi64(valid, e); /* r = 0 looked divisible */
    return valid;
}

CODEC__AVX512 static void codec__shortest_avx512(const float *v, size_t n,
                                                 uint32_t *sig, int *exp)
{
    for (size_t i = 0; i < n; i += 8) {
        __mmask8 live = n - i >= 8 ? 0xFF : (__mmask8)((1u << (n - i)) - 1);
        __m512i bits =
            _mm512_cvtepu32_epi64(_mm256_maskz_loadu_epi32(live, v + i));
        __m512i r, e;

        codec__digits8(bits, live, &r, &e);
        _mm256_mask_storeu_epi32(sig + i, live, _mm512_cvtepi64_epi32(r));
        _mm256_mask_storeu_epi32(exp + i, live, _mm512_cvtepi64_epi32(e));
    }
}

/* 8 ASCII digits of each x < 10^8 (64-bit lanes), the most significant in
 * the lowest byte: x as 4 + 4 digits in 32-bit halves, 2 + 2 in 16-bit
 * quarters, then tens and units in bytes; every division a multiply-shift
 * exact in its range. */
CODEC__AVX512 static inline __m512i codec__ascii8x8(__m512i x)
{
    __m512i hi = _mm512_srli_epi64(
        _mm512_mul_epu32(x, _mm512_set1_epi64(3518437209u)), 45);
    __m512i lo = _mm512_sub_epi64(
        x, _mm512_mul_epu32(hi, _mm512_set1_epi64(10000)));
    __m512i q = _mm512_or_si512(hi, _mm512_slli_epi64(lo, 32)); /* < 10^4 */
    __m512i q100 = _mm512_srli_epi16(
        _mm512_mulhi_epu16(q, _mm512_set1_epi32(5243)), 3);
    __m512i p = _mm512_or_si512(
        q100, _mm512_slli_epi32(
                  _mm512_sub_epi16(
                      q, _mm512_mullo_epi16(q100, _mm512_set1_epi16(100))),
                  16)); /* pairs, < 100 */
    __m512i tens = _mm512_srli_epi16(
        _mm512_mullo_epi16(p, _mm512_set1_epi16(103)), 10);
    __m512i units = _mm512_sub_epi16(
        p, _mm512_mullo_epi16(tens, _mm512_set1_epi16(10)));

    return _mm512_add_epi8(_mm512_or_si512(tens, _mm512_slli_epi16(units, 8)),
                           _mm512_set1_epi8('0'));
}

/* The texts codec_num_layout writes, eight at a time: the nine digits of
 * sig, '.', '0' and '-' in one vector a value, one byte shuffle from
 * codec__text_ctl, no branch on the value; the digit count and the
 * length computed, not looked up. Scientific notation and
 * non-finite values take codec__format_slow. */
CODEC__AVX512 static void codec__text_avx512(const float *v,
                                             const uint32_t *sig,
                                             const int *exp, size_t n,
                                             char (*text)[16],
                                             unsigned char *len)
{
    const __m512i one = _mm512_set1_epi64(1);
    const __m512i even = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
    const __m512i odd = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);

    for (size_t i = 0; i < n; i += 8) {
        __mmask8 live = n - i >= 8 ? 0xFF : (__mmask8)((1u << (n - i)) - 1);
        __m512i bits =
            _mm512_cvtepu32_epi64(_mm256_maskz_loadu_epi32(live, v + i));
        __m512i sg =
            _mm512_cvtepu32_epi64(_mm256_maskz_loadu_epi32(live, sig + i));
        __m512i e =
            _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(live, exp + i));
        __m512i top = _mm512_srli_epi64(
            _mm512_mul_epu32(sg, _mm512_set1_epi64(1441151881u)), 57);
        __m512i digits = codec__ascii8x8(_mm512_sub_epi64(
            sg, _mm512_mul_epu32(top, _mm512_set1_epi64(100000000))));
        __m512i k, point, place, neg, idx, src0, src1;
        __m256i plen;
        __mmask8 zero, plain, slow;

        /* k: the digit count of sig, 1 to 9: with L its bit length, t =
         * floor(L log10 2) (L * 1233 >> 12, exact for L <= 32) digits
         * or one more, as sig reaches 10^t */
        {
            const __m512i p10lo = _mm512_set_epi64(
                10000000, 1000000, 100000, 10000, 1000, 100, 10, 1);
            const __m512i p10hi = _mm512_set_epi64(
                0, 0, 0, 0, 0, 0, 1000000000, 100000000);
            __m512i t = _mm512_srli_epi64(
                _mm512_mul_epu32(_mm512_sub_epi64(_mm512_set1_epi64(64),
                                                  _mm512_lzcnt_epi64(sg)),
                                 _mm512_set1_epi64(1233)),
                12);
            k = _mm512_mask_add_epi64(
                t, _mm512_cmpge_epu64_mask(
                       sg, _mm512_permutex2var_epi64(p10lo, t, p10hi)),
                t, one);
            k = _mm512_max_epu64(k, one); /* sig 0 */
        }
        point = _mm512_add_epi64(k, e);
        zero = live &
               _mm512_testn_epi64_mask(bits, _mm512_set1_epi64(0x7FFFFFFF));
        plain = _mm512_test_epi64_mask(sg, sg) &
                _mm512_cmple_epi64_mask(point, _mm512_set1_epi64(9)) &
                _mm512_cmpge_epi64_mask(point, _mm512_set1_epi64(-3));
        slow = live & ~zero & ~plain;
        place = _mm512_add_epi64(
            _mm512_add_epi64(_mm512_mul_epu32(_mm512_sub_epi64(k, one),
                                              _mm512_set1_epi64(13)),
                             point),
            _mm512_set1_epi64(3));
        place = _mm512_mask_mov_epi64(place, (__mmask8)~plain,
                                      _mm512_set1_epi64(CODEC__ZERO));
        neg = _mm512_srli_epi64(bits, 31);
        idx = _mm512_add_epi64(
            place, _mm512_mul_epu32(neg, _mm512_set1_epi64(CODEC__ZERO + 1)));
        /* the length: "0." and -point zeros before the k digits when
         * point <= 0, the digits and point - k zeros when point >= k, the
         * k digits and a point between; a zero and the other values
         * (whose length the slow layout writes) "0"; the sign before */
        {
            __m512i ln = _mm512_add_epi64(
                _mm512_max_epi64(k, point),
                _mm512_maskz_mov_epi64(_mm512_cmplt_epi64_mask(point, k),
                                       one));
            ln = _mm512_mask_sub_epi64(
                ln, _mm512_cmple_epi64_mask(point, _mm512_setzero_si512()),
                _mm512_add_epi64(ln, one), point);
            ln = _mm512_mask_mov_epi64(ln, (__mmask8)~plain, one);
            plen = _mm512_cvtepi64_epi32(_mm512_add_epi64(ln, neg));
        }
        /* source vectors: [top, 8 digits] [last digit, '.', '0', '-'] */
        src0 = _mm512_or_si512(
            _mm512_add_epi64(top, _mm512_set1_epi64('0')),
            _mm512_slli_epi64(digits, 8));
        src1 = _mm512_or_si512(_mm512_srli_epi64(digits, 56),
                               _mm512_set1_epi64(0x2D302E00));
        {
            /* value i's source and control in 128-bit lane i % 4 of t0
             * (i < 4) or t1: the controls loaded one by one (two gathers
             * of their halves took a third longer on this loop) */
            const __m128i *ctl = &codec__text_ctl[0][0];
            uint64_t at[8];
            __m512i c0, c1, t0, t1;

            _mm512_storeu_si512(at, idx);
            c0 = _mm512_castsi128_si512(_mm_load_si128(ctl + at[0]));
            c1 = _mm512_castsi128_si512(_mm_load_si128(ctl + at[4]));
            c0 = _mm512_inserti32x4(c0, _mm_load_si128(ctl + at[1]), 1);
            c1 = _mm512_inserti32x4(c1, _mm_load_si128(ctl + at[5]), 1);
            c0 = _mm512_inserti32x4(c0, _mm_load_si128(ctl + at[2]), 2);
            c1 = _mm512_inserti32x4(c1, _mm_load_si128(ctl + at[6]), 2);
            c0 = _mm512_inserti32x4(c0, _mm_load_si128(ctl + at[3]), 3);
            c1 = _mm512_inserti32x4(c1, _mm_load_si128(ctl + at[7]), 3);
            t0 = _mm512_shuffle_epi8(
                _mm512_permutex2var_epi64(src0, even, src1), c0);
            t1 = _mm512_shuffle_epi8(
                _mm512_permutex2var_epi64(src0, odd, src1), c1);
            _mm512_storeu_si512(text[i], t0);
            _mm512_storeu_si512(text[i + 4], t1);
        }
        _mm_storel_epi64((__m128i *)(void *)(len + i),
                         _mm256_cvtepi32_epi8(plen));
        while (slow) {
            int b = __builtin_ctz(slow);
            char tmp[CODEC_NUM_BUF];

            slow &= (__mmask8)(slow - 1);
            len[i + b] = (unsigned char)codec__format_slow(
                v[i + b], sig[i + b], exp[i + b], tmp);
            memcpy(text[i + b], tmp, 16);
        }
    }
}

#endif

void codec_num_text_n(const float *v, size_t n, char (*text)[16],
                      unsigned char *len)
{
    uint32_t sig[CODEC_NUM_RUN];
    int exp[CODEC_NUM_RUN];
    char tmp[CODEC_NUM_BUF];

    codec_num_shortest_n(v, n, sig, exp);
#if defined(__x86_64__) && defined(__GNUC__)
    if (codec__avx512) {
        codec__text_avx512(v, sig, exp, n, text, len);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        len[i] = (unsigned char)codec_num_layout(v[i], sig[i], exp[i], tmp);
        memcpy(text[i], tmp, 16);
    }
}

void codec_num_shortest_n(const float *v, size_t n, uint32_t *sig, int *exp)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (codec__avx512) {
        codec__shortest_avx512(v, n, sig, exp);
        return;
    }
#endif
    codec_num_dragonbox_n(v, n, sig, exp);
}

int codec_num_shortest_simd(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return codec__avx512;
#else
    return 0;
#endif
}

size_t codec_num_layout(float v, uint32_t sig, int e, char *buf)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (sig != 0 && codec__ssse3) {
        /* |v| = 0.d1..dk * 10^point, k <= 9 */
        int k = codec__digit_count(sig), point = k + e;
        if (point <= 9 && point >= -3)
            return codec__layout_ssse3(signbit(v) ? 1u : 0u, sig, k, point,
                                       buf);
    }
#endif
    return codec__format_slow(v, sig, e, buf);
}

/* The shortest digits of v as codec_num_shortest_n gives them: sig 0 (and
 * *e 0) for zero and non-finite values. */
static uint32_t codec__shortest(float v, int *e)
{
    uint32_t sig;

    codec_num_dragonbox_n(&v, 1, &sig, e);
    return sig;
}

size_t codec_num_format_portable(float v, char *buf)
{
    int e;
    uint32_t sig = codec__shortest(v, &e);

    return codec__format_slow(v, sig, e, buf);
}

size_t codec_num_format(float v, char *buf)
{
    int e;
    uint32_t sig = codec__shortest(v, &e);

    return codec_num_layout(v, sig, e, buf);
}
