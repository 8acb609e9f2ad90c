-- Schema version 16: the claim order (migration 0005) spelled so that PostgreSQL inlines it.
-- Its body `wake - make_interval(...)` subtracts an interval from a timestamptz, an operator
-- PostgreSQL declares STABLE (an interval of days or months depends on the time zone), so the
-- planner would not inline this IMMUTABLE function: every statement that called it planned
-- its body again (a call's insert at each start and step: about a twelfth of the server's
-- time for a 3-step workflow). The same instant is computed in UTC wall time, where every
-- operator is immutable: only seconds are subtracted, so the result is equal for every input
-- (time zone and daylight saving play no part), and the claim index's entries stay as they
-- are. The index is rebuilt all the same: a session keeps an index's expression as it first
-- read it, and only a rebuild makes every session match the inlined form against it.
CREATE OR REPLACE FUNCTION statecharts_claim_order(wake timestamptz, priority integer)
    RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT timezone('UTC', timezone('UTC', wake) - make_interval(secs => priority * 60)) $$;
REINDEX INDEX workflow_runs_claim;
