"""Turn the raw output of probe_cxx_sweep.py (its JSON + the DG_PRINT_CONFIGS log) into the compact record
committed under tests/data/: for each key, runs of consecutive m that got one configuration.

usage: python tests/gpu/summarize_sweep.py SWEEP.json CONFIGS.txt.gz OUT.json "<provenance text>"
"""

from __future__ import annotations

import gzip
import json
import re
import sys

DESC = re.compile(r"GemmDesc\(gemm_type=(\d+),.*? m=(\d+), n=(\d+), k=(\d+), num_groups=(\d+),.*?num_sms=(\d+),"
                  r".*?expected_m=(\d+),.*?block_m=(\d+), block_n=(\d+),.*?cluster_m=(\d+), cluster_n=(\d+)\).*?"
                  r"swizzle_cd_mode=(\d+)\).*?smem_size=(\d+), num_stages=(\d+)\)")


def main() -> None:
    sweep = json.load(open(sys.argv[1]))
    runs: dict[str, list] = {}
    with gzip.open(sys.argv[2], "rt") as f:
        for line in f:
            m = DESC.search(line)
            if not m:
                continue
            gtype, mm, n, k, g, sms, em, bm, bn, cm, cn, swd, smem, st = map(int, m.groups())
            key = f"{gtype}/{n}/{k}/{g}"
            x = em if gtype == 2 else mm
            cfg = [bm, bn, cm, cn, st, swd, smem, sms]
            lst = runs.setdefault(key, [])
            if lst and lst[-1][2:] == cfg and lst[-1][1] == x - 1:
                lst[-1][1] = x
            else:
                lst.append([x, x, *cfg])
    out = {
        "provenance": sys.argv[4],
        "gpu": sweep["gpu"], "torch": sweep["torch"], "num_sms": sweep["num_sms"],
        "columns": ["m_first", "m_last", "block_m", "block_n", "cluster_m", "cluster_n", "stages", "swizzle_d",
                    "smem", "num_sms"],
        "runs": runs,
        "keys": sweep["keys"],
        "entries": sweep["entries"],
    }
    json.dump(out, open(sys.argv[3], "w"), indent=0)


if __name__ == "__main__":
    main()
