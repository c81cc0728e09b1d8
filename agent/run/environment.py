"""The benchmark's environment padded to a fixed size, so its stack starts at the same address in every run
(Weaver & McKee, ../shared/seeds/003_7d2f7057436bc279.txt, padded theirs to 422 bytes)."""

from __future__ import annotations

from perfctl.agent.run import RunError

ENV_PAD_VARIABLE = "PERFCTL_ENV_PAD"
# Linux refuses (E2BIG) an exec whose environment holds one "NAME=value" string longer than MAX_ARG_STRLEN,
# 32 pages = 131072 bytes counting its NUL; a larger pad is split over PERFCTL_ENV_PAD, PERFCTL_ENV_PAD_1, ...
MAX_ENV_STRING = 32 * 4096
# Without --env-size the environment block (sum of len("NAME=value") + 1 per variable) is padded to the
# smallest multiple of ENV_SIZE_STEP that holds it: 4096 for a typical login shell, 8192 for a CI job's.
# The size is fixed for the whole measurement and recorded in every sample; see docs/stat.md.
ENV_SIZE_STEP = 4096


def env_block_size(env: dict[str, str]) -> int:
    """Bytes the kernel copies for this environment: each ``NAME=value`` plus its terminating NUL."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())


def _is_pad(name: str) -> bool:
    suffix = name.removeprefix(ENV_PAD_VARIABLE)
    return name.startswith(ENV_PAD_VARIABLE) and (suffix == "" or (suffix[:1] == "_" and suffix[1:].isdigit()))


def unpadded(base: dict[str, str], cwd: str) -> tuple[dict[str, str], int]:
    """``base`` without pad variables (perfctl's own, when it runs under perfctl) plus PWD, and the bytes it
    needs with one (empty) pad variable."""
    env = {k: v for k, v in base.items() if not _is_pad(k)}
    env["PWD"] = cwd
    return env, env_block_size(env) + len(ENV_PAD_VARIABLE) + 2


def _pad_name(index: int) -> str:
    return ENV_PAD_VARIABLE if index == 0 else f"{ENV_PAD_VARIABLE}_{index}"


def pad_variables(pad_bytes: int) -> dict[str, str]:
    """Variables whose block is exactly ``pad_bytes`` (at least one variable's name, ``=`` and NUL), none
    longer than the kernel takes (MAX_ENV_STRING)."""
    pads: dict[str, str] = {}
    while pad_bytes > 0:
        name, next_overhead = _pad_name(len(pads)), len(_pad_name(len(pads) + 1)) + 2
        entry = min(pad_bytes, MAX_ENV_STRING)
        if 0 < pad_bytes - entry < next_overhead:
            # too little left for the next variable's own name: leave it enough for an empty one
            entry -= next_overhead - (pad_bytes - entry)
        pads[name] = "x" * (entry - len(name) - 2)
        pad_bytes -= entry
    return pads


def normalized_environment(base: dict[str, str], size: int, cwd: str) -> dict[str, str]:
    """``base`` plus PWD, padded with PERFCTL_ENV_PAD (and PERFCTL_ENV_PAD_1, ... beyond the kernel's
    limit on one variable) to exactly ``size`` bytes.

    PWD is set explicitly because sh adds it when missing, which would make the size depend on the
    directory. A fixed-size environment keeps the benchmark's stack at the same address run to run.
    """
    env, used = unpadded(base, cwd)
    if used > size:
        raise RunError(f"the environment needs {used} bytes, more than --env-size {size}; "
                       "raise --env-size or use --clean-env")
    env.update(pad_variables(size - env_block_size(env)))
    return env


def default_size(base: dict[str, str], cwd: str) -> int:
    """The size without --env-size: the smallest multiple of ENV_SIZE_STEP that holds ``base``."""
    _, needed = unpadded(base, cwd)
    return -(-needed // ENV_SIZE_STEP) * ENV_SIZE_STEP
