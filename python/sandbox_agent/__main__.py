"""``python -m sandbox_agent ARGS...`` runs the engine binary this package carries (``sandbox-agent ARGS...``)."""

import os
import sys

from .engine import binary_path
from .errors import EngineError


def main() -> None:
    try:
        binary = binary_path()
    except EngineError as e:
        print("sandbox_agent: %s" % e.message, file=sys.stderr)
        sys.exit(2)
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == "__main__":
    main()
