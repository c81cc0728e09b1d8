"""The server's Prometheus metrics (`perfctl server --metrics HOST:PORT`), one owner for their names:
deploy/prometheus/perfctl-alerts.yml and deploy/grafana/perfctl-dashboard.json read them
(tests/test_alert_rules.py checks that they name nothing else).

With several replicas on one database every replica exports the fleet's gauges (per machine, jobs, the
database), each read from the database; the counters and ``perfctl_agents_connected`` are the replica's own.
"""

from prometheus_client import Counter, Gauge, Histogram

SAMPLES_INGESTED = Counter("perfctl_samples_ingested_total", "Samples stored (new)")
SAMPLES_DUPLICATE = Counter("perfctl_samples_duplicate_total", "Samples received again and not stored twice")
BATCHES = Counter("perfctl_batches_total", "Sample batches acked")
INGEST_LATENCY = Histogram("perfctl_ingest_latency_seconds", "Batch receipt to ack (commit included)",
                           buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5))
INGEST_ERRORS = Counter("perfctl_ingest_errors_total", "Sample batches refused or not stored, by reason",
                        ["reason"])
for _reason in ("invalid", "storage", "unauthorized"):  # at 0 from the start: increase() sees the first error
    INGEST_ERRORS.labels(_reason)
AGENTS_CONNECTED = Gauge("perfctl_agents_connected", "Agents with an open job watch on this replica")
JOBS = Gauge("perfctl_jobs", "Jobs by state", ["state"])
JOBS_LOST = Counter("perfctl_jobs_lost_total", "Jobs this replica marked lost (their agent's lease lapsed)")
JOBS_OFFERED_AGAIN = Counter("perfctl_jobs_offered_again_total",
                             "Jobs this replica queued again: sent, but not confirmed by their agent in time")
MACHINE_HEARTBEAT = Gauge("perfctl_machine_last_heartbeat_timestamp_seconds",
                          "Unix time of the machine's last heartbeat or registration", ["machine"])
MACHINE_AUDIT_VERDICT = Gauge("perfctl_machine_audit_verdict",
                              "1 for the verdict of the machine's latest counter-trust audit", ["machine", "verdict"])
MACHINE_AUDIT_TIME = Gauge("perfctl_machine_audit_timestamp_seconds", "Unix time of the machine's latest audit",
                           ["machine"])
DATABASE_SIZE = Gauge("perfctl_database_size_bytes", "Size of the server's database")
SAMPLES_STORED = Gauge("perfctl_samples_stored", "Samples in the database")
OPEN_REGRESSIONS = Gauge("perfctl_open_regressions",
                         "Regressions found in the machine's history of the benchmark and still open (state new: "
                         "not acknowledged, fixed or a false positive; server/history_store.py)",
                         ["machine", "benchmark"])
HISTORY_QUEUED = Gauge("perfctl_history_queued", "Ended jobs waiting for their history to be analysed")
HISTORY_SET_ASIDE = Gauge("perfctl_history_set_aside", "Ended jobs whose history analysis failed 5 times, set "
                          "aside with their error (table history_set_aside)")
