-- exact_failure_regions: where exactly, to the byte, are the failing budgets?
--
-- Answers: maximal runs of failing certified intervals (OOM or thrashed; runs
-- only break at a completing interval, an uncertified gap inside a run is
-- counted in gap_bytes), with the nearest certified interval below and above.
-- A region whose neighbours both complete is a feasibility hole
-- (`concepts.holes`); an edge is
-- byte-exact when that neighbour touches the region (lo_exact: the budget
-- lo - 1 is certified to complete; hi_exact: hi + 1 is).
-- Parameters: files -- the sweep's part files (list of paths or a glob);
-- range_lo, range_hi -- the swept range in bytes (sweep.json `range_bytes`).
-- Reads: the sweep runs table (docs/sweep-format.md).

-- exact_failure_regions(files, range_lo, range_hi): one row per region, by policy and lo.
--   policy          eviction policy; region: 1, 2, ... in budget order
--   lo, hi          first and last certified failing byte budget of the region
--   intervals       distinct failing executions; outcomes: comma-separated
--   gap_bytes       uncertified bytes between lo and hi
--   below_status    status of the nearest certified interval below (null: none in range)
--   above_status    ... above; below_hi / above_lo: its edge (bytes)
--   lo_exact        below_status = 'ok' and below_hi = lo - 1; hi_exact likewise
--   hole            below_status = 'ok' and above_status = 'ok'
CREATE OR REPLACE MACRO exact_failure_regions(files, range_lo, range_hi) AS TABLE
WITH p AS (
    SELECT DISTINCT policy,
           greatest(interval_lo, range_lo) AS lo,
           least(coalesce(interval_hi, range_hi), range_hi) AS hi,
           status, outcome
    FROM read_parquet(files, union_by_name = true)
    WHERE rep = 0 AND interval_lo IS NOT NULL
      AND interval_lo <= range_hi AND coalesce(interval_hi, range_hi) >= range_lo
), b AS (
    SELECT *, CASE WHEN lag(status) OVER w = status THEN 0 ELSE 1 END AS starts,
           lag(hi) OVER w AS prev_hi
    FROM p
    WINDOW w AS (PARTITION BY policy ORDER BY lo, hi)
), g AS (
    SELECT *, sum(starts) OVER (PARTITION BY policy ORDER BY lo, hi
                                ROWS UNBOUNDED PRECEDING) AS run
    FROM b
), runs AS (
    SELECT policy, run, any_value(status) AS status, min(lo) AS lo, max(hi) AS hi,
           count(*) AS intervals, string_agg(DISTINCT outcome, ',' ORDER BY outcome) AS outcomes,
           sum(CASE WHEN prev_hi IS NOT NULL AND lo > prev_hi + 1 AND starts = 0
                    THEN lo - prev_hi - 1 ELSE 0 END) AS gap_bytes
    FROM g
    GROUP BY policy, run
), n AS (
    SELECT *,
           lag(status) OVER w AS below_status, lag(hi) OVER w AS below_hi,
           lead(status) OVER w AS above_status, lead(lo) OVER w AS above_lo
    FROM runs
    WINDOW w AS (PARTITION BY policy ORDER BY lo)
)
SELECT policy, row_number() OVER (PARTITION BY policy ORDER BY lo) AS region,
       lo, hi, intervals, outcomes, gap_bytes,
       below_status, below_hi, above_status, above_lo,
       coalesce(below_status = 'ok' AND below_hi = lo - 1, false) AS lo_exact,
       coalesce(above_status = 'ok' AND above_lo = hi + 1, false) AS hi_exact,
       coalesce(below_status = 'ok' AND above_status = 'ok', false) AS hole
FROM n
WHERE status = 'fail'
ORDER BY policy, lo;
