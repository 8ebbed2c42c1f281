/* main.c: runner of the service suites (codec, config, pool, metrics, HTTP,
 * drain, store). */
#include <curl/curl.h>
#include <stdlib.h>

#include "test_service.h"

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    SRunner *sr = srunner_create(codec_suite());
    srunner_add_suite(sr, reader_forms_suite());
    srunner_add_suite(sr, config_suite());
    srunner_add_suite(sr, pool_suite());
    srunner_add_suite(sr, metrics_suite());
    srunner_add_suite(sr, http_suite());
    srunner_add_suite(sr, drain_suite());
    srunner_add_suite(sr, store_suite());
    srunner_add_suite(sr, v2_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    curl_global_cleanup();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
