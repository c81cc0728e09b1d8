"""The event vocabulary: perf-style names parsed into backend-neutral specs.

Every backend reads an :class:`EventSpec`; none parses names itself. Names follow ``perf list``:
``instructions``, ``cycles:u``, ``page-faults``, ``irq_vectors:local_timer_entry``, ``r82d0:u``.
Modifiers ``:u``, ``:k`` and ``:uk`` set the privilege scope. Two names are perfctl's own because the
counter-artifact corrections need them by meaning rather than by tracepoint: ``timer-interrupts`` and
``device-interrupts`` (see ../shared/notes/counter-artifacts.md, section 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfctl.agent import cachegrind
from perfctl.model import SCOPE_SUFFIX

# perf_event_attr.type values (linux/perf_event.h)
TYPE_HARDWARE = 0
TYPE_SOFTWARE = 1
TYPE_TRACEPOINT = 2
TYPE_RAW = 4

# perf's modifiers as an event name's suffix: model.SCOPE_SUFFIX's (":u", ":k"), and both at once
_MODIFIER_SCOPE = {suffix[1:]: scope for scope, suffix in SCOPE_SUFFIX.items() if suffix} | {"uk": "all", "ku": "all"}


class UnknownEvent(ValueError):
    """A name that is neither a known event, a tracepoint ``group:name`` nor a raw ``rNNNN``."""


@dataclass(frozen=True)
class EventSpec:
    """One event a user asked for, resolved to what a backend needs to open it.

    ``kind`` is hardware, software, tracepoint, raw, store (retired stores, whose raw encoding depends on
    the CPU model) or dbi (counted only by the dbi backend). ``tracepoints`` lists candidate tracepoints in
    order of preference: the first that exists on the machine is used and recorded as the reading's source.
    """

    name: str
    kind: str
    scope: str
    config: int = 0
    tracepoints: tuple[str, ...] = ()
    unit: str = "count"

    @property
    def label(self) -> str:
        """The name as shown to users: canonical name plus scope suffix for scoped events."""
        return self.name + (SCOPE_SUFFIX[self.scope] if self.scopable else "")

    @property
    def scopable(self) -> bool:
        """Tracepoints fire in kernel context: excluding the kernel would drop every one of them."""
        return self.kind != "tracepoint"


# canonical name -> perf_event_attr.config of TYPE_HARDWARE (linux/perf_event.h perf_hw_id); scope user by default
_HARDWARE = {
    "cycles": 0,
    "instructions": 1,
    "cache-references": 2,
    "cache-misses": 3,
    "branches": 4,
    "branch-misses": 5,
    "bus-cycles": 6,
    "stalled-cycles-frontend": 7,
    "stalled-cycles-backend": 8,
    "ref-cycles": 9,
}
# canonical name -> (perf_event_attr.config of TYPE_SOFTWARE (perf_sw_ids), unit); scope all by default
_SOFTWARE = {
    "cpu-clock": (0, "ns"),
    "task-clock": (1, "ns"),
    "page-faults": (2, "count"),
    "context-switches": (3, "count"),
    "cpu-migrations": (4, "count"),
    "minor-faults": (5, "count"),
    "major-faults": (6, "count"),
    "alignment-faults": (7, "count"),
    "emulation-faults": (8, "count"),
}
# perfctl's named interrupt events: candidates in order (fallback when the first is absent).
_INTERRUPTS = {
    "timer-interrupts": ("irq_vectors:local_timer_entry", "timer:hrtimer_expire_entry"),
    "device-interrupts": ("irq:irq_handler_entry",),
}
# Counted only by the dbi backend: rep-prefixed iterations and x87 control-word loads (valgrind exp-bbv), the
# inputs of the rep and fldcw corrections (../shared/notes/counter-artifacts.md, section 2), and cachegrind's
# simulated cache events with the cycle estimate of iai-callgrind (agent/cachegrind.py: a model).
_DBI = {"rep-iterations": "count", "fldcw-instructions": "count", **cachegrind.EVENTS}
_ALIASES = {
    "cpu-cycles": "cycles",
    "branch-instructions": "branches",
    "faults": "page-faults",
    "cs": "context-switches",
    "migrations": "cpu-migrations",
    "stores": "retired-stores",
    "timer-irqs": "timer-interrupts",
}

DEFAULT_EVENTS = (
    "instructions:u",
    "cycles:u",
    "branches:u",
    "retired-stores:u",
    "page-faults",
    "minor-faults",
    "major-faults",
    "context-switches",
    "cpu-migrations",
    "task-clock",
    "timer-interrupts",
    "device-interrupts",
)

_TRACEPOINT = re.compile(r"^[A-Za-z0-9_]+:[A-Za-z0-9_]+$")
_RAW = re.compile(r"^r([0-9a-fA-F]{1,16})$")


def _split_modifier(text: str) -> tuple[str, str | None]:
    """Split ``instructions:u`` into (``instructions``, ``user``); tracepoints keep their colon."""
    base, sep, modifier = text.rpartition(":")
    if sep and modifier in _MODIFIER_SCOPE:
        return base, _MODIFIER_SCOPE[modifier]
    return text, None


def parse_event(text: str) -> EventSpec:
    """Resolve one perf-style event name into an :class:`EventSpec`.

    >>> parse_event("instructions").label
    'instructions:u'
    >>> parse_event("faults").name
    'page-faults'
    """
    raw_text = text.strip()
    if not raw_text or len(raw_text) > 128:
        raise UnknownEvent(f"unknown event {text!r}")
    base, scope = _split_modifier(raw_text)
    base = _ALIASES.get(base, base)
    if base in _HARDWARE:
        return EventSpec(base, "hardware", scope or "user", config=_HARDWARE[base])
    if base == "retired-stores":
        return EventSpec(base, "store", scope or "user")
    if base in _SOFTWARE:
        config, unit = _SOFTWARE[base]
        return EventSpec(base, "software", scope or "all", config=config, unit=unit)
    if base in _INTERRUPTS:
        return _tracepoint_spec(base, _INTERRUPTS[base], scope, raw_text)
    if base in _DBI:
        return EventSpec(base, "dbi", "user", unit=_DBI[base])
    match = _RAW.match(base)
    if match:
        return EventSpec(base, "raw", scope or "user", config=int(match.group(1), 16))
    group = raw_text.split(":", 1)[0]
    if _ALIASES.get(group, group) in known_names() or _RAW.match(group):
        raise UnknownEvent(f"event {text!r}: unknown modifier (use :u, :k or :uk)")
    if _TRACEPOINT.match(raw_text):
        return EventSpec(raw_text, "tracepoint", "all", tracepoints=(raw_text,))
    raise UnknownEvent(
        f"unknown event {text!r} (known: {', '.join(sorted(known_names()))}, "
        "a tracepoint group:name, or a raw rNNNN)"
    )


def _tracepoint_spec(name: str, candidates: tuple[str, ...], scope: str | None, text: str) -> EventSpec:
    if scope not in (None, "all"):
        raise UnknownEvent(f"event {text!r}: interrupts are counted in kernel context, drop the :u/:k modifier")
    return EventSpec(name, "tracepoint", "all", tracepoints=candidates)


def parse_events(texts: list[str] | tuple[str, ...]) -> list[EventSpec]:
    """Parse a list of names, each of which may itself be comma separated; duplicates are dropped."""
    specs: list[EventSpec] = []
    seen: set[str] = set()
    for text in texts:
        for part in _split_list(text):
            spec = parse_event(part)
            if spec.label not in seen:
                seen.add(spec.label)
                specs.append(spec)
    if not specs:
        raise UnknownEvent("no events given")
    return specs


def _split_list(text: str) -> list[str]:
    return [part for part in (p.strip() for p in text.split(",")) if part]


def missing_tracepoints(specs: list[EventSpec], available) -> list[str]:
    """Tracepoints named literally (``group:name``) that ``available(tp)`` says this kernel lacks.

    perfctl's own interrupt events are not listed: they fall back, or are reported unsupported.
    """
    return [s.name for s in specs if s.kind == "tracepoint" and s.tracepoints == (s.name,) and not available(s.name)]


def check_tracepoints(specs: list[EventSpec]) -> None:
    """UnknownEvent for a tracepoint named literally that this kernel lacks (when tracefs can tell): a
    misspelt tracepoint is a usage error, not an 'unsupported' row."""
    import os

    from perfctl.agent import tracefs

    events, _ = tracefs.events_dir()
    if events is None:
        return
    missing = missing_tracepoints(specs, lambda tp: os.path.isdir(os.path.join(events, *tp.split(":", 1))))
    if missing:
        raise UnknownEvent(f"unknown tracepoint {missing[0]} (not in {events})")


def known_names() -> set[str]:
    return set(_HARDWARE) | set(_SOFTWARE) | set(_INTERRUPTS) | set(_DBI) | {"retired-stores"}


def uncorrectable(specs: list[EventSpec], pmu_present: bool) -> str | None:
    """Why retired instructions cannot be corrected in runs of ``specs`` whatever else holds (the sentence
    the output shows; "" when instructions are not counted at all), or None when the correction may apply:
    checked before agent/corrections.py, and what it imports, is loaded (corrections.make_corrector)."""
    if "instructions:u" not in {spec.label for spec in specs}:
        return ""
    if not pmu_present:
        return "instructions not corrected: no PMU counts them here"
    return None
