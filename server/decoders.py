"""The decode worker pool: the processes that decode and validate sample batches (server/decode.py) beside
the gRPC process, spawned at start, killed with the server however it ends, and replaced when one dies.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from perfctl.server.decode import Decoded, Refused, decode_batch

log = logging.getLogger("perfctl.server")

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_server(server_pid: int) -> None:
    """Decode worker initializer: the kernel kills this worker when the server process ends, however it
    ends (SIGKILL included, which runs no cleanup). The death signal is armed first, then the parent
    checked: a server that died before prctl ran would otherwise leave this worker orphaned for good."""
    # Ctrl-C reaches the whole process group: the server stops its workers itself (a KeyboardInterrupt
    # traceback from each was all the signal did here)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != server_pid:
        os._exit(1)


class Decoders:
    """The decode worker pool (decoder_pool), replaced when a worker dies.

    A worker killed from outside (the OOM killer, kill -9) breaks a ProcessPoolExecutor for good: every
    later batch would fail with BrokenProcessPool. The first stream to see it replaces the pool, under a
    lock so that concurrent streams replace it once, and every stream retries its batch in the new pool."""

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = decoder_pool(workers)
        self.replaced = 0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Start the workers now, not on the first batch."""
        if self.pool is not None:
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(loop.run_in_executor(self.pool, decode_batch, b"") for _ in range(self.workers)))

    async def decode(self, data: bytes) -> Decoded | Refused:
        """decode_batch(data) in a worker (in this process without workers); BrokenProcessPool if the pool
        broke again right after a replacement (the caller answers UNAVAILABLE: the agent re-sends)."""
        if self.pool is None:
            return decode_batch(data)
        for attempt in range(2):
            pool = self.pool
            try:
                return await asyncio.get_running_loop().run_in_executor(pool, decode_batch, data)
            except BrokenProcessPool:
                await self._replace(pool)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _replace(self, broken: Executor) -> None:
        async with self._lock:
            if self.pool is not broken:  # another stream already replaced it
                return
            log.error("a decode worker died (killed from outside?); starting a new pool of %d workers",
                      self.workers)
            broken.shutdown(wait=False, cancel_futures=True)
            self.pool = decoder_pool(self.workers)
            self.replaced += 1

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def decoder_pool(workers: int) -> Executor | None:
    """Worker processes that decode batches; spawned, never forked (this process holds gRPC threads).

    PR_SET_PDEATHSIG fires when the *thread* that forked the worker ends; the pool forks from the thread
    that submits, here always the event loop's (the main thread), which lives as long as the server.
    multiprocessing's resource tracker (started for the pool's semaphores) exits when the last process
    holding its pipe ends: the server and these workers."""
    if workers <= 0:
        return None
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_die_with_server, initargs=(os.getpid(),))
