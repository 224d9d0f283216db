-- pinned_peak: how much memory was pinned at worst, and how deep was the nesting?
--
-- Answers: per run, the most pinned bytes (resident but not evictable: memory
-- minus the pool) at an allocation check that had to free memory, with the
-- nesting depth and op there (the first such maximum, as the run summary's
-- max_pinned), and separately the maximum nesting depth over the whole run.
-- The papers report "depth at peak pinned memory" and "maximum nesting depth"
-- separately: they are different numbers. Null peak fields: no check ever
-- had to free memory.
-- Parameters: none. One row per run; filter on run_id.
-- Reads: events.

-- pinned_peak: one row per run.
--   run_id
--   peak_pinned        most pinned bytes at a check with must_free
--   peak_depth         nesting depth at that check (first maximum)
--   peak_op_id         top-level op there; peak_paper_op: 1-based
--   peak_seq           the check's seq
--   max_depth          deepest nesting reached anywhere in the run
--   max_depth_op_id    top-level op where it was first reached
CREATE OR REPLACE VIEW pinned_peak AS
WITH checks AS (
    SELECT run_id, seq, op_id, depth, pinned_bytes
    FROM events
    WHERE kind = 'alloc_check' AND must_free
),
peak AS (
    SELECT run_id,
           max(pinned_bytes) AS peak_pinned,
           arg_min(seq, (-pinned_bytes, seq)) AS peak_seq
    FROM checks
    GROUP BY run_id
),
deepest AS (
    SELECT run_id, max(depth) AS max_depth, arg_min(op_id, (-depth, seq)) AS max_depth_op_id
    FROM events
    GROUP BY run_id
)
SELECT
    d.run_id,
    p.peak_pinned,
    c.depth AS peak_depth,
    c.op_id AS peak_op_id,
    c.op_id + 1 AS peak_paper_op,
    p.peak_seq,
    d.max_depth,
    d.max_depth_op_id
FROM deepest AS d
LEFT JOIN peak AS p ON p.run_id = d.run_id
LEFT JOIN checks AS c ON c.run_id = p.run_id AND c.seq = p.peak_seq;
