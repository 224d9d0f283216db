-- edge_brackets: between which two samples does each feasibility edge lie?
--
-- Answers: every pair of neighbouring samples (timeouts set aside) where one
-- completes and the other fails: the last completing and the first failing
-- sample at each end of every failing run, including the edge below the first
-- success. The true edge lies between the two budgets (exact mode pins it to
-- the byte: exact_failure_regions).
-- Parameters: files -- the sweep's part files (list of paths or a glob).
-- Reads: the sweep runs table (docs/sweep-format.md), rep 0 only.

-- edge_brackets(files): one row per edge, by policy and budget.
--   policy           eviction policy
--   direction        'ok->fail' (failing above the edge) or 'fail->ok' (completing above it)
--   ok_budget        the completing sample (bytes); ok_ratio, ok_overhead
--   fail_budget      the failing sample; fail_ratio, fail_outcome
--   width_bytes      |fail_budget - ok_budget|: how well the edge is located
--   timeouts_between timed-out samples between the two
CREATE OR REPLACE MACRO edge_brackets(files) AS TABLE
WITH s AS (
    SELECT policy, budget, ratio, status, outcome, overhead
    FROM read_parquet(files, union_by_name = true) WHERE rep = 0 AND status <> 'unresolved'
), p AS (
    SELECT policy,
           budget AS lo_budget, ratio AS lo_ratio, status AS lo_status, outcome AS lo_outcome,
           overhead AS lo_overhead,
           lead(budget) OVER w AS hi_budget, lead(ratio) OVER w AS hi_ratio,
           lead(status) OVER w AS hi_status, lead(outcome) OVER w AS hi_outcome,
           lead(overhead) OVER w AS hi_overhead
    FROM s
    WINDOW w AS (PARTITION BY policy ORDER BY budget)
)
SELECT policy,
       CASE WHEN lo_status = 'ok' THEN 'ok->fail' ELSE 'fail->ok' END AS direction,
       CASE WHEN lo_status = 'ok' THEN lo_budget ELSE hi_budget END AS ok_budget,
       CASE WHEN lo_status = 'ok' THEN lo_ratio ELSE hi_ratio END AS ok_ratio,
       CASE WHEN lo_status = 'ok' THEN lo_overhead ELSE hi_overhead END AS ok_overhead,
       CASE WHEN lo_status = 'ok' THEN hi_budget ELSE lo_budget END AS fail_budget,
       CASE WHEN lo_status = 'ok' THEN hi_ratio ELSE lo_ratio END AS fail_ratio,
       CASE WHEN lo_status = 'ok' THEN hi_outcome ELSE lo_outcome END AS fail_outcome,
       hi_budget - lo_budget AS width_bytes,
       (SELECT count(*) FROM read_parquet(files, union_by_name = true) AS t
        WHERE t.rep = 0 AND t.status = 'unresolved' AND t.policy = p.policy
          AND t.budget > p.lo_budget AND t.budget < p.hi_budget) AS timeouts_between
FROM p
WHERE hi_status IS NOT NULL AND lo_status <> hi_status
ORDER BY policy, lo_budget;
