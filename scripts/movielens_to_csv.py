#!/usr/bin/env python3
"""Join MovieLens-100k into one CSV for towerrec's schema reader.

Usage: python3 scripts/movielens_to_csv.py ML_100K_DIR OUT.csv

ML_100K_DIR holds either GroupLens's own files (`u.data`, `u.user`, `u.item`, `u.genre`:
unzip https://files.grouplens.org/datasets/movielens/ml-100k.zip, GroupLens's terms:
research use, no redistribution) or RecBole's atomic files (`ml-100k.inter`, `.user`,
`.item`), which hold the same data.

Each output row is one rating with the user's and the item's features, sorted by
timestamp (ties by user, item) so that a tail split is a time-ordered split:
    rating,timestamp,user_id,item_id,age,gender,occupation,zip_prefix,release_year,genres
`zip_prefix` is the first digit of the zip code; `genres` is '|'-separated (multi-hot).
Only the Python standard library is used.
"""
import csv
import os
import sys


def read_atomic(path):
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    header = [h.split(":")[0] for h in rows[0]]
    return [dict(zip(header, r)) for r in rows[1:] if r]


def read_grouplens(src):
    """GroupLens's u.* files, as the records read_atomic gives for RecBole's."""
    def rows(name, sep):
        with open(os.path.join(src, name), newline="", encoding="latin-1") as f:
            return [r for r in csv.reader(f, delimiter=sep, quoting=csv.QUOTE_NONE) if r]
    genre_names = {int(r[1]): r[0] for r in rows("u.genre", "|")}
    users = {r[0]: {"user_id": r[0], "age": r[1], "gender": r[2], "occupation": r[3],
                    "zip_code": r[4]} for r in rows("u.user", "|")}
    items = {}
    for r in rows("u.item", "|"):
        flags = r[5:]
        genres = [genre_names[k] for k, flag in enumerate(flags) if flag == "1"]
        items[r[0]] = {"item_id": r[0], "release_year": r[2][-4:] if r[2] else "",
                       "class": " ".join(genres)}
    inter = [{"user_id": r[0], "item_id": r[1], "rating": r[2], "timestamp": r[3]}
             for r in rows("u.data", "\t")]
    return users, items, inter


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    if os.path.exists(os.path.join(src, "u.data")):
        users, items, inter = read_grouplens(src)
    else:
        users = {u["user_id"]: u for u in read_atomic(os.path.join(src, "ml-100k.user"))}
        items = {i["item_id"]: i for i in read_atomic(os.path.join(src, "ml-100k.item"))}
        inter = read_atomic(os.path.join(src, "ml-100k.inter"))
    inter.sort(key=lambda r: (float(r["timestamp"]), int(r["user_id"]), int(r["item_id"])))
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["rating", "timestamp", "user_id", "item_id", "age", "gender", "occupation",
                    "zip_prefix", "release_year", "genres"])
        for r in inter:
            u = users.get(r["user_id"], {})
            i = items.get(r["item_id"], {})
            genres = "|".join(i.get("class", "").split())
            w.writerow([r["rating"], r["timestamp"], r["user_id"], r["item_id"], u.get("age", ""),
                        u.get("gender", ""), u.get("occupation", ""), u.get("zip_code", "")[:1],
                        i.get("release_year", ""), genres])
    print(f"wrote {len(inter)} rows to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
