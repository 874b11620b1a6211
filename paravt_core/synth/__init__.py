"""Synthetic ParaVT data and test videos, built locally with ffmpeg (no download).

Public API::

    synthesize(out_dir, videos=8, seconds=12.0, seed=0) -> SynthResult   # the whole dataset (dataset.py)
    load_manifest(out_dir) -> dict                                        # its ground truth (manifest.py)
    write_video(path, events, seconds, fps, size)    # one event video: shapes at known times (scenes.py)
    write_coded_video(path, segments, gop=...)       # frames that show their own index (codes.py)
    read_code(frame) -> index; code_image(index)
    encode_frames(path, frames, fps=..., codec=...)  # the one writer under all of them (writer.py)

Modules: ``scenes`` (pixels of the event videos), ``codes`` (index-coded videos), ``writer`` (ffmpeg),
``rows`` (questions and tool-call traces), ``tables`` (the parquets), ``archives`` (sentinel layout and
zips), ``manifest`` (ground truth), ``dataset`` (``synthesize``).
"""

from paravt_core.synth.codes import TIMESCALE, code_image, read_code, segment_ticks, write_coded_video
from paravt_core.synth.dataset import make_schedule, synthesize
from paravt_core.synth.manifest import SynthResult, load_manifest
from paravt_core.synth.scenes import COLOURS, SHAPES, Event, write_video
from paravt_core.synth.writer import encode_frames

__all__ = [
    "COLOURS",
    "SHAPES",
    "TIMESCALE",
    "Event",
    "SynthResult",
    "code_image",
    "encode_frames",
    "load_manifest",
    "make_schedule",
    "read_code",
    "segment_ticks",
    "synthesize",
    "write_coded_video",
    "write_video",
]
