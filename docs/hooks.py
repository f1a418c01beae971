"""MkDocs hook: pages generated at build time from the code itself.

``reference/cli.md`` is written from the Typer app (``edgetune.cli.reference``), so the CLI
reference cannot drift from ``edgetune --help``. The performance pages are generated from the
saved benchmark results by ``benchmarks/report.py`` and committed (a test checks they are current).
"""

from __future__ import annotations

from mkdocs.structure.files import File, Files

from edgetune.cli.reference import markdown


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "reference/cli.md", content=markdown()))
    return files
