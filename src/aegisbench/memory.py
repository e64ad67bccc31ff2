"""Handing memory that Arrow and the C heap have freed back to the system.

pyarrow's default pool (mimalloc or jemalloc) keeps freed pages for reuse, and glibc keeps
freed heap below its trim threshold: a process that reads one Parquet row group after another
would hold the largest of them resident for good, and its peak would ratchet up with every
decoded shard. :func:`release_arrow_memory` returns both once a unit of work is done; it
changes how much memory is held, never a byte that is computed.

>>> release_arrow_memory()  # safe to call at any time, on any platform
"""

from __future__ import annotations

import functools


def release_arrow_memory() -> None:
    """Return the pages Arrow's default pool and glibc's heap keep after frees."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _libc():
    """The C library, looked up on first use (``find_library`` runs ``ldconfig``: not at import)."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None
