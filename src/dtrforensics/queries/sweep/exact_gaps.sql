-- exact_gaps: which budgets of the swept range are still uncertified, and why?
--
-- Answers: per policy, the maximal byte ranges no certificate covers. Reason:
-- 'timeout' when a timed-out run lies in the gap (its certificate is not
-- used), 'below-resolution' when the gap is narrower than the walk's
-- resolution, else 'run-limit' (the walk stopped at --max-runs, or was
-- interrupted).
-- Parameters: files -- the sweep's part files (list of paths or a glob);
-- range_lo, range_hi -- the swept range in bytes (sweep.json `range_bytes`);
-- resolution -- the walk's --resolution in bytes (1: exact).
-- Reads: the sweep runs table (docs/sweep-format.md).

-- exact_gaps(files, range_lo, range_hi, resolution): one row per gap, by policy and lo.
--   policy       eviction policy
--   lo, hi       uncertified bytes (inclusive); width = hi - lo + 1
--   timeouts     timed-out runs inside the gap
--   reason       timeout | below-resolution | run-limit
CREATE OR REPLACE MACRO exact_gaps(files, range_lo, range_hi, resolution) AS TABLE
WITH pol AS (
    SELECT DISTINCT policy FROM read_parquet(files, union_by_name = true) WHERE rep = 0
), m AS (
    SELECT * FROM exact_certificates(files, range_lo, range_hi)
), c AS (
    SELECT policy, lo, hi FROM m
), g AS (
    SELECT policy, coalesce(prev_max + 1, range_lo) AS lo, lo - 1 AS hi
    FROM m WHERE lo > coalesce(prev_max + 1, range_lo)
    UNION ALL
    SELECT pol.policy, coalesce(max(c.hi) + 1, range_lo) AS lo, range_hi AS hi
    FROM pol LEFT JOIN c USING (policy)
    GROUP BY pol.policy
    HAVING coalesce(max(c.hi), range_lo - 1) < range_hi
), t AS (
    SELECT g.policy, g.lo, g.hi,
           (SELECT count(*) FROM read_parquet(files, union_by_name = true) AS r
            WHERE r.status = 'unresolved' AND r.rep = 0 AND r.policy = g.policy
              AND r.budget BETWEEN g.lo AND g.hi) AS timeouts
    FROM g
)
SELECT policy, lo, hi, hi - lo + 1 AS width, timeouts,
       CASE WHEN timeouts > 0 THEN 'timeout'
            WHEN hi - lo + 1 < resolution THEN 'below-resolution'
            ELSE 'run-limit' END AS reason
FROM t
ORDER BY policy, lo;
