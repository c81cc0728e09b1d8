"""`perfctl completion bash|zsh|fish|man`: a shell completion script, or the man page (perfctl/cli/manpage.py),
generated from the argparse parser itself, so that it knows every command and option of this version:
subcommands, options, the values of options with choices (or an argparse type that names its words in
``completions``, as --backend's), files and directories where an option or argument names one, users
after --user.

    eval "$(perfctl completion bash)"                 # in ~/.bashrc
    eval "$(perfctl completion zsh)"                  # in ~/.zshrc, after compinit
    perfctl completion fish > ~/.config/fish/completions/perfctl.fish
    perfctl completion man > perfctl.1                # man -l perfctl.1
"""

from __future__ import annotations

import argparse

from perfctl.cli.manpage import help_text, manpage
from perfctl.cli.options import exit_status, loudness

SHELLS = ("bash", "zsh", "fish")
_PATH_METAVARS = ("FILE", "LOG", "APP.rds", "FILE.png")


def add_parser(sub) -> None:
    completion = sub.add_parser("completion", help="print a bash, zsh or fish completion script, or the man page",
                                description="Print a completion script for SHELL, generated from perfctl's own "
                                            "options: eval \"$(perfctl completion bash)\" in ~/.bashrc, "
                                            "eval \"$(perfctl completion zsh)\" in ~/.zshrc after compinit, "
                                            "perfctl completion fish > ~/.config/fish/completions/perfctl.fish; "
                                            "or the man page in roff (perfctl completion man > perfctl.1).",
                                epilog=exit_status("0 printed", "2 bad usage (an unknown shell)"))
    completion.add_argument("shell", choices=SHELLS + ("man",))
    loudness(completion, verbose="accepted (the script is the output)", quiet="accepted (the script is the output)")


def run(args, parser: argparse.ArgumentParser) -> int:
    if args.shell == "man":
        print(manpage(parser), end="")
    else:
        print({"bash": bash, "zsh": zsh, "fish": fish}[args.shell](parser), end="")
    return 0


def choices_of(action: argparse.Action) -> list[str]:
    """The words an option or positional takes: its choices, or those its argparse type names."""
    return [str(c) for c in action.choices or getattr(action.type, "completions", ()) or ()]


def _value_kind(action: argparse.Action) -> str:
    """How an option's value or a positional completes: 'choices', 'file', 'dir', 'user', 'command' or
    'none'."""
    if choices_of(action):
        return "choices"
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if metavar == "DIR":
        return "dir"
    if metavar == "USER":
        return "user"
    # a machine or a file (history's sources): files are what a shell can offer
    if metavar in _PATH_METAVARS or metavar in ("A", "B") or metavar.endswith("|FILE"):
        return "file"
    if action.nargs in (argparse.REMAINDER, "*") and "CMD" in metavar:
        return "command"
    return "none"


def commands(parser: argparse.ArgumentParser, path: str = "perfctl") -> list[dict]:
    """Every command path ('perfctl', 'perfctl stat', 'perfctl cache mrc', ...) with its subcommands, its
    options, the options that take a value (and how it completes) and how its positionals complete."""
    entry = {"path": path, "subcommands": [], "options": [], "values": {}, "positional": "none", "actions": []}
    found = [entry]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                entry["subcommands"].append(name)
                found += commands(child, f"{path} {name}")
        elif action.option_strings:
            entry["options"] += [o for o in action.option_strings if o.startswith("--")] or action.option_strings
            kind = _value_kind(action) if action.nargs != 0 else "flag"
            entry["actions"].append((action, kind))
            if action.nargs != 0:
                for option in action.option_strings:
                    entry["values"][option] = (kind, choices_of(action))
        elif entry["positional"] == "none" or action.choices:
            entry["positional"] = _value_kind(action)
            entry["positional_choices"] = choices_of(action)
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
                                   "dir": "_perfctl_dirs", "user": 'COMPREPLY=($(compgen -u -- "$cur"))',
                                   "none": "COMPREPLY=()", "is_option": "[[ $cur == -* ]]", "case": '"{}")'})


def zsh(parser: argparse.ArgumentParser) -> str:
    return _script(parser, _ZSH, {"words": "compadd -- {words}", "file": "_files", "dir": "_files -/",
                                  "user": "_users", "none": "_message value", "is_option": "[[ $PREFIX == -* ]]",
                                  "case": '("{}")'})


# fish: how a value completes, as `complete` arguments (-f: no files; -F: files; -r: the option takes one)
_FISH_VALUES = {"file": "-r -F", "command": "-r -F", "dir": "-r -f -a '(__fish_complete_directories)'",
                "user": "-r -f -a '(__fish_complete_users)'", "none": "-r -f", "flag": "-f"}


def fish(parser: argparse.ArgumentParser) -> str:
    """One `complete` line per command's subcommands or positionals and per option, each under a condition
    on the command path typed so far (__perfctl_at); after `--` the benchmark's program, then files."""
    found = commands(parser)
    lines = [_FISH.replace("{paths}", " ".join(_fish_quote(c["path"]) for c in found))]
    for c in found:
        at = f"-n {_fish_quote('__perfctl_at ' + _fish_quote(c['path']))}"
        if c["subcommands"]:
            lines.append(f"complete -c perfctl {at} -f -a {_fish_quote(' '.join(c['subcommands']))}")
        elif c["positional"] == "choices":
            lines.append(f"complete -c perfctl {at} -f -a {_fish_quote(' '.join(c['positional_choices']))}")
        elif c["positional"] in ("file", "dir"):
            lines.append(f"complete -c perfctl {at} {_FISH_VALUES[c['positional']].replace('-r ', '')}")
        for action, kind in c["actions"]:
            names = " ".join(f"-l {o[2:]}" if o.startswith("--") else f"-s {o[1:]}" for o in action.option_strings)
            value = (f"-r -f -a {_fish_quote(' '.join(choices_of(action)))}" if kind == "choices"
                     else _FISH_VALUES[kind])
            described = f" -d {_fish_quote(_first_sentence(help_text(action)))}" if action.help else ""
            lines.append(f"complete -c perfctl {at} {names} {value}{described}")
    return "\n".join(lines) + "\n"


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _first_sentence(text: str) -> str:
    """A help text's first clause, short enough for fish's description column."""
    text = text.split("; ")[0].split(". ")[0]
    return text if len(text) <= 60 else text[:59] + "…"


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


_FISH = """# fish completion for perfctl, generated by `perfctl completion fish` from perfctl's own parser
complete -c perfctl -e
set -g __perfctl_paths {paths}
# the perfctl command path typed so far ('perfctl cache mrc'), or -- once the benchmark's command line began
function __perfctl_path
    set -l path perfctl
    for word in (commandline -opc)[2..-1]
        if test "$word" = --
            printf '%s\\n' --
            return
        end
        contains -- "$path $word" $__perfctl_paths; and set path "$path $word"
    end
    printf '%s\\n' $path
end
function __perfctl_at
    test (__perfctl_path) = "$argv[1]"
end
# the word after -- names the benchmark's program
function __perfctl_program_next
    set -l words (commandline -opc)
    test "$words[-1]" = --; and test (__perfctl_path) = --
end
complete -c perfctl -n __perfctl_program_next -f -a '(__fish_complete_command)'
complete -c perfctl -n 'test (__perfctl_path) = --; and not __perfctl_program_next' -F"""


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
