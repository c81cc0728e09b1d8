"""`perfctl token add`: add an agent's or a client's token to a tokens file (server/auth.py)."""

from __future__ import annotations

from perfctl.cli.options import exit_status, loudness
from perfctl.output import EXIT_OK, UsageError


def add_parser(sub) -> None:
    token = sub.add_parser("token", help="add an agent or client token to a tokens file",
                           epilog=exit_status("0 the token was added and is printed", "2 bad usage, or a tokens "
                                              "file that cannot be read or written"))
    token.add_argument("action", choices=("add",))
    token.add_argument("--file", required=True, metavar="FILE")
    role = token.add_mutually_exclusive_group(required=True)
    role.add_argument("--agent", metavar="NAME")
    role.add_argument("--client", metavar="NAME")
    loudness(token, verbose="accepted (the token is all there is to say)",
             quiet="accepted (the token is printed all the same: it is the output)")


def run(args) -> int:
    from perfctl.output_files import APPENDED, Output, check
    from perfctl.server.auth import TokenFileError, add_token

    # a line is appended to FILE: only to a new or empty file or a tokens file (docs/outputs.md), never to
    # one where it would be joined to the last line or mixed into another format
    check("perfctl token", [Output("--file", args.file, APPENDED, _not_a_tokens_file)])
    try:
        value = add_token(args.file, "agent" if args.agent else "client", args.agent or args.client)
    except TokenFileError as err:
        raise UsageError(f"perfctl token: {err}") from None
    except OSError as err:  # nothing of the line is left behind (output_files.append_whole)
        raise UsageError(f"perfctl token: cannot write {args.file}: {err.strerror}; no token was added") from None
    print(value)
    return EXIT_OK


def _not_a_tokens_file(path: str) -> str | None:
    """None for a file the server takes as its tokens file (server/auth.py reads it), else why not."""
    from perfctl.server.auth import TokenFileError, Tokens

    try:
        Tokens._parse(path)  # the tokens file's one reader; a file of comments only is a tokens file too
    except TokenFileError as err:
        return f"not a tokens file the server takes: {err}"
    return None
