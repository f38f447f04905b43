"""One job of a comparison in its own process (``solo-diet compare`` starts it; see
:mod:`~solo_diet.cli.compare.fanout`):

    python -m solo_diet.cli.compare.worker <output_dir>/.spec-<pid>.yaml <job key>

Exit status 0 when the job is done, 130 when interrupted, 1 with a traceback otherwise.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    from solo_diet.cli.compare.runner import run_one_job

    try:
        run_one_job(args[0], args[1])
    except KeyboardInterrupt as err:
        print(f"interrupted: {err}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
