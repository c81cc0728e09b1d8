"""The one meaning of every perfctl exit code, and the one place that maps an outcome to one.

compare, ab and `submit --until-settled --wait` reach a verdict the same way (SPARC's four, read off an
interval or a confidence sequence), so they exit the same way on the same verdict: before this module,
submit exited 0 on a settled "relevant difference, slower" that ab exited 3 on, and 0 on "not settled"
(ab: 4). Every command's --help, README.md ("Exit codes") and docs/operations.md take the meanings from
MEANINGS below; the code takes the numbers and :func:`outcome_exit` from here."""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_USAGE = 2
EXIT_SLOWDOWN = 3
EXIT_NO_VERDICT = 4
EXIT_WAIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT; every stop signal N gives 128 + N

# what each code means, for every command that can exit with it (--help epilogs quote these)
MEANINGS = {
    EXIT_OK: "no relevant slowdown: every verdict reached (compare: at least one benchmark judged; ab and "
             "submit --until-settled: every comparison settled)",
    EXIT_RUN_FAILED: "a run failed (exit status, signal, timeout), or a fleet job failed, was refused or lost",
    EXIT_USAGE: "bad usage or input, or a server that cannot be reached or refuses the request",
    EXIT_SLOWDOWN: "a relevant slowdown of B shown: a relevant difference with B slower (--fail-on beyond: "
                   "shown beyond the margin)",
    EXIT_NO_VERDICT: "no benchmark could be judged (compare), or a comparison not settled within the budget or "
                     "its rounds not alike (ab, submit --until-settled); no slowdown shown",
    EXIT_WAIT_TIMEOUT: "--wait-timeout passed before every job ended (they go on running on the server)",
}
SIGNAL_MEANING = "128+N stopped by signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP)"


def meaning(code: int) -> str:
    """"N what it means", as --help lists it."""
    return f"{code} {MEANINGS[code]}"


def outcome_exit(*, run_failed: bool = False, unusable: bool = False, slowdown: bool = False,
                 timed_out: bool = False, decided: bool = True) -> int:
    """The exit code of a measurement or comparison, from what it found, most serious first: a run failed
    (1); a run that gives no value to compare (2); a slowdown of B shown (3), which a verdict still open
    elsewhere cannot undo; a wait that ended before every job did (124); a verdict not reached (4); else 0.
    A stop by a signal (128 + N) is the caller's: it ends the command before any of these is known."""
    if run_failed:
        return EXIT_RUN_FAILED
    if unusable:
        return EXIT_USAGE
    if slowdown:
        return EXIT_SLOWDOWN
    if timed_out:
        return EXIT_WAIT_TIMEOUT
    if not decided:
        return EXIT_NO_VERDICT
    return EXIT_OK
