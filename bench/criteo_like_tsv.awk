# A Criteo-format TSV of `rows` rows (awk -v rows=N -v seed=S -f criteo_like_tsv.awk):
# label, 13 integer counts, 26 hex categoricals whose values are log-uniform over a
# per-feature cardinality (10 to 10^7), so low ids are hot as in real click logs; 3% of
# categoricals are empty. For speed measurements of the readers and `towerrec vocab`.
BEGIN {
    srand(seed + 0);
    for (j = 1; j <= 26; j++) lc[j] = log(10 ^ (1 + j % 7));
    for (i = 0; i < rows; i++) {
        line = (rand() < 0.25 ? "1" : "0");
        for (j = 1; j <= 13; j++) line = line "\t" int(exp(rand() * 6.9));
        for (j = 1; j <= 26; j++) {
            if (rand() < 0.03) { line = line "\t"; continue }
            line = line "\t" sprintf("%08x", int(exp(rand() * lc[j])) * 2654435761 % 4294967296);
        }
        print line;
    }
}
