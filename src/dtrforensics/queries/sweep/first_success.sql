-- first_success: what is the lowest sampled budget that completes, per policy?
--
-- Answers: for each policy, the completing sample with the smallest budget, its
-- overhead, and how many samples were taken, failed below it and timed out.
-- A policy with no completing sample has first_budget null.
-- Parameters: files -- the sweep's part files (list of paths or a glob).
-- Reads: the sweep runs table (docs/sweep-format.md), rep 0 only.

-- first_success(files): one row per policy.
--   policy          eviction policy
--   first_budget    bytes of the lowest completing sample; first_ratio its ratio
--   first_overhead  its overhead
--   samples         rep-0 runs of the policy; failing_below: failing samples under it
--   unresolved      timed-out samples (anywhere)
CREATE OR REPLACE MACRO first_success(files) AS TABLE
WITH s AS (
    SELECT policy, budget, ratio, status, overhead FROM read_parquet(files, union_by_name = true) WHERE rep = 0
), f AS (
    SELECT policy, min(budget) FILTER (WHERE status = 'ok') AS first_budget FROM s GROUP BY policy
)
SELECT f.policy,
       f.first_budget,
       any_value(s.ratio) FILTER (WHERE s.budget = f.first_budget) AS first_ratio,
       any_value(s.overhead) FILTER (WHERE s.budget = f.first_budget) AS first_overhead,
       count(*) AS samples,
       count(*) FILTER (WHERE s.status = 'fail' AND s.budget < f.first_budget) AS failing_below,
       count(*) FILTER (WHERE s.status = 'unresolved') AS unresolved
FROM f JOIN s USING (policy)
GROUP BY f.policy, f.first_budget
ORDER BY f.policy;
