"""How often the materialize path hands a regex to Arrow.

``pc.match_substring_regex`` compiles its RE2 pattern on every call (Arrow keeps no compiled-pattern cache):
the first-message patterns are ~4.4 KB and cost ~1.5 ms to compile each, the tail pattern ~9 KB and ~2 ms
(measured here on 2 cores). So each pattern must be handed to Arrow once per file (first message, shared
by every batch) or once per batch (the rows), never once per row or per check.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from paravt_core.data import validate
from paravt_core.data.materialize import Target, materialize_file
from tests.support.data_support import messages, sft_table


def test_regex_kernels_run_once_per_file_or_per_batch(tmp_path: Path, monkeypatch) -> None:
    calls: Counter[str] = Counter()
    names = {
        validate._FIRST_MESSAGE_RE: "first_message",
        validate._OPENS_WITH_ASSISTANT_RE: "opens_with_assistant",
        validate._TAIL_RE: "tail",
        validate._TAIL_ENDS_WITH_ASSISTANT_RE: "tail_ends_with_assistant",
        validate._TAIL_WITH_ASSISTANT_RE: "tail_with_assistant",
        validate.CANONICAL_ENDS_WITH_ASSISTANT_RE: "row_ends_with_assistant",
        validate.CANONICAL_MESSAGES_RE: "row_with_assistant",
    }
    real = pc.match_substring_regex

    def counting(strings, pattern, *args, **kwargs):
        calls[names.get(pattern, pattern)] += 1
        return real(strings, pattern, *args, **kwargs)

    monkeypatch.setattr(pc, "match_substring_regex", counting)
    # other tests may have seen this system prompt already (getattr: the check must fail on the count, not
    # here, when someone drops the cache)
    getattr(validate._first_message_shape, "cache_clear", lambda: None)()

    # 21 canonical rows sharing their first message (the system prompt), read as 3 batches of 7.
    rows = [json.dumps(messages(f"selfqa/v{i}.mp4")) for i in range(21)]
    src = tmp_path / "paravt_sft_x_21.parquet"
    pq.write_table(sft_table(rows), src)
    report = materialize_file(
        str(src),
        Target("/m"),
        str(tmp_path / "o.parquet"),
        str(tmp_path / "r.parquet"),
        batch_rows=7,
        threads=1,
    )
    assert (report.rows, report.kept, report.python_rows) == (21, 21, 0)
    # By hand: the first message's two patterns once for the file; every row starts with that message and
    # ends with the assistant's, so one tail pass per batch (3) and no second pass, no whole-row pattern.
    assert dict(calls) == {"first_message": 1, "opens_with_assistant": 1, "tail_ends_with_assistant": 3}
