"""Sample file formats: one module per format, each a reader (and, for perfctl's own, a writer).

Every reader turns a file into a :class:`Dataset`: per benchmark, per metric, one value per run (one
process execution: pyperf's values inside a run are averaged into one, never treated as independent).
Times are in nanoseconds whatever the tool wrote. ``read_dataset`` detects the format from the content
unless it is named (perfctl/formats/detection.py).
"""

from __future__ import annotations

import os
import stat
import tempfile

from perfctl.dataset import Dataset, DatasetError
from perfctl.formats.detection import detect
from perfctl.model import WALL_TIME

# The package's interface: what it reads (read_dataset, detect, FORMATS), what it gives and refuses with
# (perfctl/dataset.py's Dataset and DatasetError), and the name of every run's wall time.
__all__ = ["FORMATS", "WALL_TIME", "Dataset", "DatasetError", "detect", "read_dataset"]

FORMATS = ("perfctl", "hyperfine", "pyperf", "google-benchmark", "pytest-benchmark", "perf-stat", "perf-stat-json")

MAX_PIPE_BYTES = 4 << 30


def read_dataset(path: str, input_format: str | None = None, interference=None, labels=None,
                 exclude: frozenset[int] = frozenset()) -> Dataset:
    """Read a sample file; ``input_format`` overrides detection; ``interference`` (model.InterferencePolicy)
    flags or leaves out perfctl runs that other tasks interfered with (other formats carry no such data);
    ``labels`` (a mapping) keeps only the perfctl runs that carry all of them (`perfctl ab`'s ab=A, ab=B);
    ``exclude`` leaves out the perfctl runs (RunIdentity.run) that are the other side's (cli/compare.py).

    A pipe (``<(cmd)``, ``/dev/stdin``) is read once into a temporary file first: detecting the format and
    reading the file each open it, and a pipe cannot be read twice. Devices and directories are refused
    (``/dev/zero`` has no end and no lines)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    if stat.S_ISFIFO(mode):
        with tempfile.NamedTemporaryFile(prefix="perfctl-pipe-") as copy:
            _copy_pipe(path, copy)
            try:
                dataset = _read_file(copy.name, input_format, interference, labels, exclude)
            except DatasetError as err:
                raise DatasetError(str(err).replace(copy.name, path)) from None
        dataset.path = path
        return dataset
    if not stat.S_ISREG(mode):
        raise DatasetError(f"{path}: not a regular file or a pipe")
    return _read_file(path, input_format, interference, labels, exclude)


def _copy_pipe(path: str, copy) -> None:
    try:
        with open(path, "rb") as pipe:
            copied = 0
            while block := pipe.read(1 << 20):
                copied += len(block)
                if copied > MAX_PIPE_BYTES:
                    raise DatasetError(f"{path}: more than {MAX_PIPE_BYTES >> 30} GiB from a pipe; write it to a file")
                copy.write(block)
        copy.flush()
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None


def _read_file(path: str, input_format: str | None, interference, labels=None,
               exclude: frozenset[int] = frozenset()) -> Dataset:
    fmt = input_format or detect(path)
    if labels and fmt != "perfctl":
        raise DatasetError(f"{path}: labels select runs of perfctl sample files only (this is a {fmt} file)")
    if fmt == "perfctl":
        from functools import partial

        from perfctl.formats.jsonl import read_dataset as read_perfctl
        from perfctl.model import InterferencePolicy

        reader = partial(read_perfctl, interference=interference or InterferencePolicy(), labels=labels,
                         exclude=exclude)
    elif fmt == "hyperfine":
        from perfctl.formats.hyperfine import read_dataset as reader
    elif fmt == "pyperf":
        from perfctl.formats.pyperf import read_dataset as reader
    elif fmt == "perf-stat":
        from perfctl.formats.perf_stat_csv import read_dataset as reader
    elif fmt == "perf-stat-json":
        from perfctl.formats.perf_stat_json import read_dataset as reader
    elif fmt == "google-benchmark":
        from perfctl.formats.googlebench import read_dataset as reader
    elif fmt == "pytest-benchmark":
        from perfctl.formats.pytest_benchmark import read_dataset as reader
    else:
        raise DatasetError(f"unknown input format {fmt!r} (one of {', '.join(FORMATS)})")
    dataset = reader(path)
    if not any(b.metrics for b in dataset.benchmarks.values()):
        why = f" ({'; '.join(dataset.notes)})" if dataset.notes else ""
        which = " labelled " + ",".join(f"{k}={v}" for k, v in labels.items()) if labels else ""
        raise DatasetError(f"{path}: no measured runs{which} in this {fmt} file{why}")
    return dataset
