"""The compute model against public measured serving points (profiles/calibration.toml)."""

from __future__ import annotations

import pytest

from pddbench.servers.calibration import Row, evaluate, load_points, summarise, table

ROWS = table()


def _id(row: Row) -> str:
    return row.point.id


def test_points_cite_hardware_measurements_only() -> None:
    points = load_points()
    assert len({p.id for p in points}) == len(points)
    for p in points:
        assert p.source and p.url.startswith("https://") and p.quote, p.id
        assert "PDD" not in p.source and "pdd" not in p.url.lower(), p.id


def test_the_split_has_at_least_40_points_and_half_of_them_test() -> None:
    points = load_points()
    test = [p for p in points if p.split == "test"]
    assert len(points) >= 40 and len(test) >= 20
    assert len(test) >= len(points) - len(test)
    assert all(p.fit_for for p in points if p.split == "fit")


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_every_point_is_priced(row: Row) -> None:
    assert row.model_value > 0 and row.step.seconds > 0


def test_the_table_reacts_to_the_model() -> None:
    p = next(p for p in load_points() if p.id == "sglang-decode-2k")
    row = evaluate(p)
    assert row.model_value > 0 and row.step.seconds > row.step.latency_s > 0


def test_the_fit_rows_are_fitted() -> None:
    s = summarise(ROWS, "fit")
    assert s.median_abs_error <= 0.10 and s.within_band_share >= 0.9


def test_the_test_rows_stay_where_docs_calibration_md_says() -> None:
    # the honest figures of the split (docs/calibration.md): a model change that makes the
    # test rows worse fails here; one that makes them better updates the docs and this test
    s = summarise(ROWS, "test")
    assert s.rows >= 20
    assert s.median_abs_error <= 0.11 and s.within_band_share >= 0.9


def test_the_fit_never_reads_a_test_row() -> None:
    assert {r.point.split for r in table(split="fit")} == {"fit"}
    assert len(table(split="fit")) + len(table(split="test")) == len(ROWS)


def test_a_decode_kernel_without_gqa_sharing_reads_the_kv_per_query_head() -> None:
    # TensorRT-LLM's rows (before its XQA kernel): a GQA model's decode reads more KV; an MHA
    # model (one query head per KV head) is priced the same either way
    from dataclasses import replace

    points = {p.id: p for p in load_points()}
    gqa = points["trt-h100-falcon-b64-tp4-2048-2048"]
    mha = points["trt-h100-7b-b48-2048-2048"]
    assert not gqa.gqa_kv_shared and not mha.gqa_kv_shared
    for p, slower in ((gqa, True), (mha, False)):
        shared = evaluate(replace(p, gqa_kv_shared=True)).model_value
        unshared = evaluate(p).model_value
        assert (unshared < 0.8 * shared) if slower else (unshared == shared)
