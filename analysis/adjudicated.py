"""Each judge against the adjudicated consensus: the dashboard's judge-vs-human ICC, with the
study's final scores (docs/adjudication.md) in place of the clinicians' mean.

A pure function on DataFrames (no ORM): analysis.selectors reads the frames. The ICC is the one
the reliability table reports (analysis.reports.reliability_table): per judge and attribute,
the paired cells are averaged per responder and ``stats.icc`` is taken of the responders ×
(final, judge) matrix; a judge is never scored on the responders it is excluded from
(self-preference). Point estimates only: the bootstrap intervals stay on the dashboard's own
table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from analysis import stats

FINAL_COLUMNS = ("conversation", "responder", "attribute", "final_score")
JUDGE_COLUMNS = ("judge", "conversation", "responder", "attribute", "score")
COLUMNS = (
    "judge",
    "attribute",
    "n_models",
    "n_pairs",
    "icc_c1",
    "icc_a1",
    "final_mean",
    "judge_mean",
    "reason",
)


def judges_against_final(
    final: pd.DataFrame,
    judges: pd.DataFrame,
    *,
    attributes: Sequence[str],
    exclusions: Mapping[str, set[str]] | None = None,
) -> pd.DataFrame:
    """One row per judge × attribute: ICC(C,1) and ICC(A,1) of the judge against the final
    scores, over responder-level means of the cells both scored.

    Args:
        final: columns FINAL_COLUMNS, one row per (conversation, responder, attribute); rows
            without a final score (awaiting adjudication) are left out.
        judges: columns JUDGE_COLUMNS, one row per judge score (repeats are averaged per cell).
        attributes: the rubric's attributes, in the order of the rows.
        exclusions: judge → responder keys it is not scored on.
    """
    missing = [c for c in FINAL_COLUMNS if c not in final.columns] + [
        c for c in JUDGE_COLUMNS if c not in judges.columns
    ]
    if missing:
        raise ValueError(f"missing columns: {missing}")
    keys = ["conversation", "responder", "attribute"]
    have = final.dropna(subset=["final_score"])[list(FINAL_COLUMNS)].astype(
        {"conversation": str, "responder": str, "attribute": str}
    )
    cells = (
        judges.dropna(subset=["score"])
        .astype({"judge": str, "conversation": str, "responder": str, "attribute": str})
        .groupby(["judge", *keys], sort=False)["score"]
        .mean()
        .reset_index()
        .merge(have, on=keys, how="inner")
    )
    exclusions = exclusions or {}
    rows: list[dict[str, object]] = []
    for judge in dict.fromkeys(judges["judge"].astype(str)):
        excluded = exclusions.get(judge, set())
        mine = cells[(cells["judge"] == judge) & ~cells["responder"].isin(list(excluded))]
        for attribute in attributes:
            sel = mine[mine["attribute"] == attribute]
            by_model = sel.groupby("responder", sort=True)[["final_score", "score"]].mean()
            point = stats.icc(by_model[["final_score", "score"]].to_numpy(dtype=float))
            rows.append(
                {
                    "judge": judge,
                    "attribute": attribute,
                    "n_models": len(by_model),
                    "n_pairs": len(sel),
                    "icc_c1": point.icc_c1,
                    "icc_a1": point.icc_a1,
                    "final_mean": float(sel["final_score"].mean()) if len(sel) else float("nan"),
                    "judge_mean": float(sel["score"].mean()) if len(sel) else float("nan"),
                    "reason": point.reason,
                }
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))
