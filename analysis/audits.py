"""Across audits: drift of one machine over its history, and the fleet-wide spread per kernel (the
coefficient of variation of a kernel's instruction count across machines, Weaver & McKee's Figure 1).
Pure functions over audit reports: the JSON documents of agent/audit_report.py ``AuditResult.to_dict`` as the
server stores them, or their digests (server/listings.py audit_digest), each checked by ``audit_problem``
first; and how long an audit vouches for a machine (``AUDIT_MAX_AGE_NS``, ``audit_warning``)."""

from __future__ import annotations

import math

from perfctl.analysis.summary import describe

# Counts in an audit are far below 2^64; beyond it, statistics over them overflow floats (10^200 broke the
# fleet spread's standard deviation).
MAX_COUNT = float(1 << 64)


def _number(value) -> bool:
    """A finite number within +-2^64 (abs() <= bound is False for NaN and inf and never converts a huge int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_COUNT


def audit_problem(report) -> str | None:
    """None when ``report`` has what drift and fleet_spread read, with the types they read it as; else
    what is wrong. Reports come from agents (stored by the server, possibly by an older version that
    checked less): one that cannot be read is set aside by the caller, never fed to the functions below."""
    if not isinstance(report, dict):
        return "not a JSON object"
    for key in ("verdict", "kernel", "microcode", "audit_id"):
        if key in report and not isinstance(report[key], str):
            return f"{key} is not a string"
    if not isinstance(report.get("time_ns"), int) or isinstance(report.get("time_ns"), bool):
        return "time_ns is not an integer"
    fit = report.get("fit")
    if fit is not None:
        if not isinstance(fit, dict):
            return "fit is not an object"
        for name in ("a", "b"):
            interval = fit.get(f"{name}_interval")
            if not _number(fit.get(name)) or not (isinstance(interval, list) and len(interval) == 2
                                                  and all(_number(v) for v in interval)):
                return f"fit.{name} or fit.{name}_interval is not a number or a pair of numbers"
    kernels = report.get("kernels", [])
    if not isinstance(kernels, list):
        return "kernels is not a list"
    for index, kernel in enumerate(kernels):
        if not isinstance(kernel, dict) or not isinstance(kernel.get("kernel"), str) \
                or not isinstance(kernel.get("backend"), str) or not _number(kernel.get("expected")):
            return f"kernels[{index}] lacks a kernel name, a backend or an expected count"
        for key in ("median_excess", "page_faults", "interrupts"):
            if kernel.get(key) is not None and not _number(kernel[key]):
                return f"kernels[{index}].{key} is not a number"
    return None


def drift(reports: list[dict]) -> list[str]:
    """What changed between consecutive audits of one machine: verdict, kernel, microcode, and fitted
    artifact coefficients that left the previous audit's interval."""
    changes = []
    for before, after in zip(reports, reports[1:]):
        when = f"audit {after.get('audit_id', '?')[:8]}"
        if before.get("verdict") != after.get("verdict"):
            changes.append(f"{when}: verdict {before.get('verdict')} -> {after.get('verdict')}")
        for key in ("kernel", "microcode"):
            if before.get(key) != after.get(key):
                changes.append(f"{when}: {key} {before.get(key)} -> {after.get(key)}")
        old, new = before.get("fit"), after.get("fit")
        if old and new:
            for name in ("a", "b"):
                low, high = old[f"{name}_interval"]
                if not low <= new[name] <= high:
                    changes.append(f"{when}: {name} moved from {old[name]:.3f} to {new[name]:.3f}")
    return changes


def fleet_spread(latest: dict[str, dict]) -> list[dict]:
    """Per kernel: machines, the count used (hardware corrected by each machine's fit where it has a PMU,
    else the dbi reference), median, and CV across machines (None with fewer than 2)."""
    per_kernel: dict[str, list[float]] = {}
    sources: dict[str, set[str]] = {}
    for report in latest.values():
        fit = report.get("fit")
        for kernel in report.get("kernels", []):
            if kernel["backend"] == "dbi" and fit is None:
                value, source = kernel["expected"] if kernel.get("exact") else math.nan, "dbi"
            elif kernel["backend"] != "dbi" and fit is not None and kernel.get("median_excess") is not None:
                faults = kernel.get("page_faults") or 0
                interrupts = kernel.get("interrupts") or 0
                value = kernel["expected"] + kernel["median_excess"] - fit["a"] * faults - fit["b"] * interrupts
                source = "corrected hardware"
            else:
                continue
            if math.isfinite(value):
                per_kernel.setdefault(kernel["kernel"], []).append(value)
                sources.setdefault(kernel["kernel"], set()).add(source)
    rows = []
    for name, values in sorted(per_kernel.items()):
        d = describe(values)
        rows.append({"kernel": name, "machines": d.n, "source": ", ".join(sorted(sources[name])), "median": d.median,
                     "cv": None if d.n < 2 or math.isnan(d.cv) else d.cv})
    return rows


# An audit vouches for a machine's counters this long: after it, compare warns (audit_warning) and
# `perfctl stat` no longer corrects with it (agent/corrections.py correction_for).
AUDIT_MAX_AGE_NS = 7 * 24 * 3600 * 10**9


def audit_warning(machine: str, latest: dict | None, now_ns: int) -> str | None:
    """Why a compared machine's counters should not be taken on trust (``latest``: its latest audit's
    verdict and time_ns), or None."""
    if latest is None:
        return f"machine {machine} has never been audited (perfctl audit)"
    if latest["verdict"] in ("untrusted", "degraded"):
        return f"machine {machine}'s latest audit is {latest['verdict']}"
    if now_ns - latest["time_ns"] > AUDIT_MAX_AGE_NS:
        return f"machine {machine}'s latest audit is {(now_ns - latest['time_ns']) / 86400e9:.0f} days old"
    return None

