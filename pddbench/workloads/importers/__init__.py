"""Importers: public trace formats → the canonical trace (one module per format).

Each ``import_<format>(src, **options)`` returns an :class:`ImportResult` (canonical
table, epoch, source record, warnings) and raises :class:`~pddbench.errors.TraceError`
with a one-line ``FILE: WHERE: problem`` message for malformed input. Writing files and
printing belong to ``importers.cli``.
"""

from pddbench.workloads.importers.azure import import_azure
from pddbench.workloads.importers.common import ImportResult
from pddbench.workloads.importers.mooncake import import_mooncake
from pddbench.workloads.importers.weka import import_weka

__all__ = ["ImportResult", "import_azure", "import_mooncake", "import_weka"]
