/* fuzz_http.c: libFuzzer harness over the HTTP layer. An in-process attnd
 * (server_start on an ephemeral loopback port, small limits, one compute
 * thread) receives the fuzz bytes as-is on a fresh TCP connection; the
 * harness then half-closes its side and reads until the server closes.
 *
 * libmicrohttpd itself comes from Debian and is not instrumented, so
 * coverage guides the fuzzer through attnd's own code (routing, header
 * guards, body accumulation, the codec); ASan/UBSan watch the whole
 * process. Besides crashes, the harness flags a server that has not closed
 * the connection within FUZZ_HTTP_WAIT_S seconds of the client's
 * half-close (a hang), any 5xx other than 503 (and libmicrohttpd's 505
 * for an HTTP version it does not speak), and a server that stops
 * answering /healthz after an input. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "config.h"
#include "http/server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Seconds the server has to answer and close after the client half-closes.
 * Generous: the machine is shared and sanitizers slow everything down. */
#define FUZZ_HTTP_WAIT_S 20

static server *fuzz_http__srv;
static uint16_t fuzz_http__port;

static void fuzz_http__fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_http: %s%s%s\n", what, detail ? ": " : "",
            detail ? detail : "");
    __builtin_trap();
}

static int fuzz_http__connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        fuzz_http__fail("socket", strerror(errno));
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(fuzz_http__port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = FUZZ_HTTP_WAIT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        /* libFuzzer's SIGALRM (its -timeout clock) can interrupt connect;
         * the connection then completes in the background. */
        int so_err = errno;
        if (so_err == EINTR) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            socklen_t len = sizeof so_err;
            while (poll(&p, 1, FUZZ_HTTP_WAIT_S * 1000) < 0 && errno == EINTR)
                ;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &len))
                so_err = errno;
        }
        if (so_err)
            fuzz_http__fail("connect", strerror(so_err));
    }
    return fd;
}

/* Sends data, half-closes, reads everything into buf (up to cap - 1 bytes
 * kept, the rest counted and dropped). Returns the bytes kept; *timed_out
 * says whether the server never closed. A reset is a normal end here: the
 * server may close while unread request bytes remain (an error answered
 * before the body). */
static size_t fuzz_http__exchange(const uint8_t *data, size_t size, char *buf,
                                  size_t cap, int *timed_out)
{
    int fd = fuzz_http__connect();
    size_t off = 0;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the server answered and closed early */
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    size_t got = 0;
    *timed_out = 0;
    for (;;) {
        char tmp[4096];
        ssize_t n = recv(fd, tmp, sizeof tmp, 0);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                *timed_out = 1;
            break;
        }
        size_t keep = (size_t)n < cap - 1 - got ? (size_t)n : cap - 1 - got;
        memcpy(buf + got, tmp, keep);
        got += keep;
    }
    close(fd);
    buf[got] = '\0';
    return got;
}

/* Walks the responses in buf (keep-alive may carry several, each framed by
 * Content-Length; a chunked one ends the walk) and fails on a 5xx other than
 * 503. Only status lines are looked at, never bodies, which may echo
 * request text. */
static void fuzz_http__check_statuses(const char *buf, size_t got)
{
    const char *p = buf, *end = buf + got;
    while (end - p >= 12 && !strncmp(p, "HTTP/1.", 7)) {
        /* 505 is libmicrohttpd's own answer to an HTTP version it does not
         * speak (e.g. an HTTP/2 preface), a protocol answer, not a fault. */
        if (p[9] == '5' && strncmp(p + 9, "503", 3) &&
            strncmp(p + 9, "505", 3)) {
            char status[4] = {p[9], p[10], p[11], 0};
            fuzz_http__fail("5xx other than 503", status);
        }
        const char *hend = strstr(p, "\r\n\r\n");
        if (!hend)
            return;
        const char *cl = NULL;
        for (const char *h = p; h && h < hend; h = strstr(h, "\r\n")) {
            h += 2;
            if (!strncasecmp(h, "Content-Length:", 15)) {
                cl = h + 15;
                break;
            }
        }
        if (!cl)
            return;
        unsigned long long n = strtoull(cl, NULL, 10);
        if (n > (unsigned long long)(end - hend - 4))
            return;
        p = hend + 4 + n;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    config cfg;
    config_defaults(&cfg);
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1");
    cfg.port = 0;
    cfg.threads = 1;
    cfg.quiet = 1;
    cfg.limits.max_body_bytes = 64 * 1024;
    cfg.limits.max_dim = 64;
    cfg.limits.max_batch = 4;
    cfg.limits.max_heads = 8;
    cfg.limits.max_map_elems = (size_t)1 << 14;
    cfg.limits.max_flops = UINT64_C(20000000);
    cfg.limits.timeout_s = 5;
    char err[256];
    if (server_start(&cfg, &fuzz_http__srv, err, sizeof err))
        fuzz_http__fail("server_start", err);
    fuzz_http__port = server_port(fuzz_http__srv);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[1 << 16];
    int timed_out;
    size_t got = fuzz_http__exchange(data, size, buf, sizeof buf, &timed_out);
    if (timed_out)
        fuzz_http__fail("server kept the connection open after half-close",
                        NULL);
    fuzz_http__check_statuses(buf, got);
    static const uint8_t probe[] =
        "GET /healthz HTTP/1.1\r\nHost: f\r\nConnection: close\r\n\r\n";
    char pbuf[1024];
    fuzz_http__exchange(probe, sizeof probe - 1, pbuf, sizeof pbuf,
                        &timed_out);
    if (timed_out || strncmp(pbuf, "HTTP/1.1 200 ", 13))
        fuzz_http__fail("/healthz does not answer 200 after the input", pbuf);
    return 0;
}
