/* attend/fields.h: the one table of request fields. It drives parsing
 * (parse.c dispatches on a field's kind), the duplicate-field and
 * unknown-field checks, the "did you mean" of errors, and a test holds the
 * OpenAPI document's AttendRequest properties to exactly these names. The
 * names of every enum value live here too, so parsing and writing agree.
 *
 * FIELD(id, "name", member, kind, min_rank, max_rank, scope, doc)
 *   member   the codec__fields member parse.c fills (fields.c never
 *            touches it; the column keeps the table in one place)
 *   kind     how the value is read (attend_kind)
 *   scope    ATTEND_LAYER: a default that a layer of a `layers` request may
 *            override; ATTEND_WHOLE: applies to the whole request
 *   doc      the accepted shapes, or what is expected, for messages */
#ifndef ATTND_FIELDS_H
#define ATTND_FIELDS_H

#include <stddef.h>

typedef enum attend_kind {
    ATTEND_F32,    /* nested arrays or a tensor object of numbers */
    ATTEND_BOOL,   /* nested arrays of booleans */
    ATTEND_INDEX,  /* nested arrays of integers >= 0 */
    ATTEND_COUNT,  /* an integer >= 1 */
    ATTEND_NUMBER, /* a number > 0, finite in float32 */
    ATTEND_FLAG,   /* true or false */
    ATTEND_ENUM,   /* one of a list of strings */
    ATTEND_LABELS, /* strings, echoed back */
    ATTEND_OBJECT, /* an object with its own keys (rope, window, qk_norm) */
    ATTEND_ALIBI,  /* true, false or {"slopes": [h]} */
    ATTEND_LAYERS  /* an array of objects, each a layer's fields */
} attend_kind;

typedef enum attend_scope { ATTEND_LAYER = 0, ATTEND_WHOLE = 1 } attend_scope;

#define ATTEND_FIELDS(FIELD)                                                  \
    FIELD(X, "x", x, ATTEND_F32, 2, 3, ATTEND_LAYER,                          \
      "[n][d_model] or [B][n][d_model]")                                      \
    FIELD(MEMORY, "memory", memory, ATTEND_F32, 2, 3, ATTEND_LAYER,           \
      "[m][d_mem] or [B][m][d_mem]")                                          \
    FIELD(VALUE, "value", value, ATTEND_F32, 2, 3, ATTEND_LAYER,              \
      "[m][d_val] or [B][m][d_val]")                                          \
    FIELD(NUM_HEADS, "num_heads", num_heads, ATTEND_COUNT, 0, 0, ATTEND_LAYER, \
      "an integer >= 1")                                                      \
    FIELD(NUM_KV_HEADS, "num_kv_heads", num_kv_heads, ATTEND_COUNT, 0, 0,     \
      ATTEND_LAYER, "an integer >= 1")                                        \
    FIELD(W_Q, "w_q", w_q, ATTEND_F32, 2, 3, ATTEND_LAYER,                    \
      "[d_model][h*d_k] or [h][d_model][d_k]")                                \
    FIELD(W_K, "w_k", w_k, ATTEND_F32, 2, 3, ATTEND_LAYER,                    \
      "[d_mem][g*d_k] or [g][d_mem][d_k]")                                    \
    FIELD(W_V, "w_v", w_v, ATTEND_F32, 2, 3, ATTEND_LAYER,                    \
      "[d_mem][g*d_v] or [g][d_mem][d_v]")                                    \
    FIELD(W_O, "w_o", w_o, ATTEND_F32, 2, 2, ATTEND_LAYER, "[h*d_v][d_out]")  \
    FIELD(W_QKV, "w_qkv", w_qkv, ATTEND_F32, 2, 2, ATTEND_LAYER,              \
      "[d_model][h*d_k + g*d_k + g*d_v]")                                     \
    FIELD(B_Q, "b_q", b_q, ATTEND_F32, 1, 1, ATTEND_LAYER, "[h*d_k]")         \
    FIELD(B_K, "b_k", b_k, ATTEND_F32, 1, 1, ATTEND_LAYER, "[g*d_k]")         \
    FIELD(B_V, "b_v", b_v, ATTEND_F32, 1, 1, ATTEND_LAYER, "[g*d_v]")         \
    FIELD(B_O, "b_o", b_o, ATTEND_F32, 1, 1, ATTEND_LAYER, "[d_out]")         \
    FIELD(B_QKV, "b_qkv", b_qkv, ATTEND_F32, 1, 1, ATTEND_LAYER,              \
      "[h*d_k + 2*g*d_k]")                                                    \
    FIELD(WEIGHT_LAYOUT, "weight_layout", weight_layout, ATTEND_ENUM, 0, 0,   \
      ATTEND_LAYER, "a weight layout")                                        \
    FIELD(QKV_ORDER, "qkv_order", qkv_order, ATTEND_ENUM, 0, 0, ATTEND_LAYER, \
      "a packing order")                                                      \
    FIELD(MASK, "mask", mask, ATTEND_ENUM, 0, 0, ATTEND_LAYER, "a mask")      \
    FIELD(KPM, "key_padding_mask", kpm, ATTEND_BOOL, 1, 2, ATTEND_LAYER,      \
      "[m] or [B][m]")                                                        \
    FIELD(ATTN_MASK, "attn_mask", attn_mask, ATTEND_BOOL, 2, 4, ATTEND_LAYER, \
      "[n][m], [h][n][m], [B][n][m] or [B][h][n][m]")                         \
    FIELD(ATTN_BIAS, "attn_bias", attn_bias, ATTEND_F32, 2, 4, ATTEND_LAYER,  \
      "[n][m], [h][n][m], [B][n][m] or [B][h][n][m]")                         \
    FIELD(POSITIONS, "positions", positions, ATTEND_INDEX, 1, 2, ATTEND_LAYER, \
      "[n] or [B][n]")                                                        \
    FIELD(KEY_POSITIONS, "key_positions", key_positions, ATTEND_INDEX, 1, 2,  \
      ATTEND_LAYER, "[m] or [B][m]")                                          \
    FIELD(ROPE, "rope", rope, ATTEND_OBJECT, 0, 0, ATTEND_LAYER,              \
      "an object {\"dim\", \"theta\", \"inv_freq\", \"style\", "              \
      "\"attention_factor\"}")                                                \
    FIELD(ALIBI, "alibi", alibi, ATTEND_ALIBI, 0, 0, ATTEND_LAYER,            \
      "true, false or {\"slopes\": [h]}")                                     \
    FIELD(WINDOW, "window", window, ATTEND_OBJECT, 0, 0, ATTEND_LAYER,        \
      "an object {\"left\", \"right\"}")                                      \
    FIELD(GLOBAL_TOKENS, "global_tokens", global_tokens, ATTEND_INDEX, 1, 1,  \
      ATTEND_LAYER, "[k] indices")                                            \
    FIELD(SOFTCAP, "softcap", softcap, ATTEND_NUMBER, 0, 0, ATTEND_LAYER,     \
      "a number > 0")                                                         \
    FIELD(QK_NORM, "qk_norm", qk_norm, ATTEND_OBJECT, 0, 0, ATTEND_LAYER,     \
      "an object {\"q_weight\", \"k_weight\", \"eps\", \"over\"}")            \
    FIELD(SCALE, "scale", scale, ATTEND_NUMBER, 0, 0, ATTEND_LAYER,           \
      "a number > 0")                                                         \
    FIELD(RETURN_WEIGHTS, "return_weights", return_weights, ATTEND_ENUM, 0, 0, \
      ATTEND_LAYER, "which weights to return")                                \
    FIELD(ENCODING, "encoding", encoding, ATTEND_ENUM, 0, 0, ATTEND_LAYER,    \
      "an encoding")                                                          \
    FIELD(TOKENS, "tokens", tokens, ATTEND_LABELS, 1, 2, ATTEND_LAYER,        \
      "[n] or [B][n] strings")                                                \
    FIELD(MEMORY_TOKENS, "memory_tokens", memory_tokens, ATTEND_LABELS, 1, 2, \
      ATTEND_LAYER, "[m] or [B][m] strings")                                  \
    FIELD(ANALYSIS, "analysis", analysis, ATTEND_FLAG, 0, 0, ATTEND_LAYER,    \
      "true or false")                                                        \
    FIELD(TOP_K, "top_k", top_k, ATTEND_COUNT, 0, 0, ATTEND_LAYER,            \
      "an integer >= 1")                                                      \
    FIELD(VALUE_NORMS, "value_norms", value_norms, ATTEND_FLAG, 0, 0,         \
      ATTEND_LAYER, "true or false")                                          \
    FIELD(RETURN_QK, "return_qk", return_qk, ATTEND_FLAG, 0, 0, ATTEND_LAYER, \
      "true or false")                                                        \
    FIELD(STORE, "store", store, ATTEND_FLAG, 0, 0, ATTEND_WHOLE,             \
      "true or false")                                                        \
    FIELD(LAYERS, "layers", layers, ATTEND_LAYERS, 0, 0, ATTEND_WHOLE,        \
      "an array of layer objects")                                            \
    FIELD(ROLLOUT, "rollout", rollout, ATTEND_FLAG, 0, 0, ATTEND_WHOLE,       \
      "true or false")

typedef enum attend_field_id {
#define ATTEND__ID(id, name, member, kind, lo, hi, scope, doc) F_##id,
    ATTEND_FIELDS(ATTEND__ID)
#undef ATTEND__ID
    F_COUNT
} attend_field_id;

typedef struct attend_field {
    const char *name;
    attend_kind kind;
    int min_rank, max_rank;
    attend_scope scope;
    const char *doc;
    const char *const *values; /* ATTEND_ENUM: NULL-terminated names */
    const char *const *keys;   /* ATTEND_OBJECT: NULL-terminated keys */
} attend_field;

extern const attend_field attend_fields[F_COUNT];

/* The enums' names, each NULL-terminated, indexed by the value parse.c
 * stores (the attn_mask, attn_weights, ... enum values where there is one). */
extern const char *const attend_mask_names[];           /* attn_mask */
extern const char *const attend_weights_names[];        /* attn_weights */
extern const char *const attend_encoding_names[];       /* json, base64 */
extern const char *const attend_layout_names[];         /* in_out, out_in */
extern const char *const attend_qkv_order_names[];      /* qkv, per_head */
extern const char *const attend_rope_style_names[];     /* attn_rope_style */
extern const char *const attend_qk_norm_over_names[];   /* head, all */

/* The keys of the object fields, NULL-terminated. */
extern const char *const attend_rope_keys[];
extern const char *const attend_window_keys[];
extern const char *const attend_qk_norm_keys[];
extern const char *const attend_alibi_keys[];

/* The id of field key[0..len) (unescaped), or F_COUNT. */
attend_field_id attend_field_find(const char *key, size_t len);

/* The index of key[0..len) in a NULL-terminated list, or -1. */
int attend_name_index(const char *const *names, const char *key, size_t len);

/* The number of names in a NULL-terminated list. */
size_t attend_name_count(const char *const *names);

#endif
