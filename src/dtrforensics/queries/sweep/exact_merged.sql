-- exact_merged: what does the exact partition look like at a glance?
--
-- Answers: the certified intervals with neighbours merged when they touch (hi +
-- 1 = next lo) and have the same outcome: the display form of exact_partition
-- (which keeps every distinct execution). An uncertified gap always ends a run.
-- Parameters: files -- the sweep's part files (list of paths or a glob);
-- range_lo, range_hi -- the swept range in bytes (sweep.json `range_bytes`).
-- Reads: the sweep runs table (docs/sweep-format.md).

-- exact_merged(files, range_lo, range_hi): one row per merged run, by policy and lo.
--   policy          eviction policy
--   lo, hi, width   bytes (inclusive, clipped to the range)
--   status, outcome shared by every interval of the run
--   intervals       distinct executions merged
--   min_overhead    lowest overhead among them; max_overhead the highest
CREATE OR REPLACE MACRO exact_merged(files, range_lo, range_hi) AS TABLE
WITH p AS (
    SELECT DISTINCT policy,
           greatest(interval_lo, range_lo) AS lo,
           least(coalesce(interval_hi, range_hi), range_hi) AS hi,
           status, outcome, overhead
    FROM read_parquet(files, union_by_name = true)
    WHERE rep = 0 AND interval_lo IS NOT NULL
      AND interval_lo <= range_hi AND coalesce(interval_hi, range_hi) >= range_lo
), b AS (
    SELECT *,
           CASE WHEN lag(hi) OVER w = lo - 1 AND lag(outcome) OVER w = outcome
                THEN 0 ELSE 1 END AS starts
    FROM p
    WINDOW w AS (PARTITION BY policy ORDER BY lo, hi)
), g AS (
    SELECT *, sum(starts) OVER (PARTITION BY policy ORDER BY lo, hi
                                ROWS UNBOUNDED PRECEDING) AS run
    FROM b
)
SELECT policy, min(lo) AS lo, max(hi) AS hi, max(hi) - min(lo) + 1 AS width,
       any_value(status) AS status, any_value(outcome) AS outcome,
       count(*) AS intervals, min(overhead) AS min_overhead, max(overhead) AS max_overhead
FROM g
GROUP BY policy, run
ORDER BY policy, lo;
