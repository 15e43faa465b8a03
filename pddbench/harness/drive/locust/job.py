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
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pddbench.harness.drive.replay import ReplayPlan
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.rundir.records import RequestRecord
from pddbench.workloads.schema import Col

JOB_FILE = "job.json"
PLAN_FILE = "plan.parquet"
RESULT_FILE = "result.json"
WORKERS_FILE = "workers.json"

RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
TIME_POINT_FIELDS: tuple[str, ...] = (
    "intended_send_s",
    "actual_send_s",
    "first_token_s",
    "last_token_s",
    "end_s",
)
_TIME_POINT_INDEX = tuple(RECORD_FIELDS.index(f) for f in TIME_POINT_FIELDS)
_TOKEN_TIMES_INDEX = RECORD_FIELDS.index("token_times_s")

CACHED_THEORETICAL = "cached_tokens_theoretical"


@dataclass(frozen=True)
class JobSpec:
    """Everything the master process needs besides the plan bundle."""

    base_url: str
    workers: int
    options: dict[str, object]  # ReplayOptions.to_json()
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
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def read(cls, job_dir: str | Path) -> JobSpec:
        data = json.loads((Path(job_dir) / JOB_FILE).read_text())
        return cls(**data)


def plan_table(plan: ReplayPlan) -> pa.Table:
    """The plan as one table: a row per planned request, with its prompt inputs."""
    reqs = plan.requests
    rows = pa.array([r.row for r in reqs], type=pa.int64())
    trace = plan.table
    return pa.table(
        {
            "request_id": pa.array([r.request_id for r in reqs], pa.string()),
            "session_id": pa.array([r.session_id for r in reqs], pa.string()),
            "turn_index": pa.array([r.turn_index for r in reqs], pa.int32()),
            "parent_request_id": pa.array([r.parent_request_id for r in reqs], pa.string()),
            "arrival_s": pa.array([r.arrival_s for r in reqs], pa.float64()),
            "think_time_s": pa.array([r.think_time_s for r in reqs], pa.float64()),
            "input_length": pa.array([r.input_length for r in reqs], pa.int64()),
            "output_length": pa.array([r.output_length for r in reqs], pa.int64()),
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
    cols = {
        name: table.column(name).to_pylist()
        for name in (
            "request_id",
            "session_id",
            "turn_index",
            "parent_request_id",
            "arrival_s",
            "think_time_s",
            "input_length",
            "output_length",
        )
    }
    return [
        PlannedRequest(
            request_id=cols["request_id"][i],
            session_id=cols["session_id"][i],
            turn_index=cols["turn_index"][i],
            row=i,
            parent_request_id=cols["parent_request_id"][i],
            arrival_s=cols["arrival_s"][i],
            think_time_s=cols["think_time_s"][i],
            input_length=cols["input_length"][i],
            output_length=cols["output_length"][i],
        )
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
