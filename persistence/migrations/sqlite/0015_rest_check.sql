-- Schema version 15: on PostgreSQL, a function that locks a run and checks it is still at
-- rest (a step from rest in one statement). SQLite writes no step from rest (a write holds the
-- whole database), so it has nothing to add: the version is kept equal across dialects.
SELECT 1;
