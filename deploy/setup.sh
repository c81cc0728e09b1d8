#!/usr/bin/env bash
# Set up perfctl on a fresh Debian 12 machine, as root: the Debian packages it measures with, a virtual
# environment in .venv with perfctl and its test tools, and the example benchmarks in examples/bin/.
# Idempotent: a second run installs nothing new. Python packages come from deploy/requirements.lock.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(python3 python3-venv gcc make libc6-dev linux-perf valgrind hyperfine procps util-linux iproute2 openssl postgresql
          clang bpftool libbpf-dev libbpf1 g++ libbenchmark-dev chromium fonts-dejavu-core zsh fish libboost-dev prometheus
          faketime tmux)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: missing Debian packages (${missing[*]}); run this script as root" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # faketime (libfaketime) runs a test agent with its clock days fast (tests/test_i29_clock.py); tmux gives
    # stat, compare and ab a real terminal of a chosen width (tests/test_i31_terminal.py).
    # prometheus is here for promtool (tests/test_alert_rules.py); its package also enables a Prometheus
    # server, which has no business running on a machine that measures
    if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
        systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
fi

# Python packages: exactly the versions and files of deploy/requirements.lock (refreshed by deploy/lock.sh),
# so every machine tests and runs what CI tested. --latest instead installs the newest releases that
# pyproject.toml's ranges allow, into .venv-latest, to find out early what the next lock will break:
#   ./deploy/setup.sh --latest && .venv-latest/bin/ruff check . && .venv-latest/bin/python -m pytest tests
venv=.venv
if [ "${1:-}" = "--latest" ]; then
    venv=.venv-latest
elif [ -n "${1:-}" ]; then
    echo "setup: unknown option $1 (usage: deploy/setup.sh [--latest])" >&2
    exit 2
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
if [ "$venv" = .venv-latest ]; then
    "${pip[@]}" --upgrade --upgrade-strategy eager -e '.[test]'
else
    "${pip[@]}" --require-hashes --no-deps -r deploy/requirements.lock
    # perfctl itself, built with the locked setuptools (no isolated build env fetching an unlocked one)
    "${pip[@]}" --no-deps --no-build-isolation -e .
fi
# confseq, the test suite's reference for analysis/sequential.py (deploy/confseq.lock says why it is built this
# way); a C++ build of about 30 s, so only when the installed one is not that version.
confseq_version=$(sed -n 's/^confseq==\([^ ]*\).*/\1/p' deploy/confseq.lock)
if ! "$venv/bin/python" -c "import sys, importlib.metadata as m; sys.exit(m.version('confseq') != sys.argv[1])" \
        "$confseq_version" 2>/dev/null; then
    "${pip[@]}" --no-deps --no-build-isolation --require-hashes --no-binary confseq -r deploy/confseq.lock
fi
# Byte-compile perfctl as installing a wheel would (an editable install does not): every command imports
# some 40 of its modules, and compiling them again at each start cost ~0.2 s wherever Python may not write
# bytecode itself (PYTHONDONTWRITEBYTECODE, a read-only checkout).
"$venv/bin/python" -m compileall -q perfctl agent analysis server
make -s -C examples
# Build the static exec gate and the eBPF object now (perfctl would build them on first use) and show the
# machine once.
"$venv/bin/perfctl" info >/dev/null
