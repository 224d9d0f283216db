-- eviction_rate: how often do two runs evict and recompute, op window by op window?
--
-- Answers: side by side for runs `control` (a) and `test` (b) of one trace,
-- per window of `window_ops` consecutive top-level ops from op 0: pressure
-- evictions, rematerializations (primary, not collateral) and the compute
-- they cost. A window that a run never reached has nulls on that side.
-- Parameters: control, test (run_ids), window_ops (> 0).
-- Reads: events.

-- eviction_rate(control, test, window_ops): table macro, one row per window
-- that either run reached.
--   window                    0-based window index
--   first_op, last_op         its op ids
--   a_evictions, b_evictions  pressure evictions in the window
--   a_remats, b_remats        primary rematerializations in the window
--   a_remat_compute, b_remat_compute   their compute (ns)
CREATE OR REPLACE MACRO eviction_rate(control, test, window_ops) AS TABLE
WITH per_window AS (
    SELECT
        run_id,
        op_id // window_ops AS "window",
        count(*) FILTER (WHERE kind = 'evict') AS evictions,
        count(*) FILTER (WHERE kind = 'compute' AND remat AND NOT collateral) AS remats,
        coalesce(sum(cost) FILTER (WHERE kind = 'compute' AND remat AND NOT collateral), 0)
            AS remat_compute
    FROM events
    WHERE run_id IN (control, test)
    GROUP BY run_id, op_id // window_ops
),
a AS (SELECT * FROM per_window WHERE run_id = control),
b AS (SELECT * FROM per_window WHERE run_id = test)
SELECT
    coalesce(a."window", b."window") AS "window",
    coalesce(a."window", b."window") * window_ops AS first_op,
    (coalesce(a."window", b."window") + 1) * window_ops - 1 AS last_op,
    a.evictions AS a_evictions, b.evictions AS b_evictions,
    a.remats AS a_remats, b.remats AS b_remats,
    a.remat_compute::BIGINT AS a_remat_compute, b.remat_compute::BIGINT AS b_remat_compute
FROM a FULL JOIN b ON a."window" = b."window"
ORDER BY "window";
