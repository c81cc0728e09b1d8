"""`perfctl completion bash|zsh`: a shell completion script generated from the argparse parser itself, so
that it knows every command and option of this version: subcommands, options, the values of options with
choices, and files and directories where an option or argument names one.

    eval "$(perfctl completion bash)"    # in ~/.bashrc
    eval "$(perfctl completion zsh)"     # in ~/.zshrc, after compinit
"""

from __future__ import annotations

import argparse

from perfctl.cli.options import exit_status, loudness

SHELLS = ("bash", "zsh")
_PATH_METAVARS = ("FILE", "LOG", "APP.rds", "FILE.png")


def add_parser(sub) -> None:
    completion = sub.add_parser("completion", help="print a bash or zsh completion script",
                                description="Print a completion script for SHELL, generated from perfctl's own "
                                            "options: eval \"$(perfctl completion bash)\" in ~/.bashrc, or "
                                            "eval \"$(perfctl completion zsh)\" in ~/.zshrc after compinit.",
                                epilog=exit_status("0 printed", "2 bad usage (an unknown shell)"))
    completion.add_argument("shell", choices=SHELLS)
    loudness(completion, verbose="accepted (the script is the output)", quiet="accepted (the script is the output)")


def run(args, parser: argparse.ArgumentParser) -> int:
    print(bash(parser) if args.shell == "bash" else zsh(parser), end="")
    return 0


def _value_kind(action: argparse.Action) -> str:
    """How an option's value or a positional completes: 'choices', 'file', 'dir', 'command' or 'none'."""
    if action.choices:
        return "choices"
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if metavar == "DIR":
        return "dir"
    if metavar in _PATH_METAVARS or metavar in ("A", "B"):
        return "file"
    if action.nargs in (argparse.REMAINDER, "*") and "CMD" in metavar:
        return "command"
    return "none"


def commands(parser: argparse.ArgumentParser, path: str = "perfctl") -> list[dict]:
    """Every command path ('perfctl', 'perfctl stat', 'perfctl cache mrc', ...) with its subcommands, its
    options, the options that take a value (and how it completes) and how its positionals complete."""
    entry = {"path": path, "subcommands": [], "options": [], "values": {}, "positional": "none"}
    found = [entry]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                entry["subcommands"].append(name)
                found += commands(child, f"{path} {name}")
        elif action.option_strings:
            entry["options"] += [o for o in action.option_strings if o.startswith("--")] or action.option_strings
            if action.nargs != 0:
                kind = _value_kind(action)
                for option in action.option_strings:
                    entry["values"][option] = (kind, list(action.choices or ()))
        elif entry["positional"] == "none" or action.choices:
            entry["positional"] = _value_kind(action)
            entry["positional_choices"] = list(action.choices or ())
    return found


def _script(parser: argparse.ArgumentParser, template: str, shell: dict) -> str:
    """``template`` filled with the command paths and two case lists: how each option's value completes,
    and what each command completes to (its options after a '-', else its subcommands or positionals).
    ``shell`` says it in the shell's words: ``words`` (a format with {words}), ``file``, ``dir``, ``none``,
    ``is_option`` (the test for a word starting with '-') and ``case`` (a format of a case label)."""
    found = commands(parser)
    paths = "|".join(f'"{c["path"]}"' for c in found if c["path"] != "perfctl")

    def completes(kind: str, choices) -> str:
        if kind == "choices":
            return shell["words"].format(words=" ".join(choices))
        return shell.get(kind, shell["file"] if kind == "command" else shell["none"])

    values, words = [], []
    for c in found:
        for option, (kind, choices) in sorted(c["values"].items()):
            label = shell["case"].format(f"{c['path']}:{option}")
            values.append(f"        {label} {completes(kind, choices)}; return ;;")
        rest = (shell["words"].format(words=" ".join(c["subcommands"])) if c["subcommands"]
                else completes(c["positional"], c.get("positional_choices", [])))
        words.append(f'        {shell["case"].format(c["path"])}\n'
                     f'            if {shell["is_option"]}; then {shell["words"].format(words=" ".join(c["options"]))}'
                     f'\n            else {rest}; fi ;;')
    return template.format(paths=paths, values="\n".join(values), words="\n".join(words))


def bash(parser: argparse.ArgumentParser) -> str:
    return _script(parser, _BASH, {"words": '_perfctl_words "{words}"', "file": "_perfctl_files",
                                   "dir": "_perfctl_dirs", "none": "COMPREPLY=()", "is_option": "[[ $cur == -* ]]",
                                   "case": '"{}")'})


def zsh(parser: argparse.ArgumentParser) -> str:
    return _script(parser, _ZSH, {"words": "compadd -- {words}", "file": "_files", "dir": "_files -/",
                                  "none": "_message value", "is_option": "[[ $PREFIX == -* ]]", "case": '("{}")'})


_BASH = """# bash completion for perfctl, generated by `perfctl completion bash` from perfctl's own parser
_perfctl_words() {{ COMPREPLY=($(compgen -W "$1" -- "$cur")); }}
_perfctl_files() {{ local IFS=$'\\n'; compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")); }}
_perfctl_dirs() {{ local IFS=$'\\n'; compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur")); }}
_perfctl() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} path=perfctl i
    for ((i = 1; i < COMP_CWORD; i++)); do
        if [[ ${{COMP_WORDS[i]}} == -- ]]; then  # the benchmark's command line: a program, then its files
            if ((i == COMP_CWORD - 1)); then local IFS=$'\\n'; COMPREPLY=($(compgen -c -- "$cur"))
            else _perfctl_files; fi
            return
        fi
        case "$path ${{COMP_WORDS[i]}}" in
            {paths}) path="$path ${{COMP_WORDS[i]}}" ;;
        esac
    done
    case "$path:$prev" in
{values}
    esac
    case "$path" in
{words}
    esac
}}
complete -F _perfctl perfctl
"""


_ZSH = """#compdef perfctl
# zsh completion for perfctl, generated by `perfctl completion zsh` from perfctl's own parser
_perfctl() {{
    local cmdpath=perfctl i
    for ((i = 2; i < CURRENT; i++)); do
        if [[ ${{words[i]}} == -- ]]; then  # the benchmark's command line: a program, then its files
            if ((i == CURRENT - 1)); then _command_names -e; else _files; fi
            return
        fi
        case "$cmdpath ${{words[i]}}" in
            ({paths}) cmdpath="$cmdpath ${{words[i]}}" ;;
        esac
    done
    case "$cmdpath:${{words[CURRENT-1]}}" in
{values}
    esac
    case "$cmdpath" in
{words}
    esac
}}
compdef _perfctl perfctl
"""
