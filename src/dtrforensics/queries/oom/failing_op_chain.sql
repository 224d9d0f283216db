-- failing_op_chain: which op failed in an OOM run, and what does it read?
--
-- Answers: for every run that ended in OOM, the failing tensor with the op that
-- produces it (level 0), then that op's argument tensors, each with the op that
-- produces it (level 1). The arguments are resident and locked while the
-- failing allocation is attempted. E.g. ResNet-32 at ratio 0.104 fails
-- allocating x7984 (cudnn_batch_norm), whose op reads x7977 (a convolution).
-- Parameters: none. Rows per OOM run: 1 + the failing op's argument count;
-- filter on run_id, order by level, arg_index.
-- Reads: events, tensors, ops, storages.

-- failing_op_chain: the failing tensor and its op's arguments.
--   run_id         recording
--   level          0 = the failing tensor, 1 = an argument of its op
--   role           'failing' or 'argument'
--   arg_index      0-based argument position (null at level 0; duplicates kept)
--   tensor_id      the tensor; tensor: its name
--   size           the tensor's own bytes (0 for a view)
--   storage_id     its storage; storage_bytes: that storage's size
--   op_id          the op producing the tensor (0-based); paper_op: 1-based
--   op_name        that op's name
CREATE OR REPLACE VIEW failing_op_chain AS
WITH failing AS (
    SELECT e.run_id, e.tensor_id, t.op_id
    FROM events AS e
    JOIN tensors AS t ON t.run_id = e.run_id AND t.tensor_id = e.tensor_id
    WHERE e.kind = 'oom'
),
chain AS (
    SELECT run_id, 0 AS level, 'failing' AS role, CAST(NULL AS BIGINT) AS arg_index,
           tensor_id
    FROM failing
    UNION ALL
    SELECT f.run_id, 1 AS level, 'argument' AS role, a.ordinal - 1 AS arg_index,
           a.tensor_id
    FROM failing AS f
    JOIN ops AS o ON o.run_id = f.run_id AND o.op_id = f.op_id,
    unnest(o.args) WITH ORDINALITY AS a(tensor_id, ordinal)
)
SELECT
    c.run_id,
    c.level,
    c.role,
    c.arg_index,
    c.tensor_id,
    t.name AS tensor,
    t.size,
    t.storage_id,
    s.size AS storage_bytes,
    t.op_id,
    o.paper_op,
    o.name AS op_name
FROM chain AS c
JOIN tensors AS t ON t.run_id = c.run_id AND t.tensor_id = c.tensor_id
JOIN storages AS s ON s.run_id = t.run_id AND s.storage_id = t.storage_id
JOIN ops AS o ON o.run_id = t.run_id AND o.op_id = t.op_id;
