"""Pure sampling arithmetic: target times, frame lookup, crop frame counts, seek planning, the seek floor."""

import pytest

from paravt_core.video.sampling import (
    Run,
    crop_frame_count,
    frame_at,
    nearest_keyframe,
    plan_runs,
    preceding_keyframe,
    seek_floor_frames,
    uniform_times,
)

# A 10 fps stream of 8 frames with one long frame: 0.0 0.1 0.2 0.3 [0.4 shown until 1.0] 1.0 1.1 1.2
TIMES = [0.0, 0.1, 0.2, 0.3, 0.4, 1.0, 1.1, 1.2]


def test_uniform_times():
    assert uniform_times(2.0, 4.0, 5) == [2.0, 2.5, 3.0, 3.5, 4.0]
    assert uniform_times(3.0, 9.0, 1) == [3.0]
    with pytest.raises(ValueError):
        uniform_times(0.0, 1.0, 0)


@pytest.mark.parametrize(
    ("t", "index"),
    [(-5.0, 0), (0.0, 0), (0.05, 0), (0.1, 1), (0.39, 3), (0.4, 4), (0.99, 4), (1.0, 5), (7.0, 7)],
)
def test_frame_at_is_the_frame_on_screen(t, index):
    assert frame_at(TIMES, t) == index


def test_frame_at_tolerates_float_noise():
    # 0.1 * 3 = 0.30000000000000004 and 0.7 - 0.4 = 0.29999999999999993 both mean frame 3.
    assert frame_at(TIMES, 0.7 - 0.4) == 3


def test_nearest_keyframe():
    keys = [0, 4, 6]  # at 0.0, 0.4, 1.1
    assert nearest_keyframe(TIMES, keys, 0.15) == 0
    assert nearest_keyframe(TIMES, keys, 0.2) == 0  # tie 0.2 from both: the earlier one
    assert nearest_keyframe(TIMES, keys, 0.3) == 4
    assert nearest_keyframe(TIMES, keys, 0.8) == 6
    assert nearest_keyframe(TIMES, keys, 50.0) == 6


@pytest.mark.parametrize(
    ("start", "end", "kwargs", "count"),
    [
        (0.0, 30.0, {}, 16),  # 30 frames at 1 fps, capped at 16
        (10.0, 16.7, {}, 6),  # 6.7 -> nearest even 6
        (10.0, 17.0, {}, 8),  # 7 is halfway between 6 and 8: halves go up
        (0.0, 0.3, {}, 2),  # at least 2
        (0.0, 100.0, {"max_frames": 15}, 14),  # odd max: largest even below it
        (0.0, 0.5, {"min_frames": 3}, 4),  # odd min: smallest even above it
        (0.0, 10.0, {"fps": 2.0, "max_frames": 32}, 20),
        (0.0, 10.0, {"min_frames": 3, "max_frames": 3}, 3),  # no even count allowed: honour the range
    ],
)
def test_crop_frame_count(start, end, kwargs, count):
    options = {"fps": 1.0, "min_frames": 2, "max_frames": 16} | kwargs
    assert crop_frame_count(start, end, **options) == count


def test_crop_frame_count_rejects_bad_options():
    with pytest.raises(ValueError):
        crop_frame_count(0, 1, fps=1.0, min_frames=4, max_frames=2)
    with pytest.raises(ValueError):
        crop_frame_count(0, 1, fps=0.0, min_frames=2, max_frames=4)


def test_preceding_keyframe():
    keys = [0, 30, 60]
    assert [preceding_keyframe(keys, i) for i in (0, 29, 30, 31, 95)] == [0, 0, 30, 30, 60]
    assert preceding_keyframe([5, 9], 2) == 0  # nothing before: decode from the start of the stream


def test_plan_runs_groups_targets_without_a_keyframe_between():
    keys = [0, 30, 60, 90]
    runs = plan_runs([95, 10, 20, 35, 65, 70, 20], keys)
    assert runs == [Run(0, (10, 20)), Run(30, (35,)), Run(60, (65, 70)), Run(90, (95,))]
    assert [r.span for r in runs] == [21, 6, 11, 6]
    # 29 then 31: keyframe 30 lies between, so seeking to it beats decoding on.
    assert plan_runs([29, 31], keys) == [Run(0, (29,)), Run(30, (31,))]
    # 31 then 59: no keyframe between, one run.
    assert plan_runs([31, 59], keys) == [Run(30, (31, 59))]


def test_seek_floor_counts_each_target_from_its_keyframe():
    # (10-0+1) + (20-0+1) + (35-30+1) = 11 + 21 + 6
    assert seek_floor_frames([10, 20, 35], [0, 30]) == 38


# Cases the first mutation run showed no test pinned down (docs/mutation.md).


def test_bad_options_say_what_was_given():
    with pytest.raises(ValueError, match=r"count must be positive, got 0"):
        uniform_times(0.0, 1.0, 0)
    with pytest.raises(ValueError, match=r"need 1 <= min_frames <= max_frames, got 4, 2"):
        crop_frame_count(0, 1, fps=1.0, min_frames=4, max_frames=2)
    with pytest.raises(ValueError, match=r"need 1 <= min_frames <= max_frames, got 0, 2"):
        crop_frame_count(0, 1, fps=1.0, min_frames=0, max_frames=2)
    with pytest.raises(ValueError, match=r"fps must be positive, got 0.0"):
        crop_frame_count(0, 1, fps=0.0, min_frames=2, max_frames=4)


def test_crop_frame_count_edges_of_the_range():
    # min_frames=1 is allowed: the smallest even count >= 1 is 2 (0.3 s at 1 fps rounds to 0 -> 2).
    assert crop_frame_count(0.0, 0.3, fps=1.0, min_frames=1, max_frames=4) == 2
    # [4, 5] holds one even count, 4 (lo == hi == 4): a 100 s crop gets 4, not max_frames=5.
    assert crop_frame_count(0.0, 100.0, fps=1.0, min_frames=4, max_frames=5) == 4


def test_nearest_keyframe_when_the_first_keyframe_is_not_frame_0():
    keys = [2, 5]  # at 0.2 and 1.0
    assert nearest_keyframe(TIMES, keys, 0.05) == 2  # before the first keyframe: the first keyframe
    # 0.65 is 0.45 after 0.2 and 0.35 before 1.0: the later one (|1.0-0.65| < |0.65-0.2|)
    assert nearest_keyframe(TIMES, keys, 0.65) == 5
    # 0.55 is 0.35 after 0.2 and 0.45 before 1.0: the earlier one
    assert nearest_keyframe(TIMES, keys, 0.55) == 2


def test_preceding_keyframe_is_the_first_keyframe_when_only_it_precedes():
    assert preceding_keyframe([5, 9], 6) == 5
    assert preceding_keyframe([5, 9], 5) == 5


def test_a_target_on_its_own_keyframe_continues_the_run_it_ends():
    # 5 is a keyframe and a target; 7's keyframe is 5, the previous target: decoding on from 5 reaches 7
    # without a new seek, so one run.
    assert plan_runs([5, 7], [0, 5]) == [Run(5, (5, 7))]
    assert plan_runs([], [0, 5]) == []
