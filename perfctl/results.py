"""Analysis results as tagged JSON, for the wire: the server's Compare RPC sends the comparison it computed
(perfctl/pairing.py Compared: analysis/compare.py's Comparison and its context) and the client rebuilds the
same frozen dataclasses and renders them as it renders a comparison of files, so a table, JSON, CSV or
Markdown from a server is the one a file compare prints (tests/test_fleet_compare.py).

A dataclass is ``{"type": "module.Class", "fields": {...}}``, an enum ``{"enum": "module.Class", "name": N}``,
a non-finite float ``{"float": "nan"}`` (JSON has none), a tuple a list (decoded as a tuple). Decoding
accepts only the dataclasses and enums that analysis/ defines and only their fields: the answer comes from
a server, and a hostile one must not get to build anything else (the same rule as for every other message).

A Verdict (analysis/verdicts.py) travels as the verdicts of three vocabularies did before they were one
enum (``VERDICT_FORMS``), so that a client or server of either side of that change reads the other.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import json
import math
import types
import typing

from perfctl.analysis.verdicts import Verdict

ANALYSIS = ("compare", "sparc", "verdicts", "spa", "speedup_test", "summary", "multiple", "disturbance", "rank_tests",
            "ab")
MODULES = (*(f"perfctl.analysis.{name}" for name in ANALYSIS), "perfctl.pairing")

# How a Verdict travels in each field that holds one: as an enum of the vocabulary the field held when the
# verdicts were three (SPARC's verdicts.Relevance, the Speedup-Test's speedup_test.Verdict), or as its words
# (None; a protocol run both ways said plain strings). The members of each former enum, by its tag.
VERDICT_FORMS = {
    ("sparc.SparcDecision", "relevance"): "verdicts.Relevance",
    ("ab.Settlement", "verdict"): "verdicts.Relevance",
    ("speedup_test.MeanTestResult", "verdict"): "speedup_test.Verdict",
    ("speedup_test.MedianTestResult", "verdict"): "speedup_test.Verdict",
    ("compare.ProtocolOutcome", "verdict"): None,
}
FORMER_ENUMS = {"verdicts.Relevance": ("RELEVANT", "TRIVIAL", "EQUIVALENCE", "INDETERMINATE"),
                "speedup_test.Verdict": ("SPEEDUP", "NOT_SIGNIFICANT", "CANNOT_CONCLUDE")}


class ResultError(ValueError):
    """An encoded result that does not decode to analysis/'s types; one line."""


@functools.cache
def _known() -> dict[str, type]:
    """Every dataclass and enum that analysis/ defines, and the context of a comparison (perfctl/pairing.py),
    by ``module.Class``."""
    known = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for _attr, value in vars(module).items():
            if isinstance(value, type) and value.__module__ == module.__name__ and \
                    (dataclasses.is_dataclass(value) or issubclass(value, enum.Enum)):
                known[_tag(value)] = value
    return known


def _tag(cls: type) -> str:
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


def encode(obj):
    """A JSON-ready form of an analysis result (a tree of frozen dataclasses)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        tag = _tag(type(obj))
        return {"type": tag, "fields": {f.name: _field(tag, f.name, getattr(obj, f.name))
                                        for f in dataclasses.fields(obj)}}
    if isinstance(obj, Verdict):
        raise TypeError(f"a verdict ({obj.name}) outside the fields VERDICT_FORMS names")
    if isinstance(obj, enum.Enum):
        return {"enum": _tag(type(obj)), "name": obj.name}
    if isinstance(obj, (list, tuple)):
        return [encode(item) for item in obj]
    if isinstance(obj, dict):
        return {"dict": [[encode(key), encode(value)] for key, value in obj.items()]}
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if hasattr(obj, "item"):  # a numpy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"float": repr(obj)}
    if isinstance(obj, (int, float)):
        return obj
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _field(tag: str, name: str, value):
    """One field of a dataclass ``tag``, encoded; a Verdict in the form the field has always had on the wire."""
    if not isinstance(value, Verdict):
        return encode(value)
    form = VERDICT_FORMS.get((tag, name), "")
    if form == "" or (form is not None and value.name not in FORMER_ENUMS[form]):
        raise TypeError(f"{tag}.{name}: verdict {value.name} has no form on the wire")
    return value.value if form is None else {"enum": form, "name": value.name}


def decode(data):
    """The analysis result ``encode`` made; ResultError for anything else."""
    if isinstance(data, list):
        return tuple(decode(item) for item in data)
    if not isinstance(data, dict):
        if data is None or isinstance(data, (bool, int, float, str)):
            return data
        raise ResultError(f"unexpected {type(data).__name__}")
    if set(data) == {"float"} and data["float"] in ("nan", "inf", "-inf"):
        return float(data["float"])
    if set(data) == {"dict"} and isinstance(data["dict"], list):
        pairs = [decode(pair) for pair in data["dict"]]
        if not all(isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], (str, int, float, bool))
                   for pair in pairs):
            raise ResultError("a mapping's items must be pairs with a string or number key")
        return dict(pairs)
    if set(data) == {"enum", "name"}:
        if isinstance(data["enum"], str) and data["enum"] in FORMER_ENUMS:
            if not isinstance(data["name"], str) or data["name"] not in FORMER_ENUMS[data["enum"]]:
                raise ResultError(f"unknown enum {data['enum']!r}")
            return Verdict[data["name"]]
        cls = _known().get(data["enum"]) if isinstance(data["enum"], str) else None
        if cls is None or not issubclass(cls, enum.Enum) or not isinstance(data["name"], str) \
                or data["name"] not in cls.__members__:
            raise ResultError(f"unknown enum {str(data['enum'])[:80]!r}")
        return cls[data["name"]]
    if set(data) == {"type", "fields"} and isinstance(data["fields"], dict):
        cls = _known().get(data["type"]) if isinstance(data["type"], str) else None
        if cls is None or not dataclasses.is_dataclass(cls):
            raise ResultError(f"unknown type {str(data['type'])[:80]!r}")
        hints = _hints(cls)
        extra = set(data["fields"]) - set(hints)
        if extra:
            raise ResultError(f"{data['type']} has no field {sorted(extra)[0][:80]!r}")
        fields = {key: _typed(decode(value), hints[key], f"{data['type']}.{key}")
                  for key, value in data["fields"].items()}
        try:
            return cls(**fields)
        except TypeError as err:
            raise ResultError(f"{data['type']}: {err}") from None
    raise ResultError("not an encoded analysis result")


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _typed(value, hint, where: str):
    """``value`` as the field annotated ``hint`` holds it (an integer where a float belongs becomes that
    float), or ResultError: a rendered table must never meet a string where it formats a number. A
    verdict sent as its words becomes the Verdict it names."""
    if type(value) is str and _accepts(Verdict, hint):
        try:
            value = Verdict(value)
        except ValueError:
            raise ResultError(f"{where}: unknown verdict {value[:80]!r}") from None
    if _conforms(value, hint):
        if isinstance(value, int) and not isinstance(value, bool) and _accepts(float, hint) and not _accepts(int, hint):
            return float(value)
        return value
    raise ResultError(f"{where}: {type(value).__name__} where {hint} belongs")


def _options(hint) -> tuple:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _accepts(kind: type, hint) -> bool:
    return kind in _options(hint)


def _conforms(value, hint) -> bool:
    """Whether a decoded value fits an annotation of analysis/'s dataclasses (unions, None, numbers,
    strings, tuples, mappings, enums, dataclasses); an annotation of another kind is not checked."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, option) for option in typing.get_args(hint))
    if hint is type(None) or hint is None:
        return value is None
    if hint is float:
        return (isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)
                                             and abs(value) <= 2**1023))
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (bool, str):
        return isinstance(value, hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_conforms(item, args[0]) for item in value)
        return len(args) == len(value) and all(_conforms(item, arg) for item, arg in zip(value, args))
    if origin is dict:
        key, item = typing.get_args(hint) or (typing.Any, typing.Any)
        return isinstance(value, dict) and all(_conforms(k, key) and _conforms(v, item) for k, v in value.items())
    if origin is list:
        return isinstance(value, tuple) and all(_conforms(item, typing.get_args(hint)[0]) for item in value)
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or issubclass(hint, enum.Enum)):
        return isinstance(value, hint)
    return True


def dumps(obj) -> str:
    return json.dumps(encode(obj), allow_nan=False, separators=(",", ":"))


def loads(text: str, expected: type):
    """Decode ``text`` into an ``expected`` (e.g. Comparison); ResultError with one line otherwise."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ResultError(f"not JSON: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    try:
        value = decode(data)
    except RecursionError:
        raise ResultError("nested too deeply") from None
    if not isinstance(value, expected):
        raise ResultError(f"expected {expected.__name__}, got {type(value).__name__}")
    return value
