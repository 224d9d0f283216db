-- op_timeline: how did memory, pinned bytes and nesting evolve op by op?
--
-- Answers: per run and top-level op, the peak resident bytes, the most pinned
-- bytes at an allocation check, the deepest nesting, and the evictions and
-- rematerializations made while that op ran (what `dtrf show` draws).
-- Parameters: none. One row per (run, op started); filter on run_id, order by op_id.
-- Reads: events.

-- op_timeline: one row per run and top-level op.
--   run_id         recording
--   op_id          top-level op (0-based); paper_op: 1-based
--   memory_max     most resident bytes at any event of the op
--   pinned_max     most pinned bytes (memory - pool) at an allocation check or OOM
--                  (null if the op made none)
--   depth_max      deepest nesting reached
--   evictions      pressure evictions; dead_frees: eager evictions
--   remats         rematerializations; remat_compute: their cost (ns)
CREATE OR REPLACE VIEW op_timeline AS
SELECT
    run_id,
    op_id,
    op_id + 1 AS paper_op,
    max(memory) AS memory_max,
    max(pinned_bytes) FILTER (WHERE kind IN ('alloc_check', 'oom')) AS pinned_max,
    max(depth) AS depth_max,
    count(*) FILTER (WHERE kind = 'evict') AS evictions,
    count(*) FILTER (WHERE kind = 'free_dead') AS dead_frees,
    count(*) FILTER (WHERE kind = 'compute' AND remat AND NOT collateral) AS remats,
    coalesce(sum(cost) FILTER (WHERE remat), 0) AS remat_compute
FROM events
WHERE op_id >= 0
GROUP BY run_id, op_id;
