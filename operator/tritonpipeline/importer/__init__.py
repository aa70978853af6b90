"""Import a Triton model repository as one TritonPipeline: config texts in, a document and findings out.
The direction is the compiler's reversed: compiler/ turns a spec into Triton's artifacts, this package
turns Triton's configs back into a spec; it may use the compiler (to check what it wrote), the compiler
never uses it (tests/unit/test_layout.py).

Pure (no file I/O, no printing): `import_repository` (`configs`) takes each model directory's
config.pbtxt text and the directories without one; `tritonpipeline import` (cli/cmd_import.py) reads the
repository, prints the findings and writes the YAML (`document_yaml`, `writer`).

What is carried: one small function per config section (`section_mappers`, `ensembles`), reading the Triton
field -> spec field tables (`Carry` rows in `tables`), so a field the spec gains is one row there (a row
naming a field the spec does not have raises). Everything else a parsed config holds is found by the
not-carried walk (`walk`) against the fields the mapper took (`reading`), and reported as a NOT_CARRIED
finding (`MODEL: field: why`): a field Triton adds later is reported, never dropped. Values Triton treats
exactly like what the render writes are not reported; NORMALISATIONS lists each of them, in one place."""

from .configs import import_repository, pipeline_name
from .findings import COMPLETED, ERROR, NOT_CARRIED, WARNING, Finding, ImportResult
from .tables import CONFIG, MODEL_FILES
from .writer import document_yaml

__all__ = [
    "COMPLETED",
    "CONFIG",
    "ERROR",
    "MODEL_FILES",
    "NOT_CARRIED",
    "WARNING",
    "Finding",
    "ImportResult",
    "document_yaml",
    "import_repository",
    "pipeline_name",
]
