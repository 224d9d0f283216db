-- failure_regions: where are the sample-supported feasibility holes?
--
-- Answers: maximal runs of consecutive failing samples (timeouts set aside: they
-- neither break nor extend a run) that have a completing sample immediately
-- below and immediately above. Failures below the first success are not holes
-- (nothing completes below them) and a failing run at the top of the range has
-- no completing sample above: neither is listed (`concepts.holes`).
-- Parameters: files -- the sweep's part files (list of paths or a glob).
-- Reads: the sweep runs table (docs/sweep-format.md), rep 0 only.

-- failure_regions(files): one row per region, by policy and budget.
--   policy           eviction policy; region: 1, 2, ... in budget order
--   lo_budget        lowest failing sample (bytes); lo_ratio its ratio
--   hi_budget        highest failing sample; hi_ratio its ratio
--   failing          failing samples in the region; outcomes: their outcomes, comma-separated
--   below_budget     the completing sample just below (bytes); below_ratio, below_overhead
--   above_budget     the completing sample just above; above_ratio, above_overhead
--   timeouts_inside  timed-out samples between below_budget and above_budget
CREATE OR REPLACE MACRO failure_regions(files) AS TABLE
WITH s AS (
    SELECT policy, budget, ratio, status, outcome, overhead
    FROM read_parquet(files, union_by_name = true) WHERE rep = 0 AND status <> 'unresolved'
), n AS (
    SELECT *,
           row_number() OVER (PARTITION BY policy ORDER BY budget)
             - row_number() OVER (PARTITION BY policy, status ORDER BY budget) AS island,
           lag(status) OVER w AS prev_status, lag(budget) OVER w AS prev_budget,
           lag(ratio) OVER w AS prev_ratio, lag(overhead) OVER w AS prev_overhead,
           lead(status) OVER w AS next_status, lead(budget) OVER w AS next_budget,
           lead(ratio) OVER w AS next_ratio, lead(overhead) OVER w AS next_overhead
    FROM s
    WINDOW w AS (PARTITION BY policy ORDER BY budget)
), r AS (
    SELECT policy,
           min(budget) AS lo_budget, arg_min(ratio, budget) AS lo_ratio,
           max(budget) AS hi_budget, arg_max(ratio, budget) AS hi_ratio,
           count(*) AS failing,
           string_agg(DISTINCT outcome, ',' ORDER BY outcome) AS outcomes,
           arg_min(prev_status, budget) AS below_status, arg_min(prev_budget, budget) AS below_budget,
           arg_min(prev_ratio, budget) AS below_ratio, arg_min(prev_overhead, budget) AS below_overhead,
           arg_max(next_status, budget) AS above_status, arg_max(next_budget, budget) AS above_budget,
           arg_max(next_ratio, budget) AS above_ratio, arg_max(next_overhead, budget) AS above_overhead
    FROM n WHERE status = 'fail'
    GROUP BY policy, island
)
SELECT policy,
       row_number() OVER (PARTITION BY policy ORDER BY lo_budget) AS region,
       lo_budget, lo_ratio, hi_budget, hi_ratio, failing, outcomes,
       below_budget, below_ratio, below_overhead, above_budget, above_ratio, above_overhead,
       (SELECT count(*) FROM read_parquet(files, union_by_name = true) AS t
        WHERE t.rep = 0 AND t.status = 'unresolved' AND t.policy = r.policy
          AND t.budget > r.below_budget AND t.budget < r.above_budget) AS timeouts_inside
FROM r
WHERE below_status = 'ok' AND above_status = 'ok'
ORDER BY policy, lo_budget;
