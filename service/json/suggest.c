/* json/suggest.c: the closest known name to a misspelt key, for messages
 * that say "did you mean ...". */
#include "json/json.h"

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
