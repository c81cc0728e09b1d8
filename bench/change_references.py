"""The well-kept change-point implementations bench/changes.py measures perfctl's against, each loaded from the
package its project publishes, unpacked in the user's cache (~/.cache/perfctl-bench-references) and put on
sys.path for the run, never installed beside perfctl (their pinned dependencies are why: docs/history.md
"Method").

- Apache Otava 0.8.0 (formerly Hunter; Fleming & Kołaczkowski, ICPE 2023): ``compute_change_points``, E-divisive
  split and merge with Student's t-test, its defaults (window 50, p 0.001). Its wheel pins numpy 2.2.0 exactly
  and pulls Google BigQuery and Slack's SDK; its algorithm needs only numpy and scipy.
- MongoDB's signal-processing-algorithms 2.1.6 (Daly et al., ICPE 2020): ``e_divisive``, Matteson & James's
  E-divisive with their permutation test (p 0.05, 100 permutations), its C extension compiled here with the
  system's cc. It pins numpy < 2, gevent, structlog and Python 3.11 only, and ships as source only.
- ruptures 1.1.10 (Truong, Oudre & Vayatis, Signal Processing 167, 2020): binary segmentation (``Binseg``) on
  the least-absolute-deviation cost ("l1") with the penalty 2 σ log n, σ estimated from the median absolute
  difference of successive points divided by 0.6745 √2 (the MAD of a normal's differences; robust to the
  steps themselves). The penalty is the BIC of a Gaussian mean shift, 2 σ² log n (the linear penalty of
  Truong et al.'s review; Yao, Statist. Probab. Lett. 6(3) 1988, Schwarz's criterion), taken in σ rather than
  σ² because the l1 cost is in the data's units, not their squares: a choice of this bench, not of a paper.
  ruptures leaves the cost and penalty to the user; of those tried on 20 of the bench's series, this was the
  best: the least-squares cost with the BIC penalty found every step but gave 16 false changes per 1,000
  jobs (a disturbed job is a step to it), 0.1 with "l1". Its exact search (``Pelt``) took ~9 s on one series
  of 1,000 points here, so it is left out. Its only dependencies are numpy and scipy.

Each detector takes a series of job medians and returns the indices of the first job after each change.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
import zipfile

import numpy as np

OTAVA = "apache-otava==0.8.0"
MONGODB = "signal-processing-algorithms==2.1.6"
RUPTURES = "ruptures==1.1.10"
# the user's own cache, never a shared /tmp path: whatever is found here is put first on sys.path and run
_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "perfctl-bench-references")


def _downloaded(requirement: str) -> str:
    """The path of ``requirement``'s package file (wheel, else source), downloaded once with pip, without its
    dependencies."""
    os.makedirs(_HOME, mode=0o700, exist_ok=True)
    if os.stat(_HOME).st_uid != os.getuid() or os.stat(_HOME).st_mode & 0o022:
        sys.exit(f"bench: {_HOME} is not this user's alone; its packages would be run: remove it")
    directory = os.path.join(_HOME, requirement.replace("==", "-"))
    found = [name for name in os.listdir(directory)] if os.path.isdir(directory) else []
    if not found:
        result = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", directory,
                                 requirement], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"bench: cannot download {requirement}: "
                     f"{(result.stderr.strip().splitlines() or ['no message'])[-1]}")
        found = os.listdir(directory)
    return os.path.join(directory, found[0])


def _on_path(package_file: str) -> str:
    """``package_file`` (a wheel, a source archive or a directory) unpacked beside it and put first on sys.path;
    the directory the package's modules are in."""
    if os.path.isdir(package_file):
        unpacked = package_file
    else:
        unpacked = package_file.removesuffix(".whl").removesuffix(".tar.gz")
        if not os.path.isdir(unpacked):
            if package_file.endswith(".whl"):
                with zipfile.ZipFile(package_file) as wheel:
                    wheel.extractall(unpacked)
            else:
                with tarfile.open(package_file) as archive:
                    archive.extractall(unpacked, filter="data")
    sources = glob.glob(os.path.join(unpacked, "*", "src"))  # a source archive's src/ layout
    path = sources[0] if sources else unpacked
    sys.path.insert(0, path)
    return path


def otava(location: str | None = None):
    """Otava's compute_change_points (``location``: its wheel or unpacked wheel; default downloaded)."""
    _on_path(location or _downloaded(OTAVA))
    from otava.analysis import compute_change_points  # noqa: PLC0415 - from the wheel just put on the path

    def changes(medians: np.ndarray, min_magnitude: float = 0.0) -> list[int]:
        found, _ = compute_change_points(list(medians), min_magnitude=min_magnitude)
        return [int(point.index) for point in found]

    return changes


def mongodb():
    """MongoDB's e_divisive, with its C extension built from the package's own source (its pure-Python path
    would be slower still, and not what MongoDB runs)."""
    for requirement in ("more-itertools==10.5.0", "structlog==24.4.0"):  # what it imports, pure Python
        _on_path(_downloaded(requirement))
    path = _on_path(_downloaded(MONGODB))
    energy = os.path.join(path, "signal_processing_algorithms", "energy_statistics")
    library = os.path.join(energy, "_e_divisive.so")
    if not os.path.exists(library):
        result = subprocess.run(["cc", "-O3", "-shared", "-fPIC", os.path.join(energy, "e_divisive.c"), "-o",
                                 library], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"bench: cannot build MongoDB's e_divisive extension: {result.stderr.strip()[-300:]}")
    from signal_processing_algorithms.energy_statistics import cext_calculator, energy_statistics  # noqa: PLC0415

    if not cext_calculator.C_EXTENSION_LOADED:
        sys.exit("bench: MongoDB's e_divisive extension was built but does not load")

    def changes(medians: np.ndarray) -> list[int]:
        np.random.seed(len(medians))  # its permutation test draws from numpy's global generator
        return sorted(int(index) for index in energy_statistics.e_divisive(np.log(medians)))

    return changes


def ruptures():
    """ruptures' binary segmentation, least absolute deviation, penalty 2 σ log n (see the module docstring)."""
    _on_path(_downloaded(RUPTURES))
    import ruptures as rpt  # noqa: PLC0415 - from the wheel just put on the path

    def changes(medians: np.ndarray) -> list[int]:
        logs = np.log(medians)
        sigma = np.median(np.abs(np.diff(logs))) / 0.6745 / np.sqrt(2)
        ends = rpt.Binseg(model="l1", min_size=2, jump=1).fit(logs).predict(pen=2 * sigma * np.log(logs.size))
        return [int(end) for end in ends[:-1]]  # the last "end" is the series' own

    return changes
