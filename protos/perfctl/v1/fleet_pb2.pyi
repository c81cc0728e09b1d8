from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventSupport(_message.Message):
    __slots__ = ("event", "supported", "reason")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    event: str
    supported: bool
    reason: str
    def __init__(self, event: _Optional[str] = ..., supported: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class MachineInfo(_message.Message):
    __slots__ = ("name", "machine_id", "inventory_json", "backends", "events", "agent_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_JSON_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    machine_id: str
    inventory_json: str
    backends: _containers.RepeatedScalarFieldContainer[str]
    events: _containers.RepeatedCompositeFieldContainer[EventSupport]
    agent_version: str
    def __init__(self, name: _Optional[str] = ..., machine_id: _Optional[str] = ..., inventory_json: _Optional[str] = ..., backends: _Optional[_Iterable[str]] = ..., events: _Optional[_Iterable[_Union[EventSupport, _Mapping]]] = ..., agent_version: _Optional[str] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("machine",)
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    machine: MachineInfo
    def __init__(self, machine: _Optional[_Union[MachineInfo, _Mapping]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("heartbeat_seconds", "max_batch_samples")
    HEARTBEAT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    heartbeat_seconds: int
    max_batch_samples: int
    def __init__(self, heartbeat_seconds: _Optional[int] = ..., max_batch_samples: _Optional[int] = ...) -> None: ...

class Benchmark(_message.Message):
    __slots__ = ("name", "argv", "executable", "executable_sha256", "input_digest")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_SHA256_FIELD_NUMBER: _ClassVar[int]
    INPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    name: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    executable: str
    executable_sha256: str
    input_digest: str
    def __init__(self, name: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., executable: _Optional[str] = ..., executable_sha256: _Optional[str] = ..., input_digest: _Optional[str] = ...) -> None: ...

class Environment(_message.Message):
    __slots__ = ("aslr_off", "env_bytes", "pinned_cpu", "user", "cwd")
    ASLR_OFF_FIELD_NUMBER: _ClassVar[int]
    ENV_BYTES_FIELD_NUMBER: _ClassVar[int]
    PINNED_CPU_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    aslr_off: bool
    env_bytes: int
    pinned_cpu: int
    user: str
    cwd: str
    def __init__(self, aslr_off: _Optional[bool] = ..., env_bytes: _Optional[int] = ..., pinned_cpu: _Optional[int] = ..., user: _Optional[str] = ..., cwd: _Optional[str] = ...) -> None: ...

class Reading(_message.Message):
    __slots__ = ("event", "backend", "scope", "status", "unit", "value", "time_enabled", "time_running", "scaled", "reason", "source", "corrected", "correction_model", "audit_id")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIME_ENABLED_FIELD_NUMBER: _ClassVar[int]
    TIME_RUNNING_FIELD_NUMBER: _ClassVar[int]
    SCALED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CORRECTED_FIELD_NUMBER: _ClassVar[int]
    CORRECTION_MODEL_FIELD_NUMBER: _ClassVar[int]
    AUDIT_ID_FIELD_NUMBER: _ClassVar[int]
    event: str
    backend: str
    scope: str
    status: str
    unit: str
    value: int
    time_enabled: int
    time_running: int
    scaled: float
    reason: str
    source: str
    corrected: float
    correction_model: str
    audit_id: str
    def __init__(self, event: _Optional[str] = ..., backend: _Optional[str] = ..., scope: _Optional[str] = ..., status: _Optional[str] = ..., unit: _Optional[str] = ..., value: _Optional[int] = ..., time_enabled: _Optional[int] = ..., time_running: _Optional[int] = ..., scaled: _Optional[float] = ..., reason: _Optional[str] = ..., source: _Optional[str] = ..., corrected: _Optional[float] = ..., correction_model: _Optional[str] = ..., audit_id: _Optional[str] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("uuid", "machine_id", "benchmark", "job_id", "run_index", "warmup", "start_time_ns", "wall_ns", "outcome", "exit_status", "signal", "environment", "readings", "backends", "stderr_tail", "max_rss_kib", "schema_version", "outlived", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    UUID_FIELD_NUMBER: _ClassVar[int]
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_INDEX_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    START_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    WALL_NS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    EXIT_STATUS_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    READINGS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    STDERR_TAIL_FIELD_NUMBER: _ClassVar[int]
    MAX_RSS_KIB_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    OUTLIVED_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    machine_id: str
    benchmark: Benchmark
    job_id: str
    run_index: int
    warmup: bool
    start_time_ns: int
    wall_ns: int
    outcome: str
    exit_status: int
    signal: int
    environment: Environment
    readings: _containers.RepeatedCompositeFieldContainer[Reading]
    backends: _containers.RepeatedScalarFieldContainer[str]
    stderr_tail: str
    max_rss_kib: int
    schema_version: int
    outlived: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, uuid: _Optional[str] = ..., machine_id: _Optional[str] = ..., benchmark: _Optional[_Union[Benchmark, _Mapping]] = ..., job_id: _Optional[str] = ..., run_index: _Optional[int] = ..., warmup: _Optional[bool] = ..., start_time_ns: _Optional[int] = ..., wall_ns: _Optional[int] = ..., outcome: _Optional[str] = ..., exit_status: _Optional[int] = ..., signal: _Optional[int] = ..., environment: _Optional[_Union[Environment, _Mapping]] = ..., readings: _Optional[_Iterable[_Union[Reading, _Mapping]]] = ..., backends: _Optional[_Iterable[str]] = ..., stderr_tail: _Optional[str] = ..., max_rss_kib: _Optional[int] = ..., schema_version: _Optional[int] = ..., outlived: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SampleBatch(_message.Message):
    __slots__ = ("sequence", "samples")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    def __init__(self, sequence: _Optional[int] = ..., samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("sequence", "stored", "duplicates")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    stored: int
    duplicates: int
    def __init__(self, sequence: _Optional[int] = ..., stored: _Optional[int] = ..., duplicates: _Optional[int] = ...) -> None: ...

class RefusedBatch(_message.Message):
    __slots__ = ("sequence",)
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("state", "job_id", "held_job_ids", "agent_time_ns")
    STATE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    HELD_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    AGENT_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    state: str
    job_id: str
    held_job_ids: _containers.RepeatedScalarFieldContainer[str]
    agent_time_ns: int
    def __init__(self, state: _Optional[str] = ..., job_id: _Optional[str] = ..., held_job_ids: _Optional[_Iterable[str]] = ..., agent_time_ns: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Command(_message.Message):
    __slots__ = ("name", "argv")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    name: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "commands", "repetitions", "warmups", "events", "backend", "timeout_seconds", "labels", "sequential", "stored_runs", "prepare", "setup", "cleanup")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    REPETITIONS_FIELD_NUMBER: _ClassVar[int]
    WARMUPS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    STORED_RUNS_FIELD_NUMBER: _ClassVar[int]
    PREPARE_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    commands: _containers.RepeatedCompositeFieldContainer[Command]
    repetitions: int
    warmups: int
    events: _containers.RepeatedScalarFieldContainer[str]
    backend: str
    timeout_seconds: float
    labels: _containers.ScalarMap[str, str]
    sequential: Sequential
    stored_runs: _containers.RepeatedScalarFieldContainer[int]
    prepare: _containers.RepeatedScalarFieldContainer[str]
    setup: _containers.RepeatedScalarFieldContainer[str]
    cleanup: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., commands: _Optional[_Iterable[_Union[Command, _Mapping]]] = ..., repetitions: _Optional[int] = ..., warmups: _Optional[int] = ..., events: _Optional[_Iterable[str]] = ..., backend: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., labels: _Optional[_Mapping[str, str]] = ..., sequential: _Optional[_Union[Sequential, _Mapping]] = ..., stored_runs: _Optional[_Iterable[int]] = ..., prepare: _Optional[_Iterable[str]] = ..., setup: _Optional[_Iterable[str]] = ..., cleanup: _Optional[_Iterable[str]] = ...) -> None: ...

class Sequential(_message.Message):
    __slots__ = ("margin", "confidence", "metric", "min_rounds")
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MIN_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    margin: float
    confidence: float
    metric: str
    min_rounds: int
    def __init__(self, margin: _Optional[float] = ..., confidence: _Optional[float] = ..., metric: _Optional[str] = ..., min_rounds: _Optional[int] = ...) -> None: ...

class WatchJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobReport(_message.Message):
    __slots__ = ("job_id", "state", "message", "samples")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: str
    message: str
    samples: int
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., samples: _Optional[int] = ...) -> None: ...

class ReportJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AuditReport(_message.Message):
    __slots__ = ("audit_id", "report_json")
    AUDIT_ID_FIELD_NUMBER: _ClassVar[int]
    REPORT_JSON_FIELD_NUMBER: _ClassVar[int]
    audit_id: str
    report_json: str
    def __init__(self, audit_id: _Optional[str] = ..., report_json: _Optional[str] = ...) -> None: ...

class ReportAuditResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MachineSummary(_message.Message):
    __slots__ = ("name", "machine_id", "inventory_json", "backends", "events", "last_heard_ns", "connected", "samples", "audit_verdict", "audit_time_ns", "clock_skew_ns", "clock_ahead_runs", "retired_ns")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_JSON_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARD_NS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    AUDIT_VERDICT_FIELD_NUMBER: _ClassVar[int]
    AUDIT_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_SKEW_NS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_AHEAD_RUNS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_NS_FIELD_NUMBER: _ClassVar[int]
    name: str
    machine_id: str
    inventory_json: str
    backends: _containers.RepeatedScalarFieldContainer[str]
    events: _containers.RepeatedCompositeFieldContainer[EventSupport]
    last_heard_ns: int
    connected: bool
    samples: int
    audit_verdict: str
    audit_time_ns: int
    clock_skew_ns: int
    clock_ahead_runs: int
    retired_ns: int
    def __init__(self, name: _Optional[str] = ..., machine_id: _Optional[str] = ..., inventory_json: _Optional[str] = ..., backends: _Optional[_Iterable[str]] = ..., events: _Optional[_Iterable[_Union[EventSupport, _Mapping]]] = ..., last_heard_ns: _Optional[int] = ..., connected: _Optional[bool] = ..., samples: _Optional[int] = ..., audit_verdict: _Optional[str] = ..., audit_time_ns: _Optional[int] = ..., clock_skew_ns: _Optional[int] = ..., clock_ahead_runs: _Optional[int] = ..., retired_ns: _Optional[int] = ...) -> None: ...

class ListMachinesRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "name")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    name: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListMachinesResponse(_message.Message):
    __slots__ = ("machines", "next_page_token")
    MACHINES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    machines: _containers.RepeatedCompositeFieldContainer[MachineSummary]
    next_page_token: str
    def __init__(self, machines: _Optional[_Iterable[_Union[MachineSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RetireMachineRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RetireMachineResponse(_message.Message):
    __slots__ = ("machine",)
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    machine: MachineSummary
    def __init__(self, machine: _Optional[_Union[MachineSummary, _Mapping]] = ...) -> None: ...

class BenchmarkSummary(_message.Message):
    __slots__ = ("machine", "name", "runs", "executable_sha256", "input_digest", "argv", "jobs", "labels", "first_ns", "last_ns", "labels_left_out")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_SHA256_FIELD_NUMBER: _ClassVar[int]
    INPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    FIRST_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_NS_FIELD_NUMBER: _ClassVar[int]
    LABELS_LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    machine: str
    name: str
    runs: int
    executable_sha256: str
    input_digest: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    jobs: int
    labels: _containers.RepeatedScalarFieldContainer[str]
    first_ns: int
    last_ns: int
    labels_left_out: int
    def __init__(self, machine: _Optional[str] = ..., name: _Optional[str] = ..., runs: _Optional[int] = ..., executable_sha256: _Optional[str] = ..., input_digest: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., jobs: _Optional[int] = ..., labels: _Optional[_Iterable[str]] = ..., first_ns: _Optional[int] = ..., last_ns: _Optional[int] = ..., labels_left_out: _Optional[int] = ...) -> None: ...

class ListBenchmarksRequest(_message.Message):
    __slots__ = ("machine", "page_size", "page_token")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    machine: str
    page_size: int
    page_token: str
    def __init__(self, machine: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListBenchmarksResponse(_message.Message):
    __slots__ = ("benchmarks", "next_page_token")
    BENCHMARKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    benchmarks: _containers.RepeatedCompositeFieldContainer[BenchmarkSummary]
    next_page_token: str
    def __init__(self, benchmarks: _Optional[_Iterable[_Union[BenchmarkSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetSamplesRequest(_message.Message):
    __slots__ = ("machine", "benchmark", "selection")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    machine: str
    benchmark: str
    selection: Selection
    def __init__(self, machine: _Optional[str] = ..., benchmark: _Optional[str] = ..., selection: _Optional[_Union[Selection, _Mapping]] = ...) -> None: ...

class Selection(_message.Message):
    __slots__ = ("machine", "job_id", "labels", "since_ns", "until_ns", "all_history")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_NS_FIELD_NUMBER: _ClassVar[int]
    ALL_HISTORY_FIELD_NUMBER: _ClassVar[int]
    machine: str
    job_id: str
    labels: _containers.ScalarMap[str, str]
    since_ns: int
    until_ns: int
    all_history: bool
    def __init__(self, machine: _Optional[str] = ..., job_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., since_ns: _Optional[int] = ..., until_ns: _Optional[int] = ..., all_history: _Optional[bool] = ...) -> None: ...

class CompareRequest(_message.Message):
    __slots__ = ("benchmarks", "metrics", "alpha", "confidence", "proportion", "margin", "paired", "correction", "precision", "seed", "interference_limit", "exclude_interfered", "a", "b", "family", "pool")
    BENCHMARKS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    PROPORTION_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    PAIRED_FIELD_NUMBER: _ClassVar[int]
    CORRECTION_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    INTERFERENCE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_INTERFERED_FIELD_NUMBER: _ClassVar[int]
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    benchmarks: _containers.RepeatedScalarFieldContainer[str]
    metrics: _containers.RepeatedScalarFieldContainer[str]
    alpha: float
    confidence: float
    proportion: float
    margin: float
    paired: bool
    correction: str
    precision: float
    seed: int
    interference_limit: float
    exclude_interfered: bool
    a: Selection
    b: Selection
    family: str
    pool: bool
    def __init__(self, benchmarks: _Optional[_Iterable[str]] = ..., metrics: _Optional[_Iterable[str]] = ..., alpha: _Optional[float] = ..., confidence: _Optional[float] = ..., proportion: _Optional[float] = ..., margin: _Optional[float] = ..., paired: _Optional[bool] = ..., correction: _Optional[str] = ..., precision: _Optional[float] = ..., seed: _Optional[int] = ..., interference_limit: _Optional[float] = ..., exclude_interfered: _Optional[bool] = ..., a: _Optional[_Union[Selection, _Mapping]] = ..., b: _Optional[_Union[Selection, _Mapping]] = ..., family: _Optional[str] = ..., pool: _Optional[bool] = ...) -> None: ...

class CompareResponse(_message.Message):
    __slots__ = ("comparison_json", "sequential_json")
    COMPARISON_JSON_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_JSON_FIELD_NUMBER: _ClassVar[int]
    comparison_json: str
    sequential_json: str
    def __init__(self, comparison_json: _Optional[str] = ..., sequential_json: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("machines", "job", "submit_id")
    MACHINES_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_ID_FIELD_NUMBER: _ClassVar[int]
    machines: _containers.RepeatedScalarFieldContainer[str]
    job: Job
    submit_id: str
    def __init__(self, machines: _Optional[_Iterable[str]] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., submit_id: _Optional[str] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_ids",)
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "machine", "state", "message", "samples", "submitted_ns", "updated_ns", "job", "failed_runs")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_NS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_NS_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    FAILED_RUNS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    machine: str
    state: str
    message: str
    samples: int
    submitted_ns: int
    updated_ns: int
    job: Job
    failed_runs: int
    def __init__(self, job_id: _Optional[str] = ..., machine: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., samples: _Optional[int] = ..., submitted_ns: _Optional[int] = ..., updated_ns: _Optional[int] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., failed_runs: _Optional[int] = ...) -> None: ...

class GetJobsRequest(_message.Message):
    __slots__ = ("machine", "job_ids", "page_size", "page_token", "id_prefixes")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    machine: str
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    page_token: str
    id_prefixes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, machine: _Optional[str] = ..., job_ids: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., id_prefixes: _Optional[_Iterable[str]] = ...) -> None: ...

class GetJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RetryJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class RetryJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("machine", "audit_id", "time_ns", "verdict", "report_json")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    AUDIT_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REPORT_JSON_FIELD_NUMBER: _ClassVar[int]
    machine: str
    audit_id: str
    time_ns: int
    verdict: str
    report_json: str
    def __init__(self, machine: _Optional[str] = ..., audit_id: _Optional[str] = ..., time_ns: _Optional[int] = ..., verdict: _Optional[str] = ..., report_json: _Optional[str] = ...) -> None: ...

class GetAuditsRequest(_message.Message):
    __slots__ = ("machine", "page_size", "page_token")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    machine: str
    page_size: int
    page_token: str
    def __init__(self, machine: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetAuditsResponse(_message.Message):
    __slots__ = ("audits", "next_page_token")
    AUDITS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    audits: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    next_page_token: str
    def __init__(self, audits: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class AuditSummary(_message.Message):
    __slots__ = ("machine", "audit_id", "time_ns", "verdict", "digest_json")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    AUDIT_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_JSON_FIELD_NUMBER: _ClassVar[int]
    machine: str
    audit_id: str
    time_ns: int
    verdict: str
    digest_json: str
    def __init__(self, machine: _Optional[str] = ..., audit_id: _Optional[str] = ..., time_ns: _Optional[int] = ..., verdict: _Optional[str] = ..., digest_json: _Optional[str] = ...) -> None: ...

class ListAuditsRequest(_message.Message):
    __slots__ = ("machine", "latest_only", "page_size", "page_token")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    LATEST_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    machine: str
    latest_only: bool
    page_size: int
    page_token: str
    def __init__(self, machine: _Optional[str] = ..., latest_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAuditsResponse(_message.Message):
    __slots__ = ("audits", "next_page_token")
    AUDITS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    audits: _containers.RepeatedCompositeFieldContainer[AuditSummary]
    next_page_token: str
    def __init__(self, audits: _Optional[_Iterable[_Union[AuditSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetAuditReportRequest(_message.Message):
    __slots__ = ("audit_id",)
    AUDIT_ID_FIELD_NUMBER: _ClassVar[int]
    audit_id: str
    def __init__(self, audit_id: _Optional[str] = ...) -> None: ...

class ChangeSide(_message.Message):
    __slots__ = ("job_id", "commit", "time_ns", "points", "runs", "median")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    commit: str
    time_ns: int
    points: int
    runs: int
    median: float
    def __init__(self, job_id: _Optional[str] = ..., commit: _Optional[str] = ..., time_ns: _Optional[int] = ..., points: _Optional[int] = ..., runs: _Optional[int] = ..., median: _Optional[float] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("id", "machine", "benchmark", "argv", "metric", "line", "state", "before", "after", "ratio", "low", "high", "confidence", "margin", "verdict", "finding", "p_value", "regression", "note", "link", "fixed_by", "detected_ns", "updated_ns", "on_request")
    class LineEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    RATIO_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    FINDING_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    REGRESSION_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    FIXED_BY_FIELD_NUMBER: _ClassVar[int]
    DETECTED_NS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_NS_FIELD_NUMBER: _ClassVar[int]
    ON_REQUEST_FIELD_NUMBER: _ClassVar[int]
    id: str
    machine: str
    benchmark: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    metric: str
    line: _containers.ScalarMap[str, str]
    state: str
    before: ChangeSide
    after: ChangeSide
    ratio: float
    low: float
    high: float
    confidence: float
    margin: float
    verdict: str
    finding: str
    p_value: float
    regression: bool
    note: str
    link: str
    fixed_by: str
    detected_ns: int
    updated_ns: int
    on_request: bool
    def __init__(self, id: _Optional[str] = ..., machine: _Optional[str] = ..., benchmark: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., metric: _Optional[str] = ..., line: _Optional[_Mapping[str, str]] = ..., state: _Optional[str] = ..., before: _Optional[_Union[ChangeSide, _Mapping]] = ..., after: _Optional[_Union[ChangeSide, _Mapping]] = ..., ratio: _Optional[float] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., confidence: _Optional[float] = ..., margin: _Optional[float] = ..., verdict: _Optional[str] = ..., finding: _Optional[str] = ..., p_value: _Optional[float] = ..., regression: _Optional[bool] = ..., note: _Optional[str] = ..., link: _Optional[str] = ..., fixed_by: _Optional[str] = ..., detected_ns: _Optional[int] = ..., updated_ns: _Optional[int] = ..., on_request: _Optional[bool] = ...) -> None: ...

class ListChangesRequest(_message.Message):
    __slots__ = ("machine", "benchmark", "since_ns", "states", "page_size", "page_token")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    machine: str
    benchmark: str
    since_ns: int
    states: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    page_token: str
    def __init__(self, machine: _Optional[str] = ..., benchmark: _Optional[str] = ..., since_ns: _Optional[int] = ..., states: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListChangesResponse(_message.Message):
    __slots__ = ("changes", "next_page_token")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[Change]
    next_page_token: str
    def __init__(self, changes: _Optional[_Iterable[_Union[Change, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateChangeRequest(_message.Message):
    __slots__ = ("change_id", "state", "note", "link")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    state: str
    note: str
    link: str
    def __init__(self, change_id: _Optional[str] = ..., state: _Optional[str] = ..., note: _Optional[str] = ..., link: _Optional[str] = ...) -> None: ...

class UpdateChangeResponse(_message.Message):
    __slots__ = ("change",)
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    change: Change
    def __init__(self, change: _Optional[_Union[Change, _Mapping]] = ...) -> None: ...

class HistoryPoint(_message.Message):
    __slots__ = ("job_id", "commit", "time_ns", "order", "runs", "median", "q1", "q3", "min", "max")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_FIELD_NUMBER: _ClassVar[int]
    Q1_FIELD_NUMBER: _ClassVar[int]
    Q3_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    commit: str
    time_ns: int
    order: str
    runs: int
    median: float
    q1: float
    q3: float
    min: float
    max: float
    def __init__(self, job_id: _Optional[str] = ..., commit: _Optional[str] = ..., time_ns: _Optional[int] = ..., order: _Optional[str] = ..., runs: _Optional[int] = ..., median: _Optional[float] = ..., q1: _Optional[float] = ..., q3: _Optional[float] = ..., min: _Optional[float] = ..., max: _Optional[float] = ...) -> None: ...

class HistorySeries(_message.Message):
    __slots__ = ("series_id", "machine", "benchmark", "argv", "metric", "line", "unit", "first_point", "points", "changes", "ordered", "points_without_order", "points_capped", "changes_capped")
    class LineEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERIES_ID_FIELD_NUMBER: _ClassVar[int]
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    FIRST_POINT_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    ORDERED_FIELD_NUMBER: _ClassVar[int]
    POINTS_WITHOUT_ORDER_FIELD_NUMBER: _ClassVar[int]
    POINTS_CAPPED_FIELD_NUMBER: _ClassVar[int]
    CHANGES_CAPPED_FIELD_NUMBER: _ClassVar[int]
    series_id: int
    machine: str
    benchmark: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    metric: str
    line: _containers.ScalarMap[str, str]
    unit: str
    first_point: int
    points: _containers.RepeatedCompositeFieldContainer[HistoryPoint]
    changes: _containers.RepeatedCompositeFieldContainer[Change]
    ordered: bool
    points_without_order: int
    points_capped: int
    changes_capped: int
    def __init__(self, series_id: _Optional[int] = ..., machine: _Optional[str] = ..., benchmark: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., metric: _Optional[str] = ..., line: _Optional[_Mapping[str, str]] = ..., unit: _Optional[str] = ..., first_point: _Optional[int] = ..., points: _Optional[_Iterable[_Union[HistoryPoint, _Mapping]]] = ..., changes: _Optional[_Iterable[_Union[Change, _Mapping]]] = ..., ordered: _Optional[bool] = ..., points_without_order: _Optional[int] = ..., points_capped: _Optional[int] = ..., changes_capped: _Optional[int] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ("machine", "labels", "benchmark", "metric", "order_by", "page_size", "page_token")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    ORDER_BY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    machine: str
    labels: _containers.ScalarMap[str, str]
    benchmark: str
    metric: str
    order_by: str
    page_size: int
    page_token: str
    def __init__(self, machine: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., benchmark: _Optional[str] = ..., metric: _Optional[str] = ..., order_by: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ("series", "next_page_token")
    SERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    series: _containers.RepeatedCompositeFieldContainer[HistorySeries]
    next_page_token: str
    def __init__(self, series: _Optional[_Iterable[_Union[HistorySeries, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
