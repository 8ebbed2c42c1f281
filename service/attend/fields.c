/* attend/fields.c: the request field table and the enums' names. */
#include "attend/fields.h"

#include <string.h>

const char *const attend_mask_names[] = {"none", "causal", NULL};
const char *const attend_weights_names[] = {"none", "per_head", "mean", NULL};
const char *const attend_encoding_names[] = {"json", "base64", NULL};
const char *const attend_layout_names[] = {"in_out", "out_in", NULL};
const char *const attend_qkv_order_names[] = {"qkv", "per_head", NULL};
const char *const attend_rope_style_names[] = {"half", "interleaved", NULL};
/* index + 1 is the attn_qk_norm_over value */
const char *const attend_qk_norm_over_names[] = {"head", "all", NULL};

const char *const attend_rope_keys[] = {"dim", "theta", "inv_freq", "style",
                                        "attention_factor", NULL};
const char *const attend_window_keys[] = {"left", "right", NULL};
const char *const attend_qk_norm_keys[] = {"q_weight", "k_weight", "eps",
                                           "over", NULL};
const char *const attend_alibi_keys[] = {"slopes", NULL};

const attend_field attend_fields[F_COUNT] = {
#define ATTEND__ROW(id, name, member, kind, lo, hi, scope, doc)              \
    {name, kind, lo, hi, scope, doc,                                          \
     F_##id == F_MASK             ? attend_mask_names                         \
     : F_##id == F_RETURN_WEIGHTS ? attend_weights_names                      \
     : F_##id == F_ENCODING       ? attend_encoding_names                     \
     : F_##id == F_WEIGHT_LAYOUT  ? attend_layout_names                       \
     : F_##id == F_QKV_ORDER      ? attend_qkv_order_names                    \
                                  : NULL,                                     \
     F_##id == F_ROPE     ? attend_rope_keys                                  \
     : F_##id == F_WINDOW ? attend_window_keys                                \
     : F_##id == F_QK_NORM ? attend_qk_norm_keys                              \
     : F_##id == F_ALIBI  ? attend_alibi_keys                                 \
                          : NULL},
    ATTEND_FIELDS(ATTEND__ROW)
#undef ATTEND__ROW
};

int attend_name_index(const char *const *names, const char *key, size_t len)
{
    int i;

    for (i = 0; names[i] != NULL; i++)
        if (strlen(names[i]) == len && memcmp(names[i], key, len) == 0)
            return i;
    return -1;
}

size_t attend_name_count(const char *const *names)
{
    size_t n = 0;

    while (names[n] != NULL)
        n++;
    return n;
}

attend_field_id attend_field_find(const char *key, size_t len)
{
    int i;

    for (i = 0; i < F_COUNT; i++)
        if (strlen(attend_fields[i].name) == len &&
            memcmp(attend_fields[i].name, key, len) == 0)
            return (attend_field_id)i;
    return F_COUNT;
}
