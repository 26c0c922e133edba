# Sourced by scripts/vocab-auc.sh and scripts/precision-auc.sh: the three data sets of
# the AUC studies, their example configs and their splits (docs/DATA.md), fixed before
# the first measurement of either:
# - Criteo's last 2,000 rows evaluate (the example's tail split);
# - Avazu by file order too (its last 20%; the example's random split is replaced);
# - MovieLens by time, the timestamp of the 80,000th of the 100,000 ratings in time
#   order (shared with the next one): 79,999 ratings train, the last 20,001 evaluate.
# Makes target/data/ml100k.csv from ../shared/data/ml-100k where it is missing.
if [ ! -f target/data/ml100k.csv ]; then
    python3 scripts/movielens_to_csv.py ../shared/data/ml-100k target/data/ml100k.csv
fi
declare -A cfg=([criteo]=examples/criteo.toml [avazu]=examples/avazu.toml
    [movielens]=examples/movielens.toml)
declare -A split=([criteo]='{kind="tail",eval_rows=2000}'
    [avazu]='{kind="tail",eval_fraction=0.2}'
    [movielens]='{kind="column",column="timestamp",eval_from=889237269}')
