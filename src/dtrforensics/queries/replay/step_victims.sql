-- step_victims: which victims did each allocation check evict, and who came second?
--
-- Answers: for run `run`, every pressure eviction decision whose top-level op
-- lies in lo_op..hi_op, with the allocation step it made room for
-- (allocation_steps.step), the victim with its score and score terms, and the
-- runner-up with its score and the margin between them.
-- Parameters: run (run_id), lo_op, hi_op (inclusive op window).
-- Reads: decisions, events, storages (and allocation_steps).

-- step_victims(run, lo_op, hi_op): table macro, one row per decision, ordered by decision.
--   step               the allocation step (allocation_steps.step)
--   decision           0-based decision index; seq, op_id, paper_op, clock, depth
--   victim, victim_tensor, victim_bytes   the storage evicted
--   score, compute, fwd_compute, bwd_compute, staleness   its score and terms
--   runner_up, runner_up_tensor, runner_up_score, margin, relative_margin
--   memory, pinned_bytes, pool_size, pool_bytes, shortfall   before this eviction
CREATE OR REPLACE MACRO step_victims(run, lo_op, hi_op) AS TABLE
WITH steps AS (
    SELECT step, seq FROM allocation_steps(run, lo_op, hi_op)
),
d AS (
    SELECT * FROM decisions WHERE run_id = run AND op_id BETWEEN lo_op AND hi_op
)
SELECT
    s.step,
    d.decision,
    d.seq,
    d.op_id,
    d.op_id + 1 AS paper_op,
    d.clock,
    d.depth,
    d.victim,
    v.tensor AS victim_tensor,
    d.victim_bytes,
    d.score,
    d.compute,
    d.fwd_compute,
    d.bwd_compute,
    d.staleness,
    d.runner_up,
    r.tensor AS runner_up_tensor,
    d.runner_up_score,
    d.margin,
    d.relative_margin,
    d.memory,
    d.pinned_bytes,
    d.pool_size,
    d.pool_bytes,
    d.shortfall
FROM d
ASOF LEFT JOIN steps AS s ON s.seq <= d.seq
LEFT JOIN storages AS v ON v.run_id = run AND v.storage_id = d.victim
LEFT JOIN storages AS r ON r.run_id = run AND r.storage_id = d.runner_up
ORDER BY d.decision;
