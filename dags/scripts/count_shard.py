"""A tiny batch stage (standard library only): count the words of this pod's shard of a generated text data set.

Run as an Indexed Job: ``AE_RANK`` is the pod's completion index and ``AE_WORLD_SIZE`` the number of shards
(``airflow_elastic.runtime.context``); the counts leave the pod as its final metrics (``runtime.report``), and the
index-0 pod's are the stage's result. ``ROWS`` sets the data set's size, ``DAY`` is only echoed.
"""

from __future__ import annotations

import os

from airflow_elastic.runtime import context, report


def main() -> None:
    me = context()
    rows = int(os.environ.get("ROWS", "1000"))
    mine = [f"row {i} of the nightly data set" for i in range(rows) if i % me.world_size == me.rank]
    words = sum(len(line.split()) for line in mine)
    print(f"shard {me.rank}/{me.world_size} for {os.environ.get('DAY', '?')}: {len(mine)} rows, {words} words")
    report({"shard": me.rank, "shards": me.world_size, "rows": len(mine), "words": words})


if __name__ == "__main__":
    main()
