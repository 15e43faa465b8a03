"""Importers: public trace formats → the canonical trace (one module per format).

Each ``import_<format>(src, **options)`` returns an :class:`ImportResult` (canonical
table, epoch, source record, warnings) and raises :class:`~pddbench.errors.TraceError`
with a one-line ``FILE: WHERE: problem`` message for malformed input. Writing files and
printing belong to ``importers.cli``. Shared machinery: ``common`` (field access, errors,
JSONL), ``csvtable`` (CSV), ``blocks`` (hash chaining, inherited prefix blocks),
``reconstruct`` (sessions and turns).
"""

from pddbench.workloads.importers.azure import import_azure
from pddbench.workloads.importers.bailian import import_bailian
from pddbench.workloads.importers.burstgpt import import_burstgpt
from pddbench.workloads.importers.common import ImportResult
from pddbench.workloads.importers.dynamo import import_dynamo
from pddbench.workloads.importers.mooncake import import_mooncake
from pddbench.workloads.importers.otel import import_otel
from pddbench.workloads.importers.tracelab import import_tracelab
from pddbench.workloads.importers.weka import import_weka

__all__ = [
    "ImportResult",
    "import_azure",
    "import_bailian",
    "import_burstgpt",
    "import_dynamo",
    "import_mooncake",
    "import_otel",
    "import_tracelab",
    "import_weka",
]
