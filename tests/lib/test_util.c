/* test_util.c: problem builders, tolerance checks, fixture loader, counting
 * allocator and test executors shared by the library's suites. */
#include "test_lib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TEST_LIB_FIXTURES
#define TEST_LIB_FIXTURES "tests/fixtures/lib"
#endif

/* -- random numbers -------------------------------------------------------- */

void tl_rng_seed(tl_rng *r, uint64_t seed)
{
    r->state = seed;
}

uint64_t tl_rng_next(tl_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

float tl_rng_uniform(tl_rng *r, float lo, float hi)
{
    /* 24 random bits: every value is exactly representable in float */
    double u = (double)(tl_rng_next(r) >> 40) / (double)(1u << 24);
    return (float)(lo + (hi - lo) * u);
}

/* -- problems -------------------------------------------------------------- */

static float *tl_fill(tl_rng *r, size_t count, float lo, float hi, float mul)
{
    float *v = malloc(count * sizeof *v);
    TL_CHECK(v != NULL, "test setup: out of memory (%zu floats)", count);
    for (size_t i = 0; i < count; i++)
        v[i] = tl_rng_uniform(r, lo, hi) * mul;
    return v;
}

static bool tl_pad_key(tl_pad pad, size_t b, size_t m, size_t j)
{
    size_t tail;

    switch (pad) {
    case TL_PAD_NONE:
        return false;
    case TL_PAD_KEY0:
        return j == 0;
    case TL_PAD_ALL_B0:
        if (b == 0)
            return true;
        break;
    case TL_PAD_SOME:
        break;
    }
    if (m < 2)
        return false; /* never a whole row in this pattern */
    tail = b % 3 + 1;
    if (tail > m - 1)
        tail = m - 1;
    if (j >= m - tail)
        return true;
    return (b % 2 == 1) && m > 3 && j == 1;
}

void tl_case_init(tl_case *c, const tl_spec *s, uint64_t seed)
{
    const attn_dims *d = &s->dims;
    size_t kv_width = s->cross ? d->d_mem : d->d_model;
    tl_rng r;

    memset(c, 0, sizeof *c);
    tl_rng_seed(&r, seed);
    if (!s->cross)
        TL_CHECK(d->m == d->n && d->d_mem == d->d_model,
                 "%s: self-attention spec needs m == n, d_mem == d_model",
                 s->name);
    c->x = tl_fill(&r, d->B * d->n * d->d_model, -1.0f, 1.0f,
                   s->x_scale != 0.0f ? s->x_scale : 1.0f);
    if (s->cross)
        c->memory = tl_fill(&r, d->B * d->m * d->d_mem, -1.0f, 1.0f, 1.0f);
    c->w_q = tl_fill(&r, d->d_model * d->h * d->d_k, -0.5f, 0.5f, 1.0f);
    c->w_k = tl_fill(&r, kv_width * d->g * d->d_k, -0.5f, 0.5f, 1.0f);
    c->w_v = tl_fill(&r, kv_width * d->g * d->d_v, -0.5f, 0.5f, 1.0f);
    if (s->w_o)
        c->w_o = tl_fill(&r, d->h * d->d_v * d->d_out, -0.5f, 0.5f, 1.0f);
    if (s->biases & TL_B_Q)
        c->b_q = tl_fill(&r, d->h * d->d_k, -0.5f, 0.5f, 1.0f);
    if (s->biases & TL_B_K)
        c->b_k = tl_fill(&r, d->g * d->d_k, -0.5f, 0.5f, 1.0f);
    if (s->biases & TL_B_V)
        c->b_v = tl_fill(&r, d->g * d->d_v, -0.5f, 0.5f, 1.0f);
    if (s->biases & TL_B_O)
        c->b_o = tl_fill(&r, d->d_out, -0.5f, 0.5f, 1.0f);
    if (s->pad != TL_PAD_NONE) {
        c->key_padding = malloc(d->B * d->m);
        TL_CHECK(c->key_padding != NULL, "test setup: out of memory");
        for (size_t b = 0; b < d->B; b++)
            for (size_t j = 0; j < d->m; j++)
                /* any nonzero byte marks a padded key, not only 1 */
                c->key_padding[b * d->m + j] =
                    tl_pad_key(s->pad, b, d->m, j)
                        ? (uint8_t)(1 + (b * 31 + j * 37) % 255)
                        : 0;
    }

    c->p.dims = *d;
    c->p.x = c->x;
    c->p.memory = c->memory;
    c->p.w_q = c->w_q;
    c->p.w_k = c->w_k;
    c->p.w_v = c->w_v;
    c->p.w_o = c->w_o;
    c->p.b_q = c->b_q;
    c->p.b_k = c->b_k;
    c->p.b_v = c->b_v;
    c->p.b_o = c->b_o;
    c->p.mask = s->mask;
    c->p.key_padding = c->key_padding;
    c->p.scale = s->scale;
    c->p.weights = ATTN_WEIGHTS_PER_HEAD;
}

void tl_case_free(tl_case *c)
{
    free(c->x);
    free(c->memory);
    free(c->w_q);
    free(c->w_k);
    free(c->w_v);
    free(c->w_o);
    free(c->b_q);
    free(c->b_k);
    free(c->b_v);
    free(c->b_o);
    free(c->key_padding);
    memset(c, 0, sizeof *c);
}

bool tl_allowed(const attn_params *p, size_t b, size_t i, size_t j)
{
    if (p->mask == ATTN_MASK_CAUSAL && j > i)
        return false;
    if (p->key_padding != NULL && p->key_padding[b * p->dims.m + j] != 0)
        return false;
    return true;
}

size_t tl_output_elems(const attn_params *p)
{
    size_t out = 0;
    int st = attn_output_sizes(p, &out, NULL);

    TL_CHECK(st == ATTN_OK, "attn_output_sizes: %s", attn_strerror(st));
    return out;
}

size_t tl_weights_elems(const attn_params *p, attn_weights mode)
{
    attn_params q = *p;
    size_t w = 0;
    int st;

    q.weights = mode;
    st = attn_output_sizes(&q, NULL, &w);
    TL_CHECK(st == ATTN_OK, "attn_output_sizes: %s", attn_strerror(st));
    return w;
}

static float *tl_nan_buffer(size_t count)
{
    float *v = malloc((count ? count : 1) * sizeof *v);

    TL_CHECK(v != NULL, "test setup: out of memory (%zu floats)", count);
    /* NaN everywhere: an element the library forgets to write fails the
     * finiteness and tolerance checks */
    for (size_t i = 0; i < count; i++)
        v[i] = NAN;
    return v;
}

float *tl_run(tl_forward_fn fn, const attn_params *p, attn_weights mode,
              float **weights)
{
    attn_params q = *p;
    float *out, *w = NULL;
    int st;

    q.weights = mode;
    out = tl_nan_buffer(tl_output_elems(&q));
    if (mode != ATTN_WEIGHTS_NONE)
        w = tl_nan_buffer(tl_weights_elems(&q, mode));
    st = fn(&q, out, w);
    TL_CHECK(st == ATTN_OK, "forward (weights mode %d) returned %d (%s)",
             (int)mode, st, attn_strerror(st));
    if (weights != NULL)
        *weights = w;
    else
        free(w);
    return out;
}

/* -- assertions ------------------------------------------------------------ */

void tl_assert_close_tol(const char *what, const float *got, const float *ref,
                         size_t count, double tol)
{
    for (size_t i = 0; i < count; i++) {
        double g = got[i], r = ref[i];
        TL_CHECK(isfinite(g) && fabs(g - r) <= tol * (1.0 + fabs(r)),
                 "%s[%zu]: got %.9g, reference %.9g (tolerance %g * "
                 "(1 + |ref|))", what, i, g, r, tol);
    }
}

void tl_assert_close_f(const char *what, const float *got, const float *ref,
                       size_t count)
{
    tl_assert_close_tol(what, got, ref, count, TL_TOL);
}

void tl_assert_close_d(const char *what, const float *got, const double *ref,
                       size_t count)
{
    for (size_t i = 0; i < count; i++) {
        double g = got[i], r = ref[i];
        TL_CHECK(isfinite(g) && fabs(g - r) <= TL_TOL * (1.0 + fabs(r)),
                 "%s[%zu]: got %.9g, expected %.9g (tolerance 1e-4 * "
                 "(1 + |expected|))", what, i, g, r);
    }
}

void tl_assert_finite(const char *what, const float *v, size_t count)
{
    for (size_t i = 0; i < count; i++)
        TL_CHECK(isfinite(v[i]), "%s[%zu] is %g, not finite", what, i,
                 (double)v[i]);
}

void tl_assert_weights_masked(const char *what, const attn_params *p,
                              const float *weights)
{
    const attn_dims *d = &p->dims;

    for (size_t b = 0; b < d->B; b++)
        for (size_t hh = 0; hh < d->h; hh++)
            for (size_t i = 0; i < d->n; i++) {
                const float *row = weights + ((b * d->h + hh) * d->n + i) * d->m;
                bool any = false;
                double sum = 0.0;
                for (size_t j = 0; j < d->m; j++) {
                    TL_CHECK(isfinite(row[j]) && row[j] >= 0.0f,
                             "%s: weight [b=%zu][h=%zu][%zu][%zu] = %g",
                             what, b, hh, i, j, (double)row[j]);
                    if (tl_allowed(p, b, i, j)) {
                        any = true;
                        sum += row[j];
                    } else {
                        TL_CHECK(row[j] == 0.0f,
                                 "%s: masked weight [b=%zu][h=%zu][%zu]"
                                 "[%zu] = %g, expected exactly 0", what,
                                 b, hh, i, j, (double)row[j]);
                    }
                }
                if (any)
                    TL_CHECK(fabs(sum - 1.0) <= TL_TOL * (double)d->m,
                             "%s: row [b=%zu][h=%zu][%zu] sums to %.9g, "
                             "expected 1 within 1e-4 * m", what, b, hh,
                             i, sum);
            }
}

float *tl_mean_heads(const attn_params *p, const float *per_head)
{
    const attn_dims *d = &p->dims;
    size_t nm = d->n * d->m;
    float *mean = malloc(d->B * nm * sizeof *mean);

    TL_CHECK(mean != NULL, "test setup: out of memory");
    for (size_t b = 0; b < d->B; b++)
        for (size_t e = 0; e < nm; e++) {
            double s = 0.0;
            for (size_t hh = 0; hh < d->h; hh++)
                s += per_head[(b * d->h + hh) * nm + e];
            mean[b * nm + e] = (float)(s / (double)d->h);
        }
    return mean;
}

/* -- fixtures -------------------------------------------------------------- */

static void tl_read_floats(FILE *fp, const char *file, const char *sec,
                           float **dst, size_t count)
{
    float *v = malloc((count ? count : 1) * sizeof *v);

    TL_CHECK(v != NULL, "%s: out of memory", file);
    for (size_t i = 0; i < count; i++)
        TL_CHECK(fscanf(fp, "%f", &v[i]) == 1,
                 "%s: section %s: value %zu unreadable", file, sec, i);
    *dst = v;
}

static void tl_read_doubles(FILE *fp, const char *file, const char *sec,
                            double **dst, size_t count)
{
    double *v = malloc((count ? count : 1) * sizeof *v);

    TL_CHECK(v != NULL, "%s: out of memory", file);
    for (size_t i = 0; i < count; i++)
        TL_CHECK(fscanf(fp, "%lf", &v[i]) == 1,
                 "%s: section %s: value %zu unreadable", file, sec, i);
    *dst = v;
}

static void tl_read_ints(FILE *fp, const char *file, const char *sec,
                         long long **dst, size_t count)
{
    long long *v = malloc((count ? count : 1) * sizeof *v);

    TL_CHECK(v != NULL, "%s: out of memory", file);
    for (size_t i = 0; i < count; i++)
        TL_CHECK(fscanf(fp, "%lld", &v[i]) == 1,
                 "%s: section %s: value %zu unreadable", file, sec, i);
    *dst = v;
}

/* The sections of the score rules (attn_params' optional fields). Returns
 * false when tok is none of them. */
static bool tl_fixture_rule(tl_fixture *f, FILE *fp, const char *file,
                            const char *tok, size_t count)
{
    attn_params *p = &f->p;
    const attn_dims *d = &p->dims;
    long long *ints = NULL;

    if (strcmp(tok, "positions") == 0 || strcmp(tok, "key_positions") == 0) {
        bool keys = tok[0] == 'k';
        int64_t *pos = malloc((count ? count : 1) * sizeof *pos);
        TL_CHECK(pos != NULL && count == d->B * (keys ? d->m : d->n),
                 "%s: %s has %zu values", file, tok, count);
        tl_read_ints(fp, file, tok, &ints, count);
        for (size_t i = 0; i < count; i++)
            pos[i] = (int64_t)ints[i];
        free(ints);
        if (keys)
            p->key_positions = f->key_positions = pos;
        else
            p->positions = f->positions = pos;
    } else if (strcmp(tok, "rope") == 0) {
        int style;
        /* rope <dim> <theta> <style 0 half, 1 interleaved> <factor> */
        p->rope.dim = count;
        TL_CHECK(fscanf(fp, "%lf %d %lf", &p->rope.theta, &style,
                        &p->rope.attention_factor) == 3,
                 "%s: bad rope line", file);
        p->rope.style = style ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
    } else if (strcmp(tok, "inv_freq") == 0) {
        tl_read_floats(fp, file, tok, &f->inv_freq, count);
        p->rope.inv_freq = f->inv_freq;
    } else if (strcmp(tok, "qk_norm") == 0) {
        /* qk_norm <over 1 head, 2 all> <eps> */
        p->qk_norm.over = (attn_qk_norm_over)count;
        TL_CHECK(fscanf(fp, "%lf", &p->qk_norm.eps) == 1,
                 "%s: bad qk_norm line", file);
    } else if (strcmp(tok, "q_weight") == 0) {
        tl_read_floats(fp, file, tok, &f->q_weight, count);
        p->qk_norm.q_weight = f->q_weight;
    } else if (strcmp(tok, "k_weight") == 0) {
        tl_read_floats(fp, file, tok, &f->k_weight, count);
        p->qk_norm.k_weight = f->k_weight;
    } else if (strcmp(tok, "softcap") == 0) {
        /* softcap 1 <value> */
        TL_CHECK(count == 1 && fscanf(fp, "%f", &p->softcap) == 1,
                 "%s: bad softcap line", file);
    } else if (strcmp(tok, "alibi_slopes") == 0) {
        TL_CHECK(count == d->h, "%s: alibi_slopes has %zu values", file,
                 count);
        tl_read_floats(fp, file, tok, &f->alibi_slopes, count);
        p->alibi_slopes = f->alibi_slopes;
    } else if (strcmp(tok, "score_bias") == 0 ||
               strcmp(tok, "score_mask") == 0) {
        /* <section> <count> <stride_b> <stride_h> then the values */
        attn_score_map *map =
            tok[6] == 'b' ? &p->score_bias : &p->score_mask;
        TL_CHECK(fscanf(fp, "%zu %zu", &map->stride_b, &map->stride_h) == 2,
                 "%s: bad %s strides", file, tok);
        if (tok[6] == 'b') {
            tl_read_floats(fp, file, tok, &f->score_bias, count);
            map->data = f->score_bias;
        } else {
            f->score_mask = malloc(count ? count : 1);
            TL_CHECK(f->score_mask != NULL, "%s: out of memory", file);
            tl_read_ints(fp, file, tok, &ints, count);
            for (size_t i = 0; i < count; i++)
                f->score_mask[i] = (uint8_t)(ints[i] != 0);
            free(ints);
            map->data = f->score_mask;
        }
    } else if (strcmp(tok, "window") == 0) {
        /* window 1 <left> <right>, -1 for an unbounded side */
        long long l, r;
        TL_CHECK(fscanf(fp, "%lld %lld", &l, &r) == 2, "%s: bad window",
                 file);
        p->window.on = (int)count;
        p->window.left = l < 0 ? ATTN_UNBOUNDED : (size_t)l;
        p->window.right = r < 0 ? ATTN_UNBOUNDED : (size_t)r;
    } else if (strcmp(tok, "global_tokens") == 0) {
        f->global_tokens = malloc((count ? count : 1) * sizeof(size_t));
        TL_CHECK(f->global_tokens != NULL, "%s: out of memory", file);
        tl_read_ints(fp, file, tok, &ints, count);
        for (size_t i = 0; i < count; i++)
            f->global_tokens[i] = (size_t)ints[i];
        free(ints);
        p->global_tokens = f->global_tokens;
        p->n_global = count;
    } else if (strcmp(tok, "value") == 0) {
        /* value <count> <d_val> then the values, before w_v */
        TL_CHECK(fscanf(fp, "%zu", &p->d_val) == 1 &&
                     count == d->B * d->m * p->d_val,
                 "%s: bad value section", file);
        tl_read_floats(fp, file, tok, &f->value, count);
        p->value = f->value;
    } else {
        return false;
    }
    return true;
}

void tl_fixture_load(tl_fixture *f, const char *name)
{
    const char *dir = getenv("ATTN_TEST_FIXTURES");
    char file[512], tok[64];
    attn_dims *d = &f->p.dims;
    unsigned version = 0;
    FILE *fp;

    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(file, sizeof file, "%s/%s.txt", dir ? dir : TEST_LIB_FIXTURES,
             name);
    fp = fopen(file, "r");
    TL_CHECK(fp != NULL, "cannot open fixture %s (run `make fixtures`)",
             file);
    TL_CHECK(fscanf(fp, "%63s %u", tok, &version) == 2 &&
                 strcmp(tok, "attn_fixture") == 0 && version == 1,
             "%s: not an attn_fixture 1 file", file);
    TL_CHECK(fscanf(fp, "%63s", tok) == 1, "%s: no name", file);
    TL_CHECK(fscanf(fp, "%63s %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu",
                    tok, &d->B, &d->n, &d->m, &d->d_model, &d->d_mem,
                    &d->h, &d->g, &d->d_k, &d->d_v, &d->d_out) == 11 &&
                 strcmp(tok, "dims") == 0,
             "%s: bad dims line", file);
    TL_CHECK(fscanf(fp, "%63s", tok) == 1 && strcmp(tok, "mask") == 0 &&
                 fscanf(fp, "%63s", tok) == 1,
             "%s: bad mask line", file);
    TL_CHECK(strcmp(tok, "none") == 0 || strcmp(tok, "causal") == 0,
             "%s: unknown mask %s", file, tok);
    f->p.mask = strcmp(tok, "causal") == 0 ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE;
    TL_CHECK(fscanf(fp, "%63s %f", tok, &f->p.scale) == 2 &&
                 strcmp(tok, "scale") == 0,
             "%s: bad scale line", file);

    for (;;) {
        size_t count, want;
        TL_CHECK(fscanf(fp, "%63s", tok) == 1, "%s: no end line", file);
        if (strcmp(tok, "end") == 0)
            break;
        TL_CHECK(fscanf(fp, "%zu", &count) == 1, "%s: section %s: no count",
                 file, tok);
#define TL_SECTION(sec, expect)                                                \
    if (strcmp(tok, #sec) == 0) {                                              \
        want = (expect);                                                       \
        TL_CHECK(count == want && f->sec == NULL,                         \
                 "%s: section " #sec " has %zu values, dims need %zu",    \
                 file, count, want);                                      \
   tl_read_floats(fp, file, #sec, &f->sec, count);                        \
   continue;                                                              \
    }
   TL_SECTION(x, d->B * d->n * d->d_model)
   TL_SECTION(memory, d->B * d->m * d->d_mem)
   TL_SECTION(w_q, d->d_model * d->h * d->d_k)
   TL_SECTION(w_k, d->d_mem * d->g * d->d_k)
   TL_SECTION(w_v, (f->value ? f->p.d_val : d->d_mem) * d->g * d->d_v)
   TL_SECTION(w_o, d->h * d->d_v * d->d_out)
   TL_SECTION(b_q, d->h * d->d_k)
   TL_SECTION(b_k, d->g * d->d_k)
   TL_SECTION(b_v, d->g * d->d_v)
   TL_SECTION(b_o, d->d_out)
#undef TL_SECTION
   if (strcmp(tok, "key_padding") == 0) {
       want = d->B * d->m;
            TL_CHECK(count == want && f->key_padding == NULL,
                     "%s: key_padding has %zu values, dims need %zu",
                     file, count, want);
            f->key_padding = malloc(count);
            TL_CHECK(f->key_padding != NULL, "%s: out of memory", file);
            for (size_t i = 0; i < count; i++) {
                unsigned v;
                TL_CHECK(fscanf(fp, "%u", &v) == 1 && v <= 1,
                         "%s: key_padding value %zu", file, i);
                f->key_padding[i] = (uint8_t)v;
            }
        } else if (strcmp(tok, "output") == 0) {
            want = d->B * d->n * d->d_out;
            TL_CHECK(count == want && f->output == NULL,
                     "%s: output has %zu values, dims need %zu", file,
                     count, want);
            tl_read_doubles(fp, file, "output", &f->output, count);
        } else if (strcmp(tok, "weights") == 0) {
            want = d->B * d->h * d->n * d->m;
            TL_CHECK(count == want && f->weights == NULL,
                     "%s: weights has %zu values, dims need %zu", file,
                     count, want);
            tl_read_doubles(fp, file, "weights", &f->weights, count);
        } else if (!tl_fixture_rule(f, fp, file, tok, count)) {
            ck_abort_msg("%s: unknown section %s", file, tok);
        }
    }
    fclose(fp);
    TL_CHECK(f->x && f->w_q && f->w_k && f->w_v && f->output &&
                 f->weights,
             "%s: a required section is missing", file);

    f->p.x = f->x;
    f->p.memory = f->memory;
    f->p.w_q = f->w_q;
    f->p.w_k = f->w_k;
    f->p.w_v = f->w_v;
    f->p.w_o = f->w_o;
    f->p.b_q = f->b_q;
    f->p.b_k = f->b_k;
    f->p.b_v = f->b_v;
    f->p.b_o = f->b_o;
    f->p.key_padding = f->key_padding;
    f->p.weights = ATTN_WEIGHTS_PER_HEAD;
}

void tl_fixture_free(tl_fixture *f)
{
    free(f->x);
    free(f->memory);
    free(f->w_q);
    free(f->w_k);
    free(f->w_v);
    free(f->w_o);
    free(f->b_q);
    free(f->b_k);
    free(f->b_v);
    free(f->b_o);
    free(f->key_padding);
    free(f->output);
    free(f->weights);
    free(f->positions);
    free(f->key_positions);
    free(f->inv_freq);
    free(f->q_weight);
    free(f->k_weight);
    free(f->alibi_slopes);
    free(f->score_bias);
    free(f->score_mask);
    free(f->global_tokens);
    free(f->value);
    memset(f, 0, sizeof *f);
}

/* -- counting allocator ---------------------------------------------------- */

/* Each block carries its size in a header of max_align_t's size, so the
 * pointer handed out keeps malloc's alignment. */
#define TL_ALLOC_HEADER sizeof(max_align_t)

static void *tl_alloc_alloc(void *ctx, size_t size)
{
    tl_alloc *a = ctx;
    unsigned char *block = NULL;

    pthread_mutex_lock(&a->lock);
    a->calls++;
    if (a->calls == a->fail_at) {
        a->failures++;
    } else if (size <= SIZE_MAX - TL_ALLOC_HEADER) {
        block = malloc(TL_ALLOC_HEADER + size);
        if (block != NULL) {
            memcpy(block, &size, sizeof size);
            /* all-ones bytes are NaN floats: workspace the library reads
             * before writing shows in its results */
            memset(block + TL_ALLOC_HEADER, 0xFF, size);
            a->live++;
            a->bytes += size;
            if (a->bytes > a->peak_bytes)
                a->peak_bytes = a->bytes;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return block ? block + TL_ALLOC_HEADER : NULL;
}

static void tl_alloc_free(void *ctx, void *ptr)
{
    tl_alloc *a = ctx;
    unsigned char *block;
    size_t size;

    if (ptr == NULL)
        return;
    block = (unsigned char *)ptr - TL_ALLOC_HEADER;
    memcpy(&size, block, sizeof size);
    pthread_mutex_lock(&a->lock);
    a->live--;
    a->bytes -= size;
    pthread_mutex_unlock(&a->lock);
    free(block);
}

void tl_alloc_init(tl_alloc *a, size_t fail_at)
{
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->lock, NULL);
    a->fail_at = fail_at;
    a->iface.alloc = tl_alloc_alloc;
    a->iface.free = tl_alloc_free;
    a->iface.ctx = a;
}

void tl_alloc_destroy(tl_alloc *a)
{
    pthread_mutex_destroy(&a->lock);
}

/* -- executors ------------------------------------------------------------- */

typedef struct tl_exec_job {
    tl_exec *e;
    size_t count;
    size_t next; /* next task to hand out, under e->lock */
    void (*fn)(void *arg, size_t i, size_t worker);
    void *arg;
} tl_exec_job;

typedef struct tl_exec_thread {
    tl_exec_job *job;
    size_t worker;
} tl_exec_thread;

static void *tl_exec_worker(void *arg)
{
    tl_exec_thread *t = arg;
    tl_exec_job *job = t->job;

    for (;;) {
        size_t i;
        pthread_mutex_lock(&job->e->lock);
        i = job->next < job->count ? job->next++ : job->count;
        if (i < job->count)
            job->e->tasks++;
        pthread_mutex_unlock(&job->e->lock);
        if (i == job->count)
            return NULL;
        job->fn(job->arg, i, t->worker);
    }
}

static void tl_exec_run(void *ctx, size_t count,
                        void (*fn)(void *arg, size_t i, size_t worker),
                        void *arg)
{
    tl_exec *e = ctx;
    size_t workers = e->iface.workers;

    pthread_mutex_lock(&e->lock);
    e->runs++;
    pthread_mutex_unlock(&e->lock);

    if (e->kind == TL_EXEC_REVERSE) {
        /* any order must do: run the last task first, rotating workers */
        for (size_t k = count; k-- > 0;) {
            fn(arg, k, k % workers);
            e->tasks++;
        }
        return;
    }

    tl_exec_job job = { e, count, 0, fn, arg };
    tl_exec_thread threads[8];
    pthread_t ids[8];
    bool started[8] = { false };
    size_t nthreads = workers < 8 ? workers : 8;

    for (size_t t = 0; t < nthreads; t++) {
        threads[t].job = &job;
        threads[t].worker = t;
        started[t] = pthread_create(&ids[t], NULL, tl_exec_worker,
                                    &threads[t]) == 0;
    }
    /* a worker id whose thread did not start is served by this thread */
    for (size_t t = 0; t < nthreads; t++)
        if (!started[t])
            tl_exec_worker(&threads[t]);
    for (size_t t = 0; t < nthreads; t++)
        if (started[t])
            pthread_join(ids[t], NULL);
}

void tl_exec_init(tl_exec *e, tl_exec_kind kind, size_t workers)
{
    memset(e, 0, sizeof *e);
    pthread_mutex_init(&e->lock, NULL);
    e->kind = kind;
    e->iface.run = tl_exec_run;
    e->iface.workers = workers;
    e->iface.ctx = e;
}

void tl_exec_destroy(tl_exec *e)
{
    pthread_mutex_destroy(&e->lock);
}
