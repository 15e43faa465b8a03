"""What a Locust run executes, as files and messages: job spec, plan bundle, shards, rows.

Owns the serialisation between the three kinds of process of a Locust replay: the
harness process (holds the :class:`~pddbench.harness.drive.replay.ReplayPlan`, writes the job
folder), the master (reads it, deals shards) and the workers (possibly on other machines,
given nothing but the master's address: their shard, the replay options and the prompt
inputs arrive as messages). Records travel back as rows in :data:`RECORD_FIELDS` order.

Must not: import gevent or Locust (the harness process imports this module), decide
timing, or touch sockets.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.drive.replay import ReplayPlan
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.rundir.records import RECORD_FIELDS, RequestRecord, Role, columns
from pddbench.workloads.schema import Col

JOB_FILE = "job.json"
PLAN_FILE = "plan.parquet"
RESULT_FILE = "result.json"
WORKERS_FILE = "workers.json"

# the record model says which columns are run-clock instants (rundir.records.Role)
_TIME_POINT_INDEX = tuple(RECORD_FIELDS.index(f) for f in columns(Role.TIME))
(_TOKEN_TIMES_INDEX,) = (RECORD_FIELDS.index(f) for f in columns(Role.TOKEN_TIMES))

CACHED_THEORETICAL = "cached_tokens_theoretical"


@dataclass(frozen=True)
class JobSpec:
    """Everything the master process needs besides the plan bundle."""

    base_url: str
    workers: int
    options: ReplayOptions
    journal: str
    job_dir: str
    master_bind_host: str = "127.0.0.1"
    master_port: int = 5557
    web_ui: bool = False
    web_host: str = "127.0.0.1"
    web_port: int = 8089
    worker_timeout_s: float = 10.0  # silence after which a worker is declared lost
    connect_timeout_s: float = 120.0  # how long to wait for the expected workers
    start_lead_s: float = 0.5  # go message → first send, so every worker starts together
    batch_interval_s: float = 0.2  # workers ship records at least this often
    stop_grace_s: float = 15.0  # after a stop: wait this long for workers' last records
    itl_events_per_request: int = 8  # live view only: ITL samples per request
    cpu_threshold: float = 0.9
    label: str = ""

    def write(self) -> Path:
        path = Path(self.job_dir) / JOB_FILE
        data = {**asdict(self), "options": self.options.to_json()}
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def read(cls, job_dir: str | Path) -> JobSpec:
        data = json.loads((Path(job_dir) / JOB_FILE).read_text())
        return cls(**{**data, "options": ReplayOptions.from_json(data["options"])})


_PLAN_TYPES = {
    "str": pa.string(),
    "str | None": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
}
_PLAN_FIELDS = tuple(f for f in fields(PlannedRequest) if f.name != "row")


def plan_table(plan: ReplayPlan) -> pa.Table:
    """The plan as one table: a row per planned request (every :class:`PlannedRequest`
    field but ``row``), with its prompt inputs."""
    reqs = plan.requests
    rows = pa.array([r.row for r in reqs], type=pa.int64())
    trace = plan.table
    planned = {
        f.name: pa.array([getattr(r, f.name) for r in reqs], _PLAN_TYPES[str(f.type)])
        for f in _PLAN_FIELDS
    }
    return pa.table(
        {
            **planned,
            Col.BLOCK_SIZE: trace.column(Col.BLOCK_SIZE).take(rows),
            Col.BLOCK_HASHES: trace.column(Col.BLOCK_HASHES).take(rows),
            Col.PARENT_SESSION_ID: trace.column(Col.PARENT_SESSION_ID).take(rows),
            CACHED_THEORETICAL: pa.array(
                [plan.theoretical_cached.get(r.request_id) for r in reqs], pa.int64()
            ),
        }
    )


def write_plan(plan: ReplayPlan, job_dir: str | Path) -> Path:
    path = Path(job_dir) / PLAN_FILE
    pq.write_table(plan_table(plan), path, compression="zstd")
    return path


def read_plan(job_dir: str | Path) -> pa.Table:
    return pq.read_table(Path(job_dir) / PLAN_FILE)


def planned_requests(table: pa.Table) -> list[PlannedRequest]:
    """The plan table's rows as PlannedRequests (``row`` = position in ``table``)."""
    cols = {  # a field with a default may be absent (a table written before it existed)
        f.name: table.column(f.name).to_pylist()
        for f in _PLAN_FIELDS
        if f.name in table.column_names or f.default is MISSING
    }
    return [
        PlannedRequest(row=i, **{name: values[i] for name, values in cols.items()})
        for i in range(table.num_rows)
    ]


def worker_plan(table: pa.Table) -> ReplayPlan:
    """A worker's shard table as a ReplayPlan (prompts materialise from its own rows)."""
    requests = planned_requests(table)
    cached = table.column(CACHED_THEORETICAL).to_pylist()
    theoretical = {r.request_id: c for r, c in zip(requests, cached, strict=True) if c is not None}
    return ReplayPlan(requests, table, theoretical, f"{len(requests)} requests (shard)")


def parent_sessions(table: pa.Table) -> dict[str, str | None]:
    sessions = table.column("session_id").to_pylist()
    parents = table.column(Col.PARENT_SESSION_ID).to_pylist()
    return {s: p for s, p in zip(sessions, parents, strict=True) if p is not None}


def shard_chunks(table: pa.Table, *, chunk_bytes: int = 4 << 20) -> list[bytes]:
    """``table`` as Arrow IPC streams of about ``chunk_bytes`` each (message-sized)."""
    if table.num_rows == 0:
        return [_ipc(table)]
    per_row = max(1, table.nbytes // table.num_rows)
    step = max(1, chunk_bytes // per_row)
    return [_ipc(table.slice(i, step)) for i in range(0, table.num_rows, step)]


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def table_from_chunks(chunks: Sequence[bytes]) -> pa.Table:
    tables = [pa.ipc.open_stream(c).read_all() for c in chunks]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def record_row(record: RequestRecord) -> list[object]:
    """A record as a message row (values in :data:`RECORD_FIELDS` order)."""
    d = record.__dict__
    return [d[name] for name in RECORD_FIELDS]


def record_from_row(row: Sequence[object], to_run_clock: Callable[[float], float]) -> RequestRecord:
    """A record from a worker's row, its time points moved onto the master's run clock."""
    values = list(row)
    for i in _TIME_POINT_INDEX:
        v = values[i]
        if isinstance(v, float) and math.isfinite(v):
            values[i] = to_run_clock(v)
    times = values[_TOKEN_TIMES_INDEX]
    if isinstance(times, list):
        values[_TOKEN_TIMES_INDEX] = [to_run_clock(t) for t in times]
    return RequestRecord(**dict(zip(RECORD_FIELDS, values, strict=True)))
