-- exact_partition: which distinct executions cover the swept budget range?
--
-- Answers: the raw partition of the range into budget-interval certificates.
-- Every run (grid sample, refinement point, walk step; rep 0, not timed out)
-- certifies its whole interval [interval_lo, interval_hi]: every budget in it
-- yields the identical execution. Intervals reached by several runs appear
-- once. Certificates partition the budget axis, so rows never overlap
-- (exact_overlaps checks it); bytes no row covers are uncertified (exact_gaps).
-- Parameters: files -- the sweep's part files (list of paths or a glob);
-- range_lo, range_hi -- the swept range in bytes (sweep.json `range_bytes`).
-- Reads: the sweep runs table (docs/sweep-format.md).

-- exact_partition(files, range_lo, range_hi): one row per interval, by policy and lo.
--   policy        eviction policy
--   lo, hi        the interval clipped to the range (bytes, inclusive); width = hi - lo + 1
--   raw_lo        the certificate as reported; raw_hi null: unbounded above
--   status        ok | fail; outcome, overhead, max_depth, oom_pinned, oom_depth of the execution
--   runs          runs that landed in it; run_budget the lowest of their budgets
CREATE OR REPLACE MACRO exact_partition(files, range_lo, range_hi) AS TABLE
SELECT policy,
       greatest(interval_lo, range_lo) AS lo,
       least(coalesce(interval_hi, range_hi), range_hi) AS hi,
       least(coalesce(interval_hi, range_hi), range_hi) - greatest(interval_lo, range_lo) + 1 AS width,
       interval_lo AS raw_lo, interval_hi AS raw_hi,
       any_value(status) AS status, any_value(outcome) AS outcome,
       any_value(overhead) AS overhead, any_value(max_depth) AS max_depth,
       any_value(oom_pinned) AS oom_pinned, any_value(oom_depth) AS oom_depth,
       count(*) AS runs, min(budget) AS run_budget
FROM read_parquet(files, union_by_name = true)
WHERE rep = 0 AND interval_lo IS NOT NULL
  AND interval_lo <= range_hi AND coalesce(interval_hi, range_hi) >= range_lo
GROUP BY policy, interval_lo, interval_hi
ORDER BY policy, lo, hi;
