-- exact_certificates: which bytes of the swept range does each certificate cover?
--
-- Answers: per policy, every distinct certified interval clipped to the range,
-- in order, with the highest byte any earlier interval covered (so a union or
-- the gaps between intervals follow without counting an overlap twice). The
-- building block of exact_coverage and exact_gaps.
-- Parameters: files -- the sweep's part files (list of paths or a glob);
-- range_lo, range_hi -- the swept range in bytes (sweep.json `range_bytes`).
-- Reads: the sweep runs table (docs/sweep-format.md).

-- exact_certificates(files, range_lo, range_hi): one row per distinct interval.
--   policy    eviction policy
--   lo, hi    the interval's bytes inside the range (inclusive)
--   prev_max  highest byte covered by an interval ordered before it (null: none)
CREATE OR REPLACE MACRO exact_certificates(files, range_lo, range_hi) AS TABLE
WITH c AS (
    SELECT DISTINCT policy,
           greatest(interval_lo, range_lo) AS lo,
           least(coalesce(interval_hi, range_hi), range_hi) AS hi
    FROM read_parquet(files, union_by_name = true)
    WHERE rep = 0 AND interval_lo IS NOT NULL
      AND interval_lo <= range_hi AND coalesce(interval_hi, range_hi) >= range_lo
)
SELECT *, max(hi) OVER (PARTITION BY policy ORDER BY lo, hi
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
FROM c;
