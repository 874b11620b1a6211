"""What rank 0 sends the other learner ranks each step: the learner's view of the samples, without pixels.

A rollout ``Sample`` carries the whole episode (conversation, processor, messages, tool records) and every
segment's float32 ``pixel_values`` next to the uint8 frames they were made from. The learner needs only, per
trainable sample, its group, its reward and its traces' tokens / masks / behaviour log-probs / frames.
:func:`compact` keeps exactly that with the frames as uint8 (4 x smaller than float32 pixels, and the
processor's patch layout repeats each frame ``temporal_patch_size`` times); :func:`restore` re-runs the same
image processor with the same pixel budget on every rank, which gives back the very ``pixel_values`` the
rollout encoded (docs/method.md §3: identical frames for rollout and learner; checked bit for bit in the tests).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from paravt_core.agent.segments import Trace


@dataclass
class LearnerReward:
    total: float


@dataclass
class LearnerEpisode:
    main: Trace
    subagent_traces: list[Trace] = field(default_factory=list)


@dataclass
class LearnerSample:
    """The fields of ``rollout.Sample`` that ``Learner.step`` reads."""

    group: int
    index: int
    reward: LearnerReward
    episode: LearnerEpisode
    trainable: bool = True


def _strip(trace: Trace) -> Trace:
    out = Trace(trace.role)
    for seg in trace.segments:
        if seg.images:  # frames are often views of a whole decoded clip: pickle would send the clip
            seg = dataclasses.replace(seg, pixel_values=None, images=[im.clone() for im in seg.images])
        out.append(seg)
    return out


def compact(samples: list[Any]) -> list[LearnerSample]:
    """The trainable samples' learner view: no pixel tensors (frames stay as uint8), no episode records."""
    return [
        LearnerSample(
            group=s.group,
            index=s.index,
            reward=LearnerReward(float(s.reward.total)),
            episode=LearnerEpisode(_strip(s.episode.main), [_strip(t) for t in s.episode.subagent_traces]),
        )
        for s in samples
        if s.trainable
    ]


def restore(
    samples: list[LearnerSample], processor: Any, images_kwargs: dict[str, Any]
) -> list[LearnerSample]:
    """Each segment's ``pixel_values`` made again from its frames by ``processor`` (in place; returned)."""
    for s in samples:
        for trace in [s.episode.main, *s.episode.subagent_traces]:
            for seg in trace.segments:
                if seg.images and seg.pixel_values is None:
                    out = processor.image_processor(
                        images=list(seg.images), return_tensors="pt", **images_kwargs
                    )
                    seg.pixel_values = out["pixel_values"]
    return samples
