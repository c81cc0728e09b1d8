"""A submission done once however often it is sent: `perfctl submit` names each submission with a uuid of
its own (SubmitJobRequest.submit_id), and the job of each machine is then uuid5(submit_id, machine).

Why: a client with several replicas (`--server A,B`) tries the next when one gives no answer in time
(perfctl/client.py), and a replica whose database hangs may still commit the job when it wakes up. Both
requests make the same job id, so the database's primary key keeps one job; the second finds it and
answers with it. The same submit_id with another job is refused, not taken for a retry."""

from __future__ import annotations

import uuid

from sqlalchemy.exc import IntegrityError

from perfctl.server.storage import Storage, StorageError
from perfctl.v1 import fleet_pb2 as pb

SUBMISSION_NAMESPACE = uuid.UUID("0f5b8a52-6c1e-4c4e-9a55-2f1d3b8e7c10")  # fixed: the ids must not change


def job_id_of(submit_id: str, machine: str) -> str:
    return str(uuid.uuid5(SUBMISSION_NAMESPACE, f"{submit_id}/{machine}"))


def submitted_job(storage: Storage, machine: str, request: pb.SubmitJobRequest) -> pb.Job:
    """The job ``request`` submits to ``machine``, stored once: made now, or, for a submit_id sent before
    with the same job, the one made then. StorageError for a submit_id that is not a uuid or that named
    another job."""
    job = pb.Job()
    job.CopyFrom(request.job)
    if not request.submit_id:  # an older client: a new id each time, as before
        job.job_id = storage.create_job(machine, request.job)
        return job
    try:
        uuid.UUID(request.submit_id)
    except ValueError:
        raise StorageError("submit_id: a uuid, as perfctl submit makes it") from None
    job.job_id = job_id_of(request.submit_id, machine)
    try:
        storage.create_job(machine, request.job, job_id=job.job_id)
    except IntegrityError:
        if storage.job_spec(job.job_id, machine) != job:
            raise StorageError(f"submit_id {request.submit_id} was used for another job") from None
    return job
