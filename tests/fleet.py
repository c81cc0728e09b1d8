"""Real components for the fleet tests: a private PostgreSQL cluster, a test CA made with openssl, perfctl
server/agent processes started and killed like an operator would, the client calls tests make on them (jobs,
machines, samples), and a server called directly with grpc stubs (Server) as a hostile or broken peer would."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import pytest

from perfctl.server.auth import add_token
from perfctl.server.storage import database_url
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def postgres_reason() -> str | None:
    if os.geteuid() != 0:
        return "probe: euid is not 0 (the test cluster runs as the postgres user)"
    if not PG_BIN or not os.path.exists(os.path.join(PG_BIN[-1], "initdb")):
        return "probe: no PostgreSQL server binaries under /usr/lib/postgresql (deploy/setup.sh installs them)"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "probe: no postgres user"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throwaway cluster on a unix socket in a temp dir, owned and run by the postgres user."""

    def __init__(self) -> None:
        self.base = tempfile.mkdtemp(prefix="perfctl-pg-")
        shutil.chown(self.base, "postgres", "postgres")
        self.data = os.path.join(self.base, "data")
        self.port = free_port()
        bin_dir = PG_BIN[-1]
        self._pg_ctl = os.path.join(bin_dir, "pg_ctl")
        subprocess.run([os.path.join(bin_dir, "initdb"), "-D", self.data, "-U", "postgres", "--auth=trust",
                        "-E", "UTF8"], user="postgres", check=True, capture_output=True, cwd=self.base)
        subprocess.run([self._pg_ctl, "-D", self.data, "-l", os.path.join(self.base, "log"), "-w", "-o",
                        f"-k {self.base} -p {self.port} -c listen_addresses='' -c fsync=on", "start"],
                       user="postgres", check=True, capture_output=True, cwd=self.base)
        self.counter = 0

    def new_database(self) -> str:
        self.counter += 1
        name = f"perfctl{self.counter}"
        subprocess.run([os.path.join(PG_BIN[-1], "createdb"), "-h", self.base, "-p", str(self.port), "-U",
                        "postgres", name], check=True, capture_output=True)
        return f"postgresql+psycopg://postgres@/{name}?host={self.base}&port={self.port}"

    def stop(self) -> None:
        subprocess.run([self._pg_ctl, "-D", self.data, "-m", "immediate", "stop"], user="postgres",
                       capture_output=True, cwd=self.base)
        shutil.rmtree(self.base, ignore_errors=True)


@contextlib.contextmanager
def bench_databases(no_postgres: bool):
    """For the benchmarks that measure SQLite and PostgreSQL alike: a list of (kind, new database URL in a
    directory), SQLite first, then PostgreSQL in a throwaway cluster where this machine runs one (why not is
    printed first, once). Each call of the function makes a new empty database."""
    from perfctl.server.storage import database_url

    reason = "--no-postgres" if no_postgres else postgres_reason()
    if reason:
        print(f"postgresql: not measured ({reason})")
    postgres = None if reason else Postgres()
    made = iter(range(1 << 30))
    kinds = [("sqlite", lambda directory: database_url(os.path.join(directory, f"db{next(made)}"), None))]
    if postgres is not None:
        kinds.append(("postgresql", lambda directory: postgres.new_database()))
    try:
        yield kinds
    finally:
        if postgres is not None:
            postgres.stop()


def server_database_args(url: str) -> list[str]:
    """`perfctl server`'s options for the database at ``url``: --data-dir for SQLite, as users give it."""
    if url.startswith("sqlite:///"):
        return ["--data-dir", os.path.dirname(url[len("sqlite:///"):])]
    return ["--db", url]


def make_certs(directory: Path, hosts: list[str]) -> dict[str, str]:
    """A CA, a server certificate for ``hosts`` and a client certificate, all made by openssl."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=perfctl test CA")
    names = ",".join(f"IP:{h}" if h[0].isdigit() else f"DNS:{h}" for h in hosts)
    for who, extension in (("server", f"subjectAltName={names}"), ("client", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj",
            f"/CN=perfctl {who}")
        (directory / f"{who}.ext").write_text(extension + "\n")
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{who}.pem", "-days", "2", "-extfile", f"{who}.ext")
    return {name: str(directory / f"{name}") for name in ("ca.pem", "server.pem", "server.key", "client.pem",
                                                           "client.key")}


def perfctl_command(*args: str, netns: str | None = None) -> list[str]:
    command = [sys.executable, "-m", "perfctl", *args]
    return ["ip", "netns", "exec", netns, *command] if netns else command


class Fleet:
    """Tokens, a server and agents as separate processes; logs in ``directory``."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.tokens = str(directory / "tokens")
        self.client_token = str(directory / "client.tok")
        Path(self.client_token).write_text(add_token(self.tokens, "client", "tester"))
        os.chmod(self.client_token, 0o600)
        self.processes: dict[str, subprocess.Popen] = {}
        self.network: NetworkLab | None = None  # its hosts' namespaces, when conftest's fleet_in made them

    def agent_token(self, name: str) -> str:
        path = self.dir / f"{name}.tok"
        if not path.exists():
            path.write_text(add_token(self.tokens, "agent", name))
            os.chmod(path, 0o600)
        return str(path)

    def start(self, key: str, args: list[str], netns: str | None = None) -> subprocess.Popen:
        log = open(self.dir / f"{key}.log", "ab")
        process = subprocess.Popen(perfctl_command(*args, netns=netns), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.processes[key] = process
        return process

    def start_server(self, listen: str, db_args: list[str], extra: list[str] = (), netns: str | None = None,
                     key: str = "server"):
        return self.start(key, ["server", "--listen", listen, *db_args, "--tokens", self.tokens, *extra],
                          netns=netns)

    def start_agent(self, name: str, server: str, extra: list[str] = (), netns: str | None = None):
        return self.start(name, ["agent", "--server", server, "--name", name, "--token-file",
                                 self.agent_token(name), "--spool", str(self.dir / f"spool-{name}"),
                                 "--allow", "/bin/*", "--allow", "/usr/bin/*", "--user", "nobody",
                                 *(() if "--audit-every" in extra else ("--audit-every", "0")), *extra],
                          netns=netns)

    def kill(self, key: str, sig: int = 9) -> int | None:
        """Signal ``key``'s process group and wait for it; its exit status (None if it was not running)."""
        process = self.processes.pop(key, None)
        if process and process.poll() is None:
            os.killpg(process.pid, sig)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait(timeout=15)
                raise AssertionError(f"{key} did not stop within 15 s of signal {sig}; the end of its log:\n"
                                     f"{self.log(key)[-6000:]}") from None
            return process.returncode
        return None

    def log(self, key: str) -> str:
        path = self.dir / f"{key}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def client(self, *args: str, server: str, extra: list[str] = (), netns: str | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
        # connection options right after the subcommand: submit's command takes everything after "--"
        command = perfctl_command(args[0], "--server", server, "--token-file", self.client_token, *extra, *args[1:],
                                  netns=netns)
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)

    def stop_all(self) -> None:
        """SIGTERM everything at once, then wait: each must stop within 15 s."""
        processes = list(self.processes.items())
        self.processes.clear()
        for _, process in processes:
            if process.poll() is None:
                os.killpg(process.pid, 15)
        slow = []
        for key, process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
                slow.append(key)
        assert not slow, f"did not stop within 15 s of SIGTERM: {slow}"


def listed_jobs(fleet, server):
    """The server's jobs by id (`perfctl jobs --json`)."""
    result = fleet.client("jobs", "--json", server=server)
    assert result.returncode == 0, result.stderr
    return {j["job_id"]: j for j in json.loads(result.stdout)}


def submit_job(fleet, server, machine, *args) -> str:
    """The id of a job submitted to ``machine`` (`perfctl submit`; ``args`` its options and command)."""
    result = fleet.client("submit", "--machines", machine, *args, server=server)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[1]


def finished_job(fleet, server, job_id, timeout=60):
    """The job once done, failed or refused."""
    return wait_for(lambda: (j := listed_jobs(fleet, server)[job_id])["state"] in ("done", "failed", "refused")
                    and j, timeout, f"job {job_id} to finish")


def listed_machine(fleet, server, name):
    """The machine ``name`` as `perfctl machines --json` lists it, or None."""
    result = fleet.client("machines", "--json", server=server)
    if result.returncode != 0:
        return None
    return {m["name"]: m for m in json.loads(result.stdout)}.get(name)


def start_agent_with(fleet, name, server, spool, allow, extra=()):
    """An agent with its own ``spool`` and ``allow`` patterns, run as nobody (Fleet.start_agent sets both)."""
    args = ["agent", "--server", server, "--name", name, "--token-file", fleet.agent_token(name), "--spool",
            str(spool), "--user", "nobody", "--audit-every", "0", *extra]
    for pattern in allow:
        args += ["--allow", pattern]
    return fleet.start(name, args)


def start_sqlite_server(fleet):
    """A server on loopback with SQLite in the fleet's directory; its address."""
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    return server


def wait_connected(fleet, server, name, timeout=60):
    """Wait until the server lists ``name`` as connected."""
    wait_for(lambda: (m := listed_machine(fleet, server, name)) and m["connected"], timeout, f"{name} to connect")


def stored_uuids(fleet) -> list[str]:
    """The uuid of every sample in the fleet's server's SQLite database (``--data-dir fleet.dir/data``), read
    from the database itself."""
    from perfctl.server.storage import Storage

    storage = Storage(database_url(str(fleet.dir / "data"), None))
    try:
        return storage.sample_uuids()
    finally:
        storage.close()


def stored_samples(fleet, server, machine):
    """Every sample the server stored of ``machine`` (GetSamples)."""
    channel = grpc.insecure_channel(server)
    token = open(fleet.client_token).read()
    try:
        return list(rpc.QueryServiceStub(channel).GetSamples(pb.GetSamplesRequest(machine=machine),
                                                             metadata=(("authorization", f"Bearer {token}"),)))
    finally:
        channel.close()


def scrape(port: int) -> str:
    """The Prometheus text a server's or an agent's --metrics endpoint on loopback serves, "" while it does not
    answer."""
    import urllib.request

    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return ""


def metric(port: int, name: str) -> float | None:
    """The value of the unlabelled metric ``name`` (scrape), None when it is not served."""
    values = [float(line.split()[-1]) for line in scrape(port).splitlines() if line.startswith(name + " ")]
    return values[0] if values else None


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def netns_reason() -> str | None:
    if os.geteuid() != 0:
        return "probe: euid is not 0 (network namespaces need root)"
    if shutil.which("ip") is None:
        return "probe: ip (iproute2) not found"
    name = f"pctl-probe-{os.getpid()}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"probe: ip netns add failed: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


class NetworkLab:
    """A server host and N agent hosts, each a network namespace; agent hosts reach the server host over
    a veth pair into a bridge there (10.77.0.1 is the server, 10.77.0.10+i the hosts). The server host has a
    second address, 10.77.0.2, for a second server replica."""

    SERVER_IP = "10.77.0.1"
    SECOND_SERVER_IP = "10.77.0.2"

    def __init__(self, hosts: int):
        self.tag = f"{os.getpid() % 100000}"
        self.server_ns = f"pctl-s{self.tag}"
        self.hosts = [f"pctl-h{self.tag}-{i}" for i in range(hosts)]
        self._run("ip", "netns", "add", self.server_ns)
        self._in(self.server_ns, "ip", "link", "set", "lo", "up")
        self._in(self.server_ns, "ip", "link", "add", "br0", "type", "bridge")
        self._in(self.server_ns, "ip", "addr", "add", f"{self.SERVER_IP}/24", "dev", "br0")
        self._in(self.server_ns, "ip", "addr", "add", f"{self.SECOND_SERVER_IP}/24", "dev", "br0")
        self._in(self.server_ns, "ip", "link", "set", "br0", "up")
        for index, host in enumerate(self.hosts):
            self._run("ip", "netns", "add", host)
            self._in(host, "ip", "link", "set", "lo", "up")
            outside, inside = self.link(index), f"pv{self.tag}h{index}"[:15]
            self._run("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
            self._run("ip", "link", "set", inside, "netns", host)
            self._run("ip", "link", "set", outside, "netns", self.server_ns)
            self._in(self.server_ns, "ip", "link", "set", outside, "master", "br0", "up")
            self._in(host, "ip", "addr", "add", f"10.77.0.{10 + index}/24", "dev", inside)
            self._in(host, "ip", "link", "set", inside, "up")

    def link(self, index: int) -> str:
        """The server-side end of host ``index``'s veth pair: set it down to cut that host off."""
        return f"pv{self.tag}s{index}"[:15]

    @staticmethod
    def _run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True)

    def _in(self, ns: str, *args: str) -> None:
        self._run("ip", "netns", "exec", ns, *args)

    def set_link(self, index: int, up: bool) -> None:
        self._in(self.server_ns, "ip", "link", "set", self.link(index), "up" if up else "down")

    def close(self) -> None:
        for ns in [self.server_ns, *self.hosts]:
            subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def fake_query_server(servicer, tmp_path: Path):
    """A QueryService of the test's own (scripted or hostile answers) on loopback: (the grpc server, the
    client's connection options). The token is not checked."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    from perfctl.v1 import fleet_pb2_grpc as rpc

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    rpc.add_QueryServiceServicer_to_server(servicer, server)
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    server.start()
    token = tmp_path / "client.tok"
    token.write_text("not-checked")
    token.chmod(0o600)
    return server, ["--server", address, "--token-file", str(token)]


class Server:
    """A running `perfctl server` called directly with grpc stubs and the fleet's tokens (a client's, each
    agent's): how a test makes the calls a hostile or broken peer would."""

    def __init__(self, fleet: Fleet, address: str):
        self.fleet, self.address = fleet, address
        self.channel = grpc.insecure_channel(address)
        self.query, self.agent = rpc.QueryServiceStub(self.channel), rpc.AgentServiceStub(self.channel)
        self.client_md = self.metadata(fleet.client_token)

    @staticmethod
    def metadata(token_file: str) -> tuple:
        return (("authorization", f"Bearer {open(token_file).read().strip()}"),)

    def agent_md(self, name: str) -> tuple:
        return self.metadata(self.fleet.agent_token(name))

    def register(self, name: str) -> None:
        self.agent.Register(pb.RegisterRequest(machine=pb.MachineInfo(name=name, machine_id="m" * 32,
                                                                      inventory_json="{}")),
                            metadata=self.agent_md(name))

    def send(self, name: str, *samples: pb.Sample, sequence: int = 1) -> list[pb.Ack]:
        return list(self.agent.StreamSamples(iter([pb.SampleBatch(sequence=sequence, samples=samples)]),
                                             metadata=self.agent_md(name)))

    def db(self) -> str:
        return database_url(str(self.fleet.dir / "data"), None)


def start_server(fleet: Fleet, extra: list[str] = (), db_args: list[str] | None = None) -> Server:
    """A server on loopback that answers, with tokens for box-a..box-c; its database ``db_args``
    (server_database_args), by default SQLite in the fleet's directory."""
    address = f"127.0.0.1:{free_port()}"
    for name in ("box-a", "box-b", "box-c"):
        fleet.agent_token(name)  # tokens before the server reads the file
    fleet.start_server(address, db_args or ["--data-dir", str(fleet.dir / "data")], list(extra))
    server = Server(fleet, address)
    wait_for(lambda: answered(lambda: server.query.ListMachines(pb.ListMachinesRequest(),
                                                                     metadata=server.client_md, timeout=5)),
             60, "the server to answer")
    return server


def answered(call) -> bool:
    """Whether a gRPC call returned (any RpcError is False)."""
    try:
        call()
        return True
    except grpc.RpcError:
        return False


def raised(call) -> grpc.RpcError:
    """The RpcError a call must raise."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


MEGABYTE = "x" * (1 << 20)  # a text past every bound the server sets on a field


NUL = "a\x00b"  # a text holding NUL, which PostgreSQL refuses and SQLite takes


def fresh(sample: pb.Sample) -> pb.Sample:
    """A copy with a new uuid, so it is stored as a new run."""
    copy = pb.Sample()
    copy.CopyFrom(sample)
    copy.uuid = str(uuid.uuid4())
    return copy
