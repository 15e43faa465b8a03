"""SLA parsing, precedence and the per-request check."""

from __future__ import annotations

import numpy as np
import pytest

from pddbench.errors import UserError
from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.sla import check
from pddbench.harness.config.sla import (
    DEFAULT_SLA,
    SLA,
    parse_sla_overrides,
    sla_from_mapping,
    with_overrides,
)
from tests.analysis.runs import rows_table


def test_parse_command_line_form() -> None:
    assert parse_sla_overrides("ttft=2.0,tpot=0.03,e2e=30") == {
        "ttft_s": 2.0,
        "tpot_s": 0.03,
        "e2e_s": 30.0,
    }
    assert parse_sla_overrides("tpot=30ms, target=99.5%") == {"tpot_s": 0.03, "target_pct": 99.5}
    assert parse_sla_overrides("ttft_s=1s") == {"ttft_s": 1.0}


@pytest.mark.parametrize("text", ["ttft", "latency=3", "ttft=fast", "target=high"])
def test_bad_command_line_form_is_one_clear_error(text: str) -> None:
    with pytest.raises(UserError, match="--sla"):
        parse_sla_overrides(text)


def test_overrides_replace_only_the_given_fields() -> None:
    base = sla_from_mapping({"ttft": 5, "e2e_s": 30, "target_pct": 90}, where="m.json")
    sla = with_overrides(base, parse_sla_overrides("ttft=2"))
    # a field the table leaves out keeps the default's value
    assert sla == SLA(ttft_s=2.0, tpot_s=DEFAULT_SLA.tpot_s, e2e_s=30.0, target_pct=90.0)
    with pytest.raises(UserError, match="target_pct"):
        with_overrides(base, {"target_pct": 150.0})


def test_manifest_sla_errors_name_the_file() -> None:
    with pytest.raises(UserError, match=r"m\.json: sla\.ttft_s"):
        sla_from_mapping({"ttft_s": -1}, where="m.json")
    with pytest.raises(UserError, match=r"m\.json"):
        sla_from_mapping({"ttft_typo": 1}, where="m.json")
    assert sla_from_mapping(None, where="m.json") == DEFAULT_SLA


def test_default_is_99_percent_with_published_decode_bounds() -> None:
    assert DEFAULT_SLA.target_pct == 99.0
    assert DEFAULT_SLA.tpot_s == 0.03 and DEFAULT_SLA.e2e_s == 30.0
    assert "target 99 %" in DEFAULT_SLA.describe()


def test_check_per_request() -> None:
    rows = [
        dict(
            request_id="a",
            session_id="s",
            turn_index=0,
            intended_send_s=0.0,
            ttft_s=1.0,
            tpot_s=0.02,
            e2e_s=3.0,
        ),
        dict(
            request_id="b", session_id="s", turn_index=1, intended_send_s=0.0, ttft_s=1.0, e2e_s=1.0
        ),  # one token: no TPOT, passes that target
        dict(
            request_id="c",
            session_id="s",
            turn_index=2,
            intended_send_s=0.0,
            ttft_s=3.0,
            tpot_s=0.02,
            e2e_s=3.0,
        ),
        dict(
            request_id="d",
            session_id="s",
            turn_index=3,
            intended_send_s=0.0,
            ttft_s=1.0,
            tpot_s=0.05,
            e2e_s=3.0,
        ),
        dict(
            request_id="e", session_id="s", turn_index=4, intended_send_s=0.0, e2e_s=1.0
        ),  # ok but never produced a token
        dict(
            request_id="f",
            session_id="s",
            turn_index=5,
            intended_send_s=0.0,
            ttft_s=0.1,
            tpot_s=0.01,
            e2e_s=0.5,
            status="timeout",
        ),
    ]
    res = check(SLA(ttft_s=2.0, tpot_s=0.03, e2e_s=10.0), RecordSet.from_arrow(rows_table(rows)))
    np.testing.assert_array_equal(res.ttft_ok, [True, True, False, True, False, False])
    np.testing.assert_array_equal(res.tpot_ok, [True, True, True, False, True, False])
    np.testing.assert_array_equal(res.met, [True, True, False, False, False, False])
    none = check(SLA(), RecordSet.from_arrow(rows_table(rows)))
    np.testing.assert_array_equal(none.met, [True] * 5 + [False])


def test_e2e_bound_scales_with_the_work_asked() -> None:
    """A long output that meets TTFT and TPOT meets E2E too (attainable by construction)."""
    rows = [
        dict(
            request_id=f"r{i}",
            session_id="s",
            turn_index=i,
            intended_send_s=0.0,
            ttft_s=2.0,
            tpot_s=0.029,
            e2e_s=2.0 + 0.029 * (out - 1),
            output_tokens=out,
            expected_output_tokens=out,
        )
        for i, out in enumerate((100, 2619, 5415))
    ]
    records = RecordSet.from_arrow(rows_table(rows))
    scaled = check(SLA(ttft_s=5.0, tpot_s=0.03, e2e_s=30.0), records)
    np.testing.assert_array_equal(scaled.met, [True, True, True])
    fixed = check(SLA(ttft_s=5.0, tpot_s=0.03, e2e_s=30.0, e2e_mode="fixed"), records)
    np.testing.assert_array_equal(fixed.e2e_ok, [True, False, False])  # 77.9 s, 159 s > 30 s
    slow = [dict(r, e2e_s=100.0) for r in rows]  # a stall beyond the per-token bound fails
    res = check(SLA(ttft_s=5.0, tpot_s=0.03, e2e_s=30.0), RecordSet.from_arrow(rows_table(slow)))
    np.testing.assert_array_equal(res.e2e_ok, [False, False, True])
    assert "TTFT + output tokens x TPOT" in SLA(ttft_s=5.0, tpot_s=0.03, e2e_s=30.0).describe()
