"""STAND-IN for `python -m sglang.launch_server` (tests only; the real server needs GPUs and torch).

It records how it was started (its arguments and the environment dgprecompile gives it) as JSON in the file named
by $STANDIN_RECORD, then exits with $STANDIN_EXIT (default 0). It computes nothing and parses nothing.
"""

import json
import os
import sys

WATCHED = ("SGL_", "SGLANG_", "DG_JIT_", "DGPRECOMPILE_", "PYTHONPATH", "CUDA_VISIBLE_DEVICES")

if __name__ == "__main__":
    record = {"module": "sglang.launch_server", "argv": sys.argv[1:], "pid": os.getpid(),
              "env": {k: v for k, v in os.environ.items() if k.startswith(WATCHED)}}
    path = os.environ.get("STANDIN_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
    sys.exit(int(os.environ.get("STANDIN_EXIT", "0")))
