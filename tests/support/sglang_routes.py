"""Shared by several test modules (from tests/contract/test_sglang_contract.py, where it was first written)."""

from __future__ import annotations

# HTTP route -> the io_struct class FastAPI parses its body into (sglang/srt/entrypoints/http_server.py)
ROUTE_CLASSES = {
    "/init_weights_update_group": "InitWeightsUpdateGroupReqInput",
    "/destroy_weights_update_group": "DestroyWeightsUpdateGroupReqInput",
    "/update_weights_from_distributed": "UpdateWeightsFromDistributedReqInput",
    "/update_weights_from_disk": "UpdateWeightFromDiskReqInput",
    "/begin_weight_update": "BeginWeightUpdateReqInput",
    "/end_weight_update": "EndWeightUpdateReqInput",
    "/pause_generation": "PauseGenerationReqInput",
    "/continue_generation": "ContinueGenerationReqInput",
    "/abort_request": "AbortReq",
}
