/* test_main.c: the one runner of the library's suites.
 *
 *   build/tests/test_lib            every suite
 *   build/tests/test_lib <suite>    one suite (kernel, torch, lesson, errors,
 *                                   alloc, exec, analysis, softmax,
 *                                   rules);
 *                                   CK_RUN_SUITE
 *                                   works too
 * Exit status 0 only when every test passed.
 */
#include "test_lib.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    SRunner *sr = srunner_create(tl_suite_kernel());
    int failed;

    srunner_add_suite(sr, tl_suite_torch());
    srunner_add_suite(sr, tl_suite_lesson());
    srunner_add_suite(sr, tl_suite_errors());
    srunner_add_suite(sr, tl_suite_alloc());
    srunner_add_suite(sr, tl_suite_exec());
    srunner_add_suite(sr, tl_suite_analysis());
    srunner_add_suite(sr, tl_suite_softmax());
    srunner_add_suite(sr, tl_suite_rules());
    if (argc > 1)
        srunner_run(sr, argv[1], NULL, CK_NORMAL);
    else
        srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    if (srunner_ntests_run(sr) == 0) {
        fprintf(stderr, "test_lib: no test ran (unknown suite name?)\n");
        failed = 1;
    }
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
