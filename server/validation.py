"""Bounds on everything an agent sends: a sample that breaks one is refused with the field named.

The server never trusts an agent's numbers: sizes, counts, names, enumerations and ranges are checked
before anything is stored, and the gRPC message size is capped (server/service.py).
"""

from __future__ import annotations

import math
import re

from perfctl.model import OUTCOMES, READING_STATUSES, parse_backends

MAX_MESSAGE_BYTES = 16 << 20
MAX_BATCH_SAMPLES = 2000
MAX_READINGS = 256
MAX_ARGV = 256
MAX_ARG_BYTES = 4096
MAX_NAME = 256
MAX_TEXT = 1024
MAX_BACKENDS = 8
SCOPES = ("user", "kernel", "all")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_EVENT = re.compile(r"^[A-Za-z0-9_:.\-]{1,128}$")
_GOOD_NAMES: set[tuple] = set()


def _text(value: str, limit: int, name: str) -> str | None:
    if len(value) > limit:
        return f"{name} longer than {limit} characters"
    return None


def validate_sample(s) -> str | None:
    """None if the wire Sample is acceptable, else what is wrong with it."""
    if not _UUID.match(s.uuid):
        return "uuid is not a canonical lower-case UUID"
    if s.schema_version != 1:
        return f"schema_version {s.schema_version} is not 1"
    b = s.benchmark
    if not b.name or len(b.name) > MAX_NAME:
        return f"benchmark.name must be 1-{MAX_NAME} characters"
    if len(b.argv) > MAX_ARGV or any(len(a) > MAX_ARG_BYTES for a in b.argv):
        return f"benchmark.argv: at most {MAX_ARGV} arguments of {MAX_ARG_BYTES} characters"
    if not _HEX64.match(b.executable_sha256) or not _HEX64.match(b.input_digest):
        return "benchmark digests must be 64 lower-case hex digits"
    for problem in (_text(b.executable, MAX_ARG_BYTES, "benchmark.executable"), _text(s.machine_id, 64, "machine_id"),
                    _text(s.environment.user, MAX_NAME, "environment.user"),
                    _text(s.environment.cwd, MAX_ARG_BYTES, "environment.cwd")):
        if problem:
            return problem
    if s.job_id and not _UUID.match(s.job_id):
        return "job_id is not a UUID"
    if not 0 <= s.run_index <= 10**9:
        return "run_index out of range"
    if s.wall_ns < 0 or s.start_time_ns < 0:
        return "negative time"
    if s.outcome not in OUTCOMES:
        return f"outcome {s.outcome!r} unknown"
    if len(s.stderr_tail) > MAX_TEXT:
        return "stderr_tail too long"
    if not 0 <= s.environment.env_bytes <= 1 << 20:
        return "environment.env_bytes out of range"
    if len(s.backends) > MAX_BACKENDS:
        return "too many backends"
    if len(s.readings) > MAX_READINGS:
        return f"more than {MAX_READINGS} readings"
    # Unset optional fields read as 0 / 0.0 / "", which pass every check below: no HasField calls needed.
    # The names of a reading (event, status, scope, backend, unit) repeat across samples: a combination
    # checked once is remembered (bounded), so the common case costs a tuple and a set lookup.
    for index, r in enumerate(s.readings):
        names = (r.event, r.status, r.scope, r.backend, r.unit)
        if names not in _GOOD_NAMES:
            problem = _check_names(index, *names)
            if problem:
                return problem
            if len(_GOOD_NAMES) < 4096:
                _GOOD_NAMES.add(names)
        if r.value < 0:
            return f"readings[{index}].value is negative"
        scaled = r.scaled
        if scaled < 0 or scaled != scaled or scaled == math.inf:
            return f"readings[{index}].scaled must be finite and >= 0"
        if len(r.reason) > MAX_TEXT:
            return f"readings[{index}].reason too long"
    return None


def _check_names(index: int, event: str, status: str, scope: str, backend: str, unit: str) -> str | None:
    if not _EVENT.match(event):
        return f"readings[{index}].event is not an event name"
    if status not in READING_STATUSES:
        return f"readings[{index}].status {status!r} unknown"
    if scope not in SCOPES:
        return f"readings[{index}].scope {scope!r} unknown"
    if len(backend) > 32 or len(unit) > 16:
        return f"readings[{index}]: backend or unit too long"
    return None


def validate_job(job) -> str | None:
    if not 1 <= len(job.commands) <= 16:
        return "a job has 1 to 16 commands"
    for command in job.commands:
        if not command.argv or len(command.argv) > MAX_ARGV or any(len(a) > MAX_ARG_BYTES for a in command.argv):
            return f"command argv: 1 to {MAX_ARGV} arguments of {MAX_ARG_BYTES} characters"
        if len(command.name) > MAX_NAME:
            return "command name too long"
    if not 1 <= job.repetitions <= 100_000 or job.warmups > 1000:
        return "repetitions must be 1-100000 and warmups at most 1000"
    if len(job.events) > 64 or any(not _EVENT.match(e) for e in job.events):
        return "events: at most 64 event names"
    if job.backend:
        try:
            parse_backends(job.backend)
        except ValueError as err:
            return str(err)
    if not (0 <= job.timeout_seconds <= 86400 and math.isfinite(job.timeout_seconds)):
        return "timeout_seconds must be 0-86400"
    return None


def validate_machine_name(name: str) -> str | None:
    if not name or len(name) > 128 or any(c.isspace() for c in name):
        return "machine name must be 1-128 characters without spaces"
    return None


AUDIT_VERDICTS = ("trusted", "degraded", "untrusted", "no-PMU")
MAX_AUDIT_BYTES = 1 << 20


def validate_audit(request) -> tuple[str | None, dict | None]:
    """(problem, parsed report): an audit report must be a bounded JSON object with a known verdict."""
    import json

    if not _UUID.match(request.audit_id):
        return "audit_id is not a UUID", None
    if len(request.report_json) > MAX_AUDIT_BYTES:
        return f"audit report larger than {MAX_AUDIT_BYTES} bytes", None
    try:
        report = json.loads(request.report_json)
    except ValueError:
        return "audit report is not JSON", None
    if not isinstance(report, dict) or report.get("verdict") not in AUDIT_VERDICTS:
        return f"audit verdict must be one of {AUDIT_VERDICTS}", None
    if not isinstance(report.get("time_ns"), int) or report["time_ns"] < 0:
        return "audit time_ns must be a non-negative integer", None
    if report.get("audit_id") != request.audit_id:
        return "audit_id differs from the report's", None
    return None, report
