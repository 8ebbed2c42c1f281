// bench_simdjson.cc: the other candidate for the codec's JSON reader, for
// bench_codec.c's table of number forms: simdjson's On-Demand parser
// (Debian's libsimdjson-dev) walking a request body of the same shape as
// codec_parse reads it (an object of nested arrays of numbers, and scalar
// members), each number's token handed to fast_float for the correctly
// rounded float32, the values packed row-major with their shape checked
// rectangular as the codec checks it. Not part of the service.
#include <cstdint>
#include <cstring>

#include <fast_float/fast_float.h>
#include <simdjson.h>

#include "bench_simdjson.h"

namespace {

using namespace simdjson;

struct walk {
    float *out;
    size_t count, room;
    size_t shape[4]; // 0 until the first array at that level closes
};

// The array value v at depth level (0: the member's value): its elements,
// numbers at the innermost level, stored in order. 0, or -1 on any error.
int walk_array(ondemand::array arr, int level, walk &w)
{
    size_t n = 0;

    for (auto el : arr) {
        ondemand::value v;
        ondemand::json_type t;
        if (el.get(v) || v.type().get(t))
            return -1;
        if (t == ondemand::json_type::array) {
            ondemand::array inner;
            if (level >= 3 || v.get_array().get(inner) ||
                walk_array(inner, level + 1, w) != 0)
                return -1;
        } else if (t == ondemand::json_type::number) {
            std::string_view tok = v.raw_json_token();
            float f;
            auto r = fast_float::from_chars(tok.data(), tok.data() + tok.size(),
                                            f);
            if (r.ec != std::errc() || w.count == w.room ||
                !(f - f == 0.0f))
                return -1;
            w.out[w.count++] = f;
        } else {
            return -1;
        }
        n++;
    }
    if (w.shape[level] == 0)
        w.shape[level] = n;
    else if (w.shape[level] != n)
        return -1; // ragged
    return 0;
}

ondemand::parser &the_parser()
{
    static ondemand::parser parser;
    return parser;
}

} // namespace

extern "C" int bench_simdjson_parse(const char *body, size_t len, size_t cap,
                                    float *out, size_t room, size_t *count)
{
    walk w{out, 0, room, {0, 0, 0, 0}};
    ondemand::document doc;
    ondemand::object obj;

    if (the_parser().iterate(padded_string_view(body, len, cap)).get(doc) ||
        doc.get_object().get(obj))
        return -1;
    for (auto field : obj) {
        ondemand::value v;
        ondemand::json_type t;
        std::string_view key;
        if (field.unescaped_key().get(key) || field.value().get(v) ||
            v.type().get(t))
            return -1;
        if (t == ondemand::json_type::array) {
            ondemand::array arr;
            std::memset(w.shape, 0, sizeof w.shape);
            if (v.get_array().get(arr) || walk_array(arr, 0, w) != 0)
                return -1;
        } else if (t == ondemand::json_type::number) {
            uint64_t u;
            if (v.get_uint64().get(u))
                return -1;
        } else {
            return -1;
        }
    }
    *count = w.count;
    return 0;
}

extern "C" const char *bench_simdjson_impl(void)
{
    return simdjson::get_active_implementation()->name().c_str();
}

extern "C" size_t bench_simdjson_padding(void)
{
    return SIMDJSON_PADDING;
}
