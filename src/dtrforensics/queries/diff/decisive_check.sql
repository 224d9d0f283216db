-- decisive_check: which budget comparison do two runs of one trace decide differently first?
--
-- Answers: every allocation compares memory + request with the budget, once at
-- its check and again after each pressure eviction, until the request fits.
-- Pairing these comparisons of runs `control` (a) and `test` (b) in order (an
-- `alloc_check` event is the first comparison of an allocation; after each
-- `evict` event the memory less the victim's bytes is compared again, short if
-- another eviction or the OOM follows), the first pair where the runs part: the same
-- state (op, tensor, depth, request, memory) with a different outcome. Two runs
-- at neighbouring budgets make identical comparisons up to this one, so for an
-- edge of a sweep it is the comparison one run loses by a few bytes where the
-- other wins (the budget certificate's bound). shortfall = memory + request -
-- budget: > 0 short (must free), <= 0 fits with -shortfall bytes to spare.
-- `same_state` is false when the first differing pair is not the same state
-- (the runs had parted some other way, e.g. an intervention). No row when
-- every paired comparison agrees.
-- Parameters: control, test (run_ids).
-- Reads: events.

-- decisive_check(control, test): table macro, at most one row.
--   comparison         0-based index of the comparison in both runs
--   same_state         both runs compared the same memory + request
--   op_id, paper_op, tensor_id, depth, request, memory   the comparison (run a's)
--   a_budget, b_budget
--   a_shortfall, b_shortfall   memory + request - budget in each run
--   a_seq, b_seq       seq of each run's alloc_check or evict event behind it
--                      (null: that run had ended)
CREATE OR REPLACE MACRO decisive_check(control, test) AS TABLE
WITH steps AS (
    SELECT run_id, seq, kind, op_id, tensor_id, depth, request, memory, bytes, budget, must_free,
           lead(kind) OVER (PARTITION BY run_id ORDER BY seq) AS next_kind
    FROM events
    WHERE run_id IN (control, test) AND kind IN ('alloc_check', 'evict', 'oom')
),
comparisons AS (
    -- the check compares the memory it found; after each eviction the loop compares
    -- again with the victim's bytes gone, and is short again if another eviction follows
    SELECT run_id, seq, op_id, tensor_id, depth, request,
           CASE kind WHEN 'evict' THEN memory - bytes ELSE memory END AS memory,
           CASE kind WHEN 'evict' THEN coalesce(next_kind IN ('evict', 'oom'), false)
                ELSE must_free END AS short,
           row_number() OVER (PARTITION BY run_id ORDER BY seq) - 1 AS comparison
    FROM steps
    WHERE kind <> 'oom'
),
a AS (SELECT * FROM comparisons WHERE run_id = control),
b AS (SELECT * FROM comparisons WHERE run_id = test),
paired AS (
    SELECT coalesce(a.comparison, b.comparison) AS comparison,
           a.short AS a_short, b.short AS b_short,
           (a.op_id, a.tensor_id, a.depth, a.request, a.memory)
               IS NOT DISTINCT FROM (b.op_id, b.tensor_id, b.depth, b.request, b.memory) AS same_state,
           coalesce(a.op_id, b.op_id) AS op_id, coalesce(a.tensor_id, b.tensor_id) AS tensor_id,
           coalesce(a.depth, b.depth) AS depth, coalesce(a.request, b.request) AS request,
           coalesce(a.memory, b.memory) AS memory,
           a.seq AS a_seq, b.seq AS b_seq
    FROM a FULL JOIN b ON a.comparison = b.comparison
)
SELECT
    comparison,
    same_state,
    op_id, op_id + 1 AS paper_op, tensor_id, depth, request, memory,
    (SELECT any_value(budget) FROM events WHERE run_id = control) AS a_budget,
    (SELECT any_value(budget) FROM events WHERE run_id = test) AS b_budget,
    memory + request - (SELECT any_value(budget) FROM events WHERE run_id = control) AS a_shortfall,
    memory + request - (SELECT any_value(budget) FROM events WHERE run_id = test) AS b_shortfall,
    a_seq, b_seq
FROM paired
WHERE NOT same_state OR a_short IS DISTINCT FROM b_short
ORDER BY comparison
LIMIT 1;
