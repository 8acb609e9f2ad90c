-- Schema version 16: on PostgreSQL, the claim order's function spelled so that it is inlined.
-- SQLite spells the claim order in each statement (persistence/stores/dialect.py, _AGED), so
-- it has nothing to change: the version is kept equal across dialects.
SELECT 1;
