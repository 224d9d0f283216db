-- exact_overlaps: do any two certificates contradict each other?
--
-- Answers: pairs of distinct budget intervals of one policy that overlap.
-- Certificates of a deterministic replay partition the budget axis, so this is
-- empty unless the engine's certificate (or its determinism) is broken.
-- Parameters: files -- the sweep's part files (list of paths or a glob).
-- Reads: the sweep runs table (docs/sweep-format.md), rep 0 only.

-- exact_overlaps(files): one row per overlapping pair (a starts first).
--   policy
--   a_lo, a_hi, a_outcome   the first certificate (a_hi null: unbounded)
--   b_lo, b_hi, b_outcome   the second
CREATE OR REPLACE MACRO exact_overlaps(files) AS TABLE
WITH c AS (
    SELECT DISTINCT policy, interval_lo AS lo, interval_hi AS hi, outcome
    FROM read_parquet(files, union_by_name = true)
    WHERE rep = 0 AND interval_lo IS NOT NULL
)
SELECT a.policy, a.lo AS a_lo, a.hi AS a_hi, a.outcome AS a_outcome,
       b.lo AS b_lo, b.hi AS b_hi, b.outcome AS b_outcome
FROM c AS a JOIN c AS b ON a.policy = b.policy
WHERE (a.lo < b.lo OR (a.lo = b.lo AND coalesce(a.hi, 9223372036854775807)
                                      < coalesce(b.hi, 9223372036854775807))
       OR (a.lo = b.lo AND a.hi IS NOT DISTINCT FROM b.hi AND a.outcome < b.outcome))
  AND b.lo <= coalesce(a.hi, 9223372036854775807)
ORDER BY a.policy, a.lo, b.lo;
