-- eviction_stream: what did a run free, in order, and under which allocation?
--
-- Answers: the eviction stream of run `run` (docs/semantics.md §12.3): pressure
-- victims (heuristic choices) and dead frees (eager evictions of released
-- storages) interleaved in event order, each with its op id, the score of a
-- pressure victim, and the allocation check that governs it (the last
-- `alloc_check` at or before it: for a pressure victim, the allocation it makes
-- room for; for a dead free, the last allocation made before the release).
-- `position` is 1-based, so "the 14th eviction" of the papers is position 14.
-- Parameters: run (run_id).
-- Reads: events, decisions.

-- eviction_stream(run): table macro, one row per stream entry, ordered by position.
--   run_id, position   1-based position in the stream
--   seq                the evict/free_dead event
--   kind               'pressure' (heuristic choice) or 'dead' (eager free)
--   storage_id         the storage freed; bytes: its size
--   op_id, paper_op    current top-level op (0-based, the papers' 1-based)
--   clock, depth       at the entry
--   tensor_id          pressure: the tensor whose allocation needs room;
--                      dead: the released tensor
--   decision           pressure: the decision index (0-based); null for dead
--   score              pressure: the victim's score; null for dead
--   runner_up, runner_up_score   pressure: second-best storage and its score
--   memory, pool_size, pool_bytes   at the entry, before the storage is freed
--   check_seq          the governing allocation check (null before the first)
--   check_tensor_id    the tensor it allocates; request: its bytes
--   check_memory       resident bytes at the check; check_pinned: memory - pool
--   check_pool_size, check_pool_bytes   the pool at the check
--   budget             the run's budget
--   check_shortfall    check_memory + request - budget (> 0: memory had to be freed)
CREATE OR REPLACE MACRO eviction_stream(run) AS TABLE
WITH entries AS (
    SELECT * FROM events
    WHERE run_id = run AND kind IN ('evict', 'free_dead')
),
checks AS (
    SELECT seq, tensor_id, request, memory, pinned_bytes, pool_size, pool_bytes
    FROM events
    WHERE run_id = run AND kind = 'alloc_check'
)
SELECT
    e.run_id,
    row_number() OVER (ORDER BY e.seq) AS position,
    e.seq,
    CASE e.kind WHEN 'evict' THEN 'pressure' ELSE 'dead' END AS kind,
    e.storage_id,
    e.bytes,
    e.op_id,
    e.op_id + 1 AS paper_op,
    e.clock,
    e.depth,
    e.tensor_id,
    e.decision,
    d.score,
    d.runner_up,
    d.runner_up_score,
    e.memory,
    e.pool_size,
    e.pool_bytes,
    c.seq AS check_seq,
    c.tensor_id AS check_tensor_id,
    c.request,
    c.memory AS check_memory,
    c.pinned_bytes AS check_pinned,
    c.pool_size AS check_pool_size,
    c.pool_bytes AS check_pool_bytes,
    e.budget,
    c.memory + c.request - e.budget AS check_shortfall
FROM entries AS e
LEFT JOIN decisions AS d ON d.run_id = e.run_id AND d.decision = e.decision
ASOF LEFT JOIN checks AS c ON c.seq <= e.seq
ORDER BY position;
