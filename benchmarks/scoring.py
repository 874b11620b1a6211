"""``make bench-scoring``: our answer scoring against lmms-eval 0.7.3's own task scorers and the release's rule.

The fixed corpus of ``paravt_bench/scoring_corpus.py`` (seeded: 360 multiple-choice and 360 grounding outputs)
is scored per benchmark three ways (``paravt_bench/scoring_refs.py``): by ``paravt_core.eval.scoring``, by
lmms-eval's task code, and by the release driver's rule. Printed: per benchmark the share of samples where our per-sample score equals
lmms-eval's, the release's, and - where the two references agree without guessing - ours; then every sample
where our score differs from lmms-eval's or from the release's, with the reason.

    PYTHONPATH=. .venv/bin/python benchmarks/scoring.py [--per-type 360] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from paravt_bench.scoring_corpus import corpus
from paravt_bench.scoring_refs import (
    BENCHMARKS,
    LMMS_EVAL_VERSION,
    Row,
    compare,
    deliberate,
    disagreement_reason,
    load_lmms_eval,
)


def _same(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9


def agreement(rows: list[Row]) -> dict[str, dict[str, float | int]]:
    """Per benchmark: samples, % ours == lmms-eval, % ours == release, references agreeing, % ours agrees there."""
    by: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by[row.benchmark].append(row)
    out = {}
    for bench in BENCHMARKS:
        rs = by.get(bench, [])
        both = [r for r in rs if r.references_agree]
        out[bench] = {
            "samples": len(rs),
            "vs_lmms_eval": 100.0 * sum(_same(r.ours, r.lmms) for r in rs) / max(len(rs), 1),
            "vs_release": 100.0 * sum(_same(r.ours, r.release) for r in rs) / max(len(rs), 1),
            "references_agree": len(both),
            "where_references_agree": 100.0 * sum(_same(r.ours, r.lmms) for r in both) / max(len(both), 1),
            # differences on purpose (hedges refused, the last statement decides): see scoring_refs.DELIBERATE
            "deliberate": sum(not _same(r.ours, r.lmms) and deliberate(r) is not None for r in both),
            "unexplained": sum(not _same(r.ours, r.lmms) and deliberate(r) is None for r in both),
        }
    return out


def _short(value: object, width: int) -> str:
    text = repr(value) if not isinstance(value, str) else value
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-type", type=int, default=360)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="", help="also write the agreement and disagreements here")
    args = parser.parse_args()

    rows = compare(corpus(args.seed, args.per_type), load_lmms_eval())
    table = agreement(rows)
    print(f"Scoring agreement on {args.per_type} multiple-choice + {args.per_type} grounding outputs "
          f"(seed {args.seed}); references: lmms-eval {LMMS_EVAL_VERSION} task scorers, the release's rule")  # fmt: skip
    print("(refs agree: both references read the reply, no guess, same score; '= there': ours equals them on those;"
          " 'on purpose': differences of scoring_refs.DELIBERATE; 'unexplained' must be 0)")  # fmt: skip
    print(f"{'benchmark':<16}{'samples':>8}{'= lmms-eval':>13}{'= release':>11}{'refs agree':>12}{'= there':>9}"
          f"{'on purpose':>12}{'unexplained':>13}")  # fmt: skip
    for bench, a in table.items():
        print(f"{bench:<16}{a['samples']:>8}{a['vs_lmms_eval']:>12.1f}%{a['vs_release']:>10.1f}%"
              f"{a['references_agree']:>12}{a['where_references_agree']:>8.1f}%{a['deliberate']:>12}"
              f"{a['unexplained']:>13}")  # fmt: skip

    differ = [r for r in rows if not (_same(r.ours, r.lmms) and _same(r.ours, r.release))]
    reasons = Counter((r.benchmark, disagreement_reason(r)) for r in differ)
    print(
        f"\nDisagreements by benchmark and reason ({len(differ)} samples where ours differs from a reference):"
    )
    for (bench, reason), n in sorted(reasons.items()):
        print(f"  {bench:<15} {n:>4}  {reason}")
    print("\nEvery disagreement (score: ours / lmms-eval / release):")
    print(
        f"{'benchmark':<15} {'id':<9} {'gold':<15} {'ours':>5} {'lmms':>5} {'rel.':>5}  {'output':<48} reason"
    )
    for r in differ:
        gold = _short(r.item["gold"], 15)
        print(f"{r.benchmark:<15} {r.item['id']:<9} {gold:<15} {r.ours:>5.2f} {r.lmms:>5.2f} {r.release:>5.2f}  "
              f"{_short(r.item['text'], 48):<48} {disagreement_reason(r)}")  # fmt: skip
    if args.json:
        dump = {
            "agreement": table,
            "disagreements": [
                {
                    "benchmark": r.benchmark,
                    "id": r.item["id"],
                    "text": r.item["text"],
                    "gold": r.item["gold"],
                    "ours": r.ours,
                    "lmms_eval": r.lmms,
                    "release": r.release,
                    "reason": disagreement_reason(r),
                }
                for r in differ
            ],  # fmt: skip
        }
        Path(args.json).write_text(json.dumps(dump, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
