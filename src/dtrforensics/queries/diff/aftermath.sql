-- aftermath: how do two runs evolve after they diverge, and do they re-converge?
--
-- Answers: side by side for runs `control` (a) and `test` (b), per window of
-- `window_ops` consecutive top-level ops starting at op `from_op`: evictions,
-- dead frees, rematerializations, most pinned bytes at an allocation check,
-- most resident bytes and deepest nesting, and whether both runs freed exactly
-- the same storages op by op in the window (same_stream).
-- aftermath_reconvergence says from which op on the two histories agree again
-- to the end of both runs: the same stream entries (storage, kind, in order)
-- and the same number of rematerializations at every op, both runs reaching
-- the same last op. Null when they never do (e.g. one run fails).
-- Parameters: control, test (run_ids), from_op (first op id), window_ops (> 0).
-- Reads: events.

-- aftermath_ops(control, test, from_op): table macro, one row per op >= from_op
-- reached by either run (the building block of the two below).
--   op_id              top-level op
--   a_ran, b_ran       the run reached this op
--   a_/b_evictions, a_/b_dead_frees, a_/b_remats
--   a_/b_pinned_max    most pinned bytes at an allocation check (or the OOM)
--   a_/b_memory_max    most resident bytes; a_/b_depth_max deepest nesting
--   same               both runs freed the same storages in the same order and
--                      rematerialized as many tensors at this op
CREATE OR REPLACE MACRO aftermath_ops(control, test, from_op) AS TABLE
WITH per_op AS (
    SELECT
        run_id,
        op_id,
        count(*) FILTER (WHERE kind = 'evict') AS evictions,
        count(*) FILTER (WHERE kind = 'free_dead') AS dead_frees,
        count(*) FILTER (WHERE kind = 'compute' AND remat AND NOT collateral) AS remats,
        max(pinned_bytes) FILTER (WHERE kind IN ('alloc_check', 'oom')) AS pinned_max,
        max(memory) AS memory_max,
        max(depth) AS depth_max,
        coalesce(string_agg(CASE kind WHEN 'evict' THEN 'p' ELSE 'd' END || storage_id, ','
                            ORDER BY seq) FILTER (WHERE kind IN ('evict', 'free_dead')),
                 '') AS stream
    FROM events
    WHERE run_id IN (control, test) AND op_id >= from_op
    GROUP BY run_id, op_id
),
a AS (SELECT * FROM per_op WHERE run_id = control),
b AS (SELECT * FROM per_op WHERE run_id = test)
SELECT
    coalesce(a.op_id, b.op_id) AS op_id,
    a.op_id IS NOT NULL AS a_ran,
    b.op_id IS NOT NULL AS b_ran,
    a.evictions AS a_evictions, b.evictions AS b_evictions,
    a.dead_frees AS a_dead_frees, b.dead_frees AS b_dead_frees,
    a.remats AS a_remats, b.remats AS b_remats,
    a.pinned_max AS a_pinned_max, b.pinned_max AS b_pinned_max,
    a.memory_max AS a_memory_max, b.memory_max AS b_memory_max,
    a.depth_max AS a_depth_max, b.depth_max AS b_depth_max,
    coalesce(a.stream = b.stream AND a.remats = b.remats, false) AS same
FROM a FULL JOIN b ON a.op_id = b.op_id
ORDER BY op_id;

-- aftermath(control, test, from_op, window_ops): table macro, one row per window.
--   window             0-based window index; first_op, last_op: its op ids
--   a_ops, b_ops       ops of the window each run reached (0: it had ended)
--   a_/b_evictions, a_/b_dead_frees, a_/b_remats   sums over the window
--   a_/b_pinned_max, a_/b_memory_max, a_/b_depth_max   maxima over the window
--   same_stream        every op of the window is `same` (see aftermath_ops)
CREATE OR REPLACE MACRO aftermath(control, test, from_op, window_ops) AS TABLE
SELECT
    (op_id - from_op) // window_ops AS "window",
    from_op + ((op_id - from_op) // window_ops) * window_ops AS first_op,
    from_op + ((op_id - from_op) // window_ops + 1) * window_ops - 1 AS last_op,
    count(*) FILTER (WHERE a_ran) AS a_ops,
    count(*) FILTER (WHERE b_ran) AS b_ops,
    sum(a_evictions) AS a_evictions, sum(b_evictions) AS b_evictions,
    sum(a_dead_frees) AS a_dead_frees, sum(b_dead_frees) AS b_dead_frees,
    sum(a_remats) AS a_remats, sum(b_remats) AS b_remats,
    max(a_pinned_max) AS a_pinned_max, max(b_pinned_max) AS b_pinned_max,
    max(a_memory_max) AS a_memory_max, max(b_memory_max) AS b_memory_max,
    max(a_depth_max) AS a_depth_max, max(b_depth_max) AS b_depth_max,
    bool_and(same) AS same_stream
FROM aftermath_ops(control, test, from_op)
GROUP BY ALL
ORDER BY "window";

-- aftermath_reconvergence(control, test, from_op): table macro, exactly one row.
--   last_difference    the last op >= from_op that is not `same` (null: none)
--   reconverge_op      the first op after it, from which both histories agree to
--                      the end (null: they never re-converge after from_op)
--   a_last_op, b_last_op   the last op each run reached
CREATE OR REPLACE MACRO aftermath_reconvergence(control, test, from_op) AS TABLE
WITH o AS (SELECT * FROM aftermath_ops(control, test, from_op)),
f AS (
    SELECT max(op_id) FILTER (WHERE NOT same) AS last_difference,
           max(op_id) FILTER (WHERE a_ran) AS a_last_op,
           max(op_id) FILTER (WHERE b_ran) AS b_last_op
    FROM o
)
SELECT
    last_difference,
    CASE WHEN last_difference IS NULL THEN from_op
         WHEN a_last_op = b_last_op AND last_difference < a_last_op
         THEN last_difference + 1 END AS reconverge_op,
    a_last_op,
    b_last_op
FROM f;
