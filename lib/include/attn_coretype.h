/* attn_coretype.h: the OpenBLAS core-type hint, for the programs that
 * re-execute themselves with OPENBLAS_CORETYPE set before any work. */
#ifndef ATTN_CORETYPE_H
#define ATTN_CORETYPE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OpenBLAS 0.3.21 (Debian 12) does not recognise recent Intel server CPUs
 * (Sapphire and Emerald Rapids among them) and falls back to its Prescott
 * kernels, a quarter of the machine's sgemm speed. OPENBLAS_CORETYPE, read
 * when OpenBLAS loads, overrides the detection, so a program sets it and
 * re-executes itself before doing any work. Returns the core type to set for
 * this CPU ("SkylakeX" with AVX-512, "Haswell" with AVX2 and FMA) when
 * OpenBLAS chose a slower one, or NULL when its choice stands. */
ATTN_API const char *attn_blas_coretype_hint(void);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_CORETYPE_H */
