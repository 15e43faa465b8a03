"""The record columns are declared once (RequestRecord's roles); consumers derive them."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa

from pddbench.harness.analysis.breakdowns import available_dimensions
from pddbench.harness.analysis.recordset import CATEGORY_COLUMNS, NUMERIC_COLUMNS, RecordSet
from pddbench.harness.config.replay import Selection
from pddbench.harness.drive.stream_records import record_for, skipped_record
from pddbench.harness.plan.player import DueRequest
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.rundir.records import (
    RECORD_FIELDS,
    RECORDS_SCHEMA,
    REQUIRED_COLUMNS,
    ZERO_DEFAULT_COLUMNS,
    Role,
    columns,
)
from pddbench.workloads.traceio import build_table
from tests.analysis.runs import rows_table

PACKAGE = Path(__file__).resolve().parents[2] / "pddbench"
DECLARED_IN = PACKAGE / "harness" / "rundir" / "records.py"


def test_every_column_has_exactly_one_role_and_the_analysis_reads_them_by_role() -> None:
    by_role = [c for role in Role for c in columns(role)]
    assert sorted(by_role) == sorted(RECORD_FIELDS) == sorted(RECORDS_SCHEMA.names)
    assert set(NUMERIC_COLUMNS) == set(columns(Role.TIME, Role.NUMBER))
    assert set(CATEGORY_COLUMNS) == set(columns(Role.CATEGORY))


def _declared_sets() -> list[set[str]]:
    """Every column set records.py declares: each role's, unions of roles, the derived ones."""
    roles = list(Role)
    n = len(roles)
    sets = [set(columns(*roles[i:j])) for i in range(n) for j in range(i + 1, n + 1)]
    sets += [set(columns(a, b)) for a in roles for b in roles]
    return [s for s in sets if s] + [set(REQUIRED_COLUMNS), set(ZERO_DEFAULT_COLUMNS)]


def test_no_module_lists_record_columns_of_its_own() -> None:
    """A literal tuple/list/set outside records.py that re-declares a set of record columns
    records.py declares (a role's, the required ones, ...), or that lists six or more
    record columns (a schema of its own), must derive it from ``columns(Role...)``
    instead. A module's short selection of what it reads (three latencies) is its own."""
    names = set(RECORD_FIELDS)
    declared = _declared_sets()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == DECLARED_IN:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                listed = [
                    e.value
                    for e in node.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in names
                ]
                if len(listed) >= 6 or (len(listed) >= 2 and set(listed) in declared):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {listed}")
    assert not found, "record columns listed outside RequestRecord:\n" + "\n".join(found)


def _rows(agents: list[str | None] | None) -> pa.Table:
    rows = [
        dict(request_id=f"r{i}", session_id="s", turn_index=i, intended_send_s=float(i))
        for i in range(4)
    ]
    if agents is not None:
        for row, agent in zip(rows, agents, strict=True):
            row["agent_type"] = agent
    return rows_table(rows)


def test_agent_type_breakdown_appears_when_records_carry_one() -> None:
    assert "agent_type" in RECORDS_SCHEMA.names  # the replay writes it for every run
    assert "agent_type" in available_dimensions(RecordSet.from_arrow(_rows(["main", "sub"] * 2)))
    assert "agent_type" not in available_dimensions(RecordSet.from_arrow(_rows(None)))
    old = _rows(None).drop_columns(["agent_type"])  # a run from before the column
    assert "agent_type" not in available_dimensions(RecordSet.from_arrow(old))


def test_the_traces_agent_type_reaches_every_record() -> None:
    trace = build_table(
        request_id=["a0", "a1", "sub0"],
        session_id=["A", "A", "A/sub"],
        turn_index=[0, 1, 0],
        arrival_s=[0.0, 1.0, 0.5],
        input_length=[10] * 3,
        output_length=[5] * 3,
        block_size=4,
        block_hashes=[[1, 2]] * 3,
        parent_request_id=[None, "a0", "a0"],
        parent_session_id=[None, None, "A"],
        agent_type=["main", "main", "subagent"],
    )
    planned = plan_requests(trace, Selection())
    records = {r.request_id: record_for(DueRequest(r, 0.0), None) for r in planned}
    assert {k: r.agent_type for k, r in records.items()} == {
        "a0": "main",
        "a1": "main",
        "sub0": "subagent",
    }
    assert skipped_record(planned[0]).agent_type == planned[0].agent_type
