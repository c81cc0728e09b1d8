"""Ingest and calls inside the server (split by subject from tests/test_server_hardening.py, issue 11's review):
one batch's error stays its own in a group commit, and a call cancelled while it waits cancels what it waited for."""

import asyncio

import pytest

from perfctl.server.auth import Tokens
from perfctl.server.decode import row_fields
from perfctl.server.ingest import GroupCommit
from perfctl.server.storage import Storage, StorageError, database_url
from perfctl.v1 import fleet_pb2 as pb
from tests.test_server_hardening import fresh, measured  # noqa: F401 - measured is a fixture


def test_group_commit_keeps_each_batch_s_error_its_own(tmp_path, measured):  # noqa: F811 - the fixture
    """Three batches in one round of the group commit: one from a machine that never registered, one from a
    machine whose row was deleted after its id was cached. Only those two fail."""
    storage = Storage(database_url(str(tmp_path / "data"), None))
    for name in ("box-a", "box-b", "box-d"):
        storage.register(pb.MachineInfo(name=name, machine_id="m" * 32), 1)
    storage.machine_pk("box-d")  # cached, then deleted behind the server's back
    with storage.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM machines WHERE name = 'box-d'")
    def batch(name):
        samples = [fresh(s) for s in measured[:2]]
        return name, [row_fields(s) for s in samples], [s.SerializeToString() for s in samples]

    async def round_of(*batches):
        writer = GroupCommit(storage)
        # gather queues all four before the writer task first runs: they share one round
        return await asyncio.gather(*(writer.ingest(*b) for b in batches), return_exceptions=True)

    results = asyncio.run(round_of(batch("box-a"), batch("ghost"), batch("box-d"), batch("box-b")))
    assert results[0] == (2, 0) and results[3] == (2, 0)
    assert isinstance(results[1], StorageError) and "unknown machine 'ghost'" in str(results[1])
    assert isinstance(results[2], StorageError) and "box-d" in str(results[2])
    assert storage.count_samples() == 4
    # the stale cached id is forgotten: the next batch of box-d hears that it must register
    later = asyncio.run(round_of(batch("box-d")))
    assert isinstance(later[0], StorageError) and "must register first" in str(later[0])
    storage.close()



def test_a_call_cancelled_while_it_waits_cancels_what_it_waited_for():
    """An agent gone while its job watch waited for a job: the call is cancelled, and the wait for the queue
    must go with it. Left running, it went on waiting on a queue no one reads (taking whatever came), and
    its wait_for's TimeoutError was logged as "Task exception was never retrieved"."""
    from perfctl.server.decoders import Decoders
    from perfctl.server.jobs import JobHub, JobKeeper
    from perfctl.server.service import AgentService

    async def scenario():
        service = AgentService(None, Tokens({}), JobKeeper(None, JobHub()), Decoders(0))
        queue: asyncio.Queue = asyncio.Queue()
        waited = asyncio.ensure_future(queue.get())
        call = asyncio.create_task(service._unless_stopping(None, waited))
        await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        queue.put_nowait("a job for a watch that is gone")
        await asyncio.sleep(0.05)
        return waited.cancelled(), queue.qsize()

    assert asyncio.run(scenario()) == (True, 1)
