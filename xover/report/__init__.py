"""`xover report`: tables, JSON/CSV, pictures and HTML from the store.

* ``data``     - gather one experiment (jobs, group gains, loss parity, iterations) or all of them;
* ``timeline`` - rebuild each job's compute / communication / turn-wait intervals from its iterations;
* ``tables``   - rich tables, the JSON object, CSV files;
* ``plots``    - the PNG pictures (timeline, throughput, losses, predicted vs measured);
* ``html``     - one self-contained HTML page;
* ``mlflow``   - an experiment's runs into an MLflow tracking store (MLflow's client, imported only for it);
* ``simulation`` - a simulation (`xover simulate`): its policies side by side, JCT distributions, utilisation.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..config import results_root
from ..console import console, counted, json_text, print_json, print_notice, working
from ..errors import printable, refuse_overwriting, refuse_writing, write_problem
from ..store.session import shown_url, store_files
from ..writes import write_whole
from . import mlflow, tables
from . import simulation as simulation_views
from .data import (
    ExperimentBrief,
    ExperimentReport,
    PicturesNotWritten,
    ReportError,
    all_experiments,
    experiment_inputs,
    find_experiment,
    gain_points,
    gather_report,
    open_existing_store,
)
from .html import report_html, summary_html
from .plots import make_pictures, picture_paths, predicted_vs_measured_picture
from .simulation import SimulationReport, gather_simulation
from .tables import JOB_CSV_FIELDS, csv_text, write_report_csv

FORMATS = ("table", "json", "csv", "html", "mlflow")

__all__ = ["FORMATS", "ExperimentBrief", "ExperimentReport", "ReportError", "make_report", "run_folder"]


def run_folder(experiment_id: str) -> Path:
    """Where an experiment's logs, pictures and report go: results/runs/<id>."""
    return results_root() / "runs" / experiment_id


def make_report(db: str | None, target: str, fmt: str, out: str | None, tracking_uri: str | None = None) -> None:
    """Render `target` ('latest', 'all' or an experiment id) as `fmt`; print what was written where."""
    if fmt not in FORMATS:
        raise ReportError(f"--format {printable(fmt)}: choose {', '.join(FORMATS)}")
    if fmt in ("table", "mlflow") and out:
        raise ReportError(
            "--out is for --format json, csv or html; "
            + ("the table goes to the terminal" if fmt == "table" else "mlflow writes to --tracking-uri")
        )
    if tracking_uri is not None and fmt != "mlflow":
        raise ReportError(f"--tracking-uri is for --format mlflow, not --format {fmt}")
    if fmt == "mlflow":
        _send_to_mlflow(db, target, tracking_uri)
        return
    if out:  # --out itself, before the store is read: the store named there is refused in its own words
        refuse_overwriting(out, store_files(db), "--out")
    store = open_existing_store(db)
    where = _where(store.url)
    simulation = None
    try:
        with store.session() as session:
            if target == "all":
                briefs = all_experiments(session)
                if not briefs:
                    raise ReportError(
                        f"the database {where} holds no experiments yet: run `xover train` or `xover run` first"
                    )
                report = None
                inputs = experiment_inputs(session) if fmt != "table" else []  # a table writes no file
            else:
                experiment = find_experiment(session, target, where)
                inputs = experiment_inputs(session, experiment) if fmt != "table" else []
                if experiment.kind == "simulate":
                    simulation = gather_simulation(session, experiment, with_jobs=fmt != "table")
                    report, briefs = None, []
                else:
                    report = gather_report(session, experiment)
                    # the predicted-vs-measured picture places this run among every other comparison run
                    briefs = all_experiments(session) if report.is_comparison and fmt != "csv" else []
    finally:
        store.close()
    # every file the report writes (FILE.csv's FILE-jobs.csv beside it, the pictures in the run's folder), checked
    # before the first is written: one of them over the store (or its WAL) would destroy every experiment
    if simulation is not None:
        from_out, elsewhere = _simulation_files(simulation, fmt, out)
    elif report is None:
        from_out, elsewhere = _summary_files(fmt, out)
    else:
        from_out, elsewhere = _experiment_files(report, fmt, out)
    # and the experiment's own inputs (its trace, its job files and scripts): a report over one would replace it
    kept = [*store_files(db), *inputs]
    if out:
        refuse_overwriting(out, kept, "--out", writes=from_out)
        _ready_to_write(from_out)
    refuse_writing(elsewhere, kept)
    if simulation is not None:
        _render_simulation(simulation, fmt, out)
    elif report is None:
        _render_summary(briefs, fmt, out)
    else:
        _render_experiment(report, briefs, fmt, out)


def _where(url: str) -> str:
    """A file as its path; another store's URL without its password (not for the terminal)."""
    return url.removeprefix("sqlite:///") if url.startswith("sqlite:") else shown_url(url)


def _send_to_mlflow(db: str | None, target: str, tracking_uri: str | None) -> None:
    """Each experiment of `target` ('all': every one) into the MLflow store, with its HTML report and pictures."""

    uri = mlflow.tracking_uri_of(tracking_uri)
    mlflow.refuse_the_store(uri, db)  # MLflow's own migrations would run on xover's tables
    store = open_existing_store(db)
    where = _where(store.url)
    try:
        with store.session() as session:
            if target == "all":
                briefs = all_experiments(session)
                experiments = [brief.experiment.id for brief in briefs if brief.experiment.kind != "simulate"]
                if not experiments:
                    held = f"only simulations ({len(briefs)}), which have no runs for MLflow" if briefs else "nothing"
                    raise ReportError(f"the database {where} holds {held}: run `xover train` or `xover run` first")
            else:
                found = find_experiment(session, target, where)
                if found.kind == "simulate":
                    raise ReportError(
                        f"{found.id} is a simulation: it has no runs for MLflow; report it as "
                        "--format table, json, csv or html"
                    )
                experiments = [found.id]
            reports = [gather_report(session, find_experiment(session, id_, where)) for id_ in experiments]
            params = {report.id: mlflow.recipe_params(session, report.id) for report in reports}
            briefs = all_experiments(session) if any(report.is_comparison for report in reports) else []
    finally:
        store.close()

    kept = store_files(db)
    for report in reports:
        folder = run_folder(report.id)
        refuse_writing([folder / "report.html", *picture_paths(report, folder)], kept)
    for report in reports:
        folder = run_folder(report.id)
        pictures = make_pictures(report, gain_points(briefs), folder)
        html = folder / "report.html"
        _write_text(html, "report.html", report_html(report, pictures), quiet=True)
        with working(f"writing experiment {report.id} to MLflow"):  # its first write makes MLflow's tables: 25 s
            written = mlflow.write_experiment(report, params[report.id], pictures, html, uri)
        what = (
            "already in MLflow, unchanged"
            if written.unchanged
            else f"{'replaced' if written.replaced else 'wrote'} {counted(written.job_runs, 'job run')} and "
            f"{counted(written.artifacts, 'artifact')}"
        )
        console.print(
            f"{report.id}: {what}; parent run {written.parent_run_id} at {mlflow.shown_tracking_uri(uri)}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )


def _render_experiment(report: ExperimentReport, briefs: list[ExperimentBrief], fmt: str, out: str | None) -> None:
    folder = run_folder(report.id)
    if fmt == "csv":
        _write_experiment_csv(report, folder, out)
        return

    points = gain_points(briefs)
    with _optional_pictures(lambda where: make_pictures(report, points, where), folder, fmt, out) as pictures:
        if fmt == "table":
            tables.print_report_tables(report, pictures or {})
        elif fmt == "json":
            _emit_json(tables.report_dict(report, pictures), out)
        else:
            page = report_html(report, pictures or {})
            _write_text(Path(out) if out else folder / "report.html", "report.html", page)


@contextmanager
def _optional_pictures(
    draw: Callable[[Path], dict[str, str]], folder: Path, fmt: str, out: str | None
) -> Iterator[dict[str, str] | None]:
    """The pictures `draw` writes into `folder` (name -> path). Where they cannot be written there (another
    user's results, a read-only mount, a full disk) the report is still shown, with one warning line naming the
    folder and why: a table or JSON without them (None: the JSON's `pictures` is null, where {} means nothing to
    draw); an html page written elsewhere (--out) with them inline, drawn into a temporary folder removed after.
    An html page due in that same folder fails as before: the page itself cannot be written there."""
    try:
        pictures = draw(folder)
    except PicturesNotWritten as error:
        if fmt == "html" and not out:
            raise
        inline = fmt == "html"
        print_notice(
            f"warning: the pictures were not written into {printable(error.folder)}: {error.why}; "
            + ("the page has them inline" if inline else "the report is shown without them")
        )
        if not inline:
            yield None
            return
        with tempfile.TemporaryDirectory(prefix="xover-pictures-") as temporary:
            yield draw(Path(temporary))
        return
    yield pictures


def _experiment_files(report: ExperimentReport, fmt: str, out: str | None) -> tuple[list[Path], list[Path]]:
    """The files _render_experiment writes: those --out names (itself, or in it, or beside it), and the others."""
    folder = run_folder(report.id)
    if fmt == "csv":
        paths = list(_experiment_csv_paths(folder, out))
        return (paths, []) if out else ([], paths)
    pictures = picture_paths(report, folder)
    return ([], pictures) if fmt == "table" else _page_files(folder, pictures, fmt, out)


def _simulation_files(simulation: SimulationReport, fmt: str, out: str | None) -> tuple[list[Path], list[Path]]:
    """The files _render_simulation writes: those --out names, and the others."""
    folder = run_folder(simulation.id)
    if fmt == "table":
        return [], []
    if fmt == "csv":
        paths = list(simulation_views.simulation_csv_paths(*_simulation_csv_target(folder, out)).values())
        return (paths, []) if out else ([], paths)
    return _page_files(folder, simulation_views.simulation_picture_paths(folder), fmt, out)


def _page_files(folder: Path, pictures: list[Path], fmt: str, out: str | None) -> tuple[list[Path], list[Path]]:
    """A json or html report's files: its page (at --out, in it, or html's in the run's folder) and pictures."""
    name = "report.json" if fmt == "json" else "report.html"
    if out:
        return [_file_in(Path(out), name)], pictures
    return [], pictures + ([folder / name] if fmt == "html" else [])


def _summary_files(fmt: str, out: str | None) -> tuple[list[Path], list[Path]]:
    """The files _render_summary writes: those --out names, and the others."""
    if fmt in ("csv", "json"):
        if not out:
            return [], []
        written = _summary_csv_path(out) if fmt == "csv" else Path(out)
        return [_file_in(written, "experiments.csv" if fmt == "csv" else "report.json")], []
    picture = results_root() / "predicted_vs_measured.png"
    if fmt == "table":
        return [], [picture]
    if out:
        return [_file_in(Path(out), "report.html")], [picture]
    return [], [picture, results_root() / "report.html"]


def _ready_to_write(paths: list[Path]) -> None:
    """The folders of the files --out names made, and each name checked against the system's limit, before the
    first picture is drawn: a report that fails at its last file leaves the pictures it drew for nothing."""
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            longest = os.pathconf(path.parent, "PC_NAME_MAX")
        except OSError as error:
            raise ReportError(f"cannot write {printable(path)}: {write_problem(path, error)}") from None
        if len(os.fsencode(path.name)) > longest:
            raise ReportError(
                f"cannot write {printable(path)}: File name too long (a file's name has at most {longest} bytes)"
            )


def _file_in(path: Path, default_name: str) -> Path:
    """The file written for --out `path`: `path` itself, or `default_name` in it where it is a folder."""
    try:
        folder = path.is_dir()
    except OSError as error:  # a name too long for the system: is_dir() raises it rather than answer False
        raise ReportError(f"cannot write {printable(path)}: {write_problem(path, error)}") from None
    return path / default_name if folder else path


def _render_simulation(simulation: SimulationReport, fmt: str, out: str | None) -> None:
    """A simulation's report (`xover simulate`) in `fmt`: its policies side by side."""
    folder = run_folder(simulation.id)
    if fmt == "table":
        simulation_views.print_simulation_tables(simulation, {})
    elif fmt == "csv":
        try:
            written = simulation_views.write_simulation_csv(simulation, *_simulation_csv_target(folder, out))
        except OSError as error:
            raise _not_written(error, _simulation_csv_target(folder, out)[0]) from None
        if out:
            for path in written:
                console.print(f"wrote {path}", highlight=False, soft_wrap=True, markup=False)
        else:
            print(written[0].read_text(encoding="utf-8"), end="")
            for path in written:
                print_notice(f"wrote {path}")
    else:
        with _optional_pictures(
            lambda where: simulation_views.simulation_pictures(simulation, where), folder, fmt, out
        ) as pictures:
            if fmt == "json":
                _emit_json(simulation_views.simulation_dict(simulation, pictures), out)
            else:
                page = simulation_views.simulation_html(simulation, pictures or {})
                _write_text(Path(out) if out else folder / "report.html", "report.html", page)


def _simulation_csv_target(folder: Path, out: str | None) -> tuple[Path, str | None]:
    """Where a simulation's CSV files go: --out FOLDER (or the run's folder): simulation.csv, jobs.csv and
    utilisation.csv in it; --out FILE.csv: the policies there, FILE-jobs.csv and FILE-utilisation.csv beside it."""
    target = Path(out) if out else folder
    if target.suffix.lower() == ".csv":
        return target.parent, target.stem
    return target, None


def _experiment_csv_paths(folder: Path, out: str | None) -> tuple[Path, Path]:
    """An experiment's jobs and iterations CSV files: --out FILE.csv: FILE.csv and FILE-iterations.csv beside it;
    --out FOLDER (or the run's folder): jobs.csv and iterations.csv in it."""
    if out and Path(out).suffix.lower() == ".csv":
        return Path(out), Path(out).with_name(Path(out).stem + "-iterations.csv")
    return Path(out or folder) / "jobs.csv", Path(out or folder) / "iterations.csv"


def _summary_csv_path(out: str) -> Path:
    """`report all --format csv --out`: FILE.csv, or experiments.csv in the folder."""
    return Path(out) if Path(out).suffix.lower() == ".csv" else Path(out) / "experiments.csv"


def _write_experiment_csv(report: ExperimentReport, folder: Path, out: str | None) -> None:
    """--out FOLDER (or FILE.csv): jobs and iterations CSV files; no --out: jobs CSV on stdout, and
    both files in the run's folder (their paths on stderr, so stdout stays one clean CSV)."""
    try:
        written = write_report_csv(report, *_experiment_csv_paths(folder, out))
    except OSError as error:
        raise _not_written(error, _experiment_csv_paths(folder, out)[0]) from None
    if out:
        for path in written:
            console.print(f"wrote {path}", highlight=False, soft_wrap=True, markup=False)
    else:
        print(csv_text(JOB_CSV_FIELDS, [job.to_json() for job in report.jobs]), end="")
        for path in written:
            print_notice(f"wrote {path}")


def _render_summary(briefs: list[ExperimentBrief], fmt: str, out: str | None) -> None:
    if fmt == "csv":
        text = tables.csv_text([key for _, key in tables.SUMMARY_COLUMNS], tables.summary_rows(briefs))
        if out:
            _write_text(_summary_csv_path(out), "experiments.csv", text)
        else:
            print(text, end="")
        return
    if fmt == "json":
        _emit_json(tables.summary_dict(briefs), out)
        return

    points = gain_points(briefs)

    def draw(folder: Path) -> dict[str, str]:
        """results/predicted_vs_measured.png (or in `folder`), where there are comparison runs to place."""
        picture = folder / "predicted_vs_measured.png"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            made = predicted_vs_measured_picture(points, None, picture)
        except OSError as error:
            raise PicturesNotWritten(folder, error) from None
        return {"predicted_vs_measured": str(picture)} if made else {}

    with _optional_pictures(draw, results_root(), fmt, out) as pictures:
        if fmt == "table":
            tables.print_summary_table(briefs)
            for name, where in (pictures or {}).items():
                console.print(f"{name}: {where}", highlight=False, soft_wrap=True, markup=False)
        else:
            page = summary_html(briefs, pictures or {})
            _write_text(Path(out) if out else results_root() / "report.html", "report.html", page)


def _emit_json(data: dict, out: str | None) -> None:
    if out:
        _write_text(Path(out), "report.json", json_text(data) + "\n")
    else:
        print_json(data)


def _not_written(error: OSError, writing: Path) -> ReportError:
    """`cannot write FILE: why`: the file the error names (NotWritten names each), else `writing` (an error of a
    write, not an open, names no file: the line said "cannot write None" and then raised a TypeError)."""
    path = Path(error.filename) if error.filename is not None else writing
    return ReportError(f"cannot write {printable(path)}: {write_problem(path, error)}")


def _write_text(path: Path, default_name: str, text: str, quiet: bool = False) -> None:
    """Write `text` to `path` (into it as `default_name` when it is a folder) and print where."""
    path = _file_in(path, default_name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, text)
    except OSError as error:
        raise ReportError(f"cannot write {path}: {write_problem(path, error)}") from None
    if not quiet:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True, markup=False)
