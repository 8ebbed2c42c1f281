// json/numbers_cc.cc: the codec's one C++ file, a shim over two header-only
// Debian libraries: dragonbox (libdragonbox-dev: shortest round-trip digits
// of a float32) and fast_float (libfast-float-dev: correctly rounded decimal
// to float32/double). Measured against the C alternatives in
// tests/bench/bench_codec.c (make bench-codec). No exceptions, no RTTI,
// no libstdc++ symbols: the service links it with the C compiler driver.
#include <cmath>

#include <dragonbox/dragonbox.h>
#include <fast_float/fast_float.h>

#include "json/numbers.h"

void codec_num_shortest(float v, uint32_t *sig, int *exp)
{
    // Callers pass finite nonzero values: dragonbox asserts on zero.
    auto d = jkj::dragonbox::to_decimal(v, jkj::dragonbox::policy::sign::ignore);
    *sig = d.significand;
    *exp = d.exponent;
}

void codec_num_dragonbox_n(const float *v, size_t n, uint32_t *sig, int *exp)
{
    // One call through the shim for a run of values, not one a value: the
    // loop around dragonbox is compiled here, with dragonbox's to_decimal.
    for (size_t i = 0; i < n; i++) {
        float a = v[i];
        if (a == 0.0f || !std::isfinite(a)) {
            sig[i] = 0;
            exp[i] = 0;
            continue;
        }
        auto d = jkj::dragonbox::to_decimal(a,
                                            jkj::dragonbox::policy::sign::ignore);
        sig[i] = d.significand;
        exp[i] = d.exponent;
    }
}

int codec_num_parse_f32(const char *first, const char *last, float *out)
{
    // Out-of-range input yields +-inf with a success code: callers check
    // finiteness, which is the contract's rule anyway.
    auto r = fast_float::from_chars(first, last, *out);
    return (r.ec == std::errc() && r.ptr == last) ? 0 : -1;
}

int codec_num_parse_f64(const char *first, const char *last, double *out)
{
    auto r = fast_float::from_chars(first, last, *out);
    return (r.ec == std::errc() && r.ptr == last) ? 0 : -1;
}
