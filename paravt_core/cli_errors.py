"""How the CLI ends: every expected failure as one line naming the problem and the next step.

``classify(err)`` maps an exception to (exit status, message): 2 for usage and config errors, 1 for failures
of the inputs, storage, network or device. Anything not recognised is still one line (its type and message)
with the hint to rerun with ``--debug`` (or ``PARAVT_DEBUG=1``), which shows the traceback instead.
``preflight`` holds the checks a stage makes before it loads a model: the device exists, the output is
writable and is not another stage's complete result.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from paravt_core.user_errors import ParavtUserError

USAGE, FAILURE, INTERRUPTED = 2, 1, 130
DEBUG_HINT = "rerun with --debug (or PARAVT_DEBUG=1) for the traceback"


class UsageError(Exception):
    """A bad argument found after parsing (e.g. an unknown pipeline name): one line, exit status 2."""


class PreflightError(ParavtUserError, RuntimeError):
    """A stage cannot start here (no such device, an output it must not write): one line, exit status 1."""


def one_line(text: str) -> str:
    """Collapse a multi-line message into one line (the lines joined with "; ")."""
    parts = [p.strip() for p in str(text).splitlines() if p.strip()]
    return "; ".join(parts) if parts else ""


def debug_enabled(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("PARAVT_DEBUG", "").strip() not in ("", "0", "false")


def _loaded(module: str) -> Any:
    """A module only if something already imported it: an exception of a library that was never imported
    cannot be the one at hand, and importing it here would cost seconds (torch, transformers)."""
    return sys.modules.get(module)


def _storage_message(err: BaseException) -> str | None:
    """S3 failures (botocore) as one sentence with the next step; None for anything else."""
    bce = _loaded("botocore.exceptions")
    if bce is None:
        return None
    if isinstance(err, bce.NoCredentialsError | bce.PartialCredentialsError):
        return "storage: no S3 credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
    if isinstance(err, bce.EndpointConnectionError | bce.ConnectTimeoutError | bce.ConnectionClosedError):
        endpoint = getattr(err, "kwargs", {}).get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL", "")
        where = f" {endpoint}" if endpoint else ""
        return f"storage: cannot reach the S3 endpoint{where}; check AWS_ENDPOINT_URL and the network"
    if isinstance(err, bce.ClientError):
        info = err.response.get("Error", {})
        op = getattr(err, "operation_name", "") or "request"
        return f"storage: S3 {op} failed: {info.get('Code', '?')}: {info.get('Message', '') or err}"
    if isinstance(err, bce.BotoCoreError):
        return f"storage: {err}"
    return None


def _network_message(err: BaseException) -> str | None:
    """Hugging Face hub and HTTP failures as one sentence; None for anything else."""
    hfe = _loaded("huggingface_hub.errors")
    if hfe is not None:
        if isinstance(err, hfe.LocalEntryNotFoundError | hfe.OfflineModeIsEnabled):
            return (
                f"network: cannot download from the Hugging Face hub ({one_line(err)[:200]}); "
                "check the network, HF_HUB_OFFLINE, or point the source at a local copy"
            )
        if isinstance(err, hfe.RepositoryNotFoundError | hfe.GatedRepoError):
            return f"network: the Hugging Face hub refused the repository ({one_line(err)[:200]}); check the id and HF_TOKEN"
        if isinstance(err, hfe.HfHubHTTPError):
            return f"network: Hugging Face hub error: {one_line(err)[:200]}"
    requests = _loaded("requests")
    if requests is not None and isinstance(err, requests.ConnectionError | requests.Timeout):
        return f"network: {one_line(err)[:200]}"
    return None


def _is_user_error(err: BaseException) -> bool:
    """An error whose message is complete for the user (``ParavtUserError``, which the project's own error
    classes derive from, or a missing/unreadable file): printed as it is."""
    return isinstance(err, ParavtUserError | FileNotFoundError | PermissionError | IsADirectoryError)


def classify(err: BaseException, command: str) -> tuple[int, str]:
    """(exit status, the one line to print) for an exception that ended ``paravt <command>``."""
    from paravt_core.config_base import ConfigError  # here, not at the top: the CLI imports this module
    # before its Ctrl-C handling is in place, so it stays stdlib-only (pydantic alone takes ~0.3 s)

    prog = f"paravt {command}"
    if isinstance(err, ConfigError):
        return USAGE, f"config error: {one_line(err)}"
    if isinstance(err, UsageError | FileExistsError | NotADirectoryError):
        return USAGE, f"{prog}: error: {one_line(err)}"
    for describe in (_storage_message, _network_message):
        text = describe(err)
        if text is not None:
            return FAILURE, f"{prog}: {text}"
    if _is_user_error(err):
        return FAILURE, f"{prog}: {one_line(err)}"
    if _is_device_error(err):
        return FAILURE, f"{prog}: device: {one_line(err)[:200]}; use device=cpu or run where the device is"
    if isinstance(err, MemoryError):
        return FAILURE, f"{prog}: out of memory; lower the batch or sequence sizes"
    return FAILURE, f"{prog}: unexpected {type(err).__name__}: {one_line(err)[:300]} ({DEBUG_HINT})"


def _is_device_error(err: BaseException) -> bool:
    text = str(err)
    return "Torch not compiled with CUDA" in text or "CUDA" in text and "available" in text


# ------------------------------------------------------------------------------------ after a failure


def _written_dirs(value: Any) -> list[str]:
    """The local folders a stage config names for writing: ``output`` and every ``*_dir`` field, at any depth
    (inputs such as ``sft_output`` or ``data.input`` are not among them)."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            written = key == "output" or key.endswith("_dir")
            if written and isinstance(item, str) and item and "://" not in item:
                found.append(item)
            else:
                found += _written_dirs(item)
    elif isinstance(value, list | tuple):
        for item in value:
            found += _written_dirs(item)
    return found


def new_local_dirs(cfg: Any) -> list[str]:
    """For each folder the stage will write, its topmost ancestor that does not exist yet (what the run
    would create): taken before the run, so that :func:`prune_unused` touches only what the run made."""
    dump = cfg.model_dump() if hasattr(cfg, "model_dump") else {}
    roots = []
    for path in _written_dirs(dump):
        path = os.path.abspath(path)
        if os.path.exists(path):
            continue
        top = path
        while not os.path.exists(os.path.dirname(top)) and os.path.dirname(top) != top:
            top = os.path.dirname(top)
        if top not in roots:
            roots.append(top)
    return roots


def _prune(path: str) -> bool:
    """Remove ``path`` if it holds nothing but empty folders and ``config.yaml`` files (what a stage writes
    before its first real result); True when it is gone."""
    keep = False
    with os.scandir(path) as entries:
        for entry in list(entries):
            if entry.is_dir(follow_symlinks=False):
                keep = not _prune(entry.path) or keep
            elif entry.name != "config.yaml" or not entry.is_file(follow_symlinks=False):
                keep = True
    if keep:
        return False
    config = os.path.join(path, "config.yaml")
    if os.path.isfile(config):
        os.remove(config)
    os.rmdir(path)
    return True


def prune_unused(roots: list[str]) -> list[str]:
    """After a failed run: the folders it created that hold no result (only its saved config, or nothing)
    are removed, so no output folder of config.yaml alone and no empty ./paravt-work/ stays behind.
    Anything else in them (downloads, records, checkpoints: what a rerun resumes from) keeps them.
    Returns the roots removed."""
    removed = []
    for root in roots:
        try:
            if os.path.isdir(root) and not os.path.islink(root) and _prune(root):
                removed.append(root)
        except OSError:  # another rank removing the same folder, or a file appearing: keep what is there
            pass
    return removed


def tidied_output_line(stage: str, output: str, removed: list[str]) -> str | None:
    """The line that takes back "resolved config saved to <output>/config.yaml" when the failed run's
    output folder was removed again; None when the output is elsewhere (s3, kept, never created)."""
    if not output or output.startswith("s3://"):
        return None
    path = os.path.abspath(output.removeprefix("file://"))
    for root in removed:
        if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
            return f"paravt {stage}: removed {root} again (it held only this failed run's config)"
    return None


# --------------------------------------------------------------------------------------------- preflight


def _devices(cfg: Any) -> list[str]:
    """The device fields of a stage config (``device`` and ``engine.device``)."""
    found = [getattr(cfg, "device", None), getattr(getattr(cfg, "engine", None), "device", None)]
    return [d for d in found if isinstance(d, str) and d]


def check_device(cfg: Any) -> None:
    """A ``cuda`` device without a visible GPU fails here, before any model is loaded."""
    for device in _devices(cfg):
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise PreflightError(
                    f"device={device} but no CUDA GPU is visible here (torch.cuda.is_available() is False); "
                    "use device=cpu or run on a GPU machine"
                )
            index = device.partition(":")[2]
            if index.isdigit() and int(index) >= torch.cuda.device_count():
                raise PreflightError(
                    f"device={device} but only {torch.cuda.device_count()} GPU(s) are visible"
                )
        elif device not in ("cpu", "auto", "meta") and not device.startswith(("mps", "xpu")):
            raise UsageError(f"unknown device {device!r}; expected cpu, cuda or cuda:N")


def _nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_writable(output: str) -> None:
    """A local output whose nearest existing ancestor is not a writable directory fails before any work."""
    if not output or output.startswith("s3://"):
        return  # s3: the first upload says (one line, storage error)
    existing = _nearest_existing(output)
    if not os.path.isdir(existing):
        raise PreflightError(f"output {output}: {existing} is a file, not a directory; choose another output")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PreflightError(f"output {output}: {existing} is not writable; choose another output")
    import tempfile

    try:  # access() does not see read-only or special file systems (/proc, /sys), nor anything for root
        tempfile.TemporaryDirectory(dir=existing, prefix=".paravt-probe-").cleanup()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise PreflightError(
            f"output {output}: cannot write in {existing} ({reason}); choose another output"
        ) from None


def output_owner(output: str) -> str | None:
    """The stage whose complete result ``output`` holds (None: nothing complete there). Markers written
    before stages recorded their name are recognised by the files only that stage writes."""
    from paravt_core import storage

    info = storage.completion_info(output)
    if info is None:
        return None
    stage = (info.get("info") or {}).get("stage")
    if stage:
        return str(stage)

    def has(name: str) -> bool:
        uri = storage.join(output, name)
        return os.path.exists(uri) if not storage.is_s3(uri) else storage.exists(uri)

    for name, owner in (
        ("results.json", "eval"),
        ("report.md", "report"),
        ("audit.json", "data"),
        ("trajectories", "rl"),
        ("loss_curve.png", "sft"),
    ):
        if has(name):
            return owner
    return None


def check_output_owner(stage: str, output: str) -> None:
    """Refuse an ``output`` that holds another stage's complete result (it would be mixed or overwritten)."""
    if not output:
        return
    owner = output_owner(output)
    if owner is not None and owner != stage:
        raise UsageError(
            f"output {output} holds a complete {owner} result; give the {stage} stage its own output "
            f"(output=...)"
        )


def preflight(stage: str, cfg: Any) -> None:
    """The checks every stage makes before loading anything heavy."""
    output = getattr(cfg, "output", "")
    check_device(cfg)
    check_writable(output)
    # Early here (before the stage's heavy imports); every stage's run checks again for components and tests.
    check_output_owner(stage, output)
    for field in ("model", "reference_model"):  # sft's model is a section: its uri
        value = getattr(cfg, field, None)
        check_model_dir(f"{field}=", getattr(value, "uri", value))
    if stage == "eval":
        check_benchmarks(cfg)
    if stage == "report" and not (
        cfg.eval_outputs or cfg.sft_output or cfg.rl_output or cfg.trend.results_prefix
    ):
        raise UsageError(
            "nothing to report: set eval_outputs=[...], sft_output=, rl_output= or trend.results_prefix="
        )


def check_model_dir(field: str, path: Any) -> None:
    """A local model folder is a checkpoint (config.json), not a stage's output holding one in final/: say
    so now, not after the stage has imported torch and started loading."""
    if not isinstance(path, str) or not path or "://" in path or not os.path.isdir(path):
        return
    if os.path.isfile(os.path.join(path, "config.json")):
        return
    final = os.path.join(path, "final")
    if os.path.isfile(os.path.join(final, "config.json")):
        raise UsageError(
            f"{field}{path} is a stage output, not a model (no config.json); did you mean {final}?"
        )
    raise UsageError(f"{field}{path}: no config.json there (a Hugging Face checkpoint folder is expected)")


def check_benchmarks(cfg: Any) -> None:
    """Eval needs benchmarks (or demo_data) and known benchmark names: usage mistakes (exit 2), before the
    stage writes anything."""
    import difflib

    from paravt_core.eval.benchmarks import REGISTRY

    if not cfg.benchmarks and not cfg.demo_data and not cfg.merge:
        raise UsageError("no benchmarks configured: set benchmarks=[{name: videomme, ...}] or demo_data=DIR")
    for bench in cfg.benchmarks:
        if bench.name not in REGISTRY:
            near = difflib.get_close_matches(bench.name, list(REGISTRY), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise UsageError(f"unknown benchmark {bench.name!r}; {hint}known: {', '.join(REGISTRY)}")
