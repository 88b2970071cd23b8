"""The command's host settings (kvtier.cli.process) hold while a command runs and
are undone after it."""

from __future__ import annotations

import sys

import pytest
from threadpoolctl import threadpool_info

from kvtier.cli.process import keep_freed_memory, one_blas_thread


def _blas_threads() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_one_blas_thread_inside_and_restored_after() -> None:
    before = _blas_threads()
    if not before:
        pytest.skip("numpy reports no BLAS library to threadpoolctl")
    with one_blas_thread():
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_keep_freed_memory_is_accepted_by_glibc() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc: the allocator is left as it is")
    assert keep_freed_memory() is True
