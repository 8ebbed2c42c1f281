/* json/suggest.c: what a message that refuses an unknown key says: the
 * closest known name ("did you mean ..."), the key's JSON Pointer and the
 * key itself, quoted. */
#include "json/json.h"
#include "json/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Optimal string alignment distance (insertions, deletions, substitutions
 * and transpositions of neighbours), or cap + 1 once it exceeds cap. Keys
 * longer than 63 bytes are never close to a field name. */
static size_t codec__distance(const char *a, size_t la, const char *b,
                              size_t lb, size_t cap)
{
    size_t d[3][64], i, j;

    if (la > 63 || lb > 63)
        return cap + 1;
    if ((la > lb ? la - lb : lb - la) > cap)
        return cap + 1;
    for (j = 0; j <= lb; j++)
        d[0][j] = j;
    for (i = 1; i <= la; i++) {
        size_t *row = d[i % 3], *up = d[(i + 2) % 3], *up2 = d[(i + 1) % 3];
        size_t best = row[0] = i;
        for (j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t v = up[j - 1] + cost;
            if (up[j] + 1 < v)
                v = up[j] + 1;
            if (row[j - 1] + 1 < v)
                v = row[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
                a[i - 2] == b[j - 1] && up2[j - 2] + 1 < v)
                v = up2[j - 2] + 1;
            row[j] = v;
            if (v < best)
                best = v;
        }
        if (best > cap)
            return cap + 1;
    }
    return d[la % 3][lb];
}

const char *codec_json_closest(const char *key, size_t len,
                               const char *const *names, size_t count)
{
    const char *best = NULL;
    size_t best_d = 3, i;

    for (i = 0; i < count; i++) {
        size_t dist = codec__distance(key, len, names[i], strlen(names[i]), 2);
        if (dist < best_d) {
            best_d = dist;
            best = names[i];
        }
    }
    return best;
}

/* How many bytes of s[0..len) to keep so that at most cap are kept and no
 * UTF-8 sequence is cut in two. */
static size_t codec__utf8_prefix(const char *s, size_t len, size_t cap)
{
    size_t n = cap;

    if (len <= cap)
        return len;
    /* s[n] is the first byte left out: while it continues a sequence,
     * that sequence's lead goes too */
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

void codec_json_pointer(char *buf, size_t cap, const char *where,
                        const char *key, size_t len)
{
    size_t n, i, step;
    int w;

    if (cap == 0)
        return;
    w = snprintf(buf, cap, "%s/", where);
    if (w < 0 || (size_t)w >= cap)
        return;
    n = (size_t)w;
    for (i = 0; i < len && key[i] != '\0'; i += step) {
        unsigned char c = (unsigned char)key[i];
        int special = c == '~' || c == '/';
        /* the reader checked the key's UTF-8: a lead byte tells the
         * length of its sequence */
        step = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (step > len - i)
            step = len - i;
        if (n + (special ? 2 : step) >= cap)
            break;
        if (special) {
            buf[n++] = '~';
            buf[n++] = c == '~' ? '0' : '1';
        } else {
            memcpy(buf + n, key + i, step);
            n += step;
        }
    }
    buf[n] = '\0';
}

char *codec_json_quote(const char *s, size_t len, size_t max)
{
    text_buf t = TEXT_BUF_INIT;
    size_t keep = codec__utf8_prefix(s, len, max);

    text_json_string(&t, s, keep);
    if (keep < len)
        text_puts(&t, "...");
    return text_take(&t, NULL);
}

char *codec_json_quote_key(const char *key, size_t len)
{
    return codec_json_quote(key, len, CODEC_QUOTE_KEY_MAX);
}
