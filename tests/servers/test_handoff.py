"""RLD -> MD handoff state machines: one-shot, catch-up, adaptive, KV ablation, early finish."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.servers import profiles
from pddbench.servers.compute import Machine
from pddbench.servers.engine import Engine, SchedulerConfig, Seq
from pddbench.servers.handoff import (
    Adopt,
    Batch,
    Extend,
    HandoffError,
    HandoffPolicy,
    HandoffSchedule,
    HandoffTransfer,
    MainHandoff,
    NotifyReady,
    RelayHandoff,
    Retire,
    choose_schedule,
)
from pddbench.servers.radix import KvPool
from pddbench.servers.tokens import TokenStream


def policy(schedule: str, threshold: int = 64, load_threshold: float = 0.5) -> HandoffPolicy:
    return HandoffPolicy(
        HandoffSchedule(schedule), HandoffTransfer.EXTEND, threshold, load_threshold
    )


def test_one_shot_hands_everything_over_at_once() -> None:
    rld, md = RelayHandoff(policy("one-shot")), MainHandoff()
    assert rld.decide(emitted=5, load=0.0) is None  # MD not ready yet
    assert md.kv_landed() == NotifyReady(0)
    rld.md_ready(0)
    batch = rld.decide(emitted=150, load=0.0)
    assert batch == Batch(0, 150, True, "one-shot")
    assert md.on_batch(batch) == Extend(150, True)
    assert md.applied(150) is None and md.seam == 150
    assert rld.decide(emitted=151, load=0.0) is None  # done
    assert rld.mode == "one-shot"


def test_catch_up_sends_threshold_batches_while_rld_keeps_going() -> None:
    rld, md = RelayHandoff(policy("catch-up", threshold=64)), MainHandoff()
    md.kv_landed()
    rld.md_ready(0)
    b1 = rld.decide(emitted=150, load=0.0)
    assert b1 == Batch(0, 64, False, "catch-up")
    assert md.on_batch(b1) == Extend(64, False)
    assert rld.decide(emitted=151, load=0.0) is None  # batch in flight
    assert md.applied(64) == NotifyReady(64)
    rld.md_ready(64)
    b2 = rld.decide(emitted=155, load=0.0)  # 91 pending > 64
    assert b2 == Batch(64, 128, False, "catch-up")
    md.on_batch(b2)
    rld.md_ready(md.applied(128).level)  # type: ignore[union-attr]
    b3 = rld.decide(emitted=160, load=0.0)  # 32 pending: final
    assert b3 == Batch(128, 160, True, "catch-up")
    assert md.on_batch(b3) == Extend(32, True)
    assert md.applied(160) is None and md.seam == 160
    assert rld.mode == "catch-up"


def test_adaptive_picks_by_rld_load_and_can_switch_mid_handoff() -> None:
    p = policy("adaptive", threshold=64, load_threshold=0.5)
    assert choose_schedule(p, 0.2) is HandoffSchedule.CATCH_UP
    assert choose_schedule(p, 0.5) is HandoffSchedule.ONE_SHOT
    rld = RelayHandoff(p)
    rld.md_ready(0)
    assert rld.decide(emitted=200, load=0.1) == Batch(0, 64, False, "catch-up")
    rld.md_ready(64)
    assert rld.decide(emitted=210, load=0.9) == Batch(64, 210, True, "one-shot")  # got busy
    assert rld.mode == "catch-up"  # reported: the handoff used catch-up batches


def test_kv_transfer_ablation_is_one_final_batch_adopted_by_md() -> None:
    rld = RelayHandoff(HandoffPolicy(transfer=HandoffTransfer.KV))
    md = MainHandoff()
    md.kv_landed()
    rld.md_ready(0)
    b = rld.decide(emitted=100, load=0.0)
    assert b == Batch(0, 100, True, "kv")
    assert md.on_batch(b) == Adopt(100)
    assert md.applied(100) is None and md.seam == 100


def test_md_ready_before_any_rld_token_hands_over_nothing() -> None:
    rld, md = RelayHandoff(policy("catch-up")), MainHandoff()
    md.kv_landed()
    rld.md_ready(0)
    b = rld.decide(emitted=0, load=0.0)
    assert b == Batch(0, 0, True, "catch-up")
    assert md.on_batch(b) == Extend(0, True)


def test_request_finished_on_rld_retires_md_even_before_its_kv_lands() -> None:
    rld, md = RelayHandoff(policy("catch-up")), MainHandoff()
    notice = rld.finish(emitted=20)
    assert notice is not None and notice.finished
    assert rld.finish(emitted=20) is None
    assert md.on_batch(notice) is None  # MD still waiting for its KV
    assert md.kv_landed() == Retire()


def test_protocol_violations_are_errors() -> None:
    md = MainHandoff()
    with pytest.raises(HandoffError):
        md.on_batch(Batch(0, 10, True, "one-shot"))  # before the KV landed
    md.kv_landed()
    with pytest.raises(HandoffError):
        md.on_batch(Batch(5, 10, True, "one-shot"))  # does not start at MD's level
    rld = RelayHandoff(policy("one-shot"))
    rld.md_ready(0)
    with pytest.raises(HandoffError):
        rld.md_ready(0)
    rld2 = RelayHandoff(policy("catch-up"))
    rld2.md_ready(0)
    rld2.decide(emitted=100, load=0.0)
    with pytest.raises(HandoffError):
        rld2.md_ready(10)  # ack for a level that was never sent


@settings(max_examples=200, deadline=None)
@given(
    schedule=st.sampled_from(["one-shot", "catch-up", "adaptive"]),
    threshold=st.integers(1, 80),
    md_lands_at=st.integers(0, 400),
    rtt=st.integers(0, 30),
    extend_ticks=st.integers(1, 5),
    total=st.integers(1, 500),
    loads=st.lists(st.floats(0, 1), min_size=1, max_size=20),
)
def test_every_position_exactly_once_in_a_tick_simulation(
    schedule: str,
    threshold: int,
    md_lands_at: int,
    rtt: int,
    extend_ticks: int,
    total: int,
    loads: list[float],
) -> None:
    """RLD emits one token per tick; messages take rtt/2 ticks; MD extends in a few ticks.

    The user-visible stream (RLD's tokens then MD's) covers 0..total-1 exactly once, in
    order, whatever the timing, and RLD never emits a token after its final batch.
    """
    rld, md = RelayHandoff(policy(schedule, threshold)), MainHandoff()
    half = rtt // 2
    emitted = 0
    shown: list[int] = []
    inbox_md: list[tuple[int, Batch]] = []
    inbox_rld: list[tuple[int, int]] = []
    md_busy_until: int | None = None
    md_next: int | None = None
    rld_on = True
    for tick in range(5000):
        if tick == md_lands_at:
            act = md.kv_landed()
            if isinstance(act, NotifyReady):
                inbox_rld.append((tick + half, 0))
        for due, level in [x for x in inbox_rld if x[0] <= tick]:
            inbox_rld.remove((due, level))
            rld.md_ready(level)
        for due, batch in [x for x in inbox_md if x[0] <= tick]:
            inbox_md.remove((due, batch))
            act = md.on_batch(batch)
            assert isinstance(act, Extend)
            md_busy_until = tick + extend_ticks
            md_pending = batch
        if md_busy_until is not None and tick >= md_busy_until:
            md_busy_until = None
            nxt = md.applied(md_pending.end)
            if isinstance(nxt, NotifyReady):
                inbox_rld.append((tick + half, nxt.level))
            else:
                md_next = md_pending.end  # MD emits from the seam
        if rld_on and emitted < total:
            shown.append(emitted)
            emitted += 1
        if rld_on:
            if emitted >= total:
                rld_on = False
                rld.finish(emitted)
            else:
                b = rld.decide(emitted, loads[tick % len(loads)])
                if b is not None:
                    inbox_md.append((tick + half, b))
                    if b.final:
                        rld_on = False
        if md_next is not None and md_next < total:
            shown.append(md_next)
            md_next += 1
        if len(shown) >= total and not rld_on and md_busy_until is None and not inbox_md:
            break
    assert shown == list(range(total))


def test_adaptive_handoff_reads_the_relay_s_real_load() -> None:
    """A relay that memory limits hands off one-shot; an idle one catches up. (The old
    signal, decode batch / max_batch, kept a memory-full 16-chip RLD at <= 0.15: always
    catch-up.)"""

    def relay(requests: int) -> Engine:
        m = Machine(profiles.hardware("h800-sxm"), 16, profiles.model("pdd-flagship-1t"))
        e = Engine(m, KvPool(36 * 66560, 64), SchedulerConfig(max_batch=256))
        for i in range(requests):
            s = Seq(
                f"r{i}",
                65536,
                [i * 10**6 + b for b in range(1024)],
                TokenStream(0, f"r{i}", 1000),
                max_tokens=1024,
                reserve_output=1024,
            )
            e.submit(s, 0.0)
            if i < 36:
                e.kv_landed(f"r{i}", 0.0)  # decoding: in the running batch
        return e

    policy = HandoffPolicy(schedule=HandoffSchedule.ADAPTIVE)
    full = relay(40)  # 36 sequences of 64K fill its KV memory, 4 more wait
    assert full.running == 36 and full.queue_depth == 4
    assert choose_schedule(policy, full.load()) is HandoffSchedule.ONE_SHOT
    idle = relay(1)
    assert choose_schedule(policy, idle.load()) is HandoffSchedule.CATCH_UP
