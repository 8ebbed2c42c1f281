/* test_drain.c: the real binary (ATTND_BIN) as a child process: SIGTERM
 * turns /readyz 503 at once, a request in flight still completes with 200
 * (whole, even with another request pipelined behind it), and the process
 * exits 0. Also --healthcheck against it. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_service.h"

extern char **environ;

typedef struct child {
    pid_t pid;
    int err_fd; /* the child's stderr */
    uint16_t port;
} child;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *attnd_bin(void)
{
    const char *bin = getenv("ATTND_BIN");
    ck_assert_msg(bin && *bin, "ATTND_BIN must name build/attnd");
    ck_assert_msg(access(bin, X_OK) == 0, "ATTND_BIN %s is not executable",
                  bin);
    return bin;
}

/* Starts attnd with extra args on port 0 and reads its start-up line for
 * the port it bound. */
static void child_start(child *c, const char *const *extra)
{
    char *argv[16];
    int argc = 0;
    argv[argc++] = (char *)attnd_bin();
    argv[argc++] = (char *)"--host";
    argv[argc++] = (char *)"127.0.0.1";
    argv[argc++] = (char *)"--port";
    argv[argc++] = (char *)"0";
    argv[argc++] = (char *)"--threads";
    argv[argc++] = (char *)"2";
    for (const char *const *e = extra; e && *e; e++)
        argv[argc++] = (char *)*e;
    argv[argc] = NULL;
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    ck_assert_int_eq(posix_spawn(&c->pid, argv[0], &fa, NULL, argv, environ),
                     0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    c->err_fd = fds[0];
    char buf[8192];
    size_t got = 0;
    c->port = 0;
    while (!c->port && got < sizeof buf - 1) {
        struct pollfd pfd = {.fd = c->err_fd, .events = POLLIN};
        ck_assert_msg(poll(&pfd, 1, 30000) == 1, "no start-up line: %.*s",
                      (int)got, buf);
        ssize_t n = read(c->err_fd, buf + got, sizeof buf - 1 - got);
        ck_assert_msg(n > 0, "attnd exited: %.*s", (int)got, buf);
        got += (size_t)n;
        buf[got] = '\0';
        const char *l = strstr(buf, "\"msg\":\"listening\"");
        const char *p = l ? strstr(l, "\"port\":") : NULL;
        if (p && strchr(p, '\n'))
            c->port = (uint16_t)atoi(p + 7);
    }
    ck_assert_uint_ne(c->port, 0);
}

/* Waits for the child's exit and returns its status; drains its stderr so
 * it can never block on a full pipe. */
static int child_wait(child *c)
{
    char sink[4096];
    while (read(c->err_fd, sink, sizeof sink) > 0)
        ;
    close(c->err_fd);
    int st;
    ck_assert_int_eq(waitpid(c->pid, &st, 0), c->pid);
    return st;
}

/* Waits for the child's exit as child_wait does, keeping the start of its
 * stderr in log (NUL-terminated). */
static int child_wait_log(child *c, char *log, size_t cap)
{
    size_t got = 0;
    ssize_t n;
    char sink[4096];
    while ((n = read(c->err_fd, got < cap - 1 ? log + got : sink,
                     got < cap - 1 ? cap - 1 - got : sizeof sink)) > 0)
        if (got < cap - 1)
            got += (size_t)n;
    log[got] = '\0';
    close(c->err_fd);
    int st;
    ck_assert_int_eq(waitpid(c->pid, &st, 0), c->pid);
    return st;
}

/* A valid /attend whose body stops halfway until the gate opens. */
typedef struct slow {
    uint16_t port;
    ts_case c;
    size_t sent;
    atomic_int gate, status;
    char out[65536];
    size_t out_len;
} slow;

static size_t slow_read(char *buf, size_t size, size_t n, void *arg)
{
    slow *s = arg;
    if (s->sent >= s->c.json_len / 2)
        while (!atomic_load(&s->gate))
            sleep_ms(5);
    size_t k = s->c.json_len - s->sent;
    if (k > size * n)
        k = size * n;
    if (k > 256)
        k = 256;
    memcpy(buf, s->c.json + s->sent, k);
    s->sent += k;
    return k;
}

static size_t slow_write(char *d, size_t sz, size_t n, void *arg)
{
    slow *s = arg;
    size_t add = sz * n;
    if (s->out_len + add < sizeof s->out) {
        memcpy(s->out + s->out_len, d, add);
        s->out_len += add;
        s->out[s->out_len] = '\0';
    }
    return add;
}

static void *slow_post(void *arg)
{
    slow *s = arg;
    CURL *h = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/attend", (unsigned)s->port);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->c.json_len);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, slow_read);
    curl_easy_setopt(h, CURLOPT_READDATA, s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, slow_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    hl = curl_slist_append(hl, "Expect:");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    long st = -1;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    atomic_store(&s->status, (int)st);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return NULL;
}

static double child_in_flight(uint16_t port)
{
    ts_response r;
    ts_request q = {.path = "/metrics"};
    ts_http(port, &q, &r);
    double v = ts_metric(r.body, "attnd_http_requests_in_flight");
    ts_response_free(&r);
    return v;
}

START_TEST(test_drain_sigterm_finishes_in_flight_and_exits_0)
{
    child c;
    /* the body stalls halfway on purpose, for as long as a loaded machine
     * takes: the minimum body rate must not cut it */
    const char *args[] = {"--drain-delay", "1", "--quiet", "--min-body-rate",
                          "0", NULL};
    child_start(&c, args);
    ck_assert_int_eq(ts_get_status(c.port, "/readyz"), 200);

    slow *s = calloc(1, sizeof *s);
    s->port = c.port;
    ts_case_make(&s->c, 6, 8, 2, 4, NULL);
    atomic_store(&s->status, 0);
    pthread_t t;
    pthread_create(&t, NULL, slow_post, s);
    /* The slow request is in flight once the gauge counts it beside the
     * /metrics request that reads it. */
    int i = 0;
    while (child_in_flight(c.port) < 2 && i++ < 3000)
        sleep_ms(10);
    ck_assert_msg(child_in_flight(c.port) >= 2, "slow request never arrived");

    ck_assert_int_eq(kill(c.pid, SIGTERM), 0);
    long ready = 200;
    for (i = 0; i < 3000 && ready == 200; i++) {
        ready = ts_get_status(c.port, "/readyz");
        if (ready == 200)
            sleep_ms(10);
    }
    ck_assert_int_eq(ready, 503);

    atomic_store(&s->gate, 1);
    pthread_join(t, NULL);
    ck_assert_msg(atomic_load(&s->status) == 200, "in-flight request got %d: %s",
                  atomic_load(&s->status), s->out);
    ck_assert_ptr_nonnull(strstr(s->out, "\"output\""));

    int st = child_wait(&c);
    ck_assert_msg(WIFEXITED(st), "attnd did not exit normally");
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    ts_case_free(&s->c);
    free(s);
}
END_TEST

/* A client asks for an answer of about a megabyte, SIGTERM comes, and the
 * client sends another request on the same connection only after the
 * server began closing it (its end is past ESTABLISHED), then reads. The
 * first answer must arrive whole and the connection end without a reset:
 * a byte arriving after the server's end of the stream at a socket whose
 * read side is shut, or closed, makes the kernel answer with a reset and
 * drop what it still holds of the answer. */
START_TEST(test_drain_answer_whole_with_a_request_pipelined_after_sigterm)
{
    child c;
    const char *args[] = {"--quiet", "--min-send-rate", "0",
                          "--shutdown-timeout", "120", NULL};
    child_start(&c, args);
    ts_case k;
    ts_case_make(&k, 2000, 64, 4, 16, "\"return_weights\":\"none\"");
    int fd = ts_connect(c.port);
    char head[256];
    int hlen = snprintf(head, sizeof head,
                        "POST /attend HTTP/1.1\r\nHost: t\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %zu\r\n\r\n",
                        k.json_len);
    ck_assert_int_eq(send(fd, head, (size_t)hlen, MSG_NOSIGNAL), hlen);
    ck_assert_int_eq(send(fd, k.json, k.json_len, MSG_NOSIGNAL),
                     (ssize_t)k.json_len);

    /* The answer is sent whole (to the kernel) once the request leaves the
     * in-flight gauge; what the kernel cannot hold yet is made room for
     * by reading, but most of the answer stays unread. The gauge is read
     * once the answer has begun: before, the request may not have reached
     * the gauge yet, and a SIGTERM then would refuse it. */
    size_t cap = (size_t)8 << 20, got = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; got == 0; i++) {
        ck_assert_msg(i < 6000, "the answer never began");
        ssize_t n = recv(fd, buf, 65536, MSG_DONTWAIT);
        if (n > 0)
            got = (size_t)n;
        else
            sleep_ms(10);
    }
    for (int i = 0; child_in_flight(c.port) >= 2; i++) {
        ck_assert_msg(i < 6000, "the answer was never sent");
        ssize_t n = recv(fd, buf + got, 65536, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        sleep_ms(10);
    }

    ck_assert_int_eq(kill(c.pid, SIGTERM), 0);
    int state;
    for (int i = 0; (state = ts_server_end_state(fd, c.port)) == 1; i++) {
        ck_assert_msg(i < 60000, "the server never closed the connection");
        sleep_ms(1);
    }
    static const char ready[] = "GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert_int_eq(send(fd, ready, sizeof ready - 1, MSG_NOSIGNAL),
                     (ssize_t)sizeof ready - 1);

    int err = ts_read_to_end(fd, buf, cap, &got, 60);
    close(fd);
    ck_assert_msg(!err, "the connection ended in %s after %zu bytes "
                        "(server end state %d when the request was sent)",
                  strerror(err), got, state);
    ck_assert_msg(ts_whole_chunked_200(buf, got),
                  "the answer is not whole: %zu bytes", got);
    int st = child_wait(&c);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    free(buf);
    ts_case_free(&k);
}
END_TEST

/* Runs attnd --healthcheck against port; returns its exit code. */
static int healthcheck(uint16_t port)
{
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%u", (unsigned)port);
    char *argv[] = {(char *)attnd_bin(), (char *)"--healthcheck",
                    (char *)"--port", port_s, NULL};
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

START_TEST(test_drain_healthcheck_and_sigint)
{
    /* With OPENBLAS_NUM_THREADS set, OpenBLAS may start threads before
     * main; the signal must still stop attnd gracefully whichever thread
     * receives it. */
    setenv("OPENBLAS_NUM_THREADS", "2", 1);
    child c;
    const char *args[] = {"--quiet", NULL};
    child_start(&c, args);
    unsetenv("OPENBLAS_NUM_THREADS");
    ck_assert_int_eq(healthcheck(c.port), 0);
    ck_assert_int_eq(kill(c.pid, SIGINT), 0);
    int st = child_wait(&c);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    /* Nothing listens there any more. */
    ck_assert_int_eq(healthcheck(c.port), 1);
}
END_TEST

START_TEST(test_drain_bad_flag_exits_2)
{
    char *argv[] = {(char *)attnd_bin(), (char *)"--max-flops", (char *)"many",
                    NULL};
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 2);
}
END_TEST

/* A request that the connection layer cuts off and answers itself (a
 * chunked body over --max-body-bytes: 413; a body under --min-body-rate:
 * 408) is logged with the status and the error code it was answered with,
 * not as one that ended without an answer. */
START_TEST(test_drain_log_names_the_answer_of_a_cut_off_request)
{
    child c;
    const char *args[] = {"--max-body-bytes", "100", "--rate-window", "1",
                          NULL};
    child_start(&c, args);
    char body[160];
    memset(body, '1', sizeof body);
    char chunked[512];
    int len = snprintf(chunked, sizeof chunked,
                       "POST /attend HTTP/1.1\r\nHost: t\r\n"
                       "Content-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%.*s\r\n"
                       "0\r\n\r\n",
                       sizeof body, (int)sizeof body, body);
    char out[4096];
    ck_assert_int_eq(ts_raw(c.port, chunked, (size_t)len, out, sizeof out),
                     413);
    static const char slow_head[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                                    "Content-Type: application/json\r\n"
                                    "Content-Length: 90\r\n\r\n{";
    ck_assert_int_eq(
        ts_raw(c.port, slow_head, sizeof slow_head - 1, out, sizeof out), 408);
    /* guard.c lingers 2 s on a connection it answered before the request
     * ends and is logged */
    sleep_ms(2600);
    ck_assert_int_eq(kill(c.pid, SIGTERM), 0);
    static char log[65536];
    int st = child_wait_log(&c, log, sizeof log);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    ck_assert_msg(strstr(log, "\"status\":413,") &&
                      strstr(log, "\"error\":\"too_large\"}"),
                  "no request line for the 413: %s", log);
    ck_assert_msg(strstr(log, "\"status\":408,") &&
                      strstr(log, "\"error\":\"request_timeout\"}"),
                  "no request line for the 408: %s", log);
    ck_assert_msg(!strstr(log, "connection_closed"),
                  "an answered request logged as closed: %s", log);
}
END_TEST

Suite *drain_suite(void)
{
    Suite *s = suite_create("drain");
    TCase *t = tcase_create("drain");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_drain_sigterm_finishes_in_flight_and_exits_0);
    tcase_add_test(t, test_drain_answer_whole_with_a_request_pipelined_after_sigterm);
    tcase_add_test(t, test_drain_healthcheck_and_sigint);
    tcase_add_test(t, test_drain_bad_flag_exits_2);
    tcase_add_test(t, test_drain_log_names_the_answer_of_a_cut_off_request);
    suite_add_tcase(s, t);
    return s;
}
