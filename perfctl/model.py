"""The common model shared by agent, server and CLI: a Sample is one run, a Reading one counter of it.

Field meanings are documented in docs/samples.md; the JSON Lines file format is these dataclasses' fields
with a ``type`` tag per line ("machine" or "sample"), written by perfctl/formats/jsonl_writer.py. Raw values
are never overwritten: derived numbers (``scaled``, ``corrected``) sit beside them.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

SCHEMA_VERSION = 1
READING_STATUSES = ("ok", "unsupported", "multiplexed", "error")
OUTCOMES = ("ok", "failed", "signal", "timeout")
BACKENDS = ("perf_event", "perf-stat", "dbi", "ebpf")
# Backends whose counts are deterministic functions of the program and its inputs (valgrind simulates the
# program and lays out its memory itself; perfctl gives every run the same environment): ab's exact rule
# (analysis/ab.py; docs/backends.md says what was checked).
DETERMINISTIC_BACKENDS = ("dbi",)
# A reading's privilege scope, and the suffix its label carries (perf's ``instructions:u``): the one owner
# of both, for the event parser (agent/events.py), every backend, the readers and the server's validation.
SCOPES = ("user", "kernel", "all")
SCOPE_SUFFIX = {"user": ":u", "kernel": ":k", "all": ""}
# Every run's own metric: its wall time in ns, measured by perfctl whatever the backend.
WALL_TIME = "wall-time"
# What compare and ab measure when no --metric is given: the first of these counted on both sides.
DEFAULT_METRICS = ("instructions", "cycles", "task-clock", WALL_TIME)
# the label that tells a comparison's commands apart in its samples (ab=A, ab=B, ...): `perfctl ab`'s file, an
# agent's --until-settled job, the server's replay of that job
SIDE_LABEL = "ab"


def side_letter(index: int) -> str:
    """The letter of a comparison's command ``index``: A is the baseline."""
    return chr(ord("A") + index)


def parse_backends(text: str) -> tuple[str, ...]:
    """A --backend value: one backend, or ``perf_event,ebpf`` (both count the same runs); ValueError
    with the rule that was broken."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise ValueError(f"unknown backend {(unknown or [text])[0]!r} (available: {', '.join(BACKENDS)})")
    if len(names) > 1 and set(names) != {"perf_event", "ebpf"}:
        raise ValueError(f"backends {', '.join(names)} cannot count one run together; only perf_event,ebpf can")
    return ("perf_event", "ebpf") if len(names) > 1 else names


MAX_LABELS = 32
MAX_LABEL_KEY = 64
MAX_LABEL_VALUE = 256
# \Z, not $: "$" also matches before a final newline, so "commit\n" would pass as a key.
_LABEL_KEY = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_LABEL_KEY}}}\Z")
LABEL_KEY_RULE = f"key must be 1-{MAX_LABEL_KEY} characters of A-Z a-z 0-9 _ . -"


def label_problem(key, value) -> str | None:
    """What is wrong with one label (``key``=``value``), or None.

    Keys are identifiers (commit, branch, build.id): they become selectors (``box-a@commit=abc``), column
    names and query keys, so they are short and of a small alphabet. Values are free but printable: they
    end up in tables, logs and terminals, where a newline forges lines and an escape drives the terminal."""
    if not isinstance(key, str) or not _LABEL_KEY.match(key):
        return LABEL_KEY_RULE
    if not isinstance(value, str):
        return "value must be a string"
    if len(value) > MAX_LABEL_VALUE:
        return f"value longer than {MAX_LABEL_VALUE} characters"
    if not value.isprintable():  # false for every control character, newline and tab included
        return "value has control or non-printable characters"
    return None


def labels_problem(labels, field: str = "labels") -> str | None:
    """None if ``labels`` (a mapping of key to value: a sample's, a job's, a selection's) is acceptable,
    else its first problem in one line naming ``field`` and the bad label. The one owner of what a label
    is: the CLI, the agent, the server and the file reader all ask here."""
    if not hasattr(labels, "items"):
        return f"{field} must be an object of key to value"
    if len(labels) > MAX_LABELS:
        return f"{field}: more than {MAX_LABELS} labels ({len(labels)})"
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem:
            where = f"{field} key {_shown(key)}" if problem == LABEL_KEY_RULE else f"{field}[{key!r}]"
            return f"{where}: {problem}"
    return None


def parse_label(text: str, option: str = "--label") -> tuple[str, str]:
    """A command-line ``KEY=VALUE`` (split at the first ``=``: a value may hold more), as (key, value);
    ValueError in one line naming the option, the text and the broken rule."""
    key, equals, value = text.partition("=")
    problem = "expected KEY=VALUE" if not equals else label_problem(key, value)
    if problem:
        raise ValueError(f"{option} {_shown(text)}: {problem}")
    return key, value


def parse_labels(texts: Iterable[str], option: str = "--label") -> dict[str, str]:
    """Every ``KEY=VALUE`` of a repeatable option as one labels mapping; ValueError for a bad one, a key
    given twice (which value was meant cannot be guessed) or more than MAX_LABELS."""
    labels: dict[str, str] = {}
    for text in texts:
        key, value = parse_label(text, option)
        if key in labels:
            raise ValueError(f"{option} {_shown(text)}: key {key!r} given twice")
        labels[key] = value
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{option}: at most {MAX_LABELS} labels, got {len(labels)}")
    return labels


def _shown(value) -> str:
    """A bad key or text as quoted in a message: escaped (one line) and cut at 80 characters."""
    if not isinstance(value, str):
        return type(value).__name__
    return repr(value[:80]) + ("..." if len(value) > 80 else "")


@dataclass(frozen=True)
class Reading:
    event: str
    backend: str
    scope: str
    status: str
    unit: str = "count"
    value: int | None = None
    time_enabled: int | None = None
    time_running: int | None = None
    scaled: float | None = None
    reason: str | None = None
    source: str | None = None
    corrected: float | None = None
    correction_model: str | None = None
    audit_id: str | None = None

    @property
    def label(self) -> str:
        return reading_label(self)


def ok_fields(event: str, backend: str, scope: str, unit: str, source: str | None) -> dict:
    """Every field of an "ok" Reading of this event but its count, in field order: made once per event, for
    :func:`counted_reading` to copy on every run."""
    return dict(vars(Reading(event=event, backend=backend, scope=scope, unit=unit, source=source, status="ok")))


def counted_reading(fields: dict, value: int, time_enabled: int, time_running: int) -> Reading:
    """The "ok" Reading of ``fields`` (:func:`ok_fields`) and one run's count: what Reading(...) makes, the
    same fields in the same order, without its __init__. A frozen dataclass's __init__ sets each of its 14
    fields through object.__setattr__: ~3 us a reading, 30 us a run of `perfctl stat`'s eight counted
    events on these VMs (bench/stat_rate.py), where a copied dict costs a tenth of that. The writer reads
    that instance dict back in one go (formats/jsonl_writer.py lists the hot path's speed-ups)."""
    reading = object.__new__(Reading)
    object.__setattr__(reading, "__dict__", {**fields, "value": value, "time_enabled": time_enabled,
                                             "time_running": time_running})
    return reading


@dataclass(frozen=True)
class Benchmark:
    name: str
    argv: tuple[str, ...]
    executable: str
    executable_sha256: str
    input_digest: str


@dataclass(frozen=True)
class Environment:
    """What was controlled for this run (the environment fingerprint of DESIGN.md)."""

    aslr_off: bool
    env_bytes: int
    pinned_cpu: int | None
    user: str
    cwd: str


@dataclass(frozen=True)
class Sample:
    uuid: str
    machine_id: str
    benchmark: Benchmark
    run_index: int
    warmup: bool
    start_time_ns: int
    wall_ns: int
    outcome: str
    exit_status: int | None
    signal: int | None
    environment: Environment
    readings: tuple[Reading, ...]
    backends: tuple[str, ...]
    job_id: str | None = None
    stderr_tail: str | None = None
    max_rss_kib: int | None = None
    schema_version: int = SCHEMA_VERSION
    extra: dict = field(default_factory=dict)
    # key=value labels (commit, branch, build): `perfctl stat --label` or the job's; rules: labels_problem
    labels: dict[str, str] = field(default_factory=dict)

    def reading(self, label: str) -> Reading | None:
        """The reading named ``label`` (counter_labels), or None."""
        for reading_, name in zip(self.readings, counter_labels(tuple(map(LABELLED, self.readings)))):
            if name == label:
                return reading_
        return None

    def metric_value(self, metric: str) -> float | None:
        """The run's value of ``metric`` (a reading's label, or wall-time), or None when the run did not
        count it (not ok, unsupported, an error)."""
        if metric == WALL_TIME:
            return float(self.wall_ns)
        reading = self.reading(metric)
        return float(reading.value) if reading is not None and reading.status == "ok" else None

    def metric_unit(self, metric: str) -> str:
        """The unit of ``metric_value(metric)``: its reading's, or ns for wall-time (which has no reading)."""
        reading = None if metric == WALL_TIME else self.reading(metric)
        return "ns" if reading is None else reading.unit


def metric_label(metric: str, counted) -> str | None:
    """The label under which ``metric`` is counted among the labels ``counted``: the name itself, or with
    perf's ``:u`` suffix (``instructions`` is ``instructions:u``), as compare matches them; None if neither.
    wall-time is every run's."""
    if metric == WALL_TIME:
        return metric
    for label in (metric, metric + SCOPE_SUFFIX["user"]):
        if label in counted:
            return label
    return None


def default_metric(counted) -> str:
    """The first of DEFAULT_METRICS that is counted (labels ``counted``): instructions, cycles, task-clock,
    else wall-time, which every run has."""
    return next(label for label in (metric_label(metric, counted) for metric in DEFAULT_METRICS) if label)


def compared_metric(asked: str | None, support: dict[str, str | None]) -> str:
    """The metric a comparison's rounds decide on (`perfctl ab --metric`, a job's --until-settled), among what
    the backend counts here (``support``: label -> why not, None where counted): ``asked`` in compare's spelling
    (``instructions`` is ``instructions:u``), by default the first of DEFAULT_METRICS counted (wall-time at
    worst). ValueError, saying why, when ``asked`` is not counted here: known before any run."""
    counted = {label for label, reason in support.items() if reason is None}
    if asked is None:
        return default_metric(counted)
    label = metric_label(asked, counted)
    if label is None:
        raise ValueError(support.get(asked) or "not counted here")
    return label


def reading_label(reading: Reading) -> str:
    """How a reading is named in tables and lookups: event plus :u/:k for scoped events."""
    scope = reading.scope
    return reading.event + SCOPE_SUFFIX[scope] if scope == "user" or scope == "kernel" else reading.event


def distinct_labels(labelled: list[tuple[str, str]]) -> list[str]:
    """Names for a run's readings given as (label, backend): a label that an earlier backend of the same run
    already used gets ``@backend`` (perf_event's and ebpf's context-switches of one run stay apart)."""
    first_backend: dict[str, str] = {}
    names = []
    for label, backend in labelled:
        owner = first_backend.setdefault(label, backend)
        names.append(label if owner == backend else f"{label}@{backend}")
    return names


@functools.lru_cache(maxsize=256)
def counter_labels(counters: tuple[tuple[str, str | None, str | None], ...]) -> tuple[str, ...]:
    """The distinct names (distinct_labels) of one run's readings, given as their (event, scope, backend):
    the one place a reading's name is worked out, for a run measured (Sample.reading, report/stat.py), read
    from a file (formats/jsonl.py) or stored by the server (server/decode.py), so all are named alike. Every
    run of a measurement counts the same few, so their names are worked out once."""
    return tuple(distinct_labels([(event + SCOPE_SUFFIX.get(scope, ""), backend)
                                  for event, scope, backend in counters]))


# what a reading's distinct name is made of, fetched in one C call: counter_labels' key
LABELLED = operator.attrgetter("event", "scope", "backend")


# Counts and nanoseconds are unsigned 64-bit on the wire (protos/perfctl/v1/fleet.proto): anything larger
# is no measurement, and sums of values near float's maximum overflow into inf in the statistics.
MAX_VALUE = float(1 << 64)


INTERFERENCE_EVENT = "interference-time"
DEFAULT_INTERFERENCE_LIMIT = 0.05


@dataclass(frozen=True)
class InterferencePolicy:
    """Which runs count as interfered with (share of wall time above ``limit``) and whether statistics
    leave them out; runs without eBPF accounting are never flagged."""

    limit: float = DEFAULT_INTERFERENCE_LIMIT
    exclude: bool = False

    def flags(self, readings, wall_ns: int) -> bool:
        share = interference_share(readings, wall_ns)
        return share is not None and share > self.limit

    def judge(self, warmup: bool, outcome: str, readings, wall_ns) -> tuple[str | None, bool]:
        """The one rule of which runs are measured, used by `perfctl stat`'s summary (report/stat.py) and by
        every reading of perfctl samples (formats/jsonl.py DatasetBuilder, which files, the report and a
        server's stored runs go through): (why the run is left out: ``warmup``, its outcome (``failed``,
        ``signal``, ``timeout``) or ``interfered-with`` (only with ``exclude``); None when it is counted,
        and whether it is flagged as interfered with). Warm-ups and failed runs are never flagged."""
        if warmup:
            return "warmup", False
        if outcome != "ok":
            return outcome, False
        interfered = self.flags(readings, wall_ns)
        return ("interfered-with" if interfered and self.exclude else None), interfered

    def describe(self) -> str:
        return (f"other tasks ran on the benchmark's CPUs for more than {self.limit:.0%} of the run's wall time "
                "(or for a time eBPF could not tell)")


def interference_share(readings, wall_ns: int) -> float | None:
    """Time other tasks ran on the benchmark's CPUs during a run (the ebpf backend's interference-time) per
    unit of the run's wall time, or None when the run was not accounted by eBPF; infinity when it was but
    the time is unknown (an error reading: a switch the kernel did not report, agent/ebpf.py), so that a run
    that cannot be shown clean is never kept as clean. ``readings`` are Readings or their dicts."""
    for reading in readings:
        if isinstance(reading, dict):
            fields = reading
        elif reading.event != INTERFERENCE_EVENT:  # every reading of a run, for every run: no dict for those
            continue
        else:
            fields = vars(reading)
        if fields.get("event") == INTERFERENCE_EVENT and fields.get("status") == "ok" and wall_ns > 0:
            return float(fields["value"]) / wall_ns
        if fields.get("event") == INTERFERENCE_EVENT and fields.get("status") == "error":
            return math.inf
    return None


# hyperfine's hooks around a benchmark's runs (agent/hooks.py), in the order they are given.
HOOKS = ("prepare", "setup", "cleanup")
# The characters of the shell's control operators (;, |, &&, <, >, ...): unquoted in a fleet job's hook, they
# would reach its program as words, not do what a shell does with them.
_SHELL_OPERATORS = frozenset("();<>|&")


def job_hook_words(command: str) -> list[str]:
    """A fleet job's hook split into words as a shell would (shlex), never run by one: ValueError when it has
    no words, cannot be split (an unclosed quote) or holds a shell operator outside quotes (``;``, ``|``,
    ``&&``, ``>``...), which its program would get as a word. The server, ``perfctl submit`` and the agent
    judge a hook by this one rule (the operators' check is a help, not a guard: no shell ever reads them)."""
    try:
        words = shlex.split(command)
    except ValueError as err:
        raise ValueError(f"cannot be split into words ({err})") from None
    lexer = shlex.shlex(command, posix=False, punctuation_chars=True)  # keeps quotes: a quoted ';' is a word
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # a backslash-escaped quote, which only POSIX rules read: the words are all there is
        tokens = []
    if not words:
        raise ValueError("has no words")
    operators = [token for token in tokens if set(token) <= _SHELL_OPERATORS]
    if operators:
        raise ValueError(f"has the shell operator {operators[0]!r}: a job's hook runs without a shell (put "
                         "the commands in a script the agent allows)")
    return words
