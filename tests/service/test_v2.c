/* test_v2.c: the contract's v2 additions over real HTTP: the field table
 * against the OpenAPI document, layers equal to each layer alone, refs
 * equal to the same request inline, store: true, weight layouts and packed
 * projections equal to their v1 spelling, value_norms, return_qk and
 * rollout against values computed here, and the errors of each. Answers are
 * compared byte for byte with meta.elapsed_ms (the only field that may
 * differ) blanked. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attend/fields.h"
#include "store/store.h"
#include "test_service.h"

/* Deterministic values in (-1, 1). */
static double tv_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)((*s >> 40) & 0xFFFF) / 32768.0 - 1.0;
}

/* A rows x cols matrix of values (as float32-exact numbers: k/32768). */
static json_t *tv_matrix(size_t rows, size_t cols, uint64_t *s)
{
    json_t *m = json_array();
    for (size_t r = 0; r < rows; r++) {
        json_t *row = json_array();
        for (size_t c = 0; c < cols; c++)
            json_array_append_new(row, json_real(tv_next(s)));
        json_array_append_new(m, row);
    }
    return m;
}

/* The transpose of a nested 2-D array. */
static json_t *tv_transpose(const json_t *m)
{
    size_t rows = json_array_size(m), cols = json_array_size(json_array_get(m, 0));
    json_t *t = json_array();
    for (size_t c = 0; c < cols; c++) {
        json_t *row = json_array();
        for (size_t r = 0; r < rows; r++)
            json_array_append(row, json_array_get(json_array_get(m, r), c));
        json_array_append_new(t, row);
    }
    return t;
}

static double tv_at(const json_t *a, size_t i, size_t j)
{
    return json_number_value(json_array_get(json_array_get(a, i), j));
}

/* POSTs body to path and returns the response (the caller frees it). */
static void tv_post(uint16_t port, const char *path, const char *body,
                    ts_response *out)
{
    ts_request rq = {.method = "POST", .path = path,
                     .content_type = "application/json", .body = body,
                     .body_len = strlen(body)};
    ts_http(port, &rq, out);
}

static char *tv_dump(const json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* Blanks every "elapsed_ms":<number> in s (in place). */
static void tv_blank_elapsed(char *s)
{
    const char *key = "\"elapsed_ms\":";
    char *p = s;
    while ((p = strstr(p, key)) != NULL) {
        p += strlen(key);
        /* "0" and spaces: the text keeps its length and stays JSON */
        *p++ = '0';
        while (*p && *p != ',' && *p != '}')
            *p++ = ' ';
    }
}

/* POSTs the request object and returns the 200 body, elapsed blanked. */
static char *tv_answer(uint16_t port, const json_t *req)
{
    char *body = tv_dump(req);
    ts_response r;
    tv_post(port, "/attend", body, &r);
    free(body);
    ck_assert_msg(r.status == 200, "status %ld: %s", r.status, r.body);
    tv_blank_elapsed(r.body);
    return r.body; /* ts_response_free frees only body */
}

/* A small self-attention layer: x [n][d], weights [d][h*dk]. */
static json_t *tv_layer(size_t n, size_t d, size_t h, size_t dk, uint64_t seed)
{
    json_t *o = json_object();
    json_object_set_new(o, "x", tv_matrix(n, d, &seed));
    json_object_set_new(o, "w_q", tv_matrix(d, h * dk, &seed));
    json_object_set_new(o, "w_k", tv_matrix(d, h * dk, &seed));
    json_object_set_new(o, "w_v", tv_matrix(d, h * dk, &seed));
    json_object_set_new(o, "w_o", tv_matrix(h * dk, d, &seed));
    json_object_set_new(o, "num_heads", json_integer((json_int_t)h));
    return o;
}

START_TEST(test_v2_openapi_lists_the_field_table)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    ts_response r;
    ts_request rq = {.path = "/openapi.json"};
    ts_http(server_port(srv), &rq, &r);
    ck_assert_int_eq(r.status, 200);
    json_t *doc = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    json_t *props = json_object_get(
        json_object_get(json_object_get(json_object_get(doc, "components"),
                                        "schemas"), "AttendRequest"),
        "properties");
    ck_assert_ptr_nonnull(props);
    /* the same set of names, both ways */
    ck_assert_uint_eq(json_object_size(props), F_COUNT);
    for (int i = 0; i < F_COUNT; i++) {
        const attend_field *f = &attend_fields[i];
        json_t *p = json_object_get(props, f->name);
        ck_assert_msg(p != NULL, "OpenAPI lacks field %s", f->name);
        if (f->values != NULL) {
            /* every enum's names come from the table (in any order) */
            json_t *e = json_object_get(p, "enum");
            ck_assert_msg(e != NULL, "%s: no enum", f->name);
            ck_assert_uint_eq(json_array_size(e),
                              attend_name_count(f->values));
            for (size_t k = 0; k < json_array_size(e); k++) {
                const char *v = json_string_value(json_array_get(e, k));
                ck_assert_msg(v && attend_name_index(f->values, v,
                                                     strlen(v)) >= 0,
                              "%s: enum value %s not in the table", f->name,
                              v ? v : "(not a string)");
            }
        }
        if (f->keys != NULL) {
            json_t *obj = p;
            if (json_object_get(p, "properties") == NULL) /* alibi: oneOf */
                obj = json_array_get(json_object_get(p, "oneOf"), 1);
            json_t *kp = json_object_get(obj, "properties");
            ck_assert_msg(kp != NULL, "%s: no properties", f->name);
            ck_assert_uint_eq(json_object_size(kp),
                              attend_name_count(f->keys));
            for (size_t k = 0; f->keys[k] != NULL; k++)
                ck_assert_msg(json_object_get(kp, f->keys[k]) != NULL,
                              "%s lacks key %s", f->name, f->keys[k]);
        }
    }
    json_decref(doc);
    ts_response_free(&r);
    server_stop(srv);
}
END_TEST

START_TEST(test_v2_unknown_fields)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    static const struct {
        const char *extra, *field, *says;
    } cases[] = {
        {"\"key_pading_mask\":[false,false]", "/key_pading_mask",
         "did you mean \"key_padding_mask\""},
        {"\"nmu_heads\":2", "/nmu_heads", "did you mean \"num_heads\""},
        {"\"completely_else\":1", "/completely_else", "unknown field"},
        {"\"rope\":{\"theta\":1e4,\"sytle\":\"half\"}", "/rope/sytle",
         "did you mean \"style\""},
        {"\"window\":{\"left\":1,\"rigth\":1}", "/window/rigth",
         "did you mean \"right\""},
        {"\"layers\":[{\"store\":true}]", "/layers/0/store",
         "applies to the whole request"},
        /* a pointer is a Unicode string (RFC 6901): a key's characters
         * stay as they are, only '~' and '/' are escaped (~0, ~1); the
         * message shows the key as a JSON string */
        {"\"tokens\xc3\xa9\":1", "/tokens\xc3\xa9",
         "unknown field \"tokens\xc3\xa9\"; did you mean \"tokens\""},
        {"\"tok\\\"en\\u0001\":1", "/tok\"en\001",
         "unknown field \"tok\\\"en\\u0001\"; did you mean \"tokens\""},
        {"\"a~b/c\":1", "/a~0b~1c", "unknown field \"a~b/c\" (GET"},
        {"\"rope\":{\"theta\xc3\xa9\":1}", "/rope/theta\xc3\xa9",
         "unknown key \"theta\xc3\xa9\"; did you mean \"theta\""},
        {"\"window\":{\"le/ft\":1}", "/window/le~1ft",
         "unknown key \"le/ft\"; did you mean \"left\""},
        {"\"qk_norm\":{\"\xe2\x82\xac\":1}", "/qk_norm/\xe2\x82\xac",
         "unknown key \"\xe2\x82\xac\""},
        {"\"alibi\":{\"slopes~\":[1]}", "/alibi/slopes~0",
         "unknown key \"slopes~\"; did you mean \"slopes\""},
        {"\"layers\":[{\"w_k\xc3\xa9\":[[1]]}]", "/layers/0/w_k\xc3\xa9",
         "unknown field \"w_k\xc3\xa9\"; did you mean \"w_k\""},
        {"\"b_q\":{\"dtype\":\"float32\",\"dat\xc3\xa9\":\"\"}",
         "/b_q/dat\xc3\xa9",
         "unknown key \"dat\xc3\xa9\" in a tensor object; did you mean "
         "\"data\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ts_case c;
        ts_response r;
        ts_case_make(&c, 2, 2, 1, 2, cases[i].extra);
        tv_post(port, "/attend", c.json, &r);
        ts_assert_error(&r, 422, "invalid_request");
        json_t *root = json_loads(r.body, 0, NULL);
        json_t *e = json_object_get(root, "error");
        ck_assert_str_eq(json_string_value(json_object_get(e, "field")),
                         cases[i].field);
        ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")),
                             cases[i].says) != NULL,
                      "%s: %s", cases[i].extra, r.body);
        json_decref(root);
        ts_response_free(&r);
        ts_case_free(&c);
    }
    /* a long key: the whole of it in the pointer, at most 64 bytes of it
     * in the message, never cut inside a character */
    {
        char extra[512], field[400], shown[96];
        size_t n = 0;
        extra[n++] = '"';
        for (int k = 0; k < 100; k++) {
            memcpy(extra + n, "\xc3\xa9", 2);
            n += 2;
        }
        snprintf(extra + n, sizeof extra - n, "\":1");
        snprintf(field, sizeof field, "/%.*s", (int)n - 1, extra + 1);
        snprintf(shown, sizeof shown, "unknown field %.65s\"... (GET",
                 extra);
        ts_case c;
        ts_response r;
        ts_case_make(&c, 2, 2, 1, 2, extra);
        tv_post(port, "/attend", c.json, &r);
        ts_assert_error(&r, 422, "invalid_request");
        json_t *root = json_loads(r.body, 0, NULL);
        json_t *e = json_object_get(root, "error");
        ck_assert_str_eq(json_string_value(json_object_get(e, "field")), field);
        ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")),
                             shown) != NULL, "%s", r.body);
        json_decref(root);
        ts_response_free(&r);
        ts_case_free(&c);
    }
    /* a tensor object's keys are unescaped: "d\u0061ta" is "data" */
    {
        ts_response r;
        const char *body =
            "{\"x\":{\"dtype\":\"float32\",\"shape\":[1,1],"
            "\"d\\u0061ta\":\"AACAPw==\"},\"w_q\":[[1]],\"w_k\":[[1]],"
            "\"w_v\":[[1]]}";
        tv_post(port, "/attend", body, &r);
        ck_assert_msg(r.status == 200, "%s", r.body);
        ts_response_free(&r);
        body = "{\"x\":{\"dtype\":\"float32\",\"shape\":[1,1],"
               "\"dat\":\"AACAPw==\"},\"w_q\":[[1]],\"w_k\":[[1]],"
               "\"w_v\":[[1]]}";
        tv_post(port, "/attend", body, &r);
        ts_assert_error(&r, 422, "invalid_request");
        ck_assert_ptr_nonnull(strstr(r.body, "\"/x/dat\""));
        ts_response_free(&r);
    }
    server_stop(srv);
}
END_TEST

/* Each layer of a `layers` request answers as the same request alone, and
 * a field a layer does not give comes from the top level. */
START_TEST(test_v2_layers_equal_alone)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    json_t *l0 = tv_layer(4, 6, 2, 3, 1), *l1 = tv_layer(4, 6, 2, 3, 2);
    json_t *whole = json_object(), *arr = json_array();

    /* the top level gives mask and a bias; layer 1 overrides the mask, and
     * takes the bias away with its own null */
    json_object_set_new(whole, "mask", json_string("causal"));
    json_object_set_new(whole, "b_o", json_pack("[f,f,f,f,f,f]", 0.5, -0.5,
                                                0.25, 0.0, 1.0, 2.0));
    json_object_set_new(l1, "mask", json_string("none"));
    json_object_set_new(l1, "b_o", json_null());
    json_array_append(arr, l0);
    json_array_append(arr, l1);
    json_object_set_new(whole, "layers", arr);
    char *all = tv_answer(port, whole);
    json_t *ans = json_loads(all, 0, NULL);
    ck_assert_ptr_nonnull(ans);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(ans, "meta"), "layers")), 2);
    for (int i = 0; i < 2; i++) {
        json_t *alone = json_deep_copy(i ? l1 : l0);
        if (i == 0) {
            json_object_set_new(alone, "mask", json_string("causal"));
            json_object_set(alone, "b_o", json_object_get(whole, "b_o"));
        }
        char *one = tv_answer(port, alone);
        char *mine = tv_dump(json_array_get(json_object_get(ans, "layers"), i));
        json_t *a = json_loads(one, 0, NULL);
        char *theirs = tv_dump(a);
        ck_assert_str_eq(mine, theirs);
        free(one);
        free(mine);
        free(theirs);
        json_decref(a);
        json_decref(alone);
    }
    /* an error inside a layer points into it */
    json_object_set_new(l1, "w_q", tv_matrix(5, 6, &(uint64_t){9}));
    json_array_set(json_object_get(whole, "layers"), 1, l1);
    {
        char *body = tv_dump(whole);
        ts_response r;
        tv_post(port, "/attend", body, &r);
        ts_assert_error(&r, 422, "invalid_request");
        ck_assert_msg(strstr(r.body, "\"/layers/1/w_q") != NULL, "%s",
                      r.body);
        ts_response_free(&r);
        free(body);
    }
    free(all);
    json_decref(ans);
    json_decref(whole);
    json_decref(l0);
    json_decref(l1);
    server_stop(srv);
}
END_TEST

/* rollout over two layers against (A+I)/2 products computed here from the
 * mean maps the layers return. */
START_TEST(test_v2_rollout)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    size_t n = 5;
    json_t *whole = json_object(), *arr = json_array();
    json_array_append_new(arr, tv_layer(n, 4, 2, 2, 3));
    json_array_append_new(arr, tv_layer(n, 4, 2, 2, 4));
    json_object_set_new(whole, "layers", arr);
    json_object_set_new(whole, "rollout", json_true());
    json_object_set_new(whole, "return_weights", json_string("mean"));
    json_object_set_new(whole, "mask", json_string("causal"));
    char *all = tv_answer(port, whole);
    json_t *ans = json_loads(all, 0, NULL);
    json_t *a0 = json_object_get(json_array_get(json_object_get(ans, "layers"), 0), "attention");
    json_t *a1 = json_object_get(json_array_get(json_object_get(ans, "layers"), 1), "attention");
    json_t *ro = json_object_get(ans, "rollout");
    ck_assert_ptr_nonnull(ro);
    double r0[5][5], r1[5][5];
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            r0[i][j] = (tv_at(a0, i, j) + (i == j)) / 2;
            r1[i][j] = (tv_at(a1, i, j) + (i == j)) / 2;
        }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double want = 0;
            for (size_t k = 0; k < n; k++)
                want += r1[i][k] * r0[k][j];
            ck_assert_msg(fabs(tv_at(ro, i, j) - want) <= 1e-5,
                          "rollout[%zu][%zu] %g, expected %g", i, j,
                          tv_at(ro, i, j), want);
        }
    /* cross-attention layers have no rollout */
    json_object_set_new(json_array_get(arr, 1), "memory",
                        tv_matrix(3, 4, &(uint64_t){5}));
    {
        char *body = tv_dump(whole);
        ts_response r;
        tv_post(port, "/attend", body, &r);
        ts_assert_error(&r, 422, "invalid_request");
        ck_assert_ptr_nonnull(strstr(r.body, "\"/rollout\""));
        ts_response_free(&r);
        free(body);
    }
    free(all);
    json_decref(ans);
    json_decref(whole);
    server_stop(srv);
}
END_TEST

/* store: true names every tensor; the same request by refs answers byte
 * for byte as inline; a ref the store lacks is unknown_ref with the
 * field's pointer. */
START_TEST(test_v2_refs_equal_inline)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    json_t *req = tv_layer(3, 4, 2, 2, 7);
    json_object_set_new(req, "b_q", json_pack("[f,f,f,f]", 0.1, 0.2, 0.3, 0.4));
    char *inline_answer = tv_answer(port, req);

    json_object_set_new(req, "store", json_true());
    char *stored = tv_answer(port, req);
    json_t *sa = json_loads(stored, 0, NULL);
    json_t *refs = json_object_get(json_object_get(sa, "meta"), "refs");
    ck_assert_ptr_nonnull(refs);
    const char *names[] = {"x", "w_q", "w_k", "w_v", "w_o", "b_q"};
    json_t *byref = json_object();
    json_object_set(byref, "num_heads", json_object_get(req, "num_heads"));
    for (size_t i = 0; i < 6; i++) {
        const char *ref = json_string_value(json_object_get(refs, names[i]));
        ck_assert_msg(ref && strncmp(ref, "sha256:", 7) == 0 &&
                          strlen(ref) == 71, "%s: %s", names[i], stored);
        json_object_set_new(byref, names[i], json_pack("{s:s}", "ref", ref));
    }
    char *ref_answer = tv_answer(port, byref);
    ck_assert_str_eq(ref_answer, inline_answer);

    /* a shape of another element count, a malformed ref, an unknown one */
    {
        const char *w_q = json_string_value(json_object_get(refs, "w_q"));
        json_t *bad = json_deep_copy(byref);
        char *body;
        ts_response r;
        json_object_set_new(bad, "w_q", json_pack("{s:s,s:[i,i]}", "ref", w_q,
                                                  "shape", 3, 3));
        body = tv_dump(bad);
        tv_post(port, "/attend", body, &r);
        ts_assert_error(&r, 422, "invalid_request");
        ck_assert_ptr_nonnull(strstr(r.body, "\"/w_q/shape\""));
        ts_response_free(&r);
        free(body);
        /* a shape the field does not take, although its count may
         * match: [] is rank 0, not "the stored shape" */
        static const char *const bad_shapes[] = {"[]", "[16]"};
        for (size_t i = 0; i < 2; i++) {
            json_object_set_new(bad, "w_q",
                                json_pack("{s:s,s:o}", "ref", w_q, "shape",
                                          json_loads(bad_shapes[i], 0, NULL)));
            body = tv_dump(bad);
            tv_post(port, "/attend", body, &r);
            ts_assert_error(&r, 422, "invalid_request");
            ck_assert_msg(strstr(r.body, "\"field\":\"/w_q/shape\"") &&
                              strstr(r.body, "found a shape of rank"),
                          "%s: %s", bad_shapes[i], r.body);
            ts_response_free(&r);
            free(body);
        }
        /* the same count in another shape is the same values */
        json_object_set_new(bad, "w_q", json_pack("{s:s,s:[i,i,i]}", "ref",
                                                  w_q, "shape", 2, 4, 2));
        body = tv_dump(bad);
        tv_post(port, "/attend", body, &r);
        ck_assert_msg(r.status == 200, "%s", r.body);
        ts_response_free(&r);
        free(body);
        /* the malformed ref is shown as sent, UTF-8 and all */
        json_object_set_new(bad, "w_k",
                            json_pack("{s:s}", "ref", "sha256:xyz\xc3\xa9"));
        body = tv_dump(bad);
        tv_post(port, "/attend", body, &r);
        ts_assert_error(&r, 422, "invalid_request");
        ck_assert_ptr_nonnull(strstr(r.body, "\"/w_k\""));
        ck_assert_msg(strstr(r.body, "found \\\"sha256:xyz\xc3\xa9\\\"") != NULL,
                      "%s", r.body);
        ts_response_free(&r);
        free(body);
        json_object_set_new(
            bad, "w_k",
            json_pack("{s:s}", "ref",
                      "sha256:00000000000000000000000000000000000000000000000"
                      "00000000000000000"));
        body = tv_dump(bad);
        tv_post(port, "/attend", body, &r);
        ts_assert_error(&r, 422, "unknown_ref");
        ck_assert_ptr_nonnull(strstr(r.body, "\"/w_k\""));
        ts_response_free(&r);
        free(body);
        json_decref(bad);
    }
    free(inline_answer);
    free(stored);
    free(ref_answer);
    json_decref(sa);
    json_decref(byref);
    json_decref(req);
    server_stop(srv);
}
END_TEST

/* store: true names in meta.refs the tensors the store kept: not one
 * larger than the whole store, and none when the store is off ({}), since
 * a ref to either would only ever be unknown_ref. */
START_TEST(test_v2_store_names_what_it_kept)
{
    uint64_t seed = 5;
    json_t *req = json_object();
    /* w_q and w_k: 512 values, 2048 bytes and the 256 a tensor costs, over
     * a store of 2048 bytes; x and w_v: 16 values */
    json_object_set_new(req, "x", tv_matrix(1, 16, &seed));
    json_object_set_new(req, "w_q", tv_matrix(16, 32, &seed));
    json_object_set_new(req, "w_k", tv_matrix(16, 32, &seed));
    json_object_set_new(req, "w_v", tv_matrix(16, 1, &seed));
    json_object_set_new(req, "store", json_true());
    for (int on = 1; on >= 0; on--) {
        config cfg;
        ts_config(&cfg);
        cfg.tensor_store_bytes = on ? 2048 : 0;
        server *srv = ts_start(&cfg);
        char *text = tv_answer(server_port(srv), req);
        json_t *ans = json_loads(text, 0, NULL);
        json_t *refs = json_object_get(json_object_get(ans, "meta"), "refs");
        ck_assert_msg(json_is_object(refs), "%s", text);
        if (on) {
            ck_assert_msg(json_object_size(refs) == 2 &&
                              json_object_get(refs, "x") &&
                              json_object_get(refs, "w_v"),
                          "%s", text);
            /* what it names, it holds */
            char path[96];
            snprintf(path, sizeof path, "/tensors/%s",
                     json_string_value(json_object_get(refs, "w_v")));
            ck_assert_int_eq(ts_get_status(server_port(srv), path), 200);
        } else {
            ck_assert_msg(json_object_size(refs) == 0, "%s", text);
        }
        json_decref(ans);
        free(text);
        server_stop(srv);
    }
    json_decref(req);
}
END_TEST

/* out_in weights, 3-D out_in weights and w_qkv in both orders answer as
 * the same weights in the v1 layout. */
START_TEST(test_v2_layouts_equal_v1)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    size_t n = 3, d = 4, h = 2, dk = 2;
    json_t *v1 = tv_layer(n, d, h, dk, 11);
    char *want = tv_answer(port, v1);

    /* nn.Linear's [out][in] */
    json_t *oi = json_deep_copy(v1);
    const char *w[] = {"w_q", "w_k", "w_v", "w_o"};
    for (int i = 0; i < 4; i++)
        json_object_set_new(oi, w[i], tv_transpose(json_object_get(v1, w[i])));
    json_object_set_new(oi, "weight_layout", json_string("out_in"));
    char *got = tv_answer(port, oi);
    ck_assert_str_eq(got, want);
    free(got);

    /* packed, all queries then keys then values, in out_in */
    json_t *pk = json_deep_copy(oi), *rows = json_array();
    for (int i = 0; i < 3; i++) {
        json_t *t = json_object_get(oi, w[i]);
        for (size_t r = 0; r < json_array_size(t); r++)
            json_array_append(rows, json_array_get(t, r));
        json_object_del(pk, w[i]);
    }
    json_object_set_new(pk, "w_qkv", rows);
    got = tv_answer(port, pk);
    ck_assert_str_eq(got, want);
    free(got);

    /* per head: q_i, k_i, v_i of each head together */
    json_t *ph = json_deep_copy(pk), *prow = json_array();
    for (size_t head = 0; head < h; head++)
        for (int i = 0; i < 3; i++)
            for (size_t c = 0; c < dk; c++)
                json_array_append(prow, json_array_get(
                                            json_object_get(oi, w[i]),
                                            head * dk + c));
    json_object_set_new(ph, "w_qkv", prow);
    json_object_set_new(ph, "qkv_order", json_string("per_head"));
    got = tv_answer(port, ph);
    ck_assert_str_eq(got, want);
    free(got);

    /* w_qkv with w_q: the excluded field is named */
    json_object_set(ph, "w_q", json_object_get(v1, "w_q"));
    {
        char *body = tv_dump(ph);
        ts_response r;
        tv_post(port, "/attend", body, &r);
        ts_assert_error(&r, 422, "invalid_request");
        ck_assert_ptr_nonnull(strstr(r.body, "\"/w_q\""));
        ts_response_free(&r);
        free(body);
    }
    free(want);
    json_decref(v1);
    json_decref(oi);
    json_decref(pk);
    json_decref(ph);
    server_stop(srv);
}
END_TEST

/* value_norms and q/k against values computed here from the weights. */
START_TEST(test_v2_value_norms_and_qk)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    size_t n = 3, d = 4, h = 2, dk = 2;
    json_t *req = tv_layer(n, d, h, dk, 13);
    json_object_set_new(req, "value_norms", json_true());
    json_object_set_new(req, "return_qk", json_true());
    char *text = tv_answer(port, req);
    json_t *ans = json_loads(text, 0, NULL);
    json_t *x = json_object_get(req, "x"), *wq = json_object_get(req, "w_q"),
           *wk = json_object_get(req, "w_k"), *wv = json_object_get(req, "w_v"),
           *wo = json_object_get(req, "w_o");
    json_t *vn = json_object_get(ans, "value_norms"),
           *q = json_object_get(ans, "q"), *k = json_object_get(ans, "k");
    ck_assert_ptr_nonnull(vn);
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_nonnull(k);
    for (size_t i = 0; i < h; i++)
        for (size_t t = 0; t < n; t++) {
            double norm = 0;
            for (size_t c = 0; c < d; c++) {
                double acc = 0;
                for (size_t e = 0; e < dk; e++) {
                    double v = 0;
                    for (size_t r = 0; r < d; r++)
                        v += tv_at(x, t, r) * tv_at(wv, r, i * dk + e);
                    acc += v * tv_at(wo, i * dk + e, c);
                }
                norm += acc * acc;
            }
            ck_assert(fabs(json_number_value(json_array_get(
                               json_array_get(vn, i), t)) - sqrt(norm)) <=
                      1e-4 * (1 + sqrt(norm)));
            for (size_t e = 0; e < dk; e++) {
                double qv = 0, kv = 0;
                for (size_t r = 0; r < d; r++) {
                    qv += tv_at(x, t, r) * tv_at(wq, r, i * dk + e);
                    kv += tv_at(x, t, r) * tv_at(wk, r, i * dk + e);
                }
                ck_assert(fabs(tv_at(json_array_get(q, i), t, e) - qv) <=
                          1e-4 * (1 + fabs(qv)));
                ck_assert(fabs(tv_at(json_array_get(k, i), t, e) - kv) <=
                          1e-4 * (1 + fabs(kv)));
            }
        }
    free(text);
    json_decref(ans);
    json_decref(req);
    server_stop(srv);
}
END_TEST

/* POSTs the request object and asserts an error with this status, code,
 * field pointer (NULL: none) and start of the message. */
static void tv_expect_error(uint16_t port, const json_t *req, long status,
                            const char *code, const char *field,
                            const char *message_start)
{
    char *body = tv_dump(req);
    ts_response r;
    tv_post(port, "/attend", body, &r);
    ts_assert_error(&r, status, code);
    json_t *root = json_loads(r.body, 0, NULL);
    json_t *e = json_object_get(root, "error");
    const char *f = json_string_value(json_object_get(e, "field"));
    const char *m = json_string_value(json_object_get(e, "message"));
    ck_assert_msg(field ? f != NULL && strcmp(f, field) == 0 : f == NULL,
                  "field: %s", r.body);
    ck_assert_msg(strncmp(m, message_start, strlen(message_start)) == 0,
                  "message: %s", r.body);
    json_decref(root);
    ts_response_free(&r);
    free(body);
}

/* The rollout's products (2 B n^3 a layer after the first) count against
 * --max-flops with the layers' own work: a few cheap layers over many
 * tokens cannot hold a core for minutes. */
START_TEST(test_v2_rollout_work_is_limited)
{
    config cfg;
    ts_config(&cfg);
    cfg.limits.max_flops = 1000000;
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    size_t n = 64, i;
    json_t *whole = json_object(), *arr = json_array(), *x = json_array();
    for (i = 0; i < n; i++)
        json_array_append_new(x, json_pack("[f]", 0.01 * (double)i));
    json_object_set_new(whole, "x", x);
    json_object_set_new(whole, "w_q", json_pack("[[f]]", 1.0));
    json_object_set_new(whole, "w_k", json_pack("[[f]]", 1.0));
    json_object_set_new(whole, "w_v", json_pack("[[f]]", 1.0));
    /* each layer's own work is small: one key a query */
    json_object_set_new(whole, "window", json_pack("{s:i}", "left", 0));
    json_object_set_new(whole, "return_weights", json_string("none"));
    json_object_set_new(whole, "rollout", json_true());
    json_object_set_new(whole, "layers", arr);
    /* two layers: one product of 2 * 64^3 = 524288 units, served */
    json_array_append_new(arr, json_object());
    json_array_append_new(arr, json_object());
    char *ok = tv_answer(port, whole);
    ck_assert_ptr_nonnull(strstr(ok, "\"rollout\""));
    free(ok);
    /* three: two products, over the limit */
    json_array_append_new(arr, json_object());
    tv_expect_error(port, whole, 413, "too_large", NULL,
                    "the layers and the rollout need ");
    json_decref(whole);
    server_stop(srv);
}
END_TEST

/* --max-map-elems counts a `layers` request as it counts one request: the
 * attention maps, here summed over the layers with the rollout's [n][n];
 * a layer's output is bounded on its own, as a request's is. */
START_TEST(test_v2_layers_limits_count_the_whole)
{
    config cfg;
    ts_config(&cfg);
    /* one layer: maps 2 x 4 x 4 = 32 values, output 4 x 6 = 24 */
    cfg.limits.max_map_elems = 40;
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    json_t *alone = tv_layer(4, 6, 2, 3, 21);
    json_t *whole = json_object(), *arr = json_array();
    char *text = tv_answer(port, alone); /* 32 values: served */
    free(text);
    /* the same request as the one layer of a `layers` request */
    json_array_append(arr, alone);
    json_object_set_new(whole, "layers", arr);
    text = tv_answer(port, whole);
    free(text);
    /* with the rollout, 32 + 16; with mean maps, 16 + 16 */
    json_object_set_new(whole, "rollout", json_true());
    tv_expect_error(port, whole, 413, "too_large", NULL,
                    "the attention maps of the layers and the rollout would "
                    "hold 48 values together; the limit --max-map-elems");
    json_object_set_new(whole, "return_weights", json_string("mean"));
    text = tv_answer(port, whole);
    free(text);
    json_object_del(whole, "rollout");
    json_object_del(whole, "return_weights");
    /* two layers of 32 */
    json_array_append_new(arr, tv_layer(4, 6, 2, 3, 22));
    tv_expect_error(port, whole, 413, "too_large", NULL,
                    "the attention maps of the layers would hold 64 values "
                    "together; the limit --max-map-elems");
    json_decref(alone);
    json_decref(whole);
    server_stop(srv);
}
END_TEST

/* An error found once a layer's fields are merged says which layer: in a
 * field the layer gave (or lacks), field and message point into the
 * layer; in one it inherited, the field is the top level's and the
 * message names the layer. */
START_TEST(test_v2_layers_errors_name_the_layer)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    uint64_t seed = 31;
    json_t *whole = tv_layer(4, 8, 2, 4, 30), *arr = json_array();
    json_object_del(whole, "w_o");
    json_object_set_new(whole, "layers", arr);
    json_array_append_new(arr, json_object());

    /* the top-level w_q, [8][8], against the layer's x, [4][6] */
    json_array_append_new(arr,
                          json_pack("{s:o}", "x", tv_matrix(4, 6, &seed)));
    tv_expect_error(port, whole, 422, "invalid_request", "/w_q",
                    "/layers/1 (with the top-level /w_q): the number of rows "
                    "is 8, expected d_model (the width of x) = 6");

    /* the layer's own w_q: the message's pointer is the field's */
    json_array_set_new(arr, 1, json_pack("{s:o}", "w_q",
                                         tv_matrix(8, 7, &seed)));
    tv_expect_error(port, whole, 422, "invalid_request", "/layers/1/w_q/0",
                    "/layers/1/w_q: the row width (h*d_k) is 7");

    /* a required field neither the layer nor the top level gives */
    json_array_set_new(arr, 1, json_object());
    json_array_set_new(arr, 0, json_pack("{s:O}", "w_k",
                                         json_object_get(whole, "w_k")));
    json_object_del(whole, "w_k");
    tv_expect_error(port, whole, 422, "invalid_request", "/layers/1/w_k",
                    "/layers/1/w_k: missing required field");

    /* a limit of one layer (413, no field): the message names the layer */
    json_object_set(whole, "w_k",
                    json_object_get(json_array_get(arr, 0), "w_k"));
    json_array_set_new(arr, 0, json_object());
    json_array_set_new(arr, 1, json_pack("{s:i}", "num_heads", 100000));
    tv_expect_error(port, whole, 413, "too_large", NULL, "/layers/1: ");
    json_decref(whole);
    server_stop(srv);
}
END_TEST

/* The store's entries now. */
static size_t tv_stored(server *srv)
{
    store_stats st;
    store_get_stats(server_store(srv), &st);
    return st.entries;
}

/* store: true stores nothing unless the whole request succeeds: not when
 * a later layer is refused, the rollout is, a later layer names a ref the
 * store lacks, or a layer's computation fails; then each layer's
 * meta.refs names its own tensors. */
START_TEST(test_v2_layers_store_only_on_success)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    uint64_t seed = 41;
    json_t *whole = json_object(), *arr = json_array();
    json_object_set_new(whole, "store", json_true());
    json_object_set_new(whole, "num_heads", json_integer(2));
    json_object_set_new(whole, "layers", arr);
    json_array_append_new(arr, tv_layer(4, 6, 2, 3, 40));
    json_array_append_new(arr, tv_layer(4, 6, 2, 3, 41));

    json_object_set_new(json_array_get(arr, 1), "w_q",
                        tv_matrix(6, 5, &seed));
    tv_expect_error(port, whole, 422, "invalid_request", "/layers/1/w_q/0",
                    "");
    ck_assert_uint_eq(tv_stored(srv), 0);

    json_object_set_new(json_array_get(arr, 1), "w_q",
                        json_pack("{s:s}", "ref",
                                  "sha256:000000000000000000000000000000000"
                                  "0000000000000000000000000000000"));
    tv_expect_error(port, whole, 422, "unknown_ref", "/layers/1/w_q",
                    "/layers/1/w_q");
    ck_assert_uint_eq(tv_stored(srv), 0);

    json_object_set_new(json_array_get(arr, 1), "w_q",
                        tv_matrix(6, 6, &seed));
    json_object_set_new(json_array_get(arr, 1), "memory",
                        tv_matrix(3, 6, &seed));
    json_object_set_new(whole, "rollout", json_true());
    tv_expect_error(port, whole, 422, "invalid_request", "/rollout",
                    "/rollout: needs self-attention");
    ck_assert_uint_eq(tv_stored(srv), 0);
    json_object_del(whole, "rollout");
    json_object_del(json_array_get(arr, 1), "memory");

    /* finite weights whose output overflows float32: refused once
     * computed */
    for (int k = 0; k < 2; k++) {
        json_t *big = json_array();
        for (int r = 0; r < 6; r++)
            json_array_append_new(big, json_pack("[f,f,f,f,f,f]", 1e30, 1e30,
                                                 1e30, 1e30, 1e30, 1e30));
        json_object_set_new(json_array_get(arr, 1), k ? "w_o" : "w_v", big);
    }
    tv_expect_error(port, whole, 422, "invalid_request", "/layers/1",
                    "the computation failed");
    ck_assert_uint_eq(tv_stored(srv), 0);
    json_object_set_new(json_array_get(arr, 1), "w_v",
                        tv_matrix(6, 6, &seed));
    json_object_set_new(json_array_get(arr, 1), "w_o",
                        tv_matrix(6, 6, &seed));

    /* kept until stored: a top-level default the layers copied, and
     * weights build converted to the library's layout */
    json_object_set_new(whole, "b_o", json_pack("[f,f,f,f,f,f]", 0.5, -0.5,
                                                0.25, 0.0, 1.0, 2.0));
    json_object_set_new(json_array_get(arr, 1), "weight_layout",
                        json_string("out_in"));
    char *text = tv_answer(port, whole);
    json_t *ans = json_loads(text, 0, NULL);
    for (size_t l = 0; l < 2; l++) {
        json_t *refs = json_object_get(
            json_object_get(json_array_get(json_object_get(ans, "layers"), l),
                            "meta"), "refs");
        ck_assert_uint_eq(json_object_size(refs), 6); /* x, w_q..w_o, b_o */
        /* each names the values as they were sent */
        const char *names[] = {"w_q", "b_o"};
        for (int k = 0; k < 2; k++) {
            const json_t *sent = json_object_get(k ? whole
                                                   : json_array_get(arr, l),
                                                 names[k]);
            char *body = tv_dump(sent);
            ts_response r;
            tv_post(port, "/tensors", body, &r);
            ck_assert_msg(r.status == 200, "%ld: %s", r.status, r.body);
            json_t *up = json_loads(r.body, 0, NULL);
            ck_assert_str_eq(json_string_value(json_object_get(up, "ref")),
                             json_string_value(json_object_get(refs,
                                                               names[k])));
            json_decref(up);
            ts_response_free(&r);
            free(body);
        }
    }
    ck_assert_uint_eq(tv_stored(srv), 11);
    free(text);
    json_decref(ans);
    json_decref(whole);
    server_stop(srv);
}
END_TEST

/* rollout applies to the whole request, and is encoded as the top level
 * says, whatever the first layer's encoding. */
START_TEST(test_v2_rollout_follows_the_top_level_encoding)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    json_t *whole = json_object(), *arr = json_array();
    json_object_set_new(whole, "rollout", json_true());
    json_object_set_new(whole, "layers", arr);
    json_array_append_new(arr, tv_layer(3, 4, 2, 2, 50));
    json_array_append_new(arr, tv_layer(3, 4, 2, 2, 51));
    for (int top = 0; top < 2; top++) {
        /* the layers say the other encoding */
        const char *said = top ? "base64" : "json";
        const char *other = top ? "json" : "base64";
        json_object_set_new(whole, "encoding", json_string(said));
        for (size_t l = 0; l < 2; l++)
            json_object_set_new(json_array_get(arr, l), "encoding",
                                json_string(other));
        char *text = tv_answer(port, whole);
        json_t *ans = json_loads(text, 0, NULL);
        json_t *ro = json_object_get(ans, "rollout");
        json_t *out0 = json_object_get(
            json_array_get(json_object_get(ans, "layers"), 0), "output");
        ck_assert_msg(top ? json_is_object(ro) : json_is_array(ro),
                      "encoding %s: %s", said, text);
        ck_assert_msg(top ? json_is_array(out0) : json_is_object(out0),
                      "layer 0 in %s: %s", other, text);
        if (top)
            ck_assert_str_eq(json_string_value(json_object_get(ro, "dtype")),
                             "float32");
        free(text);
        json_decref(ans);
    }
    json_decref(whole);
    server_stop(srv);
}
END_TEST

Suite *v2_suite(void)
{
    Suite *s = suite_create("v2");
    TCase *tc = tcase_create("v2");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_v2_openapi_lists_the_field_table);
    tcase_add_test(tc, test_v2_unknown_fields);
    tcase_add_test(tc, test_v2_layers_equal_alone);
    tcase_add_test(tc, test_v2_layers_limits_count_the_whole);
    tcase_add_test(tc, test_v2_layers_errors_name_the_layer);
    tcase_add_test(tc, test_v2_layers_store_only_on_success);
    tcase_add_test(tc, test_v2_rollout);
    tcase_add_test(tc, test_v2_rollout_work_is_limited);
    tcase_add_test(tc, test_v2_rollout_follows_the_top_level_encoding);
    tcase_add_test(tc, test_v2_refs_equal_inline);
    tcase_add_test(tc, test_v2_store_names_what_it_kept);
    tcase_add_test(tc, test_v2_layouts_equal_v1);
    tcase_add_test(tc, test_v2_value_norms_and_qk);
    suite_add_tcase(s, tc);
    return s;
}
