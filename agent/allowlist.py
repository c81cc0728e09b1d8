"""The agent's allowlist: which programs a job may run (`perfctl agent --allow PATTERN`). A program is judged
as the client named it, lexically, before the filesystem is looked at (a refusal tells a client nothing it did
not say), and then as its real executable (symlinks resolved); patterns are globs whose ``*`` stays within one
path component (glob_regex)."""

from __future__ import annotations

import os
import re
import shutil

from perfctl.agent.runner import RunError

_GLOB_CHARACTERS = re.compile(r"[*?\[]")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """An --allow pattern as a regular expression for re.fullmatch: ``**`` matches any characters, ``/``
    included; ``*`` any characters within one path component; ``?`` one character other than ``/``;
    ``[...]`` one character of a class as in fnmatch (``[!...]`` negates), never ``/``.

    fnmatch's ``*`` also matches ``/``, so ``/opt/bench/*`` allowed every program below /opt/bench,
    whatever directory (or symlink to /) was made there.
    """
    out, i, n = [], 0, len(pattern)
    while i < n:
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            while i < n and pattern[i] == "*":
                i += 1
            continue
        char = pattern[i]
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = i + (pattern[i:i + 1] == "!")
            end += pattern[end:end + 1] == "]"  # a ] right after [ or [! is a member, as in fnmatch
            end = pattern.find("]", end)
            if end < 0:
                out.append(re.escape(char))  # no closing ]: a literal [, as in fnmatch
                continue
            members = pattern[i:end]
            negate = members.startswith("!")
            members = "".join("\\" + c if c in "\\[]&~|^" else c for c in members[negate:])
            out.append(f"(?!/)[{'^' if negate else ''}{members}]")
            i = end + 1
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.DOTALL)


def resolve_pattern(pattern: str) -> str:
    """The pattern with its directories before the first wildcard resolved (os.path.realpath), as the
    executable is: ``/bin/*`` allows /bin/true where /bin is a symlink to /usr/bin. A pattern without
    wildcards is resolved whole: allowing a symlink allows the file it names."""
    parts = pattern.split("/")
    literal = next((k for k, part in enumerate(parts) if _GLOB_CHARACTERS.search(part)), len(parts))
    if literal == len(parts):
        return os.path.realpath(pattern)
    head = os.path.realpath("/".join(parts[:literal]) or "/")
    return head.rstrip("/") + "/" + "/".join(parts[literal:])


def matches(path: str, patterns: list[str]) -> bool:
    """Whether the path, as it is (nothing resolved here), matches one of the patterns as written or with
    their directories resolved (resolve_pattern), by glob_regex's rules."""
    return any(glob_regex(form).fullmatch(path) for pattern in patterns
               for form in dict.fromkeys((pattern, resolve_pattern(pattern))))


def allowed(executable: str, patterns: list[str]) -> bool:
    """Whether the executable's real path (symlinks resolved: a symlink to / in an allowed directory
    must not open every program) matches one of the patterns (glob_regex's rules)."""
    return matches(os.path.realpath(executable), patterns)


class NotAllowed(Exception):
    """A job's program is outside the agent's --allow patterns; the message names it as the client did."""


def allowed_program(argv0: str, patterns: list[str], path: str | None, workdir: str) -> str:
    """The real path of a job's program, checked against the allowlist: NotAllowed when it is outside,
    RunError when it is inside but missing.

    The program as the client named it is judged first, lexically (made absolute against ``workdir``,
    normalised with os.path.normpath; a bare name is looked up in the clean environment's PATH, whose
    directories are public): when no pattern matches it, the refusal repeats it as given and nothing of the
    filesystem was looked at, so a client learns neither whether a path exists nor where a symlink points
    (the agent is root). Only then is its real path resolved and judged too; that refusal does not name
    the target either, and "not found" is said only of a path inside the allowlist.
    """
    refusal = NotAllowed(f"{argv0} is not allowed by this agent's --allow patterns")
    if "\0" in argv0:  # never a path
        raise refusal
    if "/" in argv0:
        named = os.path.normpath(os.path.join(workdir, argv0))
    else:
        directories = [os.path.normpath(os.path.join(workdir, entry or "."))
                       for entry in (path if path is not None else os.defpath).split(os.pathsep)]
        if not any(matches(os.path.join(directory, argv0), patterns) for directory in directories):
            raise refusal
        found = shutil.which(argv0, path=os.pathsep.join(directories))
        if found is None:
            raise RunError(f"command not found in PATH: {argv0}")
        named = os.path.normpath(found)
    if not matches(named, patterns):
        raise refusal
    real = os.path.realpath(named)
    if not matches(real, patterns):
        raise refusal
    if not os.path.exists(real):
        raise RunError(f"command not found: {argv0}")
    return real

