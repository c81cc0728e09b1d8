"""How client commands (submit, machines, jobs, compare of machines) reach the server.

Settings, first found wins: the command's options (--server, --token-file, --tls-ca, --insecure), then the
environment (PERFCTL_SERVER, PERFCTL_TOKEN or PERFCTL_TOKEN_FILE, PERFCTL_TLS_CA), then the config file
~/.config/perfctl/client.json ({"server": "host:port", "token_file": "...", "tls_ca": "..."}; the path can
be changed with PERFCTL_CONFIG). Documented in docs/operations.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfctl import security

# perfctl.security (and gRPC with it, ~0.1 s) is imported where a server is reached: files_read, which a
# comparison of files calls, never pays for it

CONNECT_TIMEOUT_S = 5.0  # per server of a list, before the next is tried


class ClientError(ValueError):
    pass


class NoServerAccepted(ClientError):
    """None of the servers accepted a connection or answered in time: all down, restarting or hung (a wait
    asks again)."""


@dataclass(frozen=True)
class Connection:
    """A command's server options as given (perfctl/cli/options.py ``connection_of`` reads them off the command
    line): what settings() starts from, before the environment and the config file. ``command``, the
    command's name after perfctl, is for its messages."""

    command: str
    server: str | None = None
    token_file: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure: bool = False


@dataclass(frozen=True)
class ClientSettings:
    server: str
    token: str
    tls: security.TlsFiles
    insecure: bool


def _config_path() -> str:
    return os.environ.get("PERFCTL_CONFIG") or os.path.expanduser("~/.config/perfctl/client.json")


def _config() -> dict:
    path = _config_path()
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ClientError(f"{path}: {err}") from None
    if not isinstance(data, dict):
        raise ClientError(f"{path}: expected a JSON object")
    return data


def read_token(path: str) -> str:
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as err:
        raise ClientError(f"token file {path}: {err.strerror}") from None
    if not token:
        raise ClientError(f"token file {path} is empty")
    return token


def settings(connection: Connection, role: str = "client") -> ClientSettings:
    """Last of all, a zero-config server on this host (perfctl/state.py): its loopback address and the token it
    made for this host's ``role`` (client or agent), when that token file is there. files_read lists the
    files read here."""
    from perfctl import security, state

    config = _config()
    local_token = state.path(state.AGENT_TOKEN if role == "agent" else state.CLIENT_TOKEN)
    local = os.path.exists(local_token)
    server = connection.server or os.environ.get("PERFCTL_SERVER") or config.get("server") or (
        state.LOCAL_SERVER if local else None)
    if not server:
        raise ClientError("no server: give --server HOST:PORT, set PERFCTL_SERVER, "
                          "or write ~/.config/perfctl/client.json")
    token_file = connection.token_file or os.environ.get("PERFCTL_TOKEN_FILE") or config.get("token_file")
    token = read_token(token_file) if token_file else os.environ.get("PERFCTL_TOKEN")
    if not token and local and server == state.LOCAL_SERVER:  # this host's token, never sent anywhere else
        token = read_token(local_token)
    if not token:
        raise ClientError("no token: give --token-file, or set PERFCTL_TOKEN or PERFCTL_TOKEN_FILE")
    ca = connection.tls_ca or os.environ.get("PERFCTL_TLS_CA") or config.get("tls_ca")
    tls = security.TlsFiles(ca=ca, cert=connection.tls_cert, key=connection.tls_key)
    return ClientSettings(server, token, tls, connection.insecure)


def files_read(connection: Connection) -> list[tuple[str, str]]:
    """(where it is named, path) of every file settings() may read for ``connection``, from every source and
    whichever wins: the config file, the token files, the TLS files. A command's output must not be one of
    them (perfctl/output_files.py), whether or not that command reaches a server: `report A B -o tok
    --token-file tok` would replace a credential with a page. A config file that cannot be read names none."""
    from perfctl import state

    try:  # a regular file only: a comparison of files must not hang on a FIFO where the config would be
        config = _config() if os.path.isfile(_config_path()) else {}
    except ClientError:
        config = {}
    named = [(f"PERFCTL_CONFIG {_config_path()}" if os.environ.get("PERFCTL_CONFIG") else _config_path(),
              _config_path())]
    for option, value, variable, key in (
            ("--token-file", connection.token_file, "PERFCTL_TOKEN_FILE", "token_file"),
            ("--tls-ca", connection.tls_ca, "PERFCTL_TLS_CA", "tls_ca"),
            ("--tls-cert", connection.tls_cert, None, None), ("--tls-key", connection.tls_key, None, None)):
        if value:
            named.append((f"{option} {value}", value))
        if variable and os.environ.get(variable):
            named.append((f"{variable} {os.environ[variable]}", os.environ[variable]))
        if key and isinstance(config.get(key), str) and config[key]:
            named.append((f"{key} in {_config_path()}", config[key]))
    named += [(f"this host's {name}", state.path(name)) for name in (state.CLIENT_TOKEN, state.AGENT_TOKEN)]
    return named


def query(connection: Connection):
    """(QueryService stub, call metadata, channel) for a client command's streams (unary calls: unary()).
    Of several servers (replicas: --server A,B), the first that accepts a connection within CONNECT_TIMEOUT_S,
    the one that answered this command's last unary call first; a DNS name with several addresses is gRPC's
    to try in turn."""

    from perfctl import security
    from perfctl.v1 import fleet_pb2_grpc as rpc

    s = settings(connection)
    servers = security.split_servers(s.server)
    servers.sort(key=lambda server: server != _answered_last.get(s.server))
    for server in servers:
        channel = security.channel(server, s.tls, s.insecure, aio=False)
        if len(servers) > 1 and not _connects(channel, CONNECT_TIMEOUT_S):
            channel.close()
            continue
        return rpc.QueryServiceStub(channel), (("authorization", f"Bearer {s.token}"),), channel
    raise NoServerAccepted(f"none of the servers {', '.join(servers)} accepted a connection within "
                      f"{CONNECT_TIMEOUT_S:g} s")


CALL_TIMEOUT_S = 60.0  # one client call, every replica tried included
# A replica that has not answered a call within this long is passed by: the next of --server A,B is asked
# too, and the first answer wins. A replica whose database hangs accepts connections and calls and answers
# none (issue 29: `machines` and `submit` waited 60 s and failed while B was healthy). The slow call is
# not cancelled: a healthy but busy replica (a large compare) may still answer first.
REPLICA_ANSWER_S = 5.0
_ELSEWHERE = ("UNAVAILABLE", "DEADLINE_EXCEEDED")  # a replica's failure, not the fleet's answer
_answered_last: dict[str, str] = {}  # --server's text -> the replica of it that answered this process last


def unary(connection: Connection, method: str, request, timeout: float = CALL_TIMEOUT_S):
    """One QueryService call ``method``, answered by the first replica of --server A,B,... that answers.
    A replica that cannot be reached or gives no answer within REPLICA_ANSWER_S is passed by (the next is
    asked at once, or after that delay, the first call still running); any other answer (NOT_FOUND,
    INVALID_ARGUMENT, ...) is the fleet's and is returned or raised as it is. A call that changes something
    must be safe to send twice: SubmitJob carries a submit_id the server dedupes (server/submissions.py),
    RetryJob queues only a lost job. Raises grpc.RpcError (one server, or the fleet's answer),
    NoServerAccepted (no replica answered: a wait asks again), ClientError or SecurityError (settings)."""
    import queue
    import time

    import grpc

    from perfctl import security
    from perfctl.v1 import fleet_pb2_grpc as rpc

    s = settings(connection)
    servers = security.split_servers(s.server)
    # the replica that answered last is asked first (a `--wait` polls every second: a hung replica first in
    # the list would cost every poll REPLICA_ANSWER_S)
    servers.sort(key=lambda server: server != _answered_last.get(s.server))
    metadata = (("authorization", f"Bearer {s.token}"),)
    deadline = time.monotonic() + timeout
    answers: queue.Queue = queue.Queue()
    channels, calls, failed = [], [], []
    ask_next = deadline  # when the next replica is asked too (at once after a failure)
    try:
        while True:
            now = time.monotonic()
            if len(calls) < len(servers) and (len(calls) == len(failed) or now >= ask_next):
                server = servers[len(calls)]
                channel = security.channel(server, s.tls, s.insecure, aio=False)
                channels.append(channel)
                call = getattr(rpc.QueryServiceStub(channel), method).future(
                    request, metadata=metadata, timeout=max(0.001, deadline - now))
                calls.append(call)
                call.add_done_callback(lambda done, server=server: answers.put((server, done)))
                ask_next = now + REPLICA_ANSWER_S
                continue
            if len(failed) == len(servers):
                raise NoServerAccepted(f"none of the servers {', '.join(servers)} answered: " + "; ".join(failed))
            until = deadline if len(calls) == len(servers) else min(ask_next, deadline)
            try:
                server, done = answers.get(timeout=max(0.0, until - now))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise NoServerAccepted(f"none of the servers {', '.join(servers)} answered within "
                                           f"{timeout:g} s") from None
                continue
            try:
                answer = done.result()
                _answered_last[s.server] = server
                return answer
            except grpc.RpcError as err:
                if len(servers) == 1 or err.code().name not in _ELSEWHERE:
                    raise
                failed.append(f"{server}: {err.code().name}: {err.details()}")
                ask_next = time.monotonic()
    finally:
        for call in calls:
            call.cancel()
        for channel in channels:
            channel.close()


def _connects(channel, timeout: float) -> bool:
    """Whether the channel reaches READY within ``timeout``; False as soon as a connection fails (a replica
    that is down refuses at once: the next is tried without waiting out the timeout)."""
    import threading

    import grpc

    settled = threading.Event()
    ready = []

    def seen(state) -> None:
        if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                     grpc.ChannelConnectivity.SHUTDOWN):
            ready.append(state == grpc.ChannelConnectivity.READY)
            settled.set()

    channel.subscribe(seen, try_to_connect=True)
    try:
        return settled.wait(timeout) and ready[0]
    finally:
        channel.unsubscribe(seen)


def _apart(fetched: list[list[dict]]) -> tuple[set[int], set[int]]:
    """The runs each side leaves out as the other's, by the rule of files and of the server's comparison
    (RunIdentity.shared): two selections of one machine may overlap (box-a@job=J and box-a).
    DatasetError when they are the same runs."""
    from perfctl.dataset import DatasetError, RunIdentity

    runs = []
    for records in fetched:
        found = set()
        for record in records:
            try:
                found.add(RunIdentity.run(record.get("uuid"), record.get("machine_id")))
            except ValueError:  # a uuid no run can have: the reader says so
                continue
        runs.append(found - {None})
    left_out = RunIdentity.shared(*runs)
    if left_out is None:
        raise DatasetError(f"A and B select the same {len(runs[0])} runs: a run compared with itself says nothing")
    return left_out


def machine_datasets(connection: Connection, sides: tuple, benchmarks: list[str], interference) -> list:
    """The stored runs of two machines as Datasets, each side a Selection (the runs the server's Compare
    would take), read with perfctl/formats/jsonl.stored_dataset, each with its machine's inventory and
    latest audit, and a note
    when that audit does not vouch for the counters: for the HTML report, which draws every run. Raises
    ClientError (the server, the network) or DatasetError (a machine without runs)."""
    import time

    import grpc

    from perfctl.analysis.audits import audit_warning
    from perfctl.dataset import DatasetError
    from perfctl.formats.jsonl import stored_dataset
    from perfctl.v1 import fleet_pb2 as pb
    from perfctl.wire import inventory_of, proto_to_dict

    try:  # a unary call first: it passes by a replica that answers nothing, and the stream follows the one
        # that answered (query)
        listed = {m.name: m for side in sides
                  for m in unary(connection, "ListMachines", pb.ListMachinesRequest(name=side.machine)).machines}
    except grpc.RpcError as err:
        raise ClientError(f"{err.code().name}: {err.details()}") from None
    stub, metadata, channel = query(connection)
    try:
        fetched = []
        for side in sides:
            if side.machine not in listed:
                raise DatasetError(f"no machine named {side.machine!r} on this server")
            fetched.append([proto_to_dict(sample) for benchmark in (benchmarks or [""])
                            for sample in stub.GetSamples(pb.GetSamplesRequest(selection=side, benchmark=benchmark),
                                                          metadata=metadata, timeout=600)])
        datasets = []
        for side, records, out in zip(sides, fetched, _apart(fetched)):
            name = side.machine
            dataset = stored_dataset(name, records, benchmarks, interference, frozenset(out))
            machine = listed[name]
            audit = ({"verdict": machine.audit_verdict, "time_ns": machine.audit_time_ns}
                     if machine.audit_verdict else None)
            dataset.machine = {**inventory_of(machine.inventory_json), "audit": audit or "never audited"}
            warning = audit_warning(name, audit, time.time_ns())
            if warning:
                dataset.notes.append(warning)
            datasets.append(dataset)
        return datasets
    except grpc.RpcError as err:
        raise ClientError(f"{err.code().name}: {err.details()}") from None
    finally:
        channel.close()



# --- performance history (issue 32): the contract's dicts (docs/history.md; server/history_service.py) ---
# Each raises what unary() raises: grpc.RpcError (NOT_FOUND: no such change; INVALID_ARGUMENT: a bad field or an
# ambiguous id prefix), NoServerAccepted, ClientError or SecurityError.

def _change_dict(change) -> dict:
    """A Change message as the contract's row (perfctl/history_rows.py owns its shape)."""
    from perfctl.history_rows import change_row, side_row

    def side(values) -> dict:
        return side_row(values.job_id, values.commit if values.HasField("commit") else None, values.time_ns,
                        values.points, values.runs, values.median)

    return change_row(
        id=change.id, machine=change.machine, benchmark=change.benchmark, argv=change.argv, metric=change.metric,
        line=dict(change.line), state=change.state, before=side(change.before), after=side(change.after),
        ratio=change.ratio, low=change.low if change.HasField("low") else None,
        high=change.high if change.HasField("high") else None, confidence=change.confidence, margin=change.margin,
        verdict=change.verdict, finding=change.finding, p_value=change.p_value, regression=change.regression,
        note=change.note, link=change.link, fixed_by=change.fixed_by if change.HasField("fixed_by") else None,
        detected_ns=change.detected_ns, updated_ns=change.updated_ns, on_request=change.on_request)


def list_changes(connection: Connection, machine: str | None = None, benchmark: str | None = None,
                 since_ns: int = 0, states=()):
    """The fleet's changes, newest first (by the time of their first point after), as the contract's dicts;
    page after page, each one call (to whichever replica answers)."""
    from perfctl.v1 import fleet_pb2 as pb

    request = pb.ListChangesRequest(machine=machine or "", benchmark=benchmark or "", since_ns=since_ns,
                                    states=list(states), page_size=1000)  # the largest: fewer round trips
    while True:
        answer = unary(connection, "ListChanges", request)
        yield from (_change_dict(change) for change in answer.changes)
        if not answer.next_page_token:
            return
        request.page_token = answer.next_page_token


def update_change(connection: Connection, change_id: str, state: str | None = None, note: str | None = None,
                  link: str | None = None) -> dict:
    """Triage of one change (its id or a unique prefix): state "acknowledged", "false positive" or "new", a
    note, a link (None: left as it is); the change after, as the contract's dict."""
    from perfctl.v1 import fleet_pb2 as pb

    request = pb.UpdateChangeRequest(change_id=change_id, state=state, note=note, link=link)
    return _change_dict(unary(connection, "UpdateChange", request).change)


def history(connection: Connection, machine: str, labels: dict, benchmark: str | None = None,
            metric: str | None = None, order_by: str | None = None) -> dict:
    """The series of ``machine`` whose line holds ``labels``, with their points and changes (the contract's
    history dict); a series longer than a page is put together from its parts. ``order_by``: a numeric label
    the server orders each series' points by and finds its changes on for this answer (changes computed on
    request: no id, no state; the series says how many points lacked the label or were left out by the
    server's cap)."""
    from perfctl.v1 import fleet_pb2 as pb

    request = pb.GetHistoryRequest(machine=machine, labels=labels, benchmark=benchmark or "", metric=metric or "",
                                   order_by=order_by or "")
    found: dict[int, dict] = {}
    while True:
        answer = unary(connection, "GetHistory", request)
        for part in answer.series:
            series = found.setdefault(part.series_id, {
                "machine": part.machine, "benchmark": part.benchmark, "argv": list(part.argv), "metric": part.metric,
                "line": dict(sorted(part.line.items())), "unit": part.unit,
                "order_by": order_by if part.ordered else None, "points_without_order": part.points_without_order,
                "points_capped": part.points_capped, "changes_capped": part.changes_capped, "points": [],
                "changes": []})
            series["points"] += [{"job": point.job_id, "commit": point.commit if point.HasField("commit") else None,
                                  "time_ns": point.time_ns, "order": point.order if point.HasField("order") else None,
                                  "runs": point.runs, "median": point.median, "q1": point.q1, "q3": point.q3,
                                  "min": point.min, "max": point.max} for point in part.points]
            series["changes"] += [_change_dict(change) for change in part.changes]
        if not answer.next_page_token:
            return {"series": list(found.values())}
        request.page_token = answer.next_page_token
