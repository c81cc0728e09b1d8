"""Compare of machines on a server (issue 15): which runs each side takes (the most recent job per benchmark,
@job=, labels, time ranges, all history), benchmarks that mix executables, the comparison returned as data
and rendered by the client exactly as a comparison of files, the server's limit, and the migration that
gives stored runs their values. A real `perfctl server` on loopback with real SQLite, real samples of
/bin/true measured with software counters, the real CLI."""

import json
import re
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest
from alembic import command
from alembic.config import Config
from conftest import measure
from fleet import perfctl_command, start_server
from sqlalchemy import create_engine

from perfctl import results, wire
from perfctl.pairing import Compared
from perfctl.server import migrations
from perfctl.server.storage import Storage
from perfctl.v1 import fleet_pb2 as pb

EVENTS = ["page-faults", "task-clock"]


@pytest.fixture(scope="module")
def runs():
    """Real samples of /bin/true: three sets of 8 runs."""
    return [measure(["/bin/true"], EVENTS, runs=8) for _ in range(3)]


def stamped(samples, *, start_ns: int, job_id: str | None = None, labels: dict | None = None,
            sha: str | None = None) -> list[pb.Sample]:
    """Wire copies of real samples as runs of a job, with labels, started from ``start_ns`` on."""
    out = []
    for index, sample in enumerate(samples):
        message = wire.sample_to_proto(sample)
        message.uuid = str(uuid.uuid4())
        message.start_time_ns = start_ns + index * 1000
        if job_id:
            message.job_id = job_id
        message.labels.clear()
        message.labels.update(labels or {})
        if sha:
            message.benchmark.executable_sha256 = sha
        out.append(message)
    return out


def job(server, machine: str) -> str:
    request = pb.SubmitJobRequest(machines=[machine], job=pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])],
                                                                   repetitions=8))
    return server.query.SubmitJob(request, metadata=server.client_md).job_ids[0]


def cli(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(perfctl_command(*args, "--server", server.address, "--token-file",
                                          server.fleet.client_token),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def server(module_fleet, runs):
    """box-a: job 1 (8 runs, commit=abc), then job 2 (8 runs, commit=def, another executable); box-b: one
    job (commit=abc). box-c: runs labelled only, without a job."""
    running = start_server(module_fleet)
    for name in ("box-a", "box-b", "box-c"):
        running.register(name)
    now = time.time_ns()
    running.jobs = {"a1": job(running, "box-a"), "a2": job(running, "box-a"), "b1": job(running, "box-b")}
    running.send("box-a", *stamped(runs[0], start_ns=now - 10**12, job_id=running.jobs["a1"],
                                   labels={"commit": "abc"}))
    running.sent = {"a2": stamped(runs[1], start_ns=now - 10**9, job_id=running.jobs["a2"],
                                  labels={"commit": "def"}, sha="f" * 64),
                    "b1": stamped(runs[2], start_ns=now - 10**9 + 500, job_id=running.jobs["b1"],
                                  labels={"commit": "abc"})}
    running.send("box-a", *running.sent["a2"], sequence=2)
    running.send("box-b", *running.sent["b1"])
    running.send("box-c", *stamped(runs[2], start_ns=now - 10**9, labels={"commit": "abc"}))
    running.start = now
    yield running


def compared(server, a: str, b: str, *extra: str) -> dict:
    result = cli(server, "compare", a, b, "--metric", "task-clock", "--format", "json", *extra)
    assert result.returncode in (0, 3, 4), result.stderr
    return json.loads(result.stdout)


def test_by_default_each_side_takes_the_most_recent_job_of_each_benchmark(server):
    document = compared(server, "box-a", "box-b")
    (row,) = document["benchmarks"]
    assert (row["n_a"], row["n_b"]) == (8, 8)  # job 2 of box-a only, never its whole history
    assert document["a"] == "machine box-a" and document["b"] == "machine box-b"


def test_a_job_a_label_or_the_whole_history(server):
    jobs = server.jobs
    assert compared(server, f"box-a@job={jobs['a1']}", "box-b")["benchmarks"][0]["n_a"] == 8
    # the CI case: one machine, two commits
    document = compared(server, "box-a@commit=abc", "box-a@commit=def")
    assert [(r["n_a"], r["n_b"]) for r in document["benchmarks"]] == [(8, 8)]
    assert "box-a@commit=abc" in document["statement"][0] and "box-a@commit=def" in document["statement"][0]
    # all history: job 1 and job 2 mix two executables under one name, so the benchmark is left out ...
    result = cli(server, "compare", "box-a", "box-b", "--all-history", "--metric", "task-clock")
    assert result.returncode == 2, result.stdout
    assert "machine box-a: no benchmark to compare: true: left out: its runs mix 2 executables" in result.stderr
    # ... unless pooled, and the note says what was pooled
    document = compared(server, "box-a", "box-b", "--all-history", "--pool")
    assert document["benchmarks"][0]["n_a"] == 16
    assert any("pooled runs that mix 2 executables" in note for note in document["notes"]), document["notes"]


def test_a_time_range_selects_by_start_time(server):
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(server.start / 1e9 - 100))
    document = compared(server, "box-a", "box-b", "--all-history", "--since", since)
    assert document["benchmarks"][0]["n_a"] == 8  # job 1 started 1000 s before
    result = cli(server, "compare", "box-a", "box-b", "--until", "1970-01-02")
    assert result.returncode == 2 and "has no measured runs selected" in result.stderr


def test_runs_without_a_job_are_one_group(server):
    document = compared(server, "box-c@commit=abc", "box-b")
    assert document["benchmarks"][0]["n_a"] == 8


def test_mixed_executables_are_named_and_left_out_unless_pooled(server):
    result = cli(server, "compare", "box-a", "box-b", "--all-history")
    said = " ".join(result.stderr.split())
    assert "true: left out: its runs mix 2 executables (sha256 " in said and "sha256 ffffffffffff: 8 runs" in said, said
    assert "compare one of them (on a server: @job=ID or a label) or pool them with --pool" in said


def test_the_server_returns_data_the_client_renders_as_for_files(server, tmp_path):
    """--format json from the server equals file compare's JSON on the same samples."""
    paths = []
    for name in ("a2", "b1"):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(wire.proto_to_dict(m)) + "\n" for m in server.sent[name]))
        paths.append(str(path))
    from_files = json.loads(subprocess.run(perfctl_command("compare", *paths, "--format", "json"),
                                           capture_output=True, text=True, check=False).stdout)
    from_server = compared(server, "box-a", "box-b")
    from_files_again = json.loads(subprocess.run(perfctl_command("compare", *paths, "--format", "json", "--metric",
                                                                 "task-clock"), capture_output=True, text=True).stdout)
    assert from_files["metrics"] == ["task-clock"]  # the default metric of these runs: no PMU here

    def comparable(document):
        kept = {k: v for k, v in document.items() if k not in ("a", "b", "statement", "notes")}
        # the server adds each machine's audit warning; everything else is said alike
        return kept, [n for n in document["notes"] if "audit" not in n]

    assert comparable(from_server) == comparable(from_files_again)
    # every other format renders from the same data
    for fmt in ("table", "csv", "markdown"):
        result = cli(server, "compare", "box-a", "box-b", "--format", fmt)
        assert result.returncode in (0, 3, 4) and "true" in result.stdout, result.stderr


def test_the_compare_rpc_answers_with_a_comparison_not_text(server):
    response = server.query.Compare(pb.CompareRequest(a=pb.Selection(machine="box-a"), b=pb.Selection(machine="box-b"),
                                                      metrics=["page-faults"]), metadata=server.client_md)
    result = results.loads(response.comparison_json, Compared)
    assert result.comparison.benchmarks[0].benchmark == "true"
    assert result.context.metrics == ("page-faults",)


def test_a_selection_over_the_servers_limit_is_refused_with_the_limit_named(fleet, runs):
    small = start_server(fleet, ["--max-compare-runs", "6"])
    small.register("box-a")
    small.send("box-a", *stamped(runs[0], start_ns=time.time_ns(), labels={"commit": "abc"}))
    with pytest.raises(grpc.RpcError) as caught:
        small.query.Compare(pb.CompareRequest(a=pb.Selection(machine="box-a"),
                                              b=pb.Selection(machine="box-a", labels={"commit": "abc"})),
                            metadata=small.client_md)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "box-a selects more than 6 runs, the most this server compares (perfctl server --max-compare-runs)" \
        in caught.value.details()
    result = cli(small, "compare", "box-a", "box-a@commit=abc")
    assert result.returncode == 2 and "RESOURCE_EXHAUSTED" in result.stderr


def test_unknown_machine_and_bad_selectors_are_one_line_errors(server):
    for args, said in ((("compare", "box-z", "box-b"), "no machine named 'box-z'"),
                       (("compare", "box-a@", "box-b"), "expected MACHINE"),
                       (("compare", "box-a@commit", "box-b"), "expected KEY=VALUE"),
                       (("compare", "box-a@job=nope", "box-b"), "job"),
                       (("compare", "box-a", "box-b", "--since", "yesterday"), "neither a date")):
        result = cli(server, *args)
        assert result.returncode == 2, (args, result.stdout)
        assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)


def test_benchmarks_lists_identity_jobs_labels_and_time_range(server):
    listed = server.query.ListBenchmarks(pb.ListBenchmarksRequest(machine="box-a"), metadata=server.client_md)
    assert [(b.name, b.runs, b.jobs, b.executable_sha256[:4]) for b in listed.benchmarks] == \
        [("true", 8, 1, b.executable_sha256[:4]) for b in listed.benchmarks]
    assert {tuple(b.labels) for b in listed.benchmarks} == {("commit=abc",), ("commit=def",)}
    assert all(b.first_ns <= b.last_ns for b in listed.benchmarks)
    everything = server.query.ListBenchmarks(pb.ListBenchmarksRequest(), metadata=server.client_md)
    assert {b.machine for b in everything.benchmarks} == {"box-a", "box-b", "box-c"}


def test_get_samples_of_a_selection_are_the_runs_compare_takes(server):
    selected = list(server.query.GetSamples(pb.GetSamplesRequest(selection=pb.Selection(machine="box-a")),
                                            metadata=server.client_md))
    assert len(selected) == 8 and {s.job_id for s in selected} == {server.jobs["a2"]}


def test_the_migration_gives_stored_runs_their_values(tmp_path, runs):
    """A database of revision 0003 with stored samples, upgraded: every run gets values, shape and context,
    and compares as a run stored today."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
    samples = [wire.sample_to_proto(s) for s in runs[0]]
    with sqlite3.connect(tmp_path / "old.db") as conn:
        conn.execute("INSERT INTO machines (name, machine_id, inventory, backends, events, agent_version, "
                     "first_seen_ns, last_heard_ns) VALUES ('old', 'm', ?, '[]', '[]', '0', 0, 0)",
                     (json.dumps({"kernel": {"release": "6.1.0-test", "version": "#1"}}),))
        conn.execute("INSERT INTO benchmarks (name, executable_sha256, input_digest, argv, executable) "
                     "VALUES ('true', ?, ?, ?, '/bin/true')", (samples[0].benchmark.executable_sha256,
                                                               samples[0].benchmark.input_digest,
                                                               json.dumps(list(samples[0].benchmark.argv))))
        for sample in samples:
            conn.execute("INSERT INTO samples (uuid, machine, benchmark, job_id, run_index, warmup, outcome, "
                         "start_time_ns, received_ns, payload) VALUES (?, 1, 1, NULL, ?, 0, 'ok', ?, 0, ?)",
                         (sample.uuid, sample.run_index, sample.start_time_ns, sample.SerializeToString()))
        conn.execute("INSERT INTO samples (uuid, machine, benchmark, job_id, run_index, warmup, outcome, "
                     "start_time_ns, received_ns, payload) VALUES ('garbled', 1, 1, NULL, 0, 0, 'ok', 0, 0, x'ffff')")
    engine.dispose()
    storage = Storage(url)  # upgrades to head
    try:
        with sqlite3.connect(tmp_path / "old.db") as conn:
            filled = conn.execute("SELECT count(*) FROM samples WHERE vals IS NOT NULL").fetchone()[0]
            kernels = conn.execute("SELECT kernel FROM contexts").fetchall()
        assert filled == len(samples) and kernels == [("6.1.0-test",)]
        from perfctl.server.selection import Selector

        dataset = Selector(storage).dataset(pb.Selection(machine="old"))
        assert len(dataset.benchmarks["true"].metrics["task-clock"]) == len(samples)
        assert any("1 stored samples of machine old could not be used" in n for n in dataset.notes)
    finally:
        storage.close()


def test_the_server_imports_neither_rich_nor_the_clients_report_code():
    """The server returns data (issue 15): nothing of the CLI's rendering is loaded into it, nor the file
    formats (its Datasets are the common model's, perfctl/dataset.py)."""
    probe = subprocess.run([sys.executable, "-c", "import sys, perfctl.server.service, perfctl.server.storage\n"
                            "print(sorted({m.split('.')[0] if m.startswith('rich') else m for m in sys.modules if\n"
                            "  m.startswith(('rich', 'perfctl.report', 'perfctl.cli', 'perfctl.formats'))}))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "[]", probe.stdout


def test_the_html_report_draws_the_runs_of_the_same_selection(server, tmp_path):
    page = tmp_path / "report.html"
    result = cli(server, "report", "box-a@commit=abc", "box-b", "-o", str(page), "--metric", "task-clock")
    assert result.returncode in (0, 3, 4), result.stderr
    text = page.read_text()
    assert "machine box-a@commit=abc" in text
    row = text[text.index('data-benchmark="true"'):]
    row = row[:row.index("</tr>")]
    # job 1's runs of A, and B's
    assert re.search(r'data-field="n_a"[^>]*>8</td>', row) and re.search(r'data-field="n_b"[^>]*>8</td>', row), row


def test_a_file_that_mixes_executables_under_one_name_is_not_pooled_unless_asked(server, tmp_path):
    """The same rule for files: two builds under one name are two programs."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(wire.proto_to_dict(m)) + "\n" for m in server.sent["a2"]) +
                     "".join(json.dumps(wire.proto_to_dict(m)) + "\n" for m in server.sent["b1"]))
    other = tmp_path / "b.jsonl"  # b1's runs again under other uuids: a run on both sides would leave A
    other.write_text("".join(json.dumps({**wire.proto_to_dict(m), "uuid": str(uuid.uuid4())}) + "\n"
                             for m in server.sent["b1"]))
    result = subprocess.run(perfctl_command("compare", str(mixed), str(other)), capture_output=True, text=True)
    assert result.returncode == 2 and "no benchmark to compare: true: left out: its runs mix 2 executables" \
        in result.stderr, result.stderr
    pooled = subprocess.run(perfctl_command("compare", str(mixed), str(other), "--pool", "--format", "json"),
                            capture_output=True, text=True)
    document = json.loads(pooled.stdout)
    assert document["benchmarks"][0]["n_a"] == 16
    assert any("pooled runs that mix 2 executables" in note for note in document["notes"]), document["notes"]


def test_a_hostile_answer_is_refused_field_by_field(tmp_path):
    """The client rebuilds analysis dataclasses from a server's JSON: every field must have its type, so a
    table never meets a string where it formats a number (a hostile or broken server)."""
    from perfctl.analysis.compare import Parameters
    from perfctl.pairing import compared as compare_datasets

    runs = tmp_path / "a.jsonl"
    result = subprocess.run(perfctl_command("stat", "-r", "3", "-e", "task-clock", "-o", str(runs), "--",
                                            "/bin/true"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    from perfctl.formats import read_dataset

    good = results.dumps(compare_datasets(read_dataset(str(runs)), read_dataset(str(runs)), None, Parameters(),
                                          ("a", "b")))
    assert results.loads(good, Compared).comparison.benchmarks[0].n_a == 3
    for key, value, said in (("median_a", 10**400, "int where float | None belongs"),
                             ("median_a", "x", "str where float | None belongs"),
                             ("n_a", 1.5, "float where <class 'int'> belongs"),
                             ("warnings", [None], "tuple where tuple[str, ...] belongs"),
                             ("sparc", {"enum": "verdicts.Relevance", "name": [1]}, "unknown enum")):
        document = json.loads(good)
        document["fields"]["comparison"]["fields"]["benchmarks"][0]["fields"][key] = value
        with pytest.raises(results.ResultError, match=re.escape(said)):
            results.loads(json.dumps(document), Compared)


def test_verdicts_travel_in_the_forms_older_clients_read():
    """One Verdict enum (analysis/verdicts.py) on the wire as the three vocabularies it replaced: SPARC's
    relevance tagged verdicts.Relevance, a protocol's one-way verdict speedup_test.Verdict, a protocol run
    both ways its words; an older server's answer reads back as the same Verdicts."""
    from perfctl.analysis.compare import Comparison, compare
    from perfctl.analysis.verdicts import Verdict

    text = results.dumps(compare({("x", "wall-time"): [100 + i % 7 for i in range(20)]},
                                 {("x", "wall-time"): [120 + i % 5 for i in range(20)]}))
    for form in ('"relevance":{"enum":"verdicts.Relevance","name":"RELEVANT"}',
                 '"verdict":{"enum":"speedup_test.Verdict","name":"NOT_SIGNIFICANT"}', '"verdict":"B slower"'):
        assert form in text
    row = results.loads(text, Comparison).benchmarks[0]
    assert (row.verdict, row.median_protocol.verdict, row.median_protocol.result.verdict) == \
        (Verdict.RELEVANT, Verdict.SLOWER, Verdict.NOT_SIGNIFICANT)
    with pytest.raises(results.ResultError, match="unknown verdict 'B sideways'"):
        results.loads(text.replace('"verdict":"B slower"', '"verdict":"B sideways"'), Comparison)


def test_times_outside_what_runs_have_and_commas_in_label_values():
    from perfctl.cli.compare import instant, selection

    for text in ("9999-12-31", "2262-04-12", "99999999999d", "106752d"):
        with pytest.raises(Exception, match="outside the times runs have"):
            instant(text)

    class Args:
        since = until = 0
        all_history = False

    assert dict(selection("box-a@k=a,b", Args, "perfctl compare").labels) == {"k": "a,b"}
    assert dict(selection("box-a@k=a,b=c", Args, "perfctl compare").labels) == {"k": "a", "b": "c"}
    assert selection("box-a@job=j,commit=1", Args, "perfctl compare").job_id == "j"


def test_a_risk_too_small_to_state_is_refused():
    from perfctl.analysis.compare import Parameters

    for kwargs, said in (({"alpha": 5e-324}, "alpha: must be at least 1e-12"),
                         ({"confidence": 0.9999999999999999}, "confidence: must be at most 1 - 1e-12")):
        with pytest.raises(ValueError, match=re.escape(said)):
            Parameters(**kwargs).validate()
    Parameters(alpha=1e-12, confidence=1 - 1e-12).validate()


def test_stored_runs_are_compared_in_start_order_on_both_databases(database_url, runs):
    """The database concatenates a series' runs in an order of its own (neither is asked to sort: see
    Storage.grouped_values); the Selector puts them in start order, with two shapes in one series (a run
    that counted one event less) and runs stored out of order, on SQLite and on PostgreSQL."""
    from perfctl.server.decode import row_fields
    from perfctl.server.selection import Selector

    storage = Storage(database_url)
    try:
        storage.register(pb.MachineInfo(name="box-a", machine_id="id-a"), 1)
        job_id = str(uuid.uuid4())
        samples = stamped(runs[0] + runs[1], start_ns=10**15, job_id=job_id)
        for index, sample in enumerate(samples):
            sample.wall_ns = 1000 + index
            if index % 3 == 1:  # another shape: task-clock not counted
                del sample.readings[[r.event for r in sample.readings].index("task-clock")]
        stored_order = list(range(len(samples)))
        random_order = [5, 12, 0, 15, 3, 9, 1, 14, 7, 2, 11, 4, 13, 6, 10, 8]
        for batch in (random_order[:8], random_order[8:]):
            storage.ingest_many([("box-a", [row_fields(samples[i]) for i in batch],
                                  [samples[i].SerializeToString() for i in batch])])
        sent = storage.grouped_values
        widths = {pk: 8 * (len(spec) + 1) for pk, spec in storage.shapes().items()}

        def reversed_series(**where):  # as a database that concatenates in another order would send them
            for benchmark, job, context, count, vals, shapes, starts, indexes in sent(**where):
                ends = np.cumsum([widths[int(shape)] for shape in shapes])
                pieces = [vals[end - widths[int(shape)]:end] for shape, end in zip(shapes, ends)]
                yield (benchmark, job, context, count, b"".join(pieces[::-1]), shapes[::-1], starts[::-1],
                       None if indexes is None else indexes[::-1])

        for read in (sent, reversed_series):
            storage.grouped_values = read
            dataset = Selector(storage).dataset(pb.Selection(machine="box-a", all_history=True))
            bench = dataset.benchmarks[samples[0].benchmark.name]
            assert list(bench.metrics["wall-time"]) == [1000.0 + i for i in stored_order]
            with_clock = [float(s.readings[[r.event for r in s.readings].index("task-clock")].value)
                          for s in samples if "task-clock" in [r.event for r in s.readings]]
            assert list(bench.metrics["task-clock"]) == with_clock
            assert (bench.first_ns, bench.last_ns) == (10**15, 10**15 + 15 * 1000)
        storage.grouped_values = sent
        # --paired: each run's run_index comes with it, in the same order as its values
        paired = Selector(storage, paired=True).dataset(pb.Selection(machine="box-a", all_history=True))
        keys = paired.benchmarks[samples[0].benchmark.name].keys
        assert list(keys["wall-time"]) == [s.run_index for s in samples]
        assert list(keys["task-clock"]) == [s.run_index for i, s in enumerate(samples) if i % 3 != 1]
    finally:
        storage.close()


def test_paired_runs_on_a_server_keep_their_true_partners_when_runs_fail(fleet, runs):
    """--paired on two machines' stored runs pairs each run with the other side's run of the same run_index
    (issue 28): box-a's run 3 and box-b's run 15 failed, and the machine drifts 5% a round, so pairing by
    place in the lists would pair runs 3-14 with the next round's partner. Real server, real SQLite, real
    samples of /bin/true with their wall times set to the drift."""
    running = start_server(fleet)
    for name in ("box-a", "box-b"):
        running.register(name)
    samples = runs[0] + runs[1] + runs[2][:4]  # 20 rounds
    for machine, failed, scale in (("box-a", 3, 1.03), ("box-b", 15, 1.0)):
        sent = stamped(samples, start_ns=time.time_ns() - 10**10 + (machine == "box-b") * 500,
                       job_id=job(running, machine))
        for index, message in enumerate(sent):
            message.run_index = index
            message.wall_ns = round(10**7 * (1 + 0.05 * index) * scale)
            if index == failed:
                message.outcome, message.exit_status = "failed", 1
        running.send(machine, *sent)
    result = cli(running, "compare", "box-a", "box-b", "--paired", "--metric", "wall-time", "--format", "json")
    assert result.returncode in (0, 3), result.stderr
    document = json.loads(result.stdout)
    (row,) = document["benchmarks"]
    assert (row["n_a"], row["n_b"]) == (18, 18)  # each failed run leaves its partner out
    assert row["ratio_low"] == pytest.approx(1.03, abs=1e-6) and row["ratio_high"] == pytest.approx(1.03, abs=1e-6)
    assert "paired by round (run index): 18 pairs" in row["warnings"], row["warnings"]


def test_the_same_selection_on_both_sides_is_refused(server):
    """A machine's runs compared with themselves (box-a@job=J box-a@job=J) would read as equivalence: refused
    in one line, as the same file on both sides is."""
    job_id = server.jobs["a2"]
    result = cli(server, "compare", f"box-a@job={job_id}", f"box-a@job={job_id}")
    assert result.returncode == 2, result.stdout
    assert "A and B select the same runs" in result.stderr and len(result.stderr.strip().splitlines()) == 1
