"""blasenv.py: the OpenBLAS environment the benchmark drivers give every
program they start (bench_lib, torch, the peer), so that the library, its
sgemm peak and PyTorch all run on the same kernels.

OpenBLAS 0.3.21 (Debian 12) does not recognise recent Intel server CPUs and
falls back to its Prescott kernels; attnd sets OPENBLAS_CORETYPE for itself
(attn_blas_coretype_hint) and re-executes. The drivers do the same for the
other programs, from `bench_lib --coretype-hint`, unless the caller already
set OPENBLAS_CORETYPE.
"""
import os
import subprocess


def blas_env(bench_bin, threads):
    """(environment, description) with OPENBLAS_NUM_THREADS=threads and
    OPENBLAS_CORETYPE set as attnd would set it."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    if "OPENBLAS_CORETYPE" in env:
        return env, "OPENBLAS_CORETYPE=%s (given)" % env["OPENBLAS_CORETYPE"]
    hint = ""
    if os.access(bench_bin, os.X_OK):
        hint = subprocess.run([bench_bin, "--coretype-hint"], env=env,
                              capture_output=True, text=True).stdout.strip()
    if hint:
        env["OPENBLAS_CORETYPE"] = hint
        return env, ("OPENBLAS_CORETYPE=%s (attn_blas_coretype_hint: "
                     "OpenBLAS's own choice is a slower fallback)" % hint)
    return env, "OPENBLAS_CORETYPE unset (OpenBLAS's own choice)"


def default_detection_env(threads):
    """The environment without OPENBLAS_CORETYPE: OpenBLAS's own choice."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    env.pop("OPENBLAS_CORETYPE", None)
    return env
