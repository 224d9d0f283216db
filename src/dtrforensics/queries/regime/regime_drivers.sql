-- regime_drivers: which storages does the slow run keep evicting again?
--
-- Answers: for runs `slow` and `fast` of one trace, from op `from_op` on (the
-- regime onset), each storage's pressure evictions in both runs and the
-- excess of the slow run, most re-evicted first: the storages whose repeated
-- eviction and recomputation make the slow regime. `first_slow_op` is the op
-- of its first pressure eviction in the slow run from `from_op` on.
-- Parameters: slow, fast (run_ids), from_op (op id), k (rows).
-- Reads: events, storages.

-- regime_drivers(slow, fast, from_op, k): table macro, at most k rows, storages
-- the slow run evicted more often than the fast run from `from_op` on.
--   rank               1 = largest excess (ties: more slow evictions, then storage id)
--   storage_id
--   slow_evictions, fast_evictions   pressure evictions from from_op on
--   excess             slow_evictions - fast_evictions
--   first_slow_op      op id of its first such eviction in the slow run
--   bytes, tensor, op_id, paper_op, op_name   the storage and the op producing it
CREATE OR REPLACE MACRO regime_drivers(slow, fast, from_op, k) AS TABLE
WITH counted AS (
    SELECT storage_id,
           count(*) FILTER (WHERE run_id = slow) AS slow_evictions,
           count(*) FILTER (WHERE run_id = fast) AS fast_evictions,
           min(op_id) FILTER (WHERE run_id = slow) AS first_slow_op
    FROM events
    WHERE run_id IN (slow, fast) AND kind = 'evict' AND op_id >= from_op
    GROUP BY storage_id
),
ranked AS (
    SELECT row_number() OVER (ORDER BY c.slow_evictions - c.fast_evictions DESC,
                                       c.slow_evictions DESC, c.storage_id) AS rank,
           c.storage_id, c.slow_evictions, c.fast_evictions,
           c.slow_evictions - c.fast_evictions AS excess, c.first_slow_op,
           s.size AS bytes, s.tensor, s.op_id, s.paper_op, s.op_name
    FROM counted AS c
    LEFT JOIN storages AS s ON s.run_id = slow AND s.storage_id = c.storage_id
    WHERE c.slow_evictions > c.fast_evictions
)
SELECT * FROM ranked WHERE rank <= k ORDER BY rank;
