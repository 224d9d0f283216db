-- allocation_steps: what happened at each allocation check, one step at a time?
--
-- Answers: for run `run`, every allocation check whose top-level op lies in
-- ops lo_op..hi_op (inclusive), in order: the tensor being allocated, the
-- request, memory, budget, pinned and pool bytes at the check, how many
-- victims were evicted to make room, whether the materialization was a
-- rematerialization and whether the allocation failed (OOM). `step` numbers
-- the run's checks from 0 whatever the window, so a step is the same in any
-- window. Victims are in step_victims.
-- Parameters: run (run_id), lo_op, hi_op (inclusive op window; pass 0 and a
-- large number for the whole run).
-- Reads: events, tensors, ops.

-- allocation_steps(run, lo_op, hi_op): table macro, one row per check, ordered by step.
--   step               0-based index of the check among all the run's checks
--   seq, clock, depth  the `alloc_check` event
--   op_id, paper_op    current top-level op (0-based, 1-based)
--   tensor_id, tensor  the tensor being allocated; tensor_op_id, op_name: its op
--   request            bytes requested (the op's total output size)
--   memory             resident bytes at the check; budget
--   pinned_bytes       memory - pool_bytes; pool_bytes, pool_size: the evictable pool
--   shortfall          memory + request - budget (> 0: memory had to be freed)
--   must_free          shortfall > 0
--   evictions          pressure evictions made for this allocation
--   first_decision     decision index of the first of them (null if none)
--   remat              the tensor was being rematerialized (null if never computed: OOM)
--   oom                this allocation failed: the run ended here out of memory
CREATE OR REPLACE MACRO allocation_steps(run, lo_op, hi_op) AS TABLE
WITH checks AS (
    SELECT seq, clock, depth, op_id, tensor_id, request, memory, budget, pinned_bytes,
           pool_bytes, pool_size, must_free,
           row_number() OVER (ORDER BY seq) - 1 AS step
    FROM events
    WHERE run_id = run AND kind = 'alloc_check'
),
after AS (
    SELECT seq, kind, tensor_id, decision, remat
    FROM events
    WHERE run_id = run AND kind IN ('evict', 'oom', 'compute')
      AND (kind <> 'compute' OR NOT collateral)
),
owned AS (
    SELECT c.seq AS check_seq, a.kind, a.decision, a.remat, a.tensor_id, a.seq
    FROM after AS a
    ASOF JOIN checks AS c ON c.seq <= a.seq
),
per_check AS (
    SELECT check_seq,
           count(*) FILTER (WHERE kind = 'evict') AS evictions,
           min(decision) AS first_decision,
           bool_or(kind = 'oom') AS oom
    FROM owned
    GROUP BY check_seq
),
computed AS (
    SELECT seq, tensor_id, remat FROM after WHERE kind = 'compute'
)
SELECT
    c.step,
    c.seq,
    c.clock,
    c.depth,
    c.op_id,
    c.op_id + 1 AS paper_op,
    c.tensor_id,
    t.name AS tensor,
    t.op_id AS tensor_op_id,
    o.name AS op_name,
    c.request,
    c.memory,
    c.budget,
    c.pinned_bytes,
    c.pool_bytes,
    c.pool_size,
    c.memory + c.request - c.budget AS shortfall,
    c.must_free,
    coalesce(p.evictions, 0) AS evictions,
    p.first_decision,
    x.remat,
    coalesce(p.oom, false) AS oom
FROM checks AS c
LEFT JOIN per_check AS p ON p.check_seq = c.seq
ASOF LEFT JOIN computed AS x ON x.tensor_id = c.tensor_id AND x.seq > c.seq
JOIN tensors AS t ON t.run_id = run AND t.tensor_id = c.tensor_id
JOIN ops AS o ON o.run_id = run AND o.op_id = t.op_id
WHERE c.op_id BETWEEN lo_op AND hi_op
ORDER BY c.step;
