"""``paravt eval``: the seven long-video benchmarks (and the synthetic one), with and without the tool.

- ``benchmarks``: one module per benchmark and the registry listing them; each ``Benchmark`` reads its
  benchmark's real row format (``formats``), builds the question (docs/method.md §7), and owns its metrics beside the
  shared ones, its published numbers and comparability rules and its fixture rows;
- ``protocols``: the agent config of each protocol (``agentic`` with sub-agents or ``crop_frames``,
  ``direct``, ``reasoning``);
- ``scoring``: answer extraction and scores (the PARA-GRPO reward functions) and the judge for open-ended
  items; ``metrics``: accuracy with its breakdowns, MLVU micro/macro, Charades mIoU and R@k (pure);
- ``records`` (exactly-once JSONL, shard merge),
  ``runner`` (concurrent samples, retries, error accounting), ``report`` (results.json, KFP metrics, HTML);
- ``demo_data``: a directory of fixture copies of every benchmark (``paravt_core/synth/eval_fixtures.py`` writes
  it from each ``Benchmark.fixture``; ``benchmarks.demo_entries`` reads its manifest, so nothing here imports
  ``paravt_core.synth``);
- ``stage``: ``run(cfg) -> StageResult``.
"""
