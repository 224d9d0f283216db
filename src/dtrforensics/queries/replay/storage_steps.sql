-- storage_steps: at which allocation checks was a storage evicted or rematerialized?
--
-- Answers: for run `run` and storage `storage`, every allocation step
-- (allocation_steps.step) that evicted the storage to make room ('eviction')
-- or rematerialized it, i.e. allocated its owning tensor again ('remat'), in
-- step order. What `dtrf replay --tui` jumps to when asked for a storage.
-- Parameters: run (run_id), storage (storage_id).
-- Reads: allocation_steps, step_victims, tensors.

-- storage_steps(run, storage): table macro, one row per step and kind, ordered by step.
--   step   the allocation step (allocation_steps.step)
--   kind   'eviction' | 'remat'
CREATE OR REPLACE MACRO storage_steps(run, storage) AS TABLE
SELECT step, kind FROM (
    SELECT DISTINCT step, 'eviction' AS kind
    FROM step_victims(run, 0, 4611686018427387904)
    WHERE victim = storage
    UNION ALL
    SELECT a.step, 'remat' AS kind
    FROM allocation_steps(run, 0, 4611686018427387904) AS a
    JOIN tensors AS t ON t.run_id = run AND t.tensor_id = a.tensor_id
    WHERE a.remat AND t.storage_id = storage
)
ORDER BY step, kind;
