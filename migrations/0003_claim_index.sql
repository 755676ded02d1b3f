-- fenceproof: an index for the dispatcher's claim (spec section 09.2).
--
-- The claim takes the oldest prepared operations (ORDER BY updated_at ... LIMIT k). The reconciler's
-- index on (status, dispatch_until, updated_at) cannot give that order for status = 'prepared'
-- (dispatch_until sits in between), so without this index PostgreSQL reads and sorts every prepared
-- row on every claim: measured by `fenceproof bench`, the claim rate then falls with the backlog
-- (bench.md, "growth"). The partial index holds prepared rows only, in claim order, so a claim reads
-- about k entries whatever the backlog; rows leave it as soon as they are claimed.
CREATE INDEX tool_operations_prepared_idx ON tool_operations (updated_at) WHERE status = 'prepared';
