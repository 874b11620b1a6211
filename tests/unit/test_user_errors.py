"""The project's user errors share ``ParavtUserError`` and keep their own bases: ``paravt`` prints each as it is
(exit status 1, no traceback hint), and code that catches ``RuntimeError`` or ``ValueError`` still catches them."""

from __future__ import annotations

import importlib

import pytest

from paravt_core import cli_errors as ce
from paravt_core.user_errors import ParavtUserError

# (module, class, the base it had before the shared one): the twelve the CLI printed as they are.
USER_ERRORS = [
    ("paravt_core.data.validate", "DataError", RuntimeError),
    ("paravt_core.engines.base", "EngineError", RuntimeError),
    ("paravt_core.eval.stage", "EvalError", RuntimeError),
    ("paravt_core.eval.formats", "FormatError", ValueError),
    ("paravt_core.eval.records", "RecordError", RuntimeError),
    ("paravt_core.video.errors", "VideoError", Exception),
    ("paravt_core.sft.data", "SftDataError", RuntimeError),
    ("paravt_core.sft.trainer", "SftError", RuntimeError),
    ("paravt_core.cli_errors", "PreflightError", RuntimeError),
    ("pipelines.cluster", "ClusterError", RuntimeError),
    ("pipelines.local", "DemoError", RuntimeError),
    ("paravt_core.report.stage", "ReportError", RuntimeError),
]


@pytest.mark.parametrize(("module", "name", "base"), USER_ERRORS)
def test_each_user_error_derives_from_the_base_and_keeps_its_own(module, name, base):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, ParavtUserError) and issubclass(cls, base)
    assert ce.classify(cls("no rows in x.parquet\nfix the path"), "data") == (
        1,
        "paravt data: no rows in x.parquet; fix the path",
    )


def test_a_new_error_needs_only_the_base():
    class ShardError(ParavtUserError, KeyError):
        pass

    assert ce.classify(ShardError("shard 3 of 2"), "eval") == (1, "paravt eval: 'shard 3 of 2'")
    assert ce.classify(KeyError("shard 3 of 2"), "eval")[1].startswith("paravt eval: unexpected KeyError")
