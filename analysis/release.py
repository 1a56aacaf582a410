"""A study published as a dataset that the importers read back whole (docs/release.md).

`release_write` puts into one directory:

- ``conversations.csv`` — the MentalBench-100k schema `import_conversations` reads (id, context,
  condition_1..3, source, ``response`` for the human reference, one column per responder);
- ``Human_judge.xlsx`` — the MentalAlign-70k layout with a ``Clinician`` column: one row per
  clinician (as a study code) and conversation; a cell holds the clinician's submitted scores
  as JSON, an imported cell's text exactly as imported, or a marker (``[not rated]``,
  ``[flagged]``) that `import_mentalalign` reads as exactly that;
- ``<judge>_llm_judge.xlsx`` per judge — the raw outputs exactly as stored, and a second sheet
  listing every invalid one with its reason;
- ``clinician_sample.txt`` when the study has a stored clinician sample (its design): one
  conversation id a line, the format of ``judge_assisted --labelled FILE``;
- ``final_scores.csv`` and ``adjudications.csv`` when clinicians rated: the final score of every
  response and attribute with its provenance, and the adjudications behind them (adjudicators as
  codes A01, …), which ``import_adjudications`` reads back to the same final scores;
- ``datasheet.md``, then ``SHA256SUMS`` over every other file; optionally ``ratings.parquet``.

Pseudonymous by construction: clinicians appear only as study codes, and no file holds a
username, an e-mail address, a timestamp, a draft or a flag reason. The release is checked
before anything is kept: a judge cell whose raw text would not be read back as the rating that
is stored (a parseable output stored invalid, say) stops it, since a re-import would then
compute other numbers.

Rows are read in batches from server-side cursors and the workbooks are written in openpyxl's
write-only mode, so memory does not grow with the study (the reliability table of the
datasheet reads the study's scores, as the dashboard does).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import zipfile
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Max, Q, QuerySet

from analysis.pseudonyms import UncodedClinician, rater_codes
from analysis.selectors import study_version
from annotation.adjudication_selectors import (
    RELEASE_ADJUDICATION_COLUMNS,
    RELEASE_FINAL_COLUMNS,
    adjudication_release_rows,
    final_score_release_rows,
)
from annotation.csvsafe import reversible_writer
from annotation.importers.base import ImportProblem
from annotation.importers.limits import (
    ImportLimits,
    check_cells,
    check_columns,
    check_file_size,
    check_zip,
)
from annotation.importers.mentalalign import CLINICIAN_COLUMN, FLAGGED, NOT_RATED
from annotation.importers.mentalbench import (
    CONDITION_COLUMNS,
    ID_COLUMNS,
    MAX_CONDITIONS,
    META_COLUMNS,
)
from annotation.models import (
    Adjudication,
    Assignment,
    AttributeThreshold,
    Conversation,
    Rater,
    Rating,
    Responder,
    Response,
    Score,
    Study,
)
from annotation.selectors import clinician_sample_current, clinician_sample_external_ids
from scoring.parsing import parse_judge_output

CONVERSATIONS = "conversations.csv"
HUMAN = "Human_judge.xlsx"
JUDGE_SUFFIX = "_llm_judge.xlsx"
DATASHEET = "datasheet.md"
CHECKSUMS = "SHA256SUMS"
PARQUET = "ratings.parquet"
#: The study's clinician sample (its design), one external id a line: `judge_assisted
#: --labelled FILE` on the re-imported study gives the estimates the study gave.
SAMPLE = "clinician_sample.txt"
#: The final score of every response × attribute with its provenance, and the adjudications
#: that `import_adjudications` reads back (docs/release.md).
FINAL_SCORES = "final_scores.csv"
ADJUDICATIONS = "adjudications.csv"
INVALID_SHEET = "invalid outputs"
BATCH = 2000
#: Excel keeps at most this many characters in a cell; a longer one would come back cut.
XLSX_MAX_CHARS = 32_767
# Characters an .xlsx cannot hold (XML 1.0 forbids them; openpyxl refuses them).
_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


Progress = Callable[[float, str], None]


class ReleaseProblem(ValueError):
    """The study cannot be released as asked; the message says what and where, on one line."""


@dataclass
class ReleaseSummary:
    files: list[str]
    counts: dict[str, Any] = field(default_factory=dict)


# --- what is released ------------------------------------------------------------------------


def _conversations(study: Study) -> QuerySet[Conversation]:
    # Practice conversations are clinicians' training material, not study data.
    return Conversation.objects.filter(study=study, practice=False)


def _responder_keys(study: Study) -> list[str]:
    """The responders of the study: the human reference first, then by key."""
    return list(
        Responder.objects.filter(responses__conversation__in=_conversations(study))
        .distinct()
        .order_by("-is_reference", "key")
        .values_list("key", flat=True)
    )


def released_ratings(study: Study) -> QuerySet[Rating]:
    """The ratings a release holds: complete ones and invalid judge outputs and imported cells
    (their raw text is part of the record), never drafts; a clinician's first rating of each
    response; no practice conversation."""
    return Rating.objects.filter(
        Q(status=Rating.Status.COMPLETE)
        | Q(status=Rating.Status.INVALID, rater__kind=Rater.Kind.JUDGE)
        | Q(status=Rating.Status.INVALID, source=Rating.Source.IMPORT),
        response__conversation__in=_conversations(study),
    ).filter(Q(rater__kind=Rater.Kind.JUDGE) | Q(repeat=0, run__isnull=True))


def _judges(study: Study) -> list[Rater]:
    ids = released_ratings(study).filter(rater__kind=Rater.Kind.JUDGE).values("rater_id")
    return list(Rater.objects.filter(pk__in=ids).order_by("name"))


def _clinician_codes(study: Study) -> list[tuple[int, str]]:
    """(rater id, code) of every clinician with released work, by code number."""
    codes = rater_codes(study_id=study.pk)
    with_work = set(
        released_ratings(study)
        .filter(rater__kind=Rater.Kind.CLINICIAN)
        .values_list("rater_id", flat=True)
        .distinct()
    ) | set(_flagged(study).values_list("rater_id", flat=True).distinct())
    uncoded = sorted(with_work - set(codes))
    if uncoded:  # dropping their work would publish another study than the one analysed
        raise UncodedClinician(study_id=study.pk, rater_id=uncoded[0])
    return sorted(((r, codes[r]) for r in with_work), key=lambda rc: int(rc[1][1:] or 0))


def _flagged(study: Study) -> QuerySet[Assignment]:
    return Assignment.objects.filter(
        conversation__in=_conversations(study),
        status=Assignment.Status.FLAGGED,
        kind=Assignment.Kind.RATING,
    )


def _batches(rows: Iterable[Any], size: int = BATCH) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _scores_of(
    rating_ids: Sequence[int], attributes: Sequence[tuple[int, str]]
) -> dict[int, dict[str, int]]:
    """Rating id → {attribute: score}, in the order of `attributes` ((id, name) in rubric
    order). Ids only from the database (no join, no sort): at paper scale the join and sort of
    the attribute per score took as long as writing the workbooks."""
    by_id: dict[int, dict[int, int]] = {}
    for rating_id, attribute_id, value in Score.objects.filter(
        rating_id__in=rating_ids
    ).values_list("rating_id", "attribute_id", "value"):
        by_id.setdefault(rating_id, {})[attribute_id] = value
    return {
        rating_id: {name: scores[pk] for pk, name in attributes if pk in scores}
        for rating_id, scores in by_id.items()
    }


def _attributes(study: Study) -> list[tuple[int, str]]:
    return list(study.rubric.attributes.order_by("position").values_list("id", "name"))


def _contexts(conversation_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    return {
        pk: (ext, context)
        for pk, ext, context in Conversation.objects.filter(
            pk__in=set(conversation_ids)
        ).values_list("id", "external_id", "context")
    }


def _scores_json(scores: dict[str, int], overall: float | None, rationale: str) -> str:
    """A stored rating as the JSON answer the importer's parser reads back to the same scores
    (and the rationale as its explanation)."""
    answer: dict[str, object] = dict(scores)
    if overall is not None:
        answer["Overall"] = int(overall) if float(overall).is_integer() else overall
    if rationale:
        answer["Explanation"] = rationale
    return json.dumps(answer, ensure_ascii=False)


# --- checks ------------------------------------------------------------------------------------


def _check_cell(text: str, *, where: str) -> str:
    if _ILLEGAL.search(text):
        raise ReleaseProblem(
            f"{where}: holds a control character that an .xlsx workbook cannot store"
        )
    if len(text) > XLSX_MAX_CHARS:
        raise ReleaseProblem(
            f"{where}: {len(text):,} characters, more than the {XLSX_MAX_CHARS:,} a workbook "
            "cell holds"
        )
    return text


def _check_keys(keys: Sequence[str]) -> None:
    reserved = META_COLUMNS | set(ID_COLUMNS) | set(CONDITION_COLUMNS)
    for key in keys:
        if key != key.strip().lower() and key != "original":
            raise ReleaseProblem(
                f"responder key {key!r}: import_conversations reads column names in lower case "
                "without surrounding spaces, so it would come back as another responder"
            )
        if key in reserved:
            raise ReleaseProblem(
                f"responder key {key!r} is a column name of the conversations schema"
            )


def _check_judges(study: Study, judges: Sequence[Rater]) -> None:
    """One released output per judge and response: the workbook layout has one cell for it."""
    twice = (
        released_ratings(study)
        .filter(rater__in=judges)
        .values("rater__name", "response_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by("rater__name", "response_id")
    )
    first = twice.first()
    if first is not None:
        raise ReleaseProblem(
            f"judge {first['rater__name']!r} rated response {first['response_id']} "
            f"{first['n']} times (several runs or repeats); the MentalAlign layout holds one "
            "output per judge and response"
        )


# --- files -------------------------------------------------------------------------------------


def _conversations_csv(
    study: Study, handle: IO[str], *, keys: Sequence[str], include_text: bool
) -> dict[str, int]:
    writer = reversible_writer(handle, lineterminator="\n")
    columns = ["id", "context", *CONDITION_COLUMNS, "source"]
    response_columns = (
        [("response" if k == "original" else k) for k in keys] if include_text else []
    )
    writer.writerow([*columns, *response_columns])
    index = {k: i for i, k in enumerate(keys)}
    max_chars = ImportLimits.from_settings().max_cell_chars
    n_conversations = n_responses = 0
    rows = (
        _conversations(study)
        .order_by("pk")
        .values_list("id", "external_id", "context", "conditions", "source")
    )
    for batch in _batches(rows.iterator(chunk_size=BATCH)):
        texts: dict[int, list[str]] = {}
        if include_text:
            for conversation_id, key, text in Response.objects.filter(
                conversation_id__in=[row[0] for row in batch]
            ).values_list("conversation_id", "responder__key", "text"):
                texts.setdefault(conversation_id, [""] * len(keys))[index[key]] = text
        for pk, ext, context, conditions, source in batch:
            conditions = list(conditions or [])
            if len(conditions) > MAX_CONDITIONS:
                raise ReleaseProblem(
                    f"conversation {ext!r} has {len(conditions)} condition labels; the "
                    f"conversations schema holds {MAX_CONDITIONS}"
                )
            padded = conditions + [""] * (MAX_CONDITIONS - len(conditions))
            values = [ext, context, *padded, source, *texts.get(pk, [""] * len(response_columns))]
            longest = max(values, key=len)
            if len(longest) > max_chars:
                raise ReleaseProblem(
                    f"conversation {ext!r}: a text of {len(longest):,} characters, more than "
                    f"the {max_chars:,} import_conversations reads (IMPORT_MAX_CELL_CHARS)"
                )
            writer.writerow(values)
            n_conversations += 1
            n_responses += sum(bool(t) for t in texts.get(pk, []))
    return {"conversations": n_conversations, "response_texts": n_responses}


def _adjudication_files(study: Study, directory: Path) -> dict[str, Any]:
    """final_scores.csv and adjudications.csv; the counts the datasheet reports."""
    finals = final_score_release_rows(study=study)
    adjudications = adjudication_release_rows(study=study)
    max_chars = ImportLimits.from_settings().max_cell_chars
    for row in adjudications:
        if len(row[5]) > max_chars:
            raise ReleaseProblem(
                f"the adjudication of conversation {row[0]!r}, responder {row[1]!r}, "
                f"attribute {row[2]!r}: a reason of {len(row[5]):,} characters, more than the "
                f"{max_chars:,} import_adjudications reads (IMPORT_MAX_CELL_CHARS)"
            )
    for name, header, rows in (
        (FINAL_SCORES, RELEASE_FINAL_COLUMNS, finals),
        (ADJUDICATIONS, RELEASE_ADJUDICATION_COLUMNS, adjudications),
    ):
        with (directory / name).open("w", encoding="utf-8", newline="") as handle:
            writer = reversible_writer(handle, lineterminator="\n")
            writer.writerow(header)
            for row in rows:
                writer.writerow(row)
    return {
        "final_scores": len(finals),
        "provenance": dict(Counter(row[4] for row in finals)),
        "adjudications": len(adjudications),
        "reasons": dict(Counter(row[4] for row in adjudications)),
        "rubric_needs_change": sum(row[6] == "true" for row in adjudications),
        "adjudicators": len({row[7] for row in adjudications if row[7]}),
    }


def _text_cell(sheet: Any, value: object) -> Any:
    """A write-only cell stored as text, never as a formula, whatever it starts with."""
    from openpyxl.cell import WriteOnlyCell

    cell = WriteOnlyCell(sheet, value=value)
    if isinstance(value, str):
        cell.data_type = "s"
    return cell


# The workbooks' document properties without the created/modified times openpyxl stamps into
# every workbook it saves: a release holds no timestamps.
CORE_PROPERTIES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/'
    b'core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/">'
    b"<dc:creator>MentalBench</dc:creator></cp:coreProperties>"
)
# Zip entries dated the zip format's first day, for the same reason (and so that the same
# study gives the same bytes).
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@contextmanager
def _write_only_workbook() -> Iterator[Any]:
    """openpyxl's write-only workbook; one given up half-way (a refused release) has its
    sheets closed, so their row writers do not complain later about a closed file."""
    import openpyxl

    book = openpyxl.Workbook(write_only=True)
    try:
        yield book
    except BaseException:
        for sheet in book.worksheets:
            with suppress(Exception):
                sheet.close()
        raise


def _save(book: Any, path: Path) -> None:
    """Save a workbook with no time in it: saved to a temporary file, then copied entry by
    entry (streamed) with CORE_PROPERTIES and fixed entry dates."""
    with tempfile.TemporaryFile() as scratch:
        book.save(scratch)
        scratch.seek(0)
        with (
            zipfile.ZipFile(scratch) as source,
            zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as target,
        ):
            for entry in source.infolist():
                info = zipfile.ZipInfo(entry.filename, date_time=ZIP_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                if entry.filename == "docProps/core.xml":
                    target.writestr(info, CORE_PROPERTIES)
                    continue
                with (
                    source.open(entry) as read,
                    target.open(info, "w", force_zip64=True) as write,
                ):
                    shutil.copyfileobj(read, write, 1 << 20)


def _append(sheet: Any, values: Sequence[object]) -> None:
    """A row; the texts openpyxl would store as a formula (a leading "=") or an error value
    ("#N/A") go in as cells typed text, the rest as plain values (a cell object per value cost
    a fifth of the time of writing a workbook)."""
    from openpyxl.cell.cell import ERROR_CODES

    sheet.append(
        [
            _text_cell(sheet, v) if isinstance(v, str) and (v[:1] == "=" or v in ERROR_CODES) else v
            for v in values
        ]
    )


def _human_workbook(
    study: Study, path: Path, *, keys: Sequence[str], clinicians: Sequence[tuple[int, str]]
) -> dict[str, int]:
    attributes = _attributes(study)
    scale = (study.rubric.scale_min, study.rubric.scale_max)
    with _write_only_workbook() as book:
        sheet = book.create_sheet("Human_judge")
        _append(
            sheet, ["ConvID", CLINICIAN_COLUMN, "context", *(f"human_response_{k}" for k in keys)]
        )
        counts = {"rows": 0, "complete": 0, "invalid": 0, "not_rated": 0, "flagged": 0}
        ratings = released_ratings(study).filter(rater__kind=Rater.Kind.CLINICIAN)
        for rater_id, code in clinicians:
            flagged = set(
                _flagged(study).filter(rater_id=rater_id).values_list("conversation_id", flat=True)
            )
            rows = _clinician_rows(
                ratings.filter(rater_id=rater_id),
                flagged=flagged,
                keys=keys,
                code=code,
                counts=counts,
                attributes=attributes,
                scale=scale,
            )
            for batch in _batches(rows):
                contexts = _contexts(c for c, _ in batch)
                for conversation_id, cells in batch:
                    ext, context = contexts[conversation_id]
                    _append(sheet, [ext, code, context, *cells])
                    counts["rows"] += 1
        _save(book, path)
    return counts


def _clinician_rows(
    ratings: QuerySet[Rating],
    *,
    flagged: set[int],
    keys: Sequence[str],
    code: str,
    counts: dict[str, int],
    attributes: Sequence[tuple[int, str]],
    scale: tuple[int, int],
) -> Iterator[tuple[int, list[str]]]:
    """(conversation id, cells) of one clinician, by conversation: their released ratings, and
    a marker in every other cell; a flagged conversation without a rating is a row of markers."""
    index = {k: i for i, k in enumerate(keys)}
    pending = deque(sorted(flagged))  # merged in order among the rated conversations

    def finish(conversation_id: int, cells: list[str | None]) -> tuple[int, list[str]]:
        marker = FLAGGED if conversation_id in flagged else NOT_RATED
        counts["flagged" if marker == FLAGGED else "not_rated"] += cells.count(None)
        return conversation_id, [c if c is not None else marker for c in cells]

    rows = ratings.order_by("response__conversation_id", "response__responder__key").values_list(
        "id",
        "response__conversation_id",
        "response__conversation__external_id",
        "response__responder__key",
        "status",
        "source",
        "raw_output",
        "overall",
        "rationale",
    )
    current: int | None = None
    cells: list[str | None] = []
    for batch in _batches(rows.iterator(chunk_size=BATCH)):
        scores = _scores_of([r[0] for r in batch], attributes)
        for rating_id, conversation_id, ext, key, status, source, raw, overall, why in batch:
            if conversation_id != current:
                if current is not None:
                    yield finish(current, cells)
                while pending and pending[0] <= conversation_id:
                    flagged_only = pending.popleft()
                    if flagged_only != conversation_id:
                        yield finish(flagged_only, [None] * len(keys))
                current, cells = conversation_id, [None] * len(keys)
            where = f"clinician {code}, conversation {ext!r}, response {key!r}"
            stored = scores.get(rating_id, {})
            if source == Rating.Source.IMPORT and raw.strip():
                text = raw  # an imported cell exactly as imported
                _check_readback(text, status, stored, attributes, scale, where=where)
            else:
                text = _scores_json(stored, overall, why)
            cells[index[key]] = _check_cell(text, where=where)
            counts["complete" if status == Rating.Status.COMPLETE else "invalid"] += 1
    if current is not None:
        yield finish(current, cells)
    for flagged_only in pending:
        yield finish(flagged_only, [None] * len(keys))


def _judge_workbook(
    study: Study, judge: Rater, path: Path, *, keys: Sequence[str]
) -> dict[str, int]:
    attributes = _attributes(study)
    scale = (study.rubric.scale_min, study.rubric.scale_max)
    with _write_only_workbook() as book:
        sheet = book.create_sheet("judge")
        _append(sheet, ["ConvID", "context", *(f"judge_response_{k}" for k in keys)])
        invalid: list[list[object]] = []
        index = {k: i for i, k in enumerate(keys)}
        counts = {"rows": 0, "complete": 0, "invalid": 0}
        rows = (
            released_ratings(study)
            .filter(rater=judge)
            .order_by("response__conversation_id", "response__responder__key")
            .values_list(
                "id",
                "response__conversation_id",
                "response__responder__key",
                "status",
                "raw_output",
                "overall",
                "rationale",
                "error",
            )
        )
        current: int | None = None
        row: list[str | None] = []
        contexts: dict[int, tuple[str, str]] = {}

        def emit() -> None:
            if current is not None:
                ext, context = contexts[current]
                _append(sheet, [ext, context, *(NOT_RATED if c is None else c for c in row)])
                counts["rows"] += 1

        for batch in _batches(rows.iterator(chunk_size=BATCH)):
            scores = _scores_of([r[0] for r in batch], attributes)
            contexts.update(_contexts(r[1] for r in batch))
            for rating_id, conversation_id, key, status, raw, overall, rationale, error in batch:
                if conversation_id != current:
                    emit()
                    current, row = conversation_id, [None] * len(keys)
                ext = contexts[conversation_id][0]
                where = f"judge {judge.name!r}, conversation {ext!r}, response {key!r}"
                stored = scores.get(rating_id, {})
                if raw.strip():
                    text = raw
                    _check_readback(text, status, stored, attributes, scale, where=where)
                elif status == Rating.Status.COMPLETE:
                    text = _scores_json(stored, overall, rationale)
                else:
                    text = ""  # an invalid rating with no output at all reads back as an empty cell
                row[index[key]] = _check_cell(text, where=where)
                if status == Rating.Status.COMPLETE:
                    counts["complete"] += 1
                else:
                    counts["invalid"] += 1
                    invalid.append([ext, f"judge_response_{key}", error])
            contexts = {current: contexts[current]} if current is not None else {}
        emit()
        reasons = book.create_sheet(INVALID_SHEET)
        _append(reasons, ["ConvID", "column", "reason"])
        for values in invalid:
            _append(reasons, values)
        _save(book, path)
    return counts


def _check_readback(
    raw: str,
    status: str,
    stored: dict[str, int],
    attributes: Sequence[tuple[int, str]],
    scale: tuple[int, int],
    *,
    where: str,
) -> None:
    """The importer will parse `raw` again: it must find the rating that is stored."""
    parsed = parse_judge_output(raw, [name for _, name in attributes], scale)
    if status == Rating.Status.COMPLETE and (not parsed.ok or parsed.scores != stored):
        raise ReleaseProblem(
            f"{where}: the stored scores are not what the raw output reads as "
            f"({parsed.error or 'other scores'}); a re-import would change them"
        )
    if status != Rating.Status.COMPLETE and parsed.ok:
        raise ReleaseProblem(
            f"{where}: stored invalid, but its raw output reads as a complete answer; a "
            "re-import would count it"
        )


def _check_importable(directory: Path, rows: dict[str, tuple[int, int]]) -> None:
    """The importers' limits (docs/importing.md) on each file, as they will be read back:
    `rows` gives each file's data rows and columns. A release the importer would refuse under
    this platform's limits is not a release that comes back."""
    limits = ImportLimits.from_settings()
    try:
        for name, (n_rows, n_columns) in rows.items():
            path = directory / name
            check_file_size(path.stat().st_size, file=name, limits=limits)
            if path.suffix == ".xlsx":
                check_zip(path, file=name, limits=limits)
            check_columns(n_columns, file=name, row=1, limits=limits)
            check_cells((n_rows + 1) * n_columns, file=name, row=n_rows + 1, limits=limits)
    except ImportProblem as exc:
        raise ReleaseProblem(
            f"{exc}; the import commands would refuse this release under this platform's limits"
        ) from None


def _judge_file_name(name: str) -> str:
    """The judge's name as a file name: the importer takes the judge's name from the command
    line, so the name in the file only has to be recognisable and safe."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "judge"
    return safe + JUDGE_SUFFIX


def _parquet(study: Study, path: Path) -> int:
    """The long table (one row per score) for pandas / datasets users."""
    import pandas as pd

    from analysis.selectors import scores_frame

    frame = scores_frame(study=study)
    pd.DataFrame(frame).to_parquet(path, index=False)
    return len(frame)


def parquet_available() -> bool:
    try:
        import pyarrow  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


def software_version() -> tuple[str, str]:
    """(version, commit) of the platform that wrote the release."""
    try:
        version = importlib.metadata.version("mentalbench")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    commit = "unknown"
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if done.returncode == 0:
            commit = done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return version, commit


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checksums_verify(directory: Path) -> list[str]:
    """The files whose SHA256SUMS line does not match (or that it does not list); [] is good."""
    listed: dict[str, str] = {}
    for line in (directory / CHECKSUMS).read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    present = sorted(p.name for p in directory.iterdir() if p.name != CHECKSUMS)
    bad = [n for n in present if listed.get(n) != sha256_of(directory / n)]
    return bad + sorted(set(listed) - set(present))


# --- the release -------------------------------------------------------------------------------


def release_write(
    *,
    study: Study,
    out: Path,
    include_text: bool = True,
    parquet: bool = False,
    progress: Progress | None = None,
) -> ReleaseSummary:
    """Write the release into `out` (a new or empty directory). Everything is written into a
    temporary directory beside it and moved into place at the end: a failed release leaves
    nothing behind. `progress` hears (fraction done, what now) between files; whatever it
    raises stops the release (a cancelled job)."""
    step = progress or (lambda fraction, message: None)
    from analysis.datasheet import datasheet_markdown

    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseProblem(f"--out {out}: exists and is not an empty directory")
    if not out.parent.is_dir():
        raise ReleaseProblem(f"--out {out}: directory {out.parent} does not exist")
    if parquet and not parquet_available():
        raise ReleaseProblem(
            "the Parquet copy needs the pyarrow package, which is not installed "
            "(pip install pyarrow), or release without --format parquet"
        )
    if study.kind != Study.Kind.RESPONSE_RATING:
        # Their labels have no importer to read them back yet, and a release that silently
        # left them out would not be the study.
        raise ReleaseProblem(
            f"study {study.name!r} is a distortion-labelling study; only response-rating studies "
            "can be released so far"
        )
    if not _conversations(study).exists():
        raise ReleaseProblem(f"study {study.name!r} has no conversations to release")
    keys = _responder_keys(study)
    _check_keys(keys)
    judges = _judges(study)
    _check_judges(study, judges)
    names = [_judge_file_name(j.name) for j in judges]
    if len(set(names)) != len(names) or HUMAN in names:
        raise ReleaseProblem("two judges' names give the same file name; rename one")
    clinicians = _clinician_codes(study)
    # A directory of the usual permissions (mkdtemp's are the owner's only), beside the target.
    staging = out.parent / f".{out.name}.{secrets.token_hex(6)}.part"
    staging.mkdir()
    try:
        step(0.02, "writing conversations.csv")
        counts: dict[str, Any] = {"responder_keys": keys}
        with (staging / CONVERSATIONS).open("w", encoding="utf-8", newline="") as handle:
            counts.update(_conversations_csv(study, handle, keys=keys, include_text=include_text))
        files = [CONVERSATIONS]
        if clinicians:
            step(0.15, f"writing {HUMAN}")
            counts["clinicians"] = _human_workbook(
                study, staging / HUMAN, keys=keys, clinicians=clinicians
            )
            files.append(HUMAN)
        counts["judges"] = {}
        for done, (judge, name) in enumerate(zip(judges, names, strict=True)):
            # The workbooks take most of the time, each about as long as the clinicians'.
            step(0.4 + 0.45 * done / len(judges), f"writing {name}")
            counts["judges"][judge.name] = _judge_workbook(study, judge, staging / name, keys=keys)
            files.append(name)
        if parquet:
            counts["parquet_rows"] = _parquet(study, staging / PARQUET)
            files.append(PARQUET)
        sample = clinician_sample_current(study=study)
        if sample is not None:
            ids = sorted(clinician_sample_external_ids(sample=sample))
            (staging / SAMPLE).write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")
            counts["clinician_sample"] = {
                "size": sample.size,
                "population": sample.population,
                "method": sample.get_method_display(),
                "seed": sample.seed,
            }
            files.append(SAMPLE)
        if clinicians:
            step(0.84, f"writing {FINAL_SCORES} and {ADJUDICATIONS}")
            counts["adjudication"] = _adjudication_files(study, staging)
            files += [FINAL_SCORES, ADJUDICATIONS]
        n_text = len(keys) if include_text else 0
        step(0.85, "checking that the files read back as the study")
        _check_importable(
            staging,
            {
                CONVERSATIONS: (counts["conversations"], 6 + n_text),
                **({HUMAN: (counts["clinicians"]["rows"], 3 + len(keys))} if clinicians else {}),
                **{
                    name: (counts["judges"][judge.name]["rows"], 2 + len(keys))
                    for judge, name in zip(judges, names, strict=True)
                },
                **(
                    {
                        ADJUDICATIONS: (
                            counts["adjudication"]["adjudications"],
                            len(RELEASE_ADJUDICATION_COLUMNS),
                        ),
                    }
                    if clinicians
                    else {}
                ),
            },
        )
        sheet = datasheet_markdown(
            study=study,
            counts=counts,
            files=files,
            judges={j.name: n for j, n in zip(judges, names, strict=True)},
            clinician_codes=[c for _, c in clinicians],
            include_text=include_text,
        )
        (staging / DATASHEET).write_text(sheet, encoding="utf-8")
        files.append(DATASHEET)
        (staging / CHECKSUMS).write_text(
            "".join(f"{sha256_of(staging / f)}  {f}\n" for f in sorted(files)), encoding="utf-8"
        )
        files.append(CHECKSUMS)
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ReleaseSummary(files=files, counts=counts)


PREVIEW_CACHE_SECONDS = 24 * 3600


def release_version(study: Study) -> str:
    """Changes when anything the release holds changes: ratings and what names and shapes the
    study (study_version: its description, rubric, judges, responders, clinician sample),
    flagged conversations, conversations and responses added, adjudications and thresholds."""
    flagged = _flagged(study).aggregate(n=Count("id"), last=Max("last_activity_at"))
    adjudicated = Adjudication.objects.filter(study=study).aggregate(
        n=Count("id"), last=Max("updated_at")
    )
    thresholds = sorted(
        AttributeThreshold.objects.filter(study=study).values_list("attribute_id", "points")
    )
    responses = Response.objects.filter(conversation__study=study).aggregate(
        n=Count("id"), last=Max("id")
    )
    return ":".join(
        map(
            str,
            (
                study_version(study=study),
                flagged["n"],
                flagged["last"],
                responses["n"],
                responses["last"],
                _conversations(study).count(),
                adjudicated["n"],
                adjudicated["last"],
                study.adjudication_threshold,
                thresholds,
            ),
        )
    )


@dataclass(frozen=True)
class DatasheetPreview:
    """What the release page shows of a release prepared for the study as it is now: its
    datasheet, or why it was refused; neither until one has been prepared."""

    sheet: str | None = None
    problem: str | None = None


def _preview_key(study: Study, include_text: bool) -> str:
    return f"analysis:release-datasheet:{study.pk}:{release_version(study)}:{include_text}"


def release_datasheet_preview(*, study: Study, include_text: bool = True) -> DatasheetPreview:
    """The datasheet (or the refusal) of the last release prepared for the study as it is now,
    for the page a researcher reads before downloading; nothing when none was. Only read here:
    building it means writing the whole release, 80 s at paper scale, which is a background
    job's work (`release_zip` remembers what it found), never a page's."""
    found: dict[str, str] | None = cache.get(_preview_key(study, include_text))
    if found is None:
        return DatasheetPreview()
    return DatasheetPreview(sheet=found.get("sheet"), problem=found.get("problem"))


def release_zip(
    *, study: Study, include_text: bool = True, progress: Progress | None = None
) -> tuple[IO[bytes], ReleaseSummary]:
    """The release as a zip in a temporary file (deleted when closed), rewound for reading. Its
    datasheet, or the reason it was refused, is remembered for the release page (under the
    study's version as it was when the release started)."""
    key = _preview_key(study, include_text)
    with tempfile.TemporaryDirectory() as work:
        directory = Path(work) / "release"
        try:
            summary = release_write(
                study=study, out=directory, include_text=include_text, progress=progress
            )
        except ReleaseProblem as exc:
            cache.set(key, {"problem": str(exc)}, timeout=PREVIEW_CACHE_SECONDS)
            raise
        sheet = (directory / DATASHEET).read_text(encoding="utf-8")
        cache.set(key, {"sheet": sheet}, timeout=PREVIEW_CACHE_SECONDS)
        if progress is not None:
            progress(0.95, "zipping")
        archive = tempfile.TemporaryFile()
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
            for name in summary.files:
                zipped.write(directory / name, arcname=name)
    archive.seek(0)
    return archive, summary
