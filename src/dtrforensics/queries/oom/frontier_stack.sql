-- frontier_stack: which materializations were in progress at a given event?
--
-- Answers: the stack of in-progress materializations of run `run` at event
-- `at_seq`, outermost (the top-level op's tensor, depth 1) first, down to the
-- event's own depth. A `materialize` event at depth d opens level d and the
-- stack is last-in first-out, so level d at seq S is the last `materialize` at
-- depth d with seq <= S. At the `oom` event this is the pinned frontier's
-- chain (run.json `frontier` adds the bytes each level holds locked);
-- frontier_stack_oom gives it for every OOM run.
-- Parameters: run (run_id), at_seq (an event's seq).
-- Reads: events, tensors, ops.

-- frontier_stack_levels: every `materialize` event as a stack level.
--   run_id, depth, seq, clock, memory, tensor_id, tensor, storage_id, op_id,
--   paper_op, op_name, remat      as in frontier_stack
CREATE OR REPLACE VIEW frontier_stack_levels AS
SELECT
    e.run_id,
    e.depth,
    e.seq,
    e.clock,
    e.memory,
    e.tensor_id,
    t.name AS tensor,
    t.storage_id,
    t.op_id,
    o.paper_op,
    o.name AS op_name,
    e.depth > 1 OR t.op_id <> e.op_id OR o.first_tensor <> e.tensor_id AS remat
FROM events AS e
JOIN tensors AS t ON t.run_id = e.run_id AND t.tensor_id = e.tensor_id
JOIN ops AS o ON o.run_id = t.run_id AND o.op_id = t.op_id
WHERE e.kind = 'materialize';

-- frontier_stack(run, at_seq): table macro, one row per level, ordered by depth.
--   run_id, depth      level (1 = the top-level op's tensor)
--   seq, clock, memory the `materialize` event that opened the level
--   tensor_id, tensor  the tensor being materialized (id, name)
--   storage_id         its storage
--   op_id, paper_op    the op producing it (0-based, 1-based); op_name
--   remat              a rematerialization (not the top-level op's first computation)
CREATE OR REPLACE MACRO frontier_stack(run, at_seq) AS TABLE
WITH here AS (
    SELECT depth FROM events WHERE run_id = run AND seq = at_seq
),
opened AS (
    SELECT depth, max(seq) AS seq
    FROM frontier_stack_levels
    WHERE run_id = run AND seq <= at_seq AND depth <= (SELECT depth FROM here)
    GROUP BY depth
)
SELECT l.*
FROM opened AS m
JOIN frontier_stack_levels AS l ON l.run_id = run AND l.seq = m.seq
ORDER BY l.depth;

-- frontier_stack_oom: the stack at the `oom` event of every OOM run.
--   run_id, depth, seq, clock, memory, tensor_id, tensor, storage_id, op_id,
--   paper_op, op_name, remat      as in frontier_stack
CREATE OR REPLACE VIEW frontier_stack_oom AS
WITH oom AS (
    SELECT run_id, seq AS oom_seq, depth AS oom_depth FROM events WHERE kind = 'oom'
),
opened AS (
    SELECT l.run_id, l.depth, max(l.seq) AS seq
    FROM frontier_stack_levels AS l JOIN oom ON oom.run_id = l.run_id
    WHERE l.seq <= oom.oom_seq AND l.depth <= oom.oom_depth
    GROUP BY l.run_id, l.depth
)
SELECT l.*
FROM opened AS m
JOIN frontier_stack_levels AS l ON l.run_id = m.run_id AND l.seq = m.seq;
