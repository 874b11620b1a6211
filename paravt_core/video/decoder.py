"""Seek-based exact frame decoding with PyAV, and a thread-safe cache of open decoders.

How a request is served:
1. The first time a file is used, a *frame table* is built: every presentation timestamp in display order
   and which frames are keyframes. Constant-rate MP4/MOV files get it from the container index in
   milliseconds; anything else has its packets demuxed once (no decoding), ~1.5 s per hour of 30 fps video.
2. Requested frames are grouped into runs (``sampling.plan_runs``): one seek to a keyframe, then decoding
   forward through every target that has no keyframe in front of it. Runs are spread over threads, each
   with its own decoder handle (a decoder is stateful and must not be shared by two threads at once).
3. While decoding a run, packets of frames that are neither requested nor used as references by other
   frames are dropped before decoding (libavcodec ``skip_frame = NONREF``, set per packet): the frames we
   return are bit-identical, we just skip work nobody looks at.
4. A frame is returned only if its decoded timestamp is exactly the one in the table, so the frame index
   and timestamp we report are the true ones.

The table is the timeline a player presents: packets the container marks as discarded (the part an MP4
edit list cuts away, e.g. after ``ffmpeg -ss 1.3 -c copy``) are decoded as references but are not frames
of the timeline. Times in seconds start where a player's seek bar starts: at the container's start, the
earliest first timestamp of its video and audio streams (ffprobe's ``format=start_time``; mpv rebases its
clock to the same point). So a transport stream that starts late or whose 33-bit clock wraps (ffmpeg then
reports it from a negative time), and a video-only MP4 delayed by an edit list, all start at 0; a video
that starts after its audio starts that much after 0. Every time is >= 0, so every frame can be cropped. Frames come out as a player shows them (display matrix and sample aspect ratio, see
``display.py``). Where a seek lands after the frames we need (MPEG-TS seeks by decode time, some files have
odd indexes), decoding falls back to earlier keyframes and finally restarts from the file's first byte.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction

import av
import av.error
import numpy as np

from .display import Display, display_from_matrix
from .errors import VideoDecodeError, VideoNotFoundError
from .sampling import Run

# swscale's bicubic widens its kernel when shrinking, so downscaling is anti-aliased.
_INTERPOLATION = "BICUBIC"


@dataclass(frozen=True)
class FrameTable:
    """Timestamps of every frame of the video stream in display order (stream time-base units)."""

    path: str
    pts: np.ndarray  # int64, strictly increasing
    keyframes: tuple[int, ...]  # display indices of keyframes
    time_base: Fraction
    end_pts: int  # timestamp where the last frame stops being shown
    width: int
    height: int
    codec: str
    times: list[float] = field(repr=False)  # seconds from the timeline's start (see ``origin``), for bisect
    from_index: bool = False  # built from the container index (fast path) rather than a full packet scan
    display: Display = field(default_factory=Display)  # how a player shows the decoded pictures
    origin: Fraction = Fraction(0)  # where the timeline's 0 is, in seconds on the stream's own clock

    @property
    def shown_width(self) -> int:
        return self.display.shown_size(self.width, self.height)[0]

    @property
    def shown_height(self) -> int:
        return self.display.shown_size(self.width, self.height)[1]

    @property
    def num_frames(self) -> int:
        return len(self.times)

    @property
    def start_time(self) -> float:
        return self.times[0]

    @property
    def end_time(self) -> float:
        return float(self.end_pts * self.time_base - self.origin)


@dataclass
class DecodeStats:
    """Work counters, summed over all handles of a cache (for benchmarks and tests of the skip logic)."""

    seeks: int = 0
    packets_sent: int = 0
    packets_skippable: int = 0  # sent with skip_frame=NONREF (not decoded if the frame is not a reference)
    frames_out: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, seeks: int, sent: int, skipped: int, out: int) -> None:
        with self.lock:
            self.seeks += seeks
            self.packets_sent += sent
            self.packets_skippable += skipped
            self.frames_out += out

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {
                "seeks": self.seeks,
                "packets_sent": self.packets_sent,
                "packets_skippable": self.packets_skippable,
                "frames_out": self.frames_out,
            }


def _open_container(path: str) -> tuple[av.container.InputContainer, av.video.stream.VideoStream]:
    try:
        container = av.open(path, mode="r", metadata_errors="ignore")
    except FileNotFoundError as exc:
        raise VideoNotFoundError(f"video not found: {path}") from exc
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as exc:
        raise VideoDecodeError(f"cannot open {path} as a video: {_reason(exc)}") from exc
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        container.close()
        raise VideoDecodeError(f"{path} has no video stream (streams: {', '.join(kinds)})")
    stream = container.streams.video[0]
    ctx = stream.codec_context
    ctx.thread_count = 1  # parallelism comes from decoding runs on several handles, not inside one
    return container, stream


def read_display(path: str) -> Display:
    """How a player shows the frames of ``path``: the display matrix the decoder attaches to the first frame
    (FFmpeg carries the container's matrix there) and the stream's sample aspect ratio."""
    container, stream = _open_container(path)
    matrix = None
    with container:
        try:
            for frame in container.decode(stream):
                for side in frame.side_data:
                    if side.type.name == "DISPLAYMATRIX":
                        matrix = np.frombuffer(bytes(side), dtype=np.int32).tolist()
                break
        except av.error.FFmpegError:
            pass  # unreadable start: scanning or decoding reports the damage with a better message
        sar = stream.sample_aspect_ratio or stream.codec_context.sample_aspect_ratio
    return display_from_matrix(matrix, Fraction(sar) if sar else None)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


_MOV_FORMATS = {"mov", "mp4", "m4a", "3gp", "3g2", "mj2"}
_INDEX_KEYFRAME = 1  # AVINDEX_KEYFRAME
_INDEX_DISCARD = 4  # AVINDEX_DISCARD_FRAME
_HEAD_PACKETS = 32  # more than any decoder's reorder depth: the first shown frame is among them


def table_from_index(path: str, container: av.container.InputContainer, stream) -> FrameTable | None:
    """Fast path for constant-rate MP4/MOV: the demuxer already holds every sample's decode timestamp and
    keyframe flag, so a uniform decode step means the display timestamps are ``first + i * step``.
    Returns None when that does not hold (variable rate, edit-list discards, other containers).

    A closed-GOP keyframe is shown after everything decoded before it and before everything after it, so
    its display index is its decode index; where that guess is wrong (open GOPs) decoding only seeks a
    little earlier. Every decoded frame is still checked against these timestamps (see ``Handle``).
    """
    if not _MOV_FORMATS.intersection(container.format.name.split(",")):
        return None
    entries = stream.index_entries
    count = len(entries)
    if count < 2:
        return None
    dts = np.empty(count, dtype=np.int64)
    flags = np.empty(count, dtype=np.int64)
    for i, entry in enumerate(entries):
        dts[i] = entry.timestamp
        flags[i] = entry.flags
    step = int(dts[1] - dts[0])
    if step <= 0 or (flags & _INDEX_DISCARD).any() or not (np.diff(dts) == step).all():
        return None
    head: list[int] = []
    try:
        for packet in container.demux(stream):
            if packet.size == 0 or packet.pts is None:
                break
            head.append(packet.pts)
            if len(head) >= min(_HEAD_PACKETS, count):
                break
    except av.error.FFmpegError:
        return None
    if len(head) < min(_HEAD_PACKETS, count):
        return None
    first = min(head)
    if any((p - first) % step for p in head):
        return None
    pts = first + step * np.arange(count, dtype=np.int64)
    keyframes = np.flatnonzero(flags & _INDEX_KEYFRAME)
    return _make_table(path, stream, pts, keyframes, int(pts[-1]) + step, from_index=True)


def _make_table(
    path: str, stream, pts: np.ndarray, keyframes: np.ndarray, end_pts: int, *, from_index: bool
) -> FrameTable:
    time_base = Fraction(stream.time_base or Fraction(1, 1))
    ctx = stream.codec_context
    origin = timeline_origin(stream, int(pts[0]) * time_base)
    # (pts * num - origin) / den as one exact integer division, so 1980/600 is 3.3, not 3.3000000000000003.
    scale = time_base.numerator * origin.denominator
    shift = origin.numerator * time_base.denominator
    den = time_base.denominator * origin.denominator
    return FrameTable(
        path=path,
        pts=pts,
        keyframes=tuple(int(i) for i in keyframes),
        time_base=time_base,
        end_pts=int(end_pts),
        width=int(ctx.width or 0),
        height=int(ctx.height or 0),
        codec=ctx.name,
        times=[(p * scale - shift) / den for p in pts.tolist()],
        from_index=from_index,
        origin=origin,
    )


def timeline_origin(stream, first_shown: Fraction) -> Fraction:
    """Where a player's seek bar starts, in seconds on the container's clock: the earliest of the video's
    first shown frame (``first_shown``) and the audio streams' first timestamps. Exact rationals, not the
    container's microsecond ``start_time``, so a video-only file's first frame is at exactly 0.0. Subtitle
    and data streams do not count (ffmpeg leaves them out of the start time too)."""
    starts = [first_shown]
    container = getattr(stream, "container", None)
    for audio in container.streams.audio if container is not None else ():
        if audio.start_time is not None and audio.time_base:
            starts.append(audio.start_time * Fraction(audio.time_base))
    return min(starts)


def build_table(path: str, *, full_scan: bool = False) -> FrameTable:
    """Frame table of the first video stream: from the container index when possible, else by a full
    packet scan (each on a container of its own, read from the start)."""
    table = None
    if not full_scan:
        container, stream = _open_container(path)
        with container:
            table = table_from_index(path, container, stream)
    if table is None:
        container, stream = _open_container(path)
        with container:
            table = scan_table(path, container, stream)
    return dataclasses.replace(table, display=read_display(path))


def scan_table(path: str, container: av.container.InputContainer, stream) -> FrameTable:
    """Demux every packet of ``stream`` once (no decoding) and build its frame table. Works for any
    container and frame rate; costs about 10 us per frame in Python (1-2 s for an hour at 30 fps)."""

    pts: list[int] = []
    keys: list[bool] = []
    ends: list[int] = []
    try:
        for packet in container.demux(stream):
            if packet.size == 0:  # the demuxer's end-of-stream marker
                continue
            if packet.is_discard:  # cut away by an edit list: decoded as a reference, never shown
                continue
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is None:
                continue
            pts.append(ts)
            keys.append(packet.is_keyframe)
            ends.append(ts + (packet.duration or 0))
    except av.error.FFmpegError as exc:
        if not pts:
            raise VideoDecodeError(f"cannot read packets of {path}: {_reason(exc)}") from exc
        # A damaged tail: serve the part that reads; decoding reports frames that do not come out.
    if not pts:
        raise VideoDecodeError(f"{path} has a video stream without any frames")
    order = np.argsort(np.asarray(pts, dtype=np.int64), kind="stable")
    sorted_pts = np.asarray(pts, dtype=np.int64)[order]
    keep = np.ones(len(sorted_pts), dtype=bool)
    keep[1:] = sorted_pts[1:] != sorted_pts[:-1]  # duplicate timestamps cannot be told apart: keep one
    key_sorted = np.asarray(keys, dtype=bool)[order][keep]
    sorted_pts = sorted_pts[keep]
    time_base = Fraction(stream.time_base or Fraction(1, 1))
    last_ticks = _last_frame_ticks(sorted_pts, max(ends) - int(sorted_pts[-1]), stream, time_base)
    keyframes = np.flatnonzero(key_sorted)
    return _make_table(
        path, stream, sorted_pts, keyframes, int(sorted_pts[-1]) + last_ticks, from_index=False
    )


def _last_frame_ticks(pts: np.ndarray, packet_ticks: int, stream, time_base: Fraction) -> int:
    """How long the last frame is shown. Taken from the last timestamp step, not from packet durations:
    with B-frames and a variable rate, MP4 sample durations follow decode order and are off by a frame."""
    if len(pts) > 1:
        return int(pts[-1] - pts[-2])
    if packet_ticks > 0:
        return packet_ticks
    rate = stream.guessed_rate or stream.average_rate
    return max(1, round(1 / (Fraction(rate) * time_base))) if rate else max(1, round(1 / time_base))


class Handle:
    """One open container and decoder. Not thread-safe: the cache lends it to one thread at a time."""

    def __init__(self, path: str, stats: DecodeStats):
        self.path = path
        self.stats = stats
        self.owner: _Entry | None = None  # set by the cache that lends it
        self.container, self.stream = _open_container(path)

    def close(self) -> None:
        self.container.close()

    def _seek(self, pts: int | None) -> None:
        """Position the demuxer before ``pts``; ``None`` restarts from the first byte of the file (a fresh
        container: seeking to the first timestamp is not the same where a demuxer seeks by decode time)."""
        if pts is None:
            self.container.close()
            self.container, self.stream = _open_container(self.path)
            return
        self.container.seek(int(pts), stream=self.stream, backward=True, any_frame=False)
        self.stream.codec_context.flush_buffers()  # no frame of before the seek, and out of draining mode

    def decode_run(
        self, table: FrameTable, run: Run, size: tuple[int, int], convert: Callable
    ) -> dict[int, np.ndarray]:
        """Decode every target of ``run``: returns display index -> HxWx3 uint8 frame at ``size`` (h, w)."""
        wanted = {int(table.pts[i]): i for i in run.targets}
        last = int(table.pts[run.targets[-1]])
        # Seek to the run's keyframe; if the demuxer lands after our first target (MPEG-TS seeks by decode
        # time, unusual indexes), back off to earlier keyframes and finally restart from the file start.
        earlier = [k for k in table.keyframes if k < run.keyframe][-2:]
        points: list[int | None] = [int(table.pts[k]) for k in (run.keyframe, *reversed(earlier))]
        missing: list[int] = []
        for seek_pts in [*dict.fromkeys(points), None]:  # in order, without repeats, then the restart
            got, missing = self._decode_from(seek_pts, wanted, last, size, convert)
            if not missing:
                return got
        times = ", ".join(f"{table.times[i]:.3f}s" for i in missing[:5])
        raise VideoDecodeError(
            f"frames at {times} of {self.path} could not be decoded (damaged or truncated file)"
        )

    def _decode_from(
        self,
        seek_pts: int | None,
        wanted: dict[int, int],
        last: int,
        size: tuple[int, int],
        convert: Callable,
    ) -> tuple[dict[int, np.ndarray], list[int]]:
        got: dict[int, np.ndarray] = {}
        sent = skipped = out = 0
        ctx = self.stream.codec_context
        try:
            self._seek(seek_pts)
            ctx = self.stream.codec_context  # a restart opens a new container
            done = False
            started = seek_pts is None  # from the file start everything is decoded, as a plain decode does
            for packet in self.container.demux(self.stream):
                if packet.size == 0:
                    packet = None  # end of file: drain the frames still held for reordering
                else:
                    # After a seek, decoding starts at a keyframe: what the seek lands on before it cannot
                    # be decoded correctly (decoders may output such frames, damaged, with a valid pts).
                    started = started or packet.is_keyframe
                    if not started:
                        continue
                    ts = packet.pts if packet.pts is not None else packet.dts
                    # Only frames nobody asked for may be skipped, and NONREF keeps every reference frame.
                    ctx.skip_frame = "DEFAULT" if ts in wanted else "NONREF"
                    sent += 1
                    skipped += ts not in wanted
                for frame in ctx.decode(packet):
                    out += 1
                    ts = frame.pts
                    if ts in wanted and ts not in got:
                        got[ts] = convert(frame, size)
                    if ts is not None and ts >= last:
                        done = True
                if done or packet is None:
                    break
        except av.error.FFmpegError as exc:
            if not got:
                raise VideoDecodeError(f"decoding {self.path} failed: {_reason(exc)}") from exc
        finally:
            ctx.skip_frame = "DEFAULT"
            self.stats.add(1, sent, skipped, out)
        result = {wanted[ts]: arr for ts, arr in got.items()}
        missing = sorted(i for ts, i in wanted.items() if ts not in got)
        return result, missing

    def decode_keyframe(
        self, table: FrameTable, index: int, size: tuple[int, int], convert: Callable
    ) -> np.ndarray:
        """Decode the keyframe at display index ``index`` alone (one packet, then drain)."""
        target = int(table.pts[index])
        ctx = self.stream.codec_context
        sent = out = 0
        try:
            self._seek(target)
            for packet in self.container.demux(self.stream):
                if packet.size == 0:
                    break
                sent += 1
                # The decoder may hold the frame back for reordering; draining releases it.
                for frame in [*ctx.decode(packet), *ctx.decode(None)]:
                    out += 1
                    if frame.pts == target:
                        return convert(frame, size)
                break
        except av.error.FFmpegError as exc:
            raise VideoDecodeError(f"decoding {self.path} failed: {_reason(exc)}") from exc
        finally:
            self.stats.add(1, sent, 0, out)
        # The demuxer did not land on the keyframe: fall back to exact decoding of that frame.
        return self.decode_run(table, Run(index, (index,)), size, convert)[index]


_AS_DECODED = Display()


def to_rgb(frame: av.VideoFrame, size: tuple[int, int], display: Display = _AS_DECODED) -> np.ndarray:
    """Frame -> HxWx3 uint8 RGB as a player shows it, at ``size`` = (height, width) of the shown picture.

    One swscale resize from the coded picture to the (possibly transposed) target applies the sample aspect
    ratio and the pixel budget together; rotation and mirroring are then exact array transposes and flips.
    """
    h, w = display.decode_size(size)
    rgb = frame.to_ndarray(format="rgb24", width=w, height=h, interpolation=_INTERPOLATION)
    return display.apply(rgb)


@dataclass
class _Entry:
    key: tuple[int, int]  # (mtime_ns, size): a rewritten file gets a fresh table
    table: FrameTable
    idle: list[Handle] = field(default_factory=list)
    evicted: bool = False


_ALL_CACHES: weakref.WeakSet[DecoderCache] = weakref.WeakSet()


def _reset_caches_in_child() -> None:
    for cache in list(_ALL_CACHES):
        cache._reset()


class DecoderCache:
    """LRU of open videos keyed by local path; each keeps its frame table and a few idle handles.

    ``acquire`` lends a handle to the calling thread (opening a new one when all are busy), ``release``
    gives it back. Two threads never hold the same handle, so decoding needs no lock; the cache's own
    bookkeeping is under one lock and never blocks on decoding.
    """

    def __init__(self, max_videos: int = 8, max_idle_per_video: int | None = None):
        self.max_videos = max_videos
        self.max_idle_per_video = max_idle_per_video or default_workers()
        self.stats = DecodeStats()
        self._reset()
        _ALL_CACHES.add(self)

    def _reset(self) -> None:
        """Fresh, empty state. Also what a forked child gets: handles and locks of the parent are not
        usable there (shared file offsets, locks possibly held by threads that do not exist)."""
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._open_locks: dict[str, threading.Lock] = {}

    def table(self, path: str) -> FrameTable:
        """The frame table of ``path`` (built on first use, rebuilt if the file changed)."""
        return self._ensure(path).table

    def _lookup(self, path: str, key: tuple[int, int]) -> _Entry | None:
        """Entry for ``path`` if it describes the file as it is now (caller holds the lock)."""
        entry = self._entries.get(path)
        if entry is not None and entry.key != key:
            self._drop(path)
            return None
        if entry is not None:
            self._entries.move_to_end(path)
        return entry

    def _ensure(self, path: str) -> _Entry:
        key = _file_key(path)
        with self._lock:
            entry = self._lookup(path, key)
            if entry is not None:
                return entry
            open_lock = self._open_locks.setdefault(path, threading.Lock())
        # First use of this file: one thread builds its table, the others wait for it.
        with open_lock:
            with self._lock:
                entry = self._lookup(path, key)
            if entry is not None:
                return entry
            return self._install(path, key, build_table(path))

    def acquire(self, path: str) -> Handle:
        """Lend a handle on ``path`` to the calling thread; give it back with ``release``."""
        entry = self._ensure(path)
        with self._lock:
            if entry.idle and not entry.evicted:
                return entry.idle.pop()
        handle = Handle(path, self.stats)
        handle.owner = entry  # a handle goes back only to the entry (file version) it was opened for
        return handle

    def _install(self, path: str, key: tuple[int, int], table: FrameTable) -> _Entry:
        entry = _Entry(key, table)
        with self._lock:
            if path in self._entries:
                self._drop(path)
            self._entries[path] = entry
            while len(self._entries) > self.max_videos:
                self._drop(next(iter(self._entries)))
        return entry

    def rescan(self, path: str) -> FrameTable:
        """Rebuild the table of ``path`` by a full packet scan (used when the fast index path was wrong)."""
        key = _file_key(path)
        table = build_table(path, full_scan=True)
        self._install(path, key, table)
        return table

    def release(self, handle: Handle) -> None:
        try:
            handle.stream.codec_context.flush_buffers()  # an idle handle keeps no decoded frames in memory
        except av.error.FFmpegError:
            handle.close()
            return
        with self._lock:
            entry = handle.owner
            if entry is not None and not entry.evicted and len(entry.idle) < self.max_idle_per_video:
                entry.idle.append(handle)
                return
        handle.close()

    def _drop(self, path: str) -> None:
        entry = self._entries.pop(path)
        self._open_locks.pop(path, None)
        entry.evicted = True
        for handle in entry.idle:
            handle.close()
        entry.idle.clear()

    def clear(self) -> None:
        with self._lock:
            for path in list(self._entries):
                self._drop(path)

    def open_paths(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def decode(
        self,
        table: FrameTable,
        runs: Sequence[Run],
        size: tuple[int, int],
        *,
        max_workers: int | None = None,
        keyframes_only: bool = False,
    ) -> dict[int, np.ndarray]:
        """Decode all targets of ``runs`` (display indices of ``table``) at ``size``, runs spread over
        threads."""
        path = table.path

        def convert(frame: av.VideoFrame, size: tuple[int, int]) -> np.ndarray:
            return to_rgb(frame, size, table.display)

        def work(run: Run) -> dict[int, np.ndarray]:
            handle = self.acquire(path)
            ok = False
            try:
                if keyframes_only:
                    part = {i: handle.decode_keyframe(table, i, size, convert) for i in run.targets}
                else:
                    part = handle.decode_run(table, run, size, convert)
                ok = True
                return part
            finally:
                if ok:
                    self.release(handle)
                else:
                    handle.close()  # state unknown after a failure: do not lend it again

        workers = max(1, min(max_workers or default_workers(), len(runs)))
        result: dict[int, np.ndarray] = {}
        if workers == 1:
            for run in runs:
                result.update(work(run))
            return result
        # Longest runs first so the last thread does not start a big run when the others are idle.
        ordered = sorted(runs, key=lambda r: r.span, reverse=True)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="paravt-decode") as pool:
            for part in pool.map(work, ordered):
                result.update(part)
        return result


os.register_at_fork(after_in_child=_reset_caches_in_child)


def default_workers() -> int:
    """Threads for decoding: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _file_key(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        raise VideoNotFoundError(f"video not found: {path}") from exc
    except OSError as exc:
        raise VideoNotFoundError(f"cannot access video {path}: {exc}") from exc
    if not os.path.isfile(path):
        raise VideoNotFoundError(f"not a regular file: {path}")
    return st.st_mtime_ns, st.st_size
