from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis import alt_test, reports
from analysis.management.lookup import study_get_or_error
from analysis.selectors import Filters, attribute_names, exclusions_for, scores_frame
from annotation.csvsafe import frame_csv

#: One row per LLM of an --llm file, these columns first (the authors' published run).
FILE_COLUMNS = (
    "llm",
    "winning_rate",
    "advantage_probability",
    "passed",
    "n_humans",
    "n_instances",
    "epsilon",
    "metric",
    "reason",
)


def _json_object(path: str, option: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"{option} {path}: cannot read the file ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{option} {path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    if not isinstance(data, dict) or not data:
        raise CommandError(f"{option} {path}: expected a non-empty JSON object")
    for key, value in data.items():
        if not isinstance(value, dict):
            raise CommandError(
                f"{option} {path}: the value of {key!r} must be an object of "
                "{instance id: annotation}"
            )
        for instance, annotation in value.items():
            if isinstance(annotation, list | dict):
                raise CommandError(
                    f"{option} {path}: {key!r} → {instance!r}: an annotation must be a string "
                    "or a number"
                )
    return data


def _float_in(value: str, option: str, low: float, high: float) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not low <= number < high:
        raise CommandError(f"{option} must be a number in [{low:g}, {high:g}), got {value!r}")
    return number


class Command(BaseCommand):
    help = (
        "The alternative annotator test (Calderon, Reichart & Dror, ACL 2025): may an LLM judge "
        "replace the clinicians? Leave one clinician out at a time, test whether the judge "
        "aligns with the others at least as well as the left-out clinician, up to the margin "
        "epsilon; Benjamini–Yekutieli over clinicians; the judge passes when it wins at least "
        "half of them. On a study (--study, --judge) one row per judge × attribute; on the "
        "authors' JSON files (--humans, --llm) one row per LLM. See docs/analysis.md."
    )

    requires_system_checks = [Tags.models]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", help="a rating study with overlapping clinicians")
        parser.add_argument(
            "--judge", action="append", help="with --study: a judge (repeatable; default all)"
        )
        parser.add_argument(
            "--humans", metavar="FILE", help="JSON: human id → {instance id: annotation}"
        )
        parser.add_argument(
            "--llm", metavar="FILE", help="JSON: LLM name → {instance id: annotation}"
        )
        parser.add_argument(
            "--epsilon",
            default=str(alt_test.DEFAULT_EPSILON),
            help="the cost-benefit margin (default 0.2, the authors' value for experts; 0.15 "
            "skilled annotators, 0.1 crowd workers)",
        )
        parser.add_argument(
            "--metric",
            choices=alt_test.METRICS,
            help="alignment score: accuracy (exact agreement) or neg_rmse (default on a study: "
            "neg_rmse, for 1–5 scores; on files: accuracy)",
        )
        parser.add_argument("--q", default=str(alt_test.DEFAULT_Q), help="FDR level (0.05)")
        parser.add_argument("--format", choices=("csv", "table"), default="table")

    def handle(self, *args: Any, **options: Any) -> None:
        epsilon = _float_in(options["epsilon"], "--epsilon", 0.0, 1.0)
        q = _float_in(options["q"], "--q", 1e-9, 1.0)
        from_files = options["humans"] or options["llm"]
        if from_files and options["study"]:
            raise CommandError("give either --study or --humans and --llm, not both")
        if from_files:
            if not (options["humans"] and options["llm"]):
                raise CommandError("--humans and --llm go together")
            if options["judge"]:
                raise CommandError("--judge goes with --study; an --llm file names its LLMs")
            table = self._from_files(options, epsilon=epsilon, q=q)
        elif options["study"]:
            table = self._from_study(options, epsilon=epsilon, q=q)
        else:
            raise CommandError("give --study (with --judge) or --humans and --llm")
        if options["format"] == "csv":
            self.stdout.write(frame_csv(table), ending="")
        else:
            self.stdout.write(table.round(3).to_string(index=False))

    def _from_files(self, options: dict[str, Any], *, epsilon: float, q: float) -> pd.DataFrame:
        humans = _json_object(options["humans"], "--humans")
        llms = _json_object(options["llm"], "--llm")
        metric = options["metric"] or "accuracy"
        rows = []
        for name, labels in llms.items():
            try:
                res = alt_test.alt_test(
                    humans=humans, llm=labels, metric=metric, epsilon=epsilon, q=q
                )
            except (TypeError, ValueError) as exc:  # neg_rmse on annotations that are not numbers
                raise CommandError(f"--llm {options['llm']}: {name!r}: {exc}") from exc
            rows.append(
                {
                    "llm": name,
                    "winning_rate": res.winning_rate,
                    "advantage_probability": res.advantage_probability,
                    "passed": res.passed,
                    "n_humans": res.n_humans,
                    "n_instances": res.n_instances,
                    "epsilon": epsilon,
                    "metric": metric,
                    "reason": res.reason,
                }
            )
        return pd.DataFrame(rows, columns=list(FILE_COLUMNS))

    def _from_study(self, options: dict[str, Any], *, epsilon: float, q: float) -> pd.DataFrame:
        study = study_get_or_error(options["study"])
        judges = tuple(options["judge"]) if options["judge"] else None
        df = scores_frame(study=study, filters=Filters(judges=judges))
        known = set(df.loc[df["rater_kind"] == reports.JUDGE, "rater"].astype(str))
        unknown = [j for j in judges or () if j not in known]
        if unknown:
            raise CommandError(
                f"study {study.name!r} has no scores by judge {', '.join(map(repr, unknown))} "
                f"(judges: {', '.join(sorted(known)) or 'none'})"
            )
        if not known:
            raise CommandError(f"study {study.name!r} has no judge scores")
        return reports.alt_test_table(
            df,
            attributes=attribute_names(study=study),
            exclusions=exclusions_for(study=study),
            epsilon=epsilon,
            metric=options["metric"] or "neg_rmse",
            q=q,
        )
