//! Routing of ids to the shards that hold their rows: the first stage of the sharded
//! forward (the scale-in paper's input distribution; DMT §3.1 step a).
//!
//! Which shards each group rank holds is worked out once, when the collection is
//! built. A table-wise or column-wise shard receives every id of a bag; a row-wise
//! table's ids are bucketed by shard with one binary search per id over the shards'
//! first rows (the plan validator guarantees they tile `0..rows` in order), so routing
//! never scans every shard per id. A row-partitioned table (OPER) has one "shard" per
//! rank that stores any of its rows, and its ids go to the nearest copy the address
//! map names (the row's position, then a binary search over the partitions, each of
//! which this rank reads from one store), as offsets there.

use crate::error::{Error, Result};
use std::sync::Arc;
use towerrec_comm::{Comm, Topology};
use towerrec_core::batch::JaggedView;
use towerrec_core::probe::HugePageBuf;
use towerrec_plan::partitioned::TableAddresses;
use towerrec_plan::Shard;

/// How a table's ids find their shards.
pub(super) enum Route<'a> {
    /// Every id of a bag to every shard (table-wise, column-wise).
    Whole(&'a [Shard]),
    /// Each id to the shard whose rows hold it (row-wise).
    Rows(&'a [Shard]),
    /// Each id to the nearest copy of its row: `shards[k]` is the store of rank
    /// `shards[k].rank` (row-partitioned).
    Addressed {
        shards: &'a [Shard],
        map: Arc<TableAddresses>,
        me: usize,
        topology: Topology,
    },
}

/// What the bucketing needs of a split table.
enum Split {
    Whole,
    Rows(Vec<u64>),
    Addressed {
        map: Arc<TableAddresses>,
        /// `(shard, offset)` of each partition's first row: the store this rank reads
        /// the partition from (a row `i` rows further is `i` rows further there).
        parts: Vec<(u32, usize)>,
        /// The route of every row, looked up once, for tables of up to
        /// [`CACHED_ROWS`] rows (4 bytes a row, in [`Router`]'s `routes`); larger ones
        /// find the row's partition per id.
        cache: Option<RouteCache>,
    },
}

/// Row-partitioned tables up to this many rows get their routes looked up once.
const CACHED_ROWS: usize = 1 << 22;

/// Bytes of the route cache a rank keeps for a row-partitioned table of `rows` rows
/// (at most: a table whose routes do not fit 32 bits keeps none).
pub(super) fn route_cache_bytes(rows: usize) -> u64 {
    if rows <= CACHED_ROWS {
        4 * rows as u64
    } else {
        0
    }
}

/// Where every shard of every sharded table lives, by group rank.
pub(super) struct Router {
    /// Every shard of every sharded table, `(table, shard)` in table then shard order:
    /// the order of the segments on the wire.
    wire: Vec<(usize, usize)>,
    /// For each rank of the group, the indices into `wire` of the shards it holds.
    by_rank: Vec<Vec<usize>>,
    /// How each table's ids are split among its shards.
    splits: Vec<Split>,
    /// Ids of the last batch bucketed by shard, per row-split table:
    /// `buckets[t][s]` holds lengths (one per sample) and values.
    buckets: Vec<Vec<Bucket>>,
    /// The routes of one table's ids, reused from table to table.
    scratch: Vec<u32>,
    /// The cached routes of every row-partitioned table, one table after another in
    /// one buffer, so that they lie on 2 MiB pages together (one table's alone are
    /// 400 kB at 100,000 rows, too small for a page of its own): a table's ids read
    /// their routes at random, and on 4 KiB pages most reads of a cold row's route
    /// also walk the page table.
    routes: HugePageBuf<u32>,
}

/// Where a row-partitioned table's routes lie among all tables' (`rows` from
/// `start`, one per row): every row's `(shard, offset)` packed in 32 bits (the shard above `shift`
/// bits of offset), half the bytes of a pair, so more of a large table's routes stay
/// in the caches nearest the core while ids are bucketed.
struct RouteCache {
    start: usize,
    rows: usize,
    shift: u32,
}

impl RouteCache {
    /// Appends the routes of `rows` rows to `all`, if every shard index and offset
    /// fits in 32 bits (else leaves `all` as it was).
    fn build(
        all: &mut Vec<u32>,
        rows: usize,
        shards: usize,
        route: impl Fn(usize) -> (u32, usize),
    ) -> Option<Self> {
        let shard_bits = (usize::BITS - shards.saturating_sub(1).leading_zeros()).max(1);
        let shift = 32u32.checked_sub(shard_bits)?;
        let start = all.len();
        for r in 0..rows {
            let (k, offset) = route(r);
            if offset >> shift != 0 {
                all.truncate(start);
                return None;
            }
            all.push(k << shift | offset as u32);
        }
        Some(Self { start, rows, shift })
    }

    /// This table's routes among all tables' `all` (an id past its rows panics, as
    /// it did with a table of its own, rather than read the next table's).
    fn of<'a>(&self, all: &'a [u32]) -> &'a [u32] {
        &all[self.start..self.start + self.rows]
    }

    /// The shard index and offset of a packed route.
    fn unpack(&self, route: u32) -> (usize, u32) {
        let k = route >> self.shift;
        (k as usize, route & ((1 << self.shift) - 1))
    }
}

/// Buckets `ids` by the `(shard, offset)` routes in `cache`: every route read first, a
/// run of independent loads from a table too large for the nearest caches that the CPU
/// overlaps, then the ids written out by shard.
fn bucket_cached(
    cache: &RouteCache,
    all: &[u32],
    ids: JaggedView<'_>,
    buckets: &mut [Bucket],
    routes: &mut Vec<u32>,
) {
    routes.clear();
    let table = cache.of(all);
    // Ids are checked against the table's rows when the batch is read.
    routes.extend(ids.values.iter().map(|&id| table[id as usize]));
    let mut at = 0;
    for s in 0..ids.batch_size() {
        let n = ids.ids(s).len();
        for &route in &routes[at..at + n] {
            let (k, offset) = cache.unpack(route);
            buckets[k].push_addressed(s, u64::from(offset));
        }
        at += n;
    }
}

/// The store (`parts`' shard index) and offset there that a row-partitioned table's
/// `row` is read from.
fn route_of(map: &TableAddresses, parts: &[(u32, usize)], row: usize) -> (u32, usize) {
    let (p, within) = map.partition_at(map.order().position(row));
    let (k, base) = parts[p];
    (k, base + within)
}

/// One shard's part of a batch: its ids renumbered from its first row (row-wise) or as
/// offsets in its store (row-partitioned).
#[derive(Default)]
struct Bucket {
    /// Row-wise: one length per sample of the batch.
    lengths: Vec<u64>,
    /// Row-partitioned: only the bags that read the store, by sample, each as
    /// `sample << 32 | length` ([`bag_of`]). Most bags read a given store nothing, and
    /// every stage after the bucketing walks this list, so a step's work grows with
    /// the ids, not with the stores times the batch.
    bags: Vec<u64>,
    values: Vec<u64>,
}

impl Bucket {
    /// Appends an id (its offset in the store) of sample `s`, which is this bucket's
    /// last sample or a later one.
    fn push_addressed(&mut self, s: usize, value: u64) {
        match self.bags.last_mut() {
            Some(last) if bag_of(*last).0 == s => *last = packed_bag(s, bag_of(*last).1 + 1),
            _ => self.bags.push(packed_bag(s, 1)),
        }
        self.values.push(value);
    }
}

/// A bag of `len` ids of `sample` packed as `sample << 32 | len`, as stores' buckets
/// list them and the input distribution sends them.
fn packed_bag(sample: usize, len: u64) -> u64 {
    (sample as u64) << 32 | len
}

/// The sample and id count of a packed bag ([`packed_bag`]).
pub(super) fn bag_of(packed: u64) -> (usize, u64) {
    ((packed >> 32) as usize, packed & 0xffff_ffff)
}

impl Router {
    /// How every table routes; shards name world ranks, which must all be members of
    /// `comm`.
    pub(super) fn new(comm: &Comm, routes: &[Route<'_>]) -> Result<Self> {
        Self::with_cache_limit(comm, routes, CACHED_ROWS)
    }

    /// [`Router::new`], caching the routes of row-partitioned tables of up to
    /// `cached_rows` rows.
    fn with_cache_limit(comm: &Comm, routes: &[Route<'_>], cached_rows: usize) -> Result<Self> {
        let p = comm.size();
        let group_of: std::collections::HashMap<usize, usize> =
            (0..p).map(|g| (comm.world_rank_of(g), g)).collect();
        let mut wire = Vec::new();
        let mut by_rank = vec![Vec::new(); p];
        let mut splits = Vec::with_capacity(routes.len());
        let mut buckets = Vec::with_capacity(routes.len());
        let mut all_routes = Vec::new();
        for (t, route) in routes.iter().enumerate() {
            let table_shards = match route {
                Route::Whole(s) | Route::Rows(s) | Route::Addressed { shards: s, .. } => *s,
            };
            for (s, shard) in table_shards.iter().enumerate() {
                let g = *group_of.get(&shard.rank).ok_or_else(|| {
                    Error::Plan(format!(
                        "table {t} shard {s} is on rank {}, which is not in this group of {p}",
                        shard.rank
                    ))
                })?;
                by_rank[g].push(wire.len());
                wire.push((t, s));
            }
            let split = match route {
                Route::Whole(_) => Split::Whole,
                Route::Rows(s) => Split::Rows(s.iter().map(|s| s.rows.0 as u64).collect()),
                Route::Addressed {
                    shards,
                    map,
                    me,
                    topology,
                } => {
                    let mut shard_of = vec![usize::MAX; topology.world_size()];
                    for (k, s) in shards.iter().enumerate() {
                        shard_of[s.rank] = k;
                    }
                    let parts: Vec<(u32, usize)> = (0..map.partitions())
                        .map(|p| {
                            let at = map.partition_location(p, *me, *topology);
                            (shard_of[at.rank] as u32, at.offset)
                        })
                        .collect();
                    let rows = map.order().rows();
                    let cache = (rows <= cached_rows)
                        .then(|| {
                            RouteCache::build(&mut all_routes, rows, shards.len(), |r| {
                                route_of(map, &parts, r)
                            })
                        })
                        .flatten();
                    Split::Addressed {
                        map: Arc::clone(map),
                        parts,
                        cache,
                    }
                }
            };
            buckets.push(match split {
                Split::Whole => Vec::new(),
                _ => table_shards.iter().map(|_| Bucket::default()).collect(),
            });
            splits.push(split);
        }
        Ok(Self {
            wire,
            by_rank,
            splits,
            buckets,
            scratch: Vec::new(),
            routes: HugePageBuf::from_slice(&all_routes),
        })
    }

    /// The `(table, shard)`s held by group rank `g`, in wire order.
    pub(super) fn held_by(&self, g: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.by_rank[g].iter().map(|&w| self.wire[w])
    }

    /// Buckets the ids of every split table of `feature(t)` by shard.
    pub(super) fn bucket<'a>(&mut self, feature: impl Fn(usize) -> JaggedView<'a>) {
        for (t, split) in self.splits.iter().enumerate() {
            if matches!(split, Split::Whole) {
                continue;
            }
            let ids = feature(t);
            let buckets = &mut self.buckets[t];
            for b in buckets.iter_mut() {
                b.lengths.clear();
                b.bags.clear();
                b.values.clear();
                if matches!(split, Split::Rows(_)) {
                    b.lengths.resize(ids.batch_size(), 0);
                }
            }
            if let Split::Addressed {
                cache: Some(cache), ..
            } = split
            {
                bucket_cached(cache, &self.routes, ids, buckets, &mut self.scratch);
                continue;
            }
            for s in 0..ids.batch_size() {
                for &id in ids.ids(s) {
                    // Ids are checked against the table's rows when the batch is read.
                    match split {
                        Split::Rows(starts) => {
                            // The last shard whose first row is ≤ id.
                            let k = starts.partition_point(|&r0| r0 <= id).saturating_sub(1);
                            let bucket = &mut buckets[k];
                            bucket.lengths[s] += 1;
                            bucket.values.push(id - starts[k]);
                        }
                        Split::Addressed { map, parts, .. } => {
                            let (k, offset) = route_of(map, parts, id as usize);
                            buckets[k as usize].push_addressed(s, offset as u64);
                        }
                        Split::Whole => unreachable!("skipped above"),
                    }
                }
            }
        }
    }

    /// For a row-partitioned table, the bags of this rank that sent shard `s` ids in
    /// the last [`Router::bucket`], by sample, each `sample << 32 | length` ([`bag_of`];
    /// the output of a bag that sent none is not exchanged); `None` for other tables.
    pub(super) fn addressed_bags(&self, t: usize, s: usize) -> Option<&[u64]> {
        match self.splits[t] {
            Split::Addressed { .. } => Some(&self.buckets[t][s].bags),
            _ => None,
        }
    }

    /// Appends the lengths and ids that shard `s` of table `t` receives from this rank:
    /// its bucket for a split table (after [`Router::bucket`]), else the whole bags. A
    /// row-partitioned store gets the count of bags that read it, each as `sample << 32
    /// | length`, then the ids (see [`super::lookup::unpack`]); with `every_bag`, every
    /// bag, empty or not (this rank's own store, which pools its bags straight into the
    /// rank's feature rows).
    pub(super) fn pack(
        &self,
        t: usize,
        s: usize,
        ids: JaggedView<'_>,
        every_bag: bool,
        send: &mut Vec<u64>,
    ) {
        if matches!(self.splits[t], Split::Addressed { .. }) {
            // Most bags send a store nothing: only the others, as `sample << 32 | length`.
            let bucket = &self.buckets[t][s];
            if every_bag {
                send.push(ids.batch_size() as u64);
                let mut bags = bucket.bags.iter().peekable();
                for b in 0..ids.batch_size() {
                    let bag = bags.next_if(|&&bag| bag_of(bag).0 == b);
                    send.push(bag.copied().unwrap_or(packed_bag(b, 0)));
                }
            } else {
                send.push(bucket.bags.len() as u64);
                send.extend_from_slice(&bucket.bags);
            }
            send.extend_from_slice(&bucket.values);
        } else if !matches!(self.splits[t], Split::Whole) {
            let bucket = &self.buckets[t][s];
            send.extend_from_slice(&bucket.lengths);
            send.extend_from_slice(&bucket.values);
        } else {
            send.extend((0..ids.batch_size()).map(|b| ids.ids(b).len() as u64));
            send.extend_from_slice(ids.values);
        }
    }
}

/// Which samples of each rank's slice an output exchange carries, both ways: all of
/// them, or the first or second half (a slice of `n` samples splits at `n / 2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Whole,
    First,
    Second,
}

impl Part {
    /// The samples of a slice of `n` that the part holds.
    pub(crate) fn range(self, n: usize) -> std::ops::Range<usize> {
        match self {
            Part::Whole => 0..n,
            Part::First => 0..n / 2,
            Part::Second => n / 2..n,
        }
    }

    /// The bags of `bags` (packed as [`bag_of`] reads them, in sample order) whose
    /// samples the part of a slice of `n` holds.
    pub(super) fn bags_in(self, bags: &[u64], n: usize) -> &[u64] {
        if self == Part::Whole {
            return bags;
        }
        let want = self.range(n);
        let first = bags.partition_point(|&p| bag_of(p).0 < want.start);
        let end = bags.partition_point(|&p| bag_of(p).0 < want.end);
        &bags[first..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharded::partitioned;
    use towerrec_comm::run_in_process;
    use towerrec_plan::{Partition, ShardingType, TablePlan};

    const ROWS: usize = 40;

    #[test]
    fn packed_routes_unpack_to_their_shard_and_offset() {
        for shards in [1, 2, 3, 4, 64, 1000] {
            let route = |r: usize| ((r % shards) as u32, r / shards * 7 % ROWS);
            // After another table's routes, as the router keeps them.
            let mut all = vec![u32::MAX; 3];
            let cache = RouteCache::build(&mut all, ROWS, shards, route).expect("fits");
            assert_eq!(all.len(), 3 + ROWS);
            assert_eq!(cache.of(&all).len(), ROWS);
            for r in 0..ROWS {
                let (k, offset) = route(r);
                assert_eq!(cache.unpack(cache.of(&all)[r]), (k as usize, offset as u32));
            }
        }
        // 2^31 shards leave one bit for offsets: room for offsets 0 and 1 only.
        let mut all = Vec::new();
        assert!(RouteCache::build(&mut all, ROWS, 1 << 31, |r| (0, r % 2)).is_some());
        assert!(RouteCache::build(&mut all, ROWS, 1 << 31, |r| (0, r)).is_none());
        assert!(RouteCache::build(&mut all, ROWS, usize::MAX, |_| (0, 0)).is_none());
        assert_eq!(
            all.len(),
            ROWS,
            "a table that does not fit leaves nothing behind"
        );
    }

    /// A row-partitioned table on 2 × 2 ranks: three hot rows first, a partition on
    /// every rank, the hot one copied to both ranks of the other host, one copied within
    /// its host.
    fn entry() -> TablePlan {
        let part = |order, rank, replicas: &[usize]| Partition {
            order,
            rank,
            replicas: replicas.to_vec(),
        };
        TablePlan {
            table: "t".into(),
            sharding: ShardingType::RowPartitioned,
            shards: Vec::new(),
            hot_rows: vec![7, 3, 30],
            partitions: vec![
                part((0, 3), 2, &[0, 1]),
                part((3, 15), 0, &[]),
                part((15, 27), 1, &[0]),
                part((27, ROWS), 3, &[]),
            ],
        }
    }

    #[test]
    fn routes_bucket_as_the_address_map_locates() {
        let topology = Topology::new(2, 2).expect("topology");
        let (map, shards) = partitioned::stores(&entry(), ROWS, 4, topology);
        // 20 bags of 0 to 5 ids, every row read.
        let lengths: Vec<usize> = (0..20).map(|b| b % 6).collect();
        let mut offsets = vec![0];
        for n in &lengths {
            offsets.push(offsets.last().expect("started with 0") + n);
        }
        let ids: Vec<u64> = (0..offsets[20]).map(|i| (i * 7 % ROWS) as u64).collect();
        let results = run_in_process(topology, |world| {
            let me = world.world_rank();
            let route = [Route::Addressed {
                shards: &shards,
                map: Arc::clone(&map),
                me,
                topology,
            }];
            let mut cached = Router::with_cache_limit(&world, &route, ROWS)?;
            let mut searched = Router::with_cache_limit(&world, &route, 0)?;
            let view = || JaggedView::new(&offsets, &ids).expect("view");
            cached.bucket(|_| view());
            searched.bucket(|_| view());
            // Each bucket's listed bags, by sample and none empty, as a length per bag.
            let buckets = |r: &Router| -> Vec<(Vec<u64>, Vec<u64>)> {
                r.buckets[0]
                    .iter()
                    .map(|b| {
                        let mut per_bag = vec![0u64; lengths.len()];
                        let mut last = None;
                        for &packed in &b.bags {
                            let (sample, n) = bag_of(packed);
                            assert!(n > 0 && last < Some(sample), "bags by sample, none empty");
                            last = Some(sample);
                            per_bag[sample] = n;
                        }
                        (per_bag, b.values.clone())
                    })
                    .collect()
            };
            // What the address map's `locate` says, id by id.
            let mut located = vec![(vec![0u64; lengths.len()], Vec::new()); shards.len()];
            for (b, bag) in offsets.windows(2).enumerate() {
                for &id in &ids[bag[0]..bag[1]] {
                    let at = map.locate(id as usize, me, topology);
                    let k = shards
                        .iter()
                        .position(|s| s.rank == at.rank)
                        .expect("a store");
                    located[k].0[b] += 1;
                    located[k].1.push(at.offset as u64);
                }
            }
            Ok::<_, Error>((buckets(&cached), buckets(&searched), located))
        })
        .expect("cluster");
        for (rank, (cached, searched, located)) in results.into_iter().enumerate() {
            assert_eq!(cached, searched, "rank {rank}");
            assert_eq!(cached, located, "rank {rank}");
            let routed: u64 = cached.iter().flat_map(|(l, _)| l).sum();
            assert_eq!(
                routed as usize,
                ids.len(),
                "rank {rank}: every id routed once"
            );
        }
    }
}
