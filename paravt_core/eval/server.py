"""What the serving engine says about itself: the context length it was started with.

The release served the model with vLLM 0.17.1 and ``--max-model-len 65536`` (``paravt/eval/utils.py``
``launch_servers`` lines 467-547 at cf55249). Under ``preset=release`` the episode applies that context on the
client side (``protocols.RELEASE_MAX_MODEL_LEN``) the way vLLM 0.17.1 applies it: a request whose
prompt (text and image tokens) fills the context is refused (``context_overflow``, as vLLM answers 400:
``vllm/v1/engine/input_processor.py`` ``_validate_prompt_len``), otherwise ``max_tokens`` is lowered to the room
left (``vllm/entrypoints/utils.py`` ``get_max_tokens``). A server started with a **smaller** context refuses
requests the release's accepted, so the run records the context the server reports and the report names it
(``report.comparability``). vLLM 0.17.1 (``vllm/entrypoints/openai/models/serving.py``
``show_available_models``) and SGLang 0.5.23 (``http_server.py`` ``available_models``) both report it as
``max_model_len`` on each model card of ``GET /v1/models``.
"""

from __future__ import annotations

import os
from typing import Any

import httpx


def served_context(
    base_url: str, model: str, timeout_s: float = 10.0, api_key_env: str = "OPENAI_API_KEY"
) -> dict[str, Any]:
    """``{"max_model_len": N or None, "source": ...}``: the context the server at ``base_url`` (``.../v1``)
    reports for ``model`` (its card, else the first one); None when it reports none or cannot be asked (the
    run goes on: the requests themselves will tell)."""
    url = base_url.rstrip("/") + "/models"
    key = os.environ.get(api_key_env, "")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(url, timeout=timeout_s, headers=headers)
        response.raise_for_status()
        cards = [c for c in (response.json().get("data") or []) if isinstance(c, dict)]
    except (httpx.HTTPError, ValueError, AttributeError) as err:
        return {"max_model_len": None, "source": f"GET /models failed ({type(err).__name__})"}
    card = next((c for c in cards if c.get("id") == model), cards[0] if cards else {})
    value = card.get("max_model_len")
    return {
        "max_model_len": int(value)
        if isinstance(value, int | float) and not isinstance(value, bool)
        else None,
        "source": "GET /models",
    }
