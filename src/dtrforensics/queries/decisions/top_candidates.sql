-- top_candidates: which storages did the policy weigh at one eviction decision?
--
-- Answers: the k best-ranked candidates at decision `decision_index` of run
-- `run`, with their scores and score components (rank 1 = the policy's
-- choice; `chosen` marks the storage actually evicted, which differs only
-- under --force-victim). Needs a recording made with scores=all; without it
-- the candidates table is empty (decisions has the victim and runner-up).
-- Parameters: run (run_id), decision_index (0-based decision), k (rows).
-- Reads: candidates, storages.

-- top_candidates(run, decision_index, k): table macro, ordered by rank.
--   run_id, decision   the decision
--   rank               1 = the policy's preference; chosen: evicted here
--   storage_id         the candidate; tensor: its owning tensor's name
--   op_id, paper_op    the op producing it (0-based, 1-based); op_name
--   score              its score (lower is evicted first; may be +inf)
--   compute, fwd_compute, bwd_compute   score numerator terms (ns)
--   size               bytes; staleness: clock - last access (ns)
--   position           0-based position in the pool scan
CREATE OR REPLACE MACRO top_candidates(run, decision_index, k) AS TABLE
SELECT
    c.run_id,
    c.decision,
    c.rank,
    c.chosen,
    c.storage_id,
    s.tensor,
    s.op_id,
    s.paper_op,
    s.op_name,
    c.score,
    c.compute,
    c.fwd_compute,
    c.bwd_compute,
    c.size,
    c.staleness,
    c.position
FROM candidates AS c
LEFT JOIN storages AS s ON s.run_id = c.run_id AND s.storage_id = c.storage_id
WHERE c.run_id = run AND c.decision = decision_index AND c.rank <= k
ORDER BY c.rank;
