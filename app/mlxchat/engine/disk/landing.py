"""File bytes landed in their buffers on several threads, hashed as they land.

A restore reads segment files straight into the arrays MLX allocates. Driven
from one Python thread, copying and hashing take turns; here the copies are
``preadv`` calls at explicit offsets on a few reader threads (each first asks
the kernel to make its pages present, ``prefault``), so a tensor's spans and
their page faults are filled in parallel, and the checksums run on one more
thread that hashes each file's bytes in file order, from the buffers they
landed in, while the next spans are read. ``os.preadv`` and xxhash release
the GIL, so the threads run at once.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable

from mlxchat.engine.disk import prefault

READERS = 4
"""Reader threads: enough to keep the page faults and copies of a few spans in
flight; more do not help a machine with few cores."""
SPAN = 64 << 10
"""A span this long has its pages made present before it is read."""


def read_at(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` with the file's bytes from ``offset``; the bytes read
    (fewer when the file ended: the rest of ``view`` is zeroed)."""
    done = 0
    while done < len(view):
        try:
            got = os.preadv(fd, [view[done:]], offset + done)
        except OSError:
            got = 0
        if not got:
            view[done:] = bytes(len(view) - done)
            break
        done += got
    return done


def _fill(fd: int, view: memoryview, offset: int) -> int:
    prefault.populate(view, SPAN)  # fresh pages present in one call, not one fault each
    return read_at(fd, view, offset)


class Landing:
    """The reader threads and the hashing thread of one restore."""

    def __init__(self, readers: int = READERS):
        self._reads: list[Future[int]] = []
        self._pool = ThreadPoolExecutor(readers, thread_name_prefix="mlxchat-kv-read")
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._hasher = threading.Thread(target=self._run, name="mlxchat-kv-hash", daemon=True)
        self._hasher.start()

    def read(self, fd: int, view: memoryview, offset: int) -> Future[int]:
        """``read_at`` on a reader thread, its pages made present first."""
        landed = self._pool.submit(_fill, fd, view, offset)
        self._reads.append(landed)
        return landed

    def settle(self) -> None:
        """Until every read given so far has landed."""
        reads, self._reads = self._reads, []
        wait(reads)  # every one, even when one failed (its file's checksum then fails)

    def then(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the hashing thread after every job given before it."""
        self._jobs.put(job)

    def wait(self) -> None:
        """Until every job given so far has run."""
        done = threading.Event()
        self.then(done.set)
        done.wait()

    def close(self) -> None:
        self._jobs.put(None)
        self._hasher.join()
        self._pool.shutdown(wait=True)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()  # jobs catch their own errors (SegmentReader marks the file damaged)
