-- regime_switches: where does the overhead jump between neighbouring budgets?
--
-- Answers: pairs of neighbouring samples (timeouts set aside) that both complete
-- and whose overheads differ by more than a factor 1 + threshold: a regime
-- switch as `concepts.is_regime_switch` defines it, its jump passed in.
-- Parameters: files -- the sweep's part files (list of paths or a glob);
-- threshold -- relative jump, e.g. 0.25 for max/min > 1.25 (the sweep's
-- --overhead-jump, by default `concepts.REGIME_JUMP`).
-- Reads: the sweep runs table (docs/sweep-format.md), rep 0 only.

-- regime_switches(files, threshold): one row per switch, by policy and budget.
--   policy       eviction policy
--   lo_budget    the lower sample (bytes); lo_ratio, lo_overhead
--   hi_budget    the upper sample; hi_ratio, hi_overhead
--   factor       max(overheads) / min(overheads)
--   direction    'down' when the overhead falls as the budget grows, else 'up'
CREATE OR REPLACE MACRO regime_switches(files, threshold) AS TABLE
WITH s AS (
    SELECT policy, budget, ratio, status, overhead
    FROM read_parquet(files, union_by_name = true) WHERE rep = 0 AND status <> 'unresolved'
), p AS (
    SELECT policy, budget AS lo_budget, ratio AS lo_ratio, status AS lo_status,
           overhead AS lo_overhead,
           lead(budget) OVER w AS hi_budget, lead(ratio) OVER w AS hi_ratio,
           lead(status) OVER w AS hi_status, lead(overhead) OVER w AS hi_overhead
    FROM s
    WINDOW w AS (PARTITION BY policy ORDER BY budget)
)
SELECT policy, lo_budget, lo_ratio, lo_overhead, hi_budget, hi_ratio, hi_overhead,
       greatest(lo_overhead, hi_overhead) / least(lo_overhead, hi_overhead) AS factor,
       CASE WHEN hi_overhead < lo_overhead THEN 'down' ELSE 'up' END AS direction
FROM p
WHERE lo_status = 'ok' AND hi_status = 'ok'
  AND greatest(lo_overhead, hi_overhead) / least(lo_overhead, hi_overhead) > 1 + threshold
ORDER BY policy, lo_budget;
