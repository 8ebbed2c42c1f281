/* embed.c: build-time generator of the dashboard's asset table.
 *
 *   embed OUT.c ENTRY...      ENTRY is urlpath=file[:content-type]
 *
 * Writes OUT.c, a C file that includes "http/assets.h" and defines
 * assets_find() over one byte array per entry. When an entry names no
 * content type it is guessed from the file's extension. The output is
 * written to OUT.c.tmp and renamed, so a failed run never leaves a
 * half-written table that make would take as up to date.
 *
 * Runs only at build time, on files from the source tree, so it reports
 * problems on stderr and exits non-zero instead of recovering.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct embed_entry {
    const char *url;  /* borrowed from argv (split in place) */
    const char *file; /* borrowed from argv */
    const char *type; /* borrowed from argv or a static string */
} embed_entry;

static const struct {
    const char *ext;
    const char *type;
} embed__types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
    {".txt", "text/plain; charset=utf-8"},
    {".md", "text/markdown; charset=utf-8"},
};

/* The content type for file by extension; binary octets when unknown, so a
 * browser never sniffs an unexpected file into something executable. */
static const char *embed_guess_type(const char *file)
{
    const char *dot = strrchr(file, '.');
    const char *slash = strrchr(file, '/');
    if (dot == NULL || (slash != NULL && dot < slash))
        return "application/octet-stream";
    for (size_t i = 0; i < sizeof embed__types / sizeof embed__types[0]; i++)
        if (strcmp(dot, embed__types[i].ext) == 0)
            return embed__types[i].type;
    return "application/octet-stream";
}

/* Splits arg (modified in place) into e. Returns 0, or -1 with a message. */
static int embed_parse(char *arg, embed_entry *e)
{
    char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg || arg[0] != '/' || eq[1] == '\0') {
        fprintf(stderr, "embed: bad entry '%s' (want /url=file[:type])\n",
                arg);
        return -1;
    }
    *eq = '\0';
    e->url = arg;
    e->file = eq + 1;
    /* A content type always has a '/', a file name after ':' rarely does not;
     * the last ':' is the separator so "text/html; charset=utf-8" survives. */
    char *colon = strrchr(eq + 1, ':');
    if (colon != NULL && strchr(colon + 1, '/') != NULL) {
        *colon = '\0';
        e->type = colon + 1;
    } else {
        e->type = embed_guess_type(e->file);
    }
    return 0;
}

/* Writes s as a C string literal body (quotes, backslashes escaped). */
static void embed_put_cstring(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(out, "\\%03o", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* Appends file's bytes to out as array number idx. Returns its length
 * through len, 0 on success, -1 with a message. */
static int embed_put_file(FILE *out, size_t idx, const char *file,
                          size_t *len)
{
    FILE *in = fopen(file, "rb");
    if (in == NULL) {
        fprintf(stderr, "embed: %s: %s\n", file, strerror(errno));
        return -1;
    }
    /* One trailing zero so an empty file still gives a valid array; it is
     * not counted in len. */
    fprintf(out, "static const unsigned char embed__data_%zu[] = {", idx);
    size_t n = 0;
    int c;
    while ((c = fgetc(in)) != EOF) {
        fprintf(out, "%s%u,", n % 16 == 0 ? "\n    " : "", (unsigned)c);
        n++;
    }
    int failed = ferror(in);
    fclose(in);
    if (failed) {
        fprintf(stderr, "embed: %s: read error\n", file);
        return -1;
    }
    fprintf(out, "%s0\n};\n\n", n % 16 == 0 ? "\n    " : "");
    *len = n;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: embed OUT.c /url=file[:type]...\n");
        return 2;
    }
    const char *out_path = argv[1];
    size_t count = (size_t)argc - 2;
    embed_entry *entries = calloc(count ? count : 1, sizeof *entries);
    size_t *lens = calloc(count ? count : 1, sizeof *lens);
    size_t tmp_len = strlen(out_path) + sizeof ".tmp";
    char *tmp_path = malloc(tmp_len);
    if (entries == NULL || lens == NULL || tmp_path == NULL) {
        fprintf(stderr, "embed: out of memory\n");
        return 1;
    }
    snprintf(tmp_path, tmp_len, "%s.tmp", out_path);

    for (size_t i = 0; i < count; i++) {
        if (embed_parse(argv[i + 2], &entries[i]) != 0)
            return 1;
        for (size_t j = 0; j < i; j++)
            if (strcmp(entries[j].url, entries[i].url) == 0) {
                fprintf(stderr, "embed: %s listed twice (%s and %s)\n",
                        entries[i].url, entries[j].file, entries[i].file);
                return 1;
            }
    }

    FILE *out = fopen(tmp_path, "w");
    if (out == NULL) {
        fprintf(stderr, "embed: %s: %s\n", tmp_path, strerror(errno));
        return 1;
    }
    fprintf(out, "/* assets.c: generated by tools/embed.c from web/ and "
                 "ASSET_FILES; do not edit. */\n"
                 "#include \"http/assets.h\"\n\n#include <string.h>\n\n");
    for (size_t i = 0; i < count; i++)
        if (embed_put_file(out, i, entries[i].file, &lens[i]) != 0) {
            fclose(out);
            remove(tmp_path);
            return 1;
        }

    fprintf(out, "static const asset embed__assets[] = {\n");
    for (size_t i = 0; i < count; i++) {
        fputs("    {", out);
        embed_put_cstring(out, entries[i].url);
        fputs(", ", out);
        embed_put_cstring(out, entries[i].type);
        fprintf(out, ", embed__data_%zu, %zu},\n", i, lens[i]);
    }
    /* A sentinel keeps the array non-empty when there are no entries. */
    fprintf(out, "    {NULL, NULL, NULL, 0}\n};\n\n");
    fprintf(out,
            "const asset *assets_find(const char *path)\n"
            "{\n"
            "    if (path == NULL)\n"
            "        return NULL;\n"
            "    for (size_t i = 0; embed__assets[i].path != NULL; i++)\n"
            "        if (strcmp(embed__assets[i].path, path) == 0)\n"
            "            return &embed__assets[i];\n"
            "    return NULL;\n"
            "}\n");
    if (fclose(out) != 0) {
        fprintf(stderr, "embed: %s: write error\n", tmp_path);
        remove(tmp_path);
        return 1;
    }
    if (rename(tmp_path, out_path) != 0) {
        fprintf(stderr, "embed: %s: %s\n", out_path, strerror(errno));
        remove(tmp_path);
        return 1;
    }
    free(entries);
    free(lens);
    free(tmp_path);
    return 0;
}
