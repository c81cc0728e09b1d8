"""Bounds on everything an agent sends: a sample that breaks one is refused with the field named.

The server never trusts an agent's numbers: sizes, counts, names, enumerations and ranges are checked
before anything is stored, and the gRPC message size is capped (server/service.py).
"""

from __future__ import annotations

import json
import math
import re

from perfctl.analysis.verdicts import FAMILIES
from perfctl.model import (
    HOOKS,
    OUTCOMES,
    READING_STATUSES,
    SCOPES,
    SIDE_LABEL,
    WALL_TIME,
    job_hook_words,
    labels_problem,
    parse_backends,
)
from perfctl.wire import MAX_HELD_JOBS

MAX_MESSAGE_BYTES = 16 << 20
MAX_BATCH_SAMPLES = 2000
MAX_READINGS = 256
MAX_ARGV = 256
MAX_ARG_BYTES = 4096
MAX_NAME = 256
MAX_TEXT = 1024
MAX_BACKENDS = 8
MAX_BACKEND_NAME = 32
MAX_UNIT = 16
MAX_EXIT_STATUS = 255
MAX_SIGNAL = 64  # SIGRTMAX on Linux
MAX_CPU = 1 << 16
MAX_RUN_INDEX = 10**9
MAX_TASKS = 1 << 22  # PID_MAX_LIMIT: no machine has more processes to leave behind
MAX_INVENTORY_BYTES = 64 << 10
MAX_EVENTS = 256
HEARTBEAT_STATES = ("", "idle", "running")
# \Z, not $: "$" also matches before a final newline, so "cycles\n" would pass as an event name.
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_EVENT = re.compile(r"^[A-Za-z0-9_:.\-]{1,128}\Z")
# Control characters other than tab and newline: NUL, escape (terminal control sequences), carriage return...
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_GOOD_NAMES: set[tuple] = set()


def _printable(value: str, limit: int, field: str) -> str | None:
    """A name (event, benchmark, machine, backend, user, path...): at most ``limit`` characters, all printable.

    Names end up in tables, logs and terminals: a newline forges lines, an escape sequence drives the
    terminal, NUL truncates in C libraries. str.isprintable() is false for all of them (and for other
    Unicode format characters such as bidirectional overrides), in C and fast."""
    if len(value) > limit:
        return f"{field} longer than {limit} characters"
    if not value.isprintable():
        return f"{field} has control or non-printable characters"
    if value.isspace():  # invisible in a table
        return f"{field} has no character other than spaces"
    return None


def _text(value: str, limit: int, field: str) -> str | None:
    """Free text (an argument, a reason): at most ``limit`` characters; tab and newline allowed, no other
    control character."""
    if len(value) > limit:
        return f"{field} longer than {limit} characters"
    if _CONTROL.search(value):
        return f"{field} has control characters"
    return None


def _finite(value: float, field: str, minimum: float | None = None) -> str | None:
    if not math.isfinite(value):
        return f"{field} must be finite"
    if minimum is not None and value < minimum:
        return f"{field} must be >= {minimum:g}"
    return None


def _backend_list(backends) -> str | None:
    """A sample's or a machine's list of backend names: at most MAX_BACKENDS, each a printable name."""
    if len(backends) > MAX_BACKENDS:
        return f"backends: more than {MAX_BACKENDS}"
    for index, backend in enumerate(backends):
        problem = _printable(backend, MAX_BACKEND_NAME, f"backends[{index}]")
        if problem:
            return problem
    return None


def validate_sample(s) -> str | None:
    """None if the wire Sample is acceptable, else what is wrong with it, naming the field.

    Every field of Sample, Benchmark, Environment and Reading is bounded here (tests/test_server_ingest.py
    walks the message descriptors, so a field added to the proto without a bound fails a test)."""
    if not _UUID.match(s.uuid):
        return "uuid is not a canonical lower-case UUID"
    if s.schema_version != 1:
        return f"schema_version {s.schema_version} is not 1"
    b = s.benchmark
    if not b.name:
        return "benchmark.name is empty"
    if len(b.argv) > MAX_ARGV:
        return f"benchmark.argv: more than {MAX_ARGV} arguments"
    if not _HEX64.match(b.executable_sha256):
        return "benchmark.executable_sha256 must be 64 lower-case hex digits"
    if not _HEX64.match(b.input_digest):
        return "benchmark.input_digest must be 64 lower-case hex digits"
    env = s.environment
    for problem in (_printable(b.name, MAX_NAME, "benchmark.name"),
                    _printable(b.executable, MAX_ARG_BYTES, "benchmark.executable"),
                    _printable(s.machine_id, 64, "machine_id"),
                    _printable(env.user, MAX_NAME, "environment.user"),
                    _printable(env.cwd, MAX_ARG_BYTES, "environment.cwd")):
        if problem:
            return problem
    for index, argument in enumerate(b.argv):
        problem = _text(argument, MAX_ARG_BYTES, f"benchmark.argv[{index}]")
        if problem:
            return problem
    if s.HasField("job_id") and not _UUID.match(s.job_id):
        return "job_id is not a UUID"
    if not 0 <= s.run_index <= MAX_RUN_INDEX:
        return f"run_index must be 0-{MAX_RUN_INDEX}"
    if s.start_time_ns < 0:
        return "start_time_ns is negative"
    if s.wall_ns < 0:
        return "wall_ns is negative"
    if s.outcome not in OUTCOMES:
        return f"outcome {s.outcome[:32]!r} unknown"
    if s.HasField("exit_status") and not 0 <= s.exit_status <= MAX_EXIT_STATUS:
        return f"exit_status must be 0-{MAX_EXIT_STATUS}"
    if s.HasField("signal") and not 1 <= s.signal <= MAX_SIGNAL:
        return f"signal must be 1-{MAX_SIGNAL}"
    if s.HasField("max_rss_kib") and s.max_rss_kib < 0:
        return "max_rss_kib is negative"
    if s.HasField("outlived") and not 1 <= s.outlived <= MAX_TASKS:
        return f"outlived must be 1-{MAX_TASKS} (absent when nothing outlived the benchmark)"
    # The benchmark's own stderr: shown only on request, may hold its colours; bounded in length only.
    if len(s.stderr_tail) > MAX_TEXT:
        return f"stderr_tail longer than {MAX_TEXT} characters"
    if not 0 <= env.env_bytes <= 1 << 20:
        return "environment.env_bytes must be 0-1048576"
    if env.HasField("pinned_cpu") and not 0 <= env.pinned_cpu < MAX_CPU:
        return f"environment.pinned_cpu must be 0-{MAX_CPU - 1}"
    problem = _backend_list(s.backends) or (labels_problem(s.labels) if s.labels else None)
    if problem:
        return problem
    if len(s.readings) > MAX_READINGS:
        return f"more than {MAX_READINGS} readings"
    # The names of a reading repeat across samples: a combination checked once is remembered (bounded),
    # so the common case costs a tuple and a set lookup.
    counted: dict[tuple[str, str, str], int] = {}
    for index, r in enumerate(s.readings):
        # one count per event, backend and scope in a run: a repeat would be taken as a second run
        first = counted.setdefault((r.event, r.backend, r.scope), index)
        if first != index:
            return f"readings[{index}] repeats event/backend/scope of readings[{first}]"
        names = (r.event, r.status, r.scope, r.backend, r.unit, r.source, r.correction_model)
        if names not in _GOOD_NAMES:
            problem = _check_names(index, *names)
            if problem:
                return problem
            if len(_GOOD_NAMES) < 4096:
                _GOOD_NAMES.add(names)
        problem = _check_numbers(index, r)
        if problem:
            return problem
        if r.HasField("audit_id") and not _UUID.match(r.audit_id):
            return f"readings[{index}].audit_id is not a UUID"
        if r.HasField("reason"):
            problem = _text(r.reason, MAX_TEXT, f"readings[{index}].reason")
            if problem:
                return problem
    return None


def _check_numbers(index: int, r) -> str | None:
    # Unset optional numbers read as 0: HasField tells "absent" from "zero" where the difference matters.
    if r.HasField("value"):
        if r.value < 0:
            return f"readings[{index}].value is negative"
    elif r.status == "ok":
        return f"readings[{index}].value is missing (status ok)"
    if r.time_enabled < 0:
        return f"readings[{index}].time_enabled is negative"
    if r.time_running < 0:
        return f"readings[{index}].time_running is negative"
    if r.HasField("scaled"):
        problem = _finite(r.scaled, f"readings[{index}].scaled", 0)
        if problem:
            return problem
    if r.HasField("corrected"):
        # A correction subtracts estimated artifacts; a small negative result is a measurement, not a bug.
        problem = _finite(r.corrected, f"readings[{index}].corrected")
        if problem:
            return problem
    return None


def _check_names(index: int, event: str, status: str, scope: str, backend: str, unit: str, source: str,
                 correction_model: str) -> str | None:
    if not _EVENT.match(event):
        return f"readings[{index}].event is not an event name"
    if status not in READING_STATUSES:
        return f"readings[{index}].status {status[:32]!r} unknown"
    if scope not in SCOPES:
        return f"readings[{index}].scope {scope[:32]!r} unknown"
    return (_printable(backend, MAX_BACKEND_NAME, f"readings[{index}].backend")
            or _printable(unit, MAX_UNIT, f"readings[{index}].unit")
            or _printable(source, MAX_NAME, f"readings[{index}].source")
            or _printable(correction_model, MAX_NAME, f"readings[{index}].correction_model"))


# A job as stored and listed (its spec is in every JobStatus): one fits a listing's page (server/listings.py
# PAGE_BYTES) and gRPC's default 4 MiB message. Linux refuses an execve whose argv and environment pass
# ARG_MAX (2 MiB with the default 8 MiB stack), so a command near this bound could not run anyway.
MAX_JOB_BYTES = 1 << 20


def validate_job(job) -> str | None:
    if not 1 <= len(job.commands) <= 16:
        return "a job has 1 to 16 commands"
    for number, command in enumerate(job.commands):
        if not command.argv or len(command.argv) > MAX_ARGV:
            return f"commands[{number}].argv: 1 to {MAX_ARGV} arguments"
        problem = _printable(command.name, MAX_NAME, f"commands[{number}].name")
        for index, argument in enumerate(command.argv):
            problem = problem or _text(argument, MAX_ARG_BYTES, f"commands[{number}].argv[{index}]")
        if problem:
            return problem
    problem = _hooks_problem(job)
    if problem:
        return problem
    if not 1 <= job.repetitions <= 100_000 or job.warmups > 1000:
        return "repetitions must be 1-100000 and warmups at most 1000"
    if len(job.events) > 64 or any(not _EVENT.match(e) for e in job.events):
        return "events: at most 64 event names"
    if job.backend:
        problem = _printable(job.backend, MAX_NAME, "backend")
        if problem:
            return problem
        try:
            parse_backends(job.backend)
        except ValueError as err:
            return str(err)
    if not (0 <= job.timeout_seconds <= 86400 and math.isfinite(job.timeout_seconds)):
        return "timeout_seconds must be 0-86400"
    if len(job.job_id) > 36:  # assigned by the server; a client's value is replaced
        return "job_id longer than 36 characters"
    if job.stored_runs:  # the server's, on a retried job only
        return "stored_runs is set by the server (perfctl jobs --retry), not by a client"
    if job.HasField("sequential"):
        problem = _sequential_problem(job)
        if problem:
            return problem
    problem = labels_problem(job.labels)
    if problem is None and job.ByteSize() > MAX_JOB_BYTES:
        return f"the job is {job.ByteSize():,} bytes (its commands' arguments): at most {MAX_JOB_BYTES:,}"
    return problem


def _hooks_problem(job) -> str | None:
    """A job's --prepare/--setup/--cleanup: none, one (for every command) or one per command, each bounded as
    an argument is and split into words as the agent will (agent/hooks.py job_hook_words: no shell), at most
    MAX_ARGV of them. Whether its program is allowed only the agent knows."""
    for hook in HOOKS:
        commands = getattr(job, hook)
        if len(commands) not in (0, 1, len(job.commands)):
            return f"{hook}: {len(commands)} commands; give none, one (for every command) or one per command"
        for index, command in enumerate(commands):
            problem = _text(command, MAX_ARG_BYTES, f"{hook}[{index}]")
            if problem:
                return problem
            try:
                words = job_hook_words(command)
            except ValueError as err:
                return f"{hook}[{index}] {err}"
            if len(words) > MAX_ARGV:
                return f"{hook}[{index}]: more than {MAX_ARGV} words"
    return None


def _sequential_problem(job) -> str | None:
    """An --until-settled job (perfctl/cli/submit.py): two or more commands, a margin and confidence in (0,
    1), a metric that is an event name or wall-time, at most as many rounds before stopping as runs."""
    from perfctl.analysis.ab import confidence_problem

    spec = job.sequential
    if len(job.commands) < 2:
        return "sequential: needs at least two commands"
    if not 0 < spec.margin < 1:  # NaN fails too
        return "sequential: margin must be strictly between 0 and 1"
    problem = confidence_problem(spec.confidence)
    if problem:
        return f"sequential: {problem}"
    if spec.metric and spec.metric != WALL_TIME and not _EVENT.match(spec.metric):
        return f"sequential.metric: an event name or {WALL_TIME}"
    if spec.min_rounds > job.repetitions:
        return "sequential.min_rounds: at most repetitions"
    if SIDE_LABEL in job.labels:
        return f"labels: {SIDE_LABEL} is the sequential job's own label ({SIDE_LABEL}=A, {SIDE_LABEL}=B, ...)"
    return None


def validate_machine_name(name: str) -> str | None:
    if not name or len(name) > 128 or not name.isprintable() or any(c.isspace() for c in name):
        return "machine name must be 1-128 printable characters without spaces"
    return None


class _Constant:
    """NaN, Infinity or -Infinity where a document had one: json.loads accepts them, JSON does not (a client
    that prints the document again would print something that is not JSON)."""

    def __init__(self, text: str):
        self.text = text


MAX_JSON_DEPTH = 32
MAX_JSON_NUMBER = float(1 << 64)


def _path_text(path: tuple) -> str:
    """kernels[0].cv; a key the agent chose is shown as a bounded literal."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            key = part if part.isidentifier() and len(part) <= 64 else ascii(part[:64])
            text += f".{key}" if text else key
    return text


def _json_document(text: str, field: str, allowed_constants=lambda path: False):
    """(problem, document, replaced): ``text`` parsed as JSON, at most MAX_JSON_DEPTH levels deep, without
    NaN or Infinity, except where ``allowed_constants(path)`` says so (those become None, and ``replaced``
    is True). A deeply nested document makes json.loads raise RecursionError, which is not a ValueError."""
    try:
        document = json.loads(text, parse_constant=_Constant)
    except RecursionError:
        return f"{field} is nested deeper than {MAX_JSON_DEPTH} levels", None, False
    except ValueError:
        return f"{field} is not JSON", None, False
    replaced = False
    stack = [(document, (), 0, None, None)]
    while stack:  # iterative: the walk must not recurse either
        value, path, depth, parent, key = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"{field} is nested deeper than {MAX_JSON_DEPTH} levels", None, False
        if isinstance(value, dict):
            stack.extend((item, (*path, name), depth + 1, value, name) for name, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, (*path, index), depth + 1, value, index) for index, item in enumerate(value))
        elif isinstance(value, _Constant):
            if not allowed_constants(path):
                return f"{field}: {value.text} at {_path_text(path) or 'the top'} is not JSON", None, False
            parent[key] = None
            replaced = True
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and not abs(value) <= MAX_JSON_NUMBER:
            # 1e400 parses as inf (printed again as Infinity, not JSON); a 400-digit integer overflows floats
            return f"{field}: a number at {_path_text(path) or 'the top'} is beyond +-2^64", None, False
    return None, document, replaced


class _Maybe:
    """A shape that may also be null."""

    def __init__(self, shape):
        self.shape = shape


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    # abs() <= bound is False for NaN and inf, and never converts a huge int to float (which raises)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_JSON_NUMBER


def _shape(value, shape, path: tuple) -> str | None:
    """None if ``value`` has ``shape``: a dict of known keys (each optional, others free), [item] a list of
    items, ("pair", item) exactly two, or a leaf: "name" (printable), "text" (tab and newline allowed),
    "integer", "number" (finite), "boolean"."""
    where = _path_text(path)
    if isinstance(shape, _Maybe):
        return None if value is None else _shape(value, shape.shape, path)
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where} is not an object"
        for key, item in shape.items():
            if key in value:
                problem = _shape(value[key], item, (*path, key))
                if problem:
                    return problem
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} is not a list"
        for index, item in enumerate(value):
            problem = _shape(item, shape[0], (*path, index))
            if problem:
                return problem
        return None
    if isinstance(shape, tuple):
        if not (isinstance(value, list) and len(value) == 2):
            return f"{where} is not a pair"
        return _shape(value[0], shape[1], (*path, 0)) or _shape(value[1], shape[1], (*path, 1))
    if shape in ("name", "text"):
        if not isinstance(value, str):
            return f"{where} is not a string"
        return _printable(value, MAX_TEXT, where) if shape == "name" else _text(value, MAX_AUDIT_TEXT, where)
    if shape == "integer" and not _integer(value):
        return f"{where} is not an integer"
    if shape == "number" and not _number(value):
        return f"{where} is not a finite number"
    if shape == "boolean" and not isinstance(value, bool):
        return f"{where} is not true or false"
    return None


PAIR = ("pair", "number")
MAX_AUDIT_TEXT = 64 << 10
# What agent/inventory.py collect() sends; perfctl machines shows cpu, kernel and pmu from it. A key may be
# missing (an older agent), and keys not listed here (a newer one) are free within the size and depth bounds.
INVENTORY_SHAPE = {
    "type": "name", "inventory_version": "integer", "machine_id": "name", "hostname": "name", "arch": "name",
    "cpu": {"vendor": "name", "model_name": "name", "family": _Maybe("integer"), "model": _Maybe("integer"),
            "stepping": _Maybe("integer"), "microcode": _Maybe("name"), "logical_cpus": _Maybe("integer"),
            "hypervisor": "boolean"},
    "kernel": {"release": "name", "version": "name"},
    "hz": _Maybe("integer"), "tick_mode": "name", "nohz_full_cpus": _Maybe("name"), "isolated_cpus": "name",
    "pmu": {"present": "boolean", "reason": "text"},
    "perf_event_paranoid": _Maybe("integer"), "aslr": _Maybe("integer"), "governors": ["name"],
    "turbo": _Maybe("name"), "smt": _Maybe("name"), "smt_active": "boolean", "nmi_watchdog": _Maybe("integer"),
    "tracefs": {"available": "boolean", "state": "text"}, "euid": "integer", "exec_gate": "text",
    "exec_gate_fix": _Maybe("text"), "run_containment": "text", "pointer_bits": "integer",
}
# What agent/audit.py run_audit reports; analysis/audits.py and perfctl audit report read it.
AUDIT_SHAPE = {
    "audit_id": "name", "machine_id": "name", "hostname": "name", "time_ns": "integer", "seconds": "number",
    "kernel": "name", "microcode": _Maybe("name"), "aslr": "text", "verdict": "name", "reasons": ["text"],
    "complete": "boolean", "interrupted_by": _Maybe("name"), "not_checked": ["text"], "backends": ["name"],
    "fit": _Maybe({"a": "number", "b": "number", "intercept": "number", "a_interval": PAIR, "b_interval": PAIR,
                   "intercept_interval": PAIR, "residual_scale": "number", "n": "integer", "confidence": "number",
                   "set_aside": "integer", "method": "text"}),
    "erratum": {"vendor": "name", "family": _Maybe("integer"), "models": _Maybe(["integer"]), "k_fldcw": "number",
                "note": "text", "source": "text"},
    "kernels": [{"kernel": "name", "backend": "name", "expected": "number", "runs": "integer", "cv": _Maybe("number"),
                 "exact": "boolean", "median_excess": _Maybe("number"), "page_faults": _Maybe("number"),
                 "interrupts": _Maybe("number")}],
    "checks": [{"item": "name", "value": "text", "meaning": "text", "fix": _Maybe("text"), "ok": "boolean"}],
    "runs": "integer",
}


def _kernel_cv(path: tuple) -> bool:
    """agent/audit.py writes a kernel's CV as NaN when it has fewer than 2 runs (no PMU: none): stored as
    null, the one place a report may have NaN."""
    return len(path) == 3 and path[0] == "kernels" and path[2] == "cv"


def validate_machine_info(info) -> str | None:
    """Register's MachineInfo: the name, the inventory (a JSON object clients parse and show, shaped as
    INVENTORY_SHAPE), backends and events."""
    problem = validate_machine_name(info.name) or _printable(info.machine_id, 64, "machine_id") or \
        _printable(info.agent_version, 64, "agent_version")
    if problem:
        return problem
    if len(info.inventory_json) > MAX_INVENTORY_BYTES:
        return f"inventory_json larger than {MAX_INVENTORY_BYTES} bytes"
    if info.inventory_json:
        problem, inventory, _ = _json_document(info.inventory_json, "inventory_json")
        if problem:
            return problem
        if not isinstance(inventory, dict):
            return "inventory_json is not a JSON object"
        problem = _shape(inventory, INVENTORY_SHAPE, ())
        if problem:
            return f"inventory_json: {problem}"
    problem = _backend_list(info.backends)
    if problem:
        return problem
    if len(info.events) > MAX_EVENTS:
        return f"events: more than {MAX_EVENTS}"
    for index, entry in enumerate(info.events):
        # a label, not only an event name: "task-clock@ebpf" when two backends count the same event
        problem = _printable(entry.event, MAX_NAME, f"events[{index}].event") or \
            _text(entry.reason, MAX_TEXT, f"events[{index}].reason")
        if problem:
            return problem
    return None


def validate_heartbeat(request) -> str | None:
    if request.state not in HEARTBEAT_STATES:
        return f"state {request.state[:32]!r} unknown"
    if request.HasField("job_id") and not _UUID.match(request.job_id):
        return "job_id is not a UUID"
    if len(request.held_job_ids) > MAX_HELD_JOBS:
        return f"held_job_ids: {len(request.held_job_ids)} jobs, at most {MAX_HELD_JOBS}"
    if not all(_UUID.match(job_id) for job_id in request.held_job_ids):
        return "held_job_ids: a job id is not a UUID"
    return None


JOB_REPORT_STATES = ("running", "done", "failed", "refused")


def validate_job_id(job_id: str) -> str | None:
    return None if _UUID.match(job_id) else "job_id is not a UUID"


MAX_JOB_IDS = 1000  # GetJobsRequest.job_ids: what one `--wait` asks after


def validate_get_jobs(request) -> str | None:
    """GetJobs: at most MAX_JOB_IDS whole job ids, and as many short id prefixes."""
    if len(request.job_ids) > MAX_JOB_IDS:
        return f"job_ids: {len(request.job_ids)} ids, at most {MAX_JOB_IDS}"
    if len(request.id_prefixes) > MAX_JOB_IDS or any(len(prefix) > 64 for prefix in request.id_prefixes):
        return f"id_prefixes: at most {MAX_JOB_IDS}, each at most 64 characters"
    return next((f"job_ids[{i}]: {problem}" for i, job_id in enumerate(request.job_ids)
                 if (problem := validate_job_id(job_id.lower()))), None)  # server/listings.py jobs_named


def validate_job_report(request) -> str | None:
    """ReportJob: the state is an enumeration, the job a UUID. The message is a human status line: see
    job_message."""
    if request.state not in JOB_REPORT_STATES:
        return f"unknown job state {request.state[:32]!r}"
    return validate_job_id(request.job_id)


def job_message(message: str) -> str:
    """A job's status message as stored: at most 1000 characters, control characters other than tab and
    newline replaced by U+FFFD. Replaced rather than refused: the message often quotes a failed command's
    stderr, and refusing it would lose the job's final state (the agent does not re-send a refused report)."""
    return _CONTROL.sub("\ufffd", message[:1000])


AUDIT_VERDICTS = ("trusted", "degraded", "untrusted", "no-PMU")
MAX_AUDIT_BYTES = 1 << 20


def validate_audit(request) -> tuple[str | None, dict | None, str | None]:
    """(problem, parsed report, text to store): an audit report must be a bounded JSON object with a known
    verdict, shaped as AUDIT_SHAPE, and readable by analysis/audits.py (audit_problem: what drift and
    fleet_spread need). Stored as received, or re-encoded when a kernel's NaN CV became null."""
    from perfctl.analysis.audits import audit_problem

    if not _UUID.match(request.audit_id):
        return "audit_id is not a UUID", None, None
    if len(request.report_json) > MAX_AUDIT_BYTES:
        return f"audit report larger than {MAX_AUDIT_BYTES} bytes", None, None
    problem, report, replaced = _json_document(request.report_json, "audit report", _kernel_cv)
    if problem:
        return problem, None, None
    if not isinstance(report, dict) or report.get("verdict") not in AUDIT_VERDICTS:
        return f"audit verdict must be one of {AUDIT_VERDICTS}", None, None
    time_ns = report.get("time_ns")
    if not isinstance(time_ns, int) or isinstance(time_ns, bool) or not 0 <= time_ns < 1 << 63:
        return "audit time_ns must be an integer 0 to 2**63-1", None, None
    if report.get("audit_id") != request.audit_id:
        return "audit_id differs from the report's", None, None
    problem = _shape(report, AUDIT_SHAPE, ()) or audit_problem(report)
    if problem:
        return f"audit report: {problem}", None, None
    return None, report, json.dumps(report) if replaced else request.report_json


COMPARE_FAMILIES = ("", *FAMILIES)  # perfctl compare --family; empty: the default (analysis/compare.py)


def validate_selection(selection, field: str) -> str | None:
    """One side of a comparison (or GetSamples' selection): which stored runs of a machine it takes. The
    machine is named as in Register; the job is a UUID or empty (any); labels follow the model's rules
    (perfctl/model.py labels_problem); the time bounds are Unix ns, 0 meaning none, and a range must not
    be empty."""
    problem = validate_machine_name(selection.machine)
    if problem:
        return f"{field}: {problem}"
    if selection.job_id and not _UUID.match(selection.job_id):
        return f"{field}.job_id is not a UUID"
    problem = labels_problem(selection.labels, f"{field}.labels")
    if problem:
        return problem
    if selection.since_ns < 0 or selection.until_ns < 0:
        return f"{field}.since_ns and {field}.until_ns must be >= 0 (0: no bound)"
    if selection.since_ns and selection.until_ns and selection.since_ns >= selection.until_ns:
        return f"{field}.since_ns must be before {field}.until_ns"
    return None


def validate_compare(request) -> str | None:
    """Compare's selectors are only looked up, never stored; bounded so one request cannot hold a worker
    thread or fill the log. Both selections (a, b) must name a machine. The statistical parameters are
    checked by Parameters.validate()."""
    for side in ("a", "b"):
        if not request.HasField(side):
            return f"{side}: no selection (name the machine to compare)"
        problem = validate_selection(getattr(request, side), side)
        if problem:
            return problem
    if request.a == request.b:
        # the same selection is the same runs on both sides: a run compared with itself says nothing (a run's
        # identity, docs/samples.md; files are refused alike by perfctl/cli/compare.py)
        return "A and B select the same runs: a run compared with itself says nothing"
    if request.family not in COMPARE_FAMILIES:
        return f"family {request.family[:16]!r} unknown: one of {', '.join(COMPARE_FAMILIES[1:])}"
    if len(request.benchmarks) > 1000 or len(request.metrics) > 100:
        return "at most 1000 benchmarks and 100 metrics"
    for field, value, limit in (("correction", request.correction, 16),
                                *((f"benchmarks[{i}]", v, MAX_NAME) for i, v in enumerate(request.benchmarks)),
                                *((f"metrics[{i}]", v, MAX_NAME) for i, v in enumerate(request.metrics))):
        problem = _printable(value, limit, field)
        if problem:
            return problem
    return None


_CHANGE_ID = re.compile(r"[0-9a-f]{4,16}\Z")  # a change's id (server/history_store.py) or its first characters
MAX_CHANGE_STATES = 4


def validate_list_changes(request, states: tuple) -> str | None:
    """ListChanges: names as long as their columns, printable; a known time; known states."""
    if len(request.states) > MAX_CHANGE_STATES or any(state not in states for state in request.states):
        return f"states: each one of {', '.join(states)}"
    if request.since_ns < 0:
        return "since_ns: negative"
    return (request.machine and _printable(request.machine, 128, "machine")) or \
        (request.benchmark and _printable(request.benchmark, MAX_NAME, "benchmark")) or None


def validate_update_change(request, states: tuple, max_note: int, max_link: int) -> str | None:
    """UpdateChange: an id or a prefix of 4 to 16 hex digits; a state a user may set; a note (free text,
    bounded) and a link (printable, bounded)."""
    if not _CHANGE_ID.match(request.change_id.lower()):
        return f"change_id: {request.change_id[:40]!r} is not a change id (4 to 16 hex digits)"
    if request.HasField("state") and request.state not in states:
        return f"state: {request.state[:40]!r} is not one of {', '.join(states)}"
    if request.HasField("note") and (problem := _text(request.note, max_note, "note")):
        return problem
    if request.HasField("link") and request.link and (problem := _printable(request.link, max_link, "link")):
        return problem
    return None


def validate_get_history(request) -> str | None:
    """GetHistory: a machine, label selectors as a sample's labels, printable names."""
    if not request.machine:
        return "machine: required"
    return _printable(request.machine, 128, "machine") or labels_problem(request.labels, "labels") or \
        (request.benchmark and _printable(request.benchmark, MAX_NAME, "benchmark")) or \
        (request.metric and _printable(request.metric, 128, "metric")) or \
        (request.order_by and labels_problem({request.order_by: "x"}, "order_by")) or None
