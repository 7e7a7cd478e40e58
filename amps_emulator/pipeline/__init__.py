"""pipeline: the transaction log and the server as Spark DataFrames (never imported by the server).

Data sources (PySpark 4 Python Data Source API), registered by :func:`register`:

* ``amps-journal`` (``journal_source.py``): a journal directory, batch and streaming; the
  bytes are parsed by ``journal/``'s own code (``journal_reader.py``).
* ``amps`` (``amps_source.py``): a running server (the emulator or a real AMPS) through the
  AMPS protocol, with the project's sans-IO codec: ``sow`` / bookmark-replay reads, and a
  publishing writer with persisted acks.

Jobs (``jobs.py``) and the ``amps-pipeline`` command (``cli.py``): export, sow-asof,
queue-audit, stats (``--html``: ``report.py``), load.

Needs the ``spark`` extra (``pip install 'amps-emulator[spark]'``) and Java 17.
"""

from __future__ import annotations

__all__ = ["register"]


def register(spark) -> None:
    """Register every data source of this package with ``spark`` (idempotent)."""
    from .journal_source import AmpsJournalDataSource

    spark.dataSource.register(AmpsJournalDataSource)
    try:
        from .amps_source import AmpsDataSource
    except ImportError:  # pragma: no cover - while the module is absent
        return
    spark.dataSource.register(AmpsDataSource)
