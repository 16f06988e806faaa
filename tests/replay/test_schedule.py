"""Pipeline schedules executed on the virtual clock against their closed forms and hand arithmetic."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ultracluster.replay.schedule import execute, stage_programs


def run(schedule, p, m, F, B, c=0.0, v=1, reps=1):
    chunks = p * v
    ex = execute(stage_programs(schedule, p, m, v), np.full((reps, chunks), F / v), np.full((reps, chunks), B / v),
                 np.full(chunks, c), np.full(chunks, c))
    return ex


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(1, 1), (2, 3), (4, 8), (8, 8), (8, 32), (16, 16)])
def test_uniform_pipeline_equals_closed_form(schedule, p, m):
    F, B = 0.37, 0.81
    ex = run(schedule, p, m, F, B)
    assert ex.stage_end.max() == pytest.approx((m + p - 1) * (F + B), rel=1e-9)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (8, 16, 2)])
def test_interleaved_bubble_divided_by_v(p, m, v):
    F, B = 0.5, 1.25
    ex = run("interleaved", p, m, F, B, v=v)
    # each chunk takes F/v, B/v: total = m(F+B) + (p-1)(F+B)/v
    assert ex.stage_end.max() == pytest.approx(m * (F + B) + (p - 1) * (F + B) / v, rel=1e-9)


def test_1f1b_with_sends_hand_computed():
    # p=2, m=3, F=1, B=2, send c=0.5 each way. Stage 1 runs F0 at 1.5, B0 to 4.5; stage 0's B0 waits for
    # the gradient (4.5 + 0.5) and runs 5-7; F2 on stage 0 runs 7-8 (stage 1's F1/B1 run 4.5-7.5);
    # B1 on stage 0 starts at max(8, 7.5+0.5) = 8, ends 10; stage 1's F2 starts 8.5, B2 ends 11.5;
    # stage 0's B2 starts 12 and ends 14. (The steady state pays 2c per microbatch, not only 2(p-1)c.)
    ex = run("1f1b", 2, 3, 1.0, 2.0, c=0.5)
    assert ex.stage_end[0].tolist() == [14.0, 11.5]


def test_1f1b_first_stage_order():
    prog = stage_programs("1f1b", 4, 6)[0]
    assert prog[:5] == [("F", 0, 0), ("F", 1, 0), ("F", 2, 0), ("F", 3, 0), ("B", 0, 0)]
    assert [k for kind, k, _ in prog if kind == "B"] == list(range(6))


def test_replicas_are_independent():
    fwd = np.array([[1.0, 1.0], [1.0, 3.0]])
    ex = execute(stage_programs("1f1b", 2, 2), fwd, 2 * fwd, np.zeros(2), np.zeros(2))
    assert ex.stage_end[0, 0] == pytest.approx((2 + 1) * 3.0)
    assert ex.stage_end[1, 0] > ex.stage_end[0, 0]


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 24), F=st.floats(0.01, 5), B=st.floats(0.01, 5),
       c=st.floats(0, 1), schedule=st.sampled_from(["gpipe", "1f1b"]))
def test_sends_never_speed_up_and_busy_bounds(p, m, F, B, c, schedule):
    t0 = run(schedule, p, m, F, B).stage_end.max()
    t1 = run(schedule, p, m, F, B, c=c).stage_end.max()
    assert t1 >= t0 - 1e-12
    assert t0 >= m * (F + B) - 1e-9                     # never faster than one stage's work
    t_more = run(schedule, p, m + 1, F, B).stage_end.max()
    bubble = lambda t, k: (t - k * (F + B)) / t  # noqa: E731  bubble fraction of the step
    assert bubble(t_more, m + 1) <= bubble(t0, m) + 1e-9  # more microbatches never a larger bubble fraction


def test_start_plus_duration_is_end_for_every_op():
    fwd = np.array([[1.0, 2.0, 1.5]])
    ex = execute(stage_programs("1f1b", 3, 4), fwd, 2 * fwd, np.full(3, 0.1), np.full(3, 0.1))
    for (kind, k, c), t1 in ex.end.items():
        dur = (fwd if kind == "F" else 2 * fwd)[0, c]
        assert ex.start[(kind, k, c)][0] + dur == pytest.approx(t1[0], rel=1e-12)
    assert ex.start[("F", 0, 0)][0] == 0.0 and ex.start[("F", 1, 0)][0] == 1.0


def test_uneven_split_of_llama_405b():
    from ultracluster.cluster import stage_layers

    # 126 layers on 16 stages: the first and last stages, which also carry the embedding and the LM head,
    # get one layer fewer (as Llama 3.1 405B trains)
    assert stage_layers(126, 16).tolist() == [7] + [8] * 14 + [7]
    assert stage_layers(126, 32).tolist() == [3] + [4] * 30 + [3]
    assert stage_layers(80, 8).tolist() == [10] * 8
    with pytest.raises(ValueError):
        stage_layers(4, 8)


def test_interleaved_stage_order_megatron():
    """Stage 0 of p=2, m=4, v=2: (p - 1) x 2 + (v - 1) x p = 4 warm-up forwards, microbatches in groups of p,
    chunk-major within (chunks 0 and 2 live on stage 0); backwards from the last chunk down."""
    F, B = "F", "B"
    assert stage_programs("interleaved", 2, 4, 2)[0] == [
        (F, 0, 0), (F, 1, 0), (F, 0, 2), (F, 1, 2),
        (F, 2, 0), (B, 0, 2), (F, 3, 0), (B, 1, 2), (F, 2, 2), (B, 0, 0), (F, 3, 2), (B, 1, 0),
        (B, 2, 2), (B, 3, 2), (B, 2, 0), (B, 3, 0)]


def test_gpipe_and_1f1b_last_stage_order():
    assert stage_programs("gpipe", 3, 2)[1] == [("F", 0, 1), ("F", 1, 1), ("B", 0, 1), ("B", 1, 1)]
    assert stage_programs("1f1b", 3, 3)[2] == [("F", 0, 2), ("B", 0, 2), ("F", 1, 2), ("B", 1, 2), ("F", 2, 2),
                                               ("B", 2, 2)]
    with pytest.raises(ValueError):
        stage_programs("zero-bubble", 2, 2)
