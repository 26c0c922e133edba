#!/usr/bin/env python3
"""Writes a snappy-compressed Parquet file of the same rows as a CSV that a towerrec
config describes (`format = "csv"`), so that the Parquet reader can be measured against
the CSV reader and the binary format on the same data (docs/DATA.md, "Parquet").

Column types follow the config's schema, as a data pipeline would hand them over:
the label keeps the type pyarrow infers (integers for 0/1), dense columns become
float64 (pyarrow parses the text to the nearest double, as towerrec's CSV reader does),
sparse columns stay strings (so their keys equal the CSV's), and a sparse column with a
`separator` becomes a list of strings with --lists (split, trimmed, empty pieces
dropped: the ids equal the CSV's) or stays the separated string without it. Columns the
schema does not name are left out.

Needs pyarrow (`pip install pyarrow`). Usage:

    python3 bench/csv_to_parquet.py CONFIG.toml DATA.csv OUT.parquet \
        [--row-group-rows 131072] [--lists]

Prints the rows, row groups and bytes written.
"""

import argparse
import os
import sys
import tomllib

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="a towerrec config with [data] format = \"csv\"")
    ap.add_argument("csv", help="the CSV file (in place of the config's data.path)")
    ap.add_argument("out", help="the Parquet file to write")
    ap.add_argument("--row-group-rows", type=int, default=131072)
    ap.add_argument("--lists", action="store_true",
                    help="write separated sparse columns as lists of strings")
    args = ap.parse_args()

    with open(args.config, "rb") as f:
        data = tomllib.load(f)["data"]
    if data.get("format") != "csv":
        sys.exit(f"{args.config}: data.format must be \"csv\", got {data.get('format')!r}")
    schema = data["schema"]
    if not schema.get("header", True):
        sys.exit("the CSV needs a header line: Parquet columns are named")
    label = schema["label"]["column"]
    dense = [d["column"] for d in schema.get("dense", [])]
    sparse = {s["column"]: s.get("separator") for s in schema.get("sparse", [])}
    wanted = list(dict.fromkeys([label, *dense, *sparse]))
    types = {c: pa.float64() for c in dense}
    types.update({c: pa.string() for c in sparse})
    if "positive" in schema["label"]:
        types[label] = pa.string()

    table = pacsv.read_csv(
        args.csv,
        parse_options=pacsv.ParseOptions(delimiter=schema.get("delimiter", ",")),
        convert_options=pacsv.ConvertOptions(
            include_columns=wanted,
            column_types=types,
            # An empty field is null (a dense fill, the empty category), as in the CSV
            # reader; "NA" and friends stay text.
            null_values=[""],
            strings_can_be_null=True,
        ),
    )
    if args.lists:
        for name, sep in sparse.items():
            if sep is not None:
                pieces = pc.split_pattern(table[name], sep).combine_chunks()
                i = table.schema.get_field_index(name)
                table = table.set_column(i, name, _pieces(pieces))
    pq.write_table(table, args.out, compression="snappy", row_group_size=args.row_group_rows)
    meta = pq.ParquetFile(args.out).metadata
    size = os.path.getsize(args.out)
    print(f"{args.out}: {meta.num_rows} rows, {meta.num_row_groups} row groups, {size} bytes")
    return 0


def _pieces(lists: pa.ListArray) -> pa.ListArray:
    """Each list's pieces trimmed of ASCII whitespace, empty ones dropped (as towerrec
    splits a separated field); a null stays null."""
    ws = " \t\n\r\x0c"
    py = [None if v is None else [t for p in v if p is not None and (t := p.strip(ws))]
          for v in lists.to_pylist()]
    return pa.array(py, type=pa.list_(pa.string()))


if __name__ == "__main__":
    sys.exit(main())
