-- exact_coverage: how much of the swept range do certificates cover?
--
-- Answers: per policy, the bytes of the range inside at least one certified
-- interval (their union, so a bad overlap is never counted twice), out of the
-- range's bytes, and the number of distinct executions seen in it.
-- Parameters: files -- the sweep's part files (list of paths or a glob);
-- range_lo, range_hi -- the swept range in bytes (sweep.json `range_bytes`).
-- Reads: the sweep runs table (docs/sweep-format.md).

-- exact_coverage(files, range_lo, range_hi): one row per policy with a run.
--   policy           eviction policy
--   certified_bytes  bytes of [range_lo, range_hi] covered by certificates
--   range_bytes      range_hi - range_lo + 1
--   coverage         certified_bytes / range_bytes (0 .. 1)
--   intervals        distinct certified executions meeting the range
CREATE OR REPLACE MACRO exact_coverage(files, range_lo, range_hi) AS TABLE
WITH pol AS (
    SELECT DISTINCT policy FROM read_parquet(files, union_by_name = true) WHERE rep = 0
), m AS (
    SELECT * FROM exact_certificates(files, range_lo, range_hi)
), c AS (
    SELECT policy, lo, hi FROM m
), u AS (
    -- each interval contributes only the bytes no earlier interval covered
    SELECT policy, greatest(hi - greatest(lo, coalesce(prev_max + 1, lo)) + 1, 0) AS fresh
    FROM m
)
SELECT pol.policy,
       coalesce((SELECT sum(fresh) FROM u WHERE u.policy = pol.policy), 0)::BIGINT AS certified_bytes,
       (range_hi - range_lo + 1)::BIGINT AS range_bytes,
       coalesce((SELECT sum(fresh) FROM u WHERE u.policy = pol.policy), 0)
         / (range_hi - range_lo + 1)::DOUBLE AS coverage,
       (SELECT count(*) FROM c WHERE c.policy = pol.policy) AS intervals
FROM pol
ORDER BY pol.policy;
