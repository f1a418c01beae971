"""``edgetune records ls|show|export|import|report``: the tuning databases, one per profile."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ._common import boundary, out, print_json

app = typer.Typer(help="Tuning records (one database per device profile).", no_args_is_help=True, rich_markup_mode=None)

RECORDS_HELP = "Records directory (default: the profile's in the user cache)."


def _store(device: str, records: Path | None):  # noqa: ANN202 — RecordStore, imported lazily
    from ..devices import resolve_device
    from ..tuning.records import RecordStore, default_dir

    profile = resolve_device(device)
    return RecordStore(records or default_dir(profile.name), profile.name)


def _existing_store(device: str, records: Path | None, hint: str):  # noqa: ANN202
    from ..errors import UsageError

    store = _store(device, records)
    if not store.exists():
        raise UsageError(f"no records for {store.profile} in {store.dir}", hint)
    return store


@app.command("ls", short_help="Profiles with records: workloads, trials, size.")
@boundary
def ls(json_out: bool = typer.Option(False, "--json")) -> None:
    """Every profile with records in the user cache: workloads, trials, size."""
    from ..tuning.records import list_stores

    rows = [s.summary() for s in list_stores()]
    if json_out:
        print_json(rows)
        return
    if not rows:
        out.print("no tuning records yet (`edgetune tune MODEL --device PROFILE` makes some)")
        return
    table = Table("profile", "workloads", "tuned", "trials", "failed", "size", "path")
    for r in rows:
        table.add_row(r["profile"], str(r["workloads"]), str(r["tuned_workloads"]), str(r["trials"]),
                      str(r["failures"]), f"{r['bytes'] / 1e6:.1f} MB", r["path"])
    out.print(table)


@app.command("show")
@boundary
def show(device: str = typer.Option(..., "--device", "-d", help="Profile or board."),
         records: Path = typer.Option(None, "--records", help=RECORDS_HELP),
         json_out: bool = typer.Option(False, "--json")) -> None:
    """Per workload: trials, failures and the best measured time."""
    store = _existing_store(device, records, "tune a model first: edgetune tune MODEL --device ...")
    by_hash = store.stats()
    stats = sorted(by_hash.values(), key=lambda s: -(s.best_ms or 0))
    if json_out:
        print_json({"summary": store.summary(), "workloads": [s.to_json() for s in stats]})
        return
    vetoes = store.standing_vetoes(by_hash)
    table = Table("workload", "trials", "failed", "best ms", "network check")
    for s in stats:
        table.add_row(s.shash, str(s.trials), str(s.failures), f"{s.best_ms:.4f}" if s.best_ms is not None else "-",
                      "vetoed" if s.shash in vetoes else "")
    out.print(table)
    summary = store.summary()
    out.print(f"{summary['workloads']} workloads, {summary['trials']} trials in {summary['path']}"
              + (f"; {len(vetoes)} best record(s) vetoed by the network check (packages keep their default schedule)"
                 if vetoes else ""))


@app.command("export", short_help="Write a profile's records into an archive.")
@boundary
def export(archive: Path = typer.Argument(..., help="The .tar.gz to write."),
           device: str = typer.Option(..., "--device", "-d", help="Profile or board."),
           records: Path = typer.Option(None, "--records", help=RECORDS_HELP)) -> None:
    """Write a profile's records into an archive (to share them or move them to another host)."""
    store = _existing_store(device, records, "nothing to export")
    store.export(archive)
    out.print(f"exported {store.summary()['trials']} records for {store.profile} → {archive}")


@app.command("import", short_help="Merge an exported archive into a profile's records.")
@boundary
def import_(archive: Path = typer.Argument(..., help="An archive from `edgetune records export`."),
            device: str = typer.Option(..., "--device", "-d", help="Profile or board."),
            records: Path = typer.Option(None, "--records", help=RECORDS_HELP)) -> None:
    """Merge an exported archive into a profile's records (duplicates are skipped)."""
    store = _store(device, records)
    workloads, added = store.import_(archive)  # under the store's lock
    out.print(f"imported {added} records ({workloads} new workloads) into {store.dir}")


@app.command("report", short_help="Estimated latency against trials, per network.")
@boundary
def report(device: str = typer.Option(..., "--device", "-d", help="Profile or board."),
           output: Path = typer.Option(Path("report.html"), "--output", "-o", help="report.html or report.png."),
           network: list[str] = typer.Option([], "--network", "-n", metavar="NET", help="Only this network (repeatable)."),
           records: Path = typer.Option(None, "--records", help=RECORDS_HELP)) -> None:
    """Estimated latency against trials and time per network (untuned and target as lines), and
    per task where the time is beside where the trials went: HTML or PNG."""
    from ..tuning.report import ReportOptions, build_report

    result = build_report(ReportOptions(device, output, records, tuple(network)))
    out.print(f"wrote {result.path}: {len(result.networks)} network(s) ({', '.join(result.networks)}) "
              f"from {result.jobs} tuning job(s)")
