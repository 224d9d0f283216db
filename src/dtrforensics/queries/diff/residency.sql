-- residency: when was each storage resident (material) during a run?
--
-- Answers: for run `run`, every stint of every storage in memory: from the
-- compute that made it material to the eviction (pressure or dead) that ended
-- it; a stint still open when the run ended (ok, or at the OOM) has no end.
-- "Was storage S resident during ops X..Y of run R" is a stint of S in R with
-- from_op <= X and (to_op is null or to_op >= Y).
-- Parameters: run (run_id).
-- Reads: events.

-- residency(run): table macro, one row per stint, ordered by storage_id, stint.
--   run_id, storage_id
--   stint              0-based count of earlier stints of the storage
--   from_seq, from_op  the compute that made it material (seq, top-level op)
--   to_seq, to_op      the evict/free_dead event that ended the stint (null: still
--                      resident at the end of the run)
--   end_kind           'pressure' or 'dead' (null: still resident)
--   remat              the stint began with a rematerialization
CREATE OR REPLACE MACRO residency(run) AS TABLE
WITH ev AS (
    SELECT seq, op_id, storage_id, kind, remat
    FROM events
    WHERE run_id = run AND kind IN ('compute', 'evict', 'free_dead')
),
numbered AS (
    SELECT *,
           coalesce(count(*) FILTER (WHERE kind <> 'compute') OVER (
               PARTITION BY storage_id ORDER BY seq
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS stint
    FROM ev
)
SELECT
    run AS run_id,
    storage_id,
    stint,
    min(seq) FILTER (WHERE kind = 'compute') AS from_seq,
    arg_min(op_id, seq) FILTER (WHERE kind = 'compute') AS from_op,
    max(seq) FILTER (WHERE kind <> 'compute') AS to_seq,
    max(op_id) FILTER (WHERE kind <> 'compute') AS to_op,
    CASE max(kind) FILTER (WHERE kind <> 'compute')
        WHEN 'evict' THEN 'pressure' WHEN 'free_dead' THEN 'dead' END AS end_kind,
    arg_min(remat, seq) FILTER (WHERE kind = 'compute') AS remat
FROM numbered
GROUP BY storage_id, stint
HAVING min(seq) FILTER (WHERE kind = 'compute') IS NOT NULL
ORDER BY storage_id, stint;
