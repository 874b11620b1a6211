"""Shared by several test modules (from tests/unit/test_data_validate.py, where it was first written)."""

from __future__ import annotations

import pyarrow as pa

MESSAGE_TYPE = pa.list_(
    pa.struct(
        [
            ("role", pa.string()),
            (
                "content",
                pa.list_(
                    pa.struct(
                        [
                            ("type", pa.string()),
                            ("text", pa.string()),
                            ("video_url", pa.struct([("url", pa.string())])),
                            ("image_url", pa.struct([("url", pa.string())])),
                        ]
                    )
                ),
            ),
        ]
    )
)
