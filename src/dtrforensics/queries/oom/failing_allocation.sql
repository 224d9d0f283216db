-- failing_allocation: which allocation failed in an OOM run, and how much was pinned?
--
-- Answers: for every run that ended in OOM, the tensor whose allocation could
-- not be satisfied, the bytes it requested, the bytes pinned (resident but not
-- evictable: memory minus the evictable pool), the nesting depth and the budget.
-- Parameters: none. One row per OOM run; filter on run_id.
-- Reads: events, tensors, ops.

-- failing_allocation: one row per OOM run.
--   run_id        recording
--   seq           the `oom` event
--   op_id         current top-level op (0-based); paper_op: the papers' 1-based number
--   tensor_id     the failing tensor; tensor: its name
--   tensor_op_id  the op producing it (0-based); tensor_op: that op's name
--   request       bytes the allocation asked for
--   memory        resident bytes when it failed
--   pinned_bytes  memory - pool_bytes: resident bytes nothing could evict
--   pool_bytes    evictable bytes (0 unless interventions excluded candidates)
--   depth         materializations in progress (top level = 1)
--   budget        the run's budget; shortfall: memory + request - budget
CREATE OR REPLACE VIEW failing_allocation AS
SELECT
    e.run_id,
    e.seq,
    e.op_id,
    e.op_id + 1 AS paper_op,
    e.tensor_id,
    t.name AS tensor,
    t.op_id AS tensor_op_id,
    o.name AS tensor_op,
    e.request,
    e.memory,
    e.pinned_bytes,
    e.pool_bytes,
    e.depth,
    e.budget,
    e.memory + e.request - e.budget AS shortfall
FROM events AS e
JOIN tensors AS t ON t.run_id = e.run_id AND t.tensor_id = e.tensor_id
JOIN ops AS o ON o.run_id = t.run_id AND o.op_id = t.op_id
WHERE e.kind = 'oom';
