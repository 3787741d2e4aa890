"""``python -m sweep.report SWEEP_DIR [--format FMT] [--max-rows N] [--against OLD_DIR]``:
re-render a sweep's report (:func:`sweep.report.summary.main`)."""

import sys

from sweep.report.summary import main

if __name__ == "__main__":
    sys.exit(main())
