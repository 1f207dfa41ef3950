"""glibc's mmap threshold is fixed only in a dxt run, never by library use (a notebook).

A review found one Kwollect fetch in a notebook slowing numpy for the rest of the kernel's
life: the first reader of an answer fixed the threshold for the whole process, so every large
array was mapped afresh and faulted in page by page.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import resource, sys
import numpy as np
from dxt_core.budget import ANSWER_BUDGET, tune_malloc

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):
        a = np.ones(1 << 20)  # 8 MiB, written: every page touched
        del a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults()  # glibc raises its threshold past 8 MiB once such a block is freed
ticket = ANSWER_BUDGET.start()  # what a library fetch does first
ANSWER_BUDGET.end(ticket)
library = faults()
if sys.argv[1] == "tuned":
    tune_malloc()
elif sys.argv[1] == "dxt":
    from dxt_core.cli import main
    try:
        main(["--version"])
    except SystemExit:
        pass
print(library, faults())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
@pytest.mark.parametrize("run", ["tuned", "dxt"])
def test_a_library_fetch_leaves_malloc_as_it_was_and_a_dxt_run_tunes_it(run):
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, run], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    library, tuned = (int(x) for x in out.stdout.splitlines()[-1].split())
    # 40 arrays of 8 MiB: reused from the heap (no fault) until tuned, then each one mapped
    # and faulted in afresh (about 500 faults each here, measured; before the fix the
    # library's loop faulted as much)
    assert library < 1_000, library
    assert tuned > 10_000, tuned
