"""Text from outside shown literally (perfctl/text.py visible, cell): names from files, agents, other clients or
a hostile server, a benchmark's stderr and error lines, with ESC shown as ``\\x1b``, never interpreted by the
terminal or by rich, and line breaks that cannot forge rows."""

import json
import time
import uuid

import grpc
import pytest
from conftest import ESC, HOSTILE, HOSTILE_SHOWN, jsonl_file, one_line, perfctl, sample_of, sample_records
from fleet import fake_query_server, free_port, wait_for

from perfctl import wire
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc


def _assert_literal(text):
    """The hostile name shows as its escapes, and nothing of it reached the output raw."""
    assert HOSTILE_SHOWN in text, text
    assert ESC not in text and "\x07" not in text and "\u202e" not in text, repr(text)


def _first_column(table: str, index: int = 0) -> str:
    """A column of a rich table (the first: the benchmark), its folded lines joined back together without
    the spaces at which rich folded them."""
    rows = [line for line in table.splitlines() if line.startswith("│")]
    return "".join(row.split("│")[1 + index].replace(" ", "") for row in rows)


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_compare_shows_hostile_benchmark_names_literally(tmp_path, fmt):
    a = jsonl_file(tmp_path / "a.jsonl", sample_records(HOSTILE) + sample_records("plain"))
    b = jsonl_file(tmp_path / "b.jsonl", sample_records(HOSTILE, base=2000) + sample_records("other"))
    # wide enough that the name is not folded: this is about what is shown, not how it is laid out
    result = perfctl("compare", a, b, "--format", fmt, "--width", "250")
    assert result.returncode == 3, result.stderr  # instructions doubled: a relevant slowdown
    if fmt == "markdown":  # Markdown escapes the name's [ ] and \ too: it is literal once rendered
        from markdown_it import MarkdownIt

        rendered = MarkdownIt("commonmark").enable("table").render(result.stdout)
        assert f"<td>{HOSTILE_SHOWN}</td>" in rendered, rendered
    else:
        _assert_literal(result.stdout)  # compare's table is borderless and wide enough not to fold the name
    assert ESC not in result.stdout
    assert "Traceback" not in result.stderr
    if fmt == "markdown":
        row = next(line for line in result.stdout.splitlines() if line.startswith("| evil"))
        assert row.count(" | ") == 10  # eleven cells: nothing in the name forged a column or a row
    if fmt == "table":
        assert "only in A: plain; only in B: other" in result.stdout


def test_json_keeps_names_exact(tmp_path):
    """JSON escapes control characters itself: the name reads back unchanged."""
    a = jsonl_file(tmp_path / "a.jsonl", sample_records(HOSTILE))
    b = jsonl_file(tmp_path / "b.jsonl", sample_records(HOSTILE, base=2000))
    result = perfctl("compare", a, b, "--format", "json")
    assert ESC not in result.stdout and json.loads(result.stdout)["benchmarks"][0]["benchmark"] == HOSTILE


def test_error_lines_show_control_characters(tmp_path):
    result = perfctl("compare", str(tmp_path / "no\x1b[2Jfile.jsonl"), str(tmp_path / "b.jsonl"))
    line = one_line(result, "perfctl compare: ", code=2)
    assert "no\\x1b[2Jfile.jsonl" in line and ESC not in result.stderr


def test_stat_shows_a_failing_benchmarks_stderr_literally():
    script = "printf 'boom \\033[2J\\033]0;owned\\007[bold red]x[/]\\n' >&2; exit 1"
    result = perfctl("stat", "-r", "1", "-e", "task-clock", "--", "/bin/sh", "-c", script)
    assert result.returncode == 1, result.stderr
    assert "boom \\x1b[2J\\x1b]0;owned\\x07[bold red]x[/]" in result.stdout, result.stdout
    assert ESC not in result.stdout and "\x07" not in result.stdout


def test_listings_from_a_real_server_show_hostile_strings_literally(fleet):
    """A client submits a job whose argv carries a newline, a bidi override and markup; an agent registers
    with an inventory holding markup (the server refuses escapes there) and a markup event
    name, and sends samples of a benchmark whose name is markup. Every listing shows them literally.
    (The server refuses ESC in names and argv; the hostile-server test below covers those.)"""
    markup = "[bold red]b[/]|x"
    for name in ("box-a", "box-b"):
        fleet.agent_token(name)
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    wait_for(lambda: fleet.client("machines", "--json", server=server).returncode == 0, 60, "the server")
    agent = rpc.AgentServiceStub(grpc.insecure_channel(server))
    # the server refuses control characters in an inventory's names: what it accepts is markup and bidi-free
    # text that rich would still interpret
    inventory = {"cpu": {"vendor": "[bold red]v[/]", "family": 25, "model": 1}, "kernel": {"release": "6.1[blink]"},
                 "pmu": {"present": False}}
    for name in ("box-a", "box-b"):
        metadata = (("authorization", f"Bearer {open(fleet.agent_token(name)).read().strip()}"),)
        agent.Register(pb.RegisterRequest(machine=pb.MachineInfo(
            name=name, machine_id="0123456789abcdef", inventory_json=json.dumps(inventory), backends=["perf_event"],
            events=[pb.EventSupport(event="[bold red]ev[/]", supported=True)])), metadata=metadata)
        base = 1000 if name == "box-a" else 2000
        samples = [wire.sample_to_proto(sample_of({**record, "uuid": str(uuid.uuid4())}))
                   for record in sample_records(markup, base=base)]
        acks = list(agent.StreamSamples(iter([pb.SampleBatch(sequence=1, samples=samples)]), metadata=metadata))
        assert acks and acks[-1].sequence == 1

    argv = ["/bin/echo", "a\nforged", "\u202eab", "[bold red]x[/]"]
    submitted = fleet.client("submit", "--machines", "box-a", "--", *argv, server=server)
    assert submitted.returncode == 0, submitted.stderr
    jobs = fleet.client("jobs", "--width", "250", server=server)
    assert jobs.returncode == 0, jobs.stderr
    assert "/bin/echoa\\nforged\\u202eab[boldred]x[/]" in _first_column(jobs.stdout, 4), jobs.stdout
    assert "\u202e" not in jobs.stdout and "forged │" not in jobs.stdout
    assert json.loads(fleet.client("jobs", "--json", server=server).stdout)[0]["commands"] == [argv]

    machines = fleet.client("machines", "box-a", "--width", "250", server=server)  # the details of one machine
    assert machines.returncode == 0, machines.stderr
    shown = " ".join(machines.stdout.split())
    assert "[bold red]v[/]" in shown and "6.1[blink]" in shown and "[bold red]ev[/]" in shown, machines.stdout
    assert ESC not in machines.stdout and "\x07" not in machines.stdout

    for fmt in ("table", "markdown", "csv"):
        compare = fleet.client("compare", "box-a", "box-b", "--format", fmt, "--width", "250", server=server)
        assert compare.returncode == 3, compare.stderr
        assert {"table": "[bold red]b[/]|x  ", "markdown": "| \\[bold red\\]b\\[/\\]\\|x |",
                "csv": "[bold red]b[/]|x,"}[fmt] in compare.stdout, compare.stdout


class _HostileQueries(rpc.QueryServiceServicer):
    """A QueryService that answers with escapes everywhere: a compromised or older server, or a stored
    row that predates the server's checks. The client is the last line of defence of the terminal."""

    def ListMachines(self, request, context):
        malformed = [pb.MachineSummary(name=f"odd-{i}", machine_id="m", inventory_json=text) for i, text in enumerate(
            ('{"cpu": 5, "kernel": "x", "pmu": [1]}', '{"cpu": {"vendor": NaN}}', "[" * 100_000, "not json"))]
        return pb.ListMachinesResponse(machines=[pb.MachineSummary(
            name=HOSTILE, machine_id="m", inventory_json=json.dumps({"kernel": {"release": HOSTILE}}),
            backends=[HOSTILE], events=[pb.EventSupport(event=HOSTILE, supported=True)], audit_verdict=HOSTILE),
            *malformed])

    def GetAudits(self, request, context):
        good = {"audit_id": "a" * 8, "verdict": "trusted", "time_ns": time.time_ns(), "fit": None,
                "kernels": [{"kernel": HOSTILE, "backend": "dbi", "expected": 5, "exact": True}]}
        broken = [{**good, "kernels": 5}, {**good, "fit": {"a": 1, "b": 1, "a_interval": [1], "b_interval": 2}},
                  {**good, "time_ns": "now"}, [1, 2],
                  # counts whose squares overflow floats broke the fleet spread's standard deviation
                  {**good, "kernels": [{**good["kernels"][0], "kernel": "k", "expected": 10**200}]}]
        return pb.GetAuditsResponse(audits=[
            pb.AuditRecord(machine=HOSTILE, audit_id="1", report_json=json.dumps(good)),
            *(pb.AuditRecord(machine="box-b", audit_id=str(i), report_json=json.dumps(report))
              for i, report in enumerate(broken)),
            pb.AuditRecord(machine="box-b", audit_id="9", report_json="{" * 100_000)])

    def ListAudits(self, request, context):
        """The same reports as their own summaries: a server that digests nothing."""
        return pb.ListAuditsResponse(audits=[pb.AuditSummary(machine=r.machine, audit_id=r.audit_id,
                                                             digest_json=r.report_json)
                                             for r in self.GetAudits(request, context).audits])

    def GetAuditReport(self, request, context):
        return next(r for r in self.GetAudits(None, context).audits if r.audit_id == request.audit_id)

    def GetJobs(self, request, context):
        return pb.GetJobsResponse(jobs=[pb.JobStatus(
            job_id=HOSTILE, machine=HOSTILE, state=HOSTILE, message=HOSTILE,
            job=pb.Job(commands=[pb.Command(name="x", argv=["/bin/echo", HOSTILE])]))])

    def Compare(self, request, context):
        if request.a.machine == "broken":  # something that is not a comparison, naming a type to build
            return pb.CompareResponse(comparison_json=json.dumps({"type": f"os.system{HOSTILE}", "fields": {}}))
        return pb.CompareResponse(comparison_json=_hostile_comparison())

    def SubmitJob(self, request, context):
        return pb.SubmitJobResponse(job_ids=[HOSTILE])


def _hostile_comparison() -> str:
    """A real comparison whose benchmark, labels and notes are hostile text."""
    from perfctl import results
    from perfctl.analysis.compare import Parameters, compare
    from perfctl.pairing import CompareContext, Compared

    key = (HOSTILE, "task-clock")
    comparison = compare({key: [1.0, 1.1, 1.2, 1.0, 1.1]}, {key: [1.0, 1.1, 1.2, 1.0, 1.2]}, Parameters(),
                         {key: [HOSTILE]})
    context = CompareContext(HOSTILE, HOSTILE, "perfctl", ("task-clock",), HOSTILE, units={"task-clock": HOSTILE})
    return results.dumps(Compared(comparison, context, (HOSTILE,)))


@pytest.fixture
def hostile_server(tmp_path):
    server, connection = fake_query_server(_HostileQueries(), tmp_path)
    yield connection
    server.stop(grace=None)


@pytest.mark.parametrize("command", [["jobs"], ["machines"], ["compare", "box-a", "box-b", "--format", "csv"],
                                     ["compare", "broken", "box-b"], ["submit", "--machines", "box-a"],
                                     ["audit", "report"]])
def test_a_hostile_server_cannot_drive_the_terminal(hostile_server, command):
    submitted = ["--", "/bin/true"] if command[0] == "submit" else []
    args = [command[0], *hostile_server, *command[1:], "--width", "250", *submitted]
    result = perfctl(*args)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert ESC not in output and "\x07" not in output and "\u202e" not in output, repr(output)
    # shown, and literally: interpreted markup would leave the "x" alone, without "red]" and "[/]"
    assert "\\x1b[2J" in output and "red]x[/]" in output, output
    if command[1:2] == ["broken"]:
        one_line(result, "perfctl compare: ", code=2)
    else:
        assert result.returncode == 0, result.stderr
    if command == ["machines"]:  # inventories of the wrong shape show as '?', the listing goes on
        assert all(f"odd-{i}" in result.stdout for i in range(4)), result.stdout
    if command == ["audit", "report"]:  # reports of the wrong shape are set aside and counted
        assert "6 audit reports of machine box-b could not be read" in " ".join(result.stdout.split())
        for machines_json in (perfctl("machines", *hostile_server, "--json"),
                              perfctl("audit", "report", *hostile_server, "--json")):
            assert machines_json.returncode == 0, machines_json.stderr
            json.loads(machines_json.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    if command[0] == "compare" and result.returncode == 0:
        # rendered here from data: a name's line breaks cannot forge rows (a header and one row)
        assert len(result.stdout.splitlines()) == 2, result.stdout


@pytest.mark.parametrize("text, shown", [
    ("plain name-1.2_x", "plain name-1.2_x"),
    ("é 日本 ünïcode", "é 日本 ünïcode"),
    ("\x1b[2J", "\\x1b[2J"),
    ("a\tb\nc\rd", "a\\tb\\nc\\rd"),
    ("\x7f\x9b", "\\x7f\\x9b"),  # DEL, and C1 CSI (an escape sequence on its own in some terminals)
    ("\u202eevil\u2066", "\\u202eevil\\u2066"),  # bidi override and isolate
    ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
    ("\ud800", "\\ud800"),  # a lone surrogate: JSON can carry it, UTF-8 cannot encode it
    ("[bold red]x[/]", "[bold red]x[/]"),  # markup is text here; cell() keeps rich from reading it
])
def test_visible(text, shown):
    from perfctl.text import cell, visible

    assert visible(text) == shown
    assert cell(text).plain == shown and not cell(text).spans


def test_visible_lines_keeps_line_ends_and_escapes_the_rest():
    from perfctl.text import visible_lines

    assert visible_lines("a,\x1b\r\nb\rc\n\n") == "a,\\x1b\r\nb\\rc\n\n"
