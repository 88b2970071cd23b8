"""The bad-input corpus: one row per case, ``(id, argv, files, needle)``.

``argv`` is the ``kvtier`` command line (split on spaces), run in a fresh
directory holding ``files`` (name -> text, bytes, or a callable writing the
file at the path it is given).  Each case must end in exit status 2 with one
line on stderr naming ``needle`` (the key, flag or file at fault).

The rows live in three modules by kind, concatenated here in their original
order (ids and order are the corpus's contract):
:mod:`tests.badinput.cases_flags` (flag values, ``real validate``, sweep
factors), :mod:`tests.badinput.cases_yaml` (profile and scenario YAML) and
:mod:`tests.badinput.cases_data` (request traces, transfer plans, outputs);
the files they use are built by :mod:`tests.badinput.builders`.
"""

from __future__ import annotations

from tests.badinput.builders import VIDUR, Files, plan
from tests.badinput.cases_data import DATA
from tests.badinput.cases_flags import FLAGS
from tests.badinput.cases_yaml import YAML

__all__ = ["CASES", "VIDUR", "Files", "plan"]

CASES: list[tuple[str, str, Files, str]] = [*FLAGS, *YAML, *DATA]
